"""Multimodal inputs of a prefill step, and the mRoPE position deltas prefill returns.

TT model classes run their own vision encoders and keep no encoder cache between steps, so the
runner hands a prefill chunk the processed tensors of every multimodal item (image, ...) whose
placeholder tokens fall in the chunk, as ``**multimodal_kwargs`` of ``prefill_forward``: one
keyword per processor field (``pixel_values``, ``image_grid_thw``, ...), each a list with one
entry per prefill row, the entry being that row's item tensors in prompt order, or ``None`` for a
row with no item in this chunk. The choice goes by placeholder positions, not by vLLM's
``scheduled_encoder_inputs``: vLLM leaves out items whose encoder output its own cache already
holds (another request with the same image), which a TT model never sees. vLLM's
``disable_chunked_mm_input`` keeps a chunk that starts before an item from ending inside it, but
an item that starts the chunk is cut when the budget is short, and a prefix-cache hit can start
a chunk inside one: a chunk may start or end inside an item, and the model places the features
by their offset in it (docs/SCHEDULING.md).

mRoPE models (``model_config.uses_mrope``) return ``(out, rope_deltas)`` from prefill (split
by ``model_adapter``): the offset between a request's text position and its rotary position
after its images. The runner keeps it per request and sends ``rope_deltas_all_users`` (one per
decode slot, 0 for padding) when the decode layout changed or a request joined, else None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch


class _FeatureLike(Protocol):
    """The part of vLLM's MultiModalFeatureSpec the runner reads."""

    modality: str
    data: Mapping[str, Any] | None
    mm_position: Any  # PlaceholderRange: offset, length


class _ChunkLike(Protocol):
    """One prefill row: the request's items and the chunk's token range [start, end)."""

    @property
    def req_id(self) -> str: ...

    @property
    def mm_features(self) -> Sequence[Any]: ...

    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


def items_in_chunk(features: Sequence[_FeatureLike], start: int, end: int) -> list[int]:
    """Indices of the items whose placeholder tokens overlap [start, end), in prompt order."""
    spans = [(f.mm_position.offset, f.mm_position.offset + f.mm_position.length) for f in features]
    return [i for i, (lo, hi) in enumerate(spans) if lo < end and start < hi]


def prefill_multimodal_kwargs(rows: Sequence[_ChunkLike]) -> dict[str, list[list[Any] | None]]:
    """The ``**multimodal_kwargs`` of one prefill step; empty when no row has an item in it."""
    per_row: list[dict[str, list[Any]]] = []
    for row in rows:
        fields: dict[str, list[Any]] = {}
        for index in items_in_chunk(row.mm_features, row.start, row.end):
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


def decode_rope_deltas(deltas: Sequence[int | None]) -> torch.Tensor:
    """Per-slot rope deltas of a decode step (0 for padding slots)."""
    return torch.tensor([0 if d is None else d for d in deltas], dtype=torch.int64)
