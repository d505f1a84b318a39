"""Multimodal inputs of a prefill step, and the mRoPE position deltas prefill returns.

vLLM's scheduler decides which multimodal items (images, ...) a prefill step covers
(``SchedulerOutput.scheduled_encoder_inputs``; with ``disable_chunked_mm_input`` an item is
never split across chunks). TT model classes run their own vision encoders, so the runner hands
them the processed tensors of exactly those items, as ``**multimodal_kwargs`` of
``prefill_forward``: one keyword per processor field (``pixel_values``, ``image_grid_thw``, ...),
each a list with one entry per prefill row, the entry being that row's item tensors in prompt
order, or ``None`` for a row with no item in this chunk.

mRoPE models (``model_config.uses_mrope``) return ``(out, rope_deltas)`` from prefill: the
offset between a request's text position and its rotary position after its images. Decode
needs it for every step, so the runner keeps it per request and sends ``rope_deltas`` (one per
decode slot, 0 for padding) on every decode call of such a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch


class _FeatureLike(Protocol):
    """The part of vLLM's MultiModalFeatureSpec the runner reads."""

    modality: str
    data: Mapping[str, Any] | None


class _RowLike(Protocol):
    req_id: str
    mm_features: list[Any]


def prefill_multimodal_kwargs(
    rows: Sequence[_RowLike], scheduled_encoder_inputs: Mapping[str, Sequence[int]]
) -> dict[str, list[list[Any] | None]]:
    """The ``**multimodal_kwargs`` of one prefill step; empty when no row has an item in it."""
    per_row: list[dict[str, list[Any]]] = []
    for row in rows:
        fields: dict[str, list[Any]] = {}
        for index in sorted(scheduled_encoder_inputs.get(row.req_id, ())):
            feature: _FeatureLike = row.mm_features[index]
            if feature.data is None:
                # vLLM fills cached items in before the request reaches the worker.
                raise ValueError(
                    f"request {row.req_id}: {feature.modality} item {index} reached the TT "
                    "runner without its processed data"
                )
            for key, elem in feature.data.items():
                fields.setdefault(key, []).append(getattr(elem, "data", elem))
        per_row.append(fields)
    keys = sorted({key for fields in per_row for key in fields})
    return {key: [fields.get(key) for fields in per_row] for key in keys}


def split_mrope_output(out: Any, num_rows: int) -> tuple[Any, list[int]]:
    """``(out, rope_deltas)`` of an mRoPE model's prefill -> the output and one int per row."""
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(
            "an mRoPE model's prefill_forward must return (out, rope_deltas); got "
            f"{type(out).__name__}"
        )
    result, deltas = out
    values = torch.as_tensor(deltas).reshape(-1).tolist()
    if len(values) != num_rows:
        raise ValueError(f"prefill returned {len(values)} rope_deltas for {num_rows} rows")
    return result, [int(v) for v in values]


def decode_rope_deltas(deltas: Sequence[int | None]) -> torch.Tensor:
    """Per-slot rope deltas of a decode step (0 for padding slots)."""
    return torch.tensor([0 if d is None else d for d in deltas], dtype=torch.int64)
