"""The reference Llama with a vision-model surface, for runner tests of multimodal prefill.

It records the ``**multimodal_kwargs`` each prefill call receives (then runs the text model as
usual) and, like an mRoPE model, returns ``(out, rope_deltas)`` from prefill and records the
``rope_deltas_all_users`` each decode call receives (None when the layout did not change).
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM


def rope_delta_of(prompt_len: int) -> int:
    """The delta this fake reports for a request: distinct per prompt length, never 0."""
    return -(prompt_len % 97) - 1


class RecordingVisionModel(ReferenceLlamaForCausalLM):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefill_mm: list[dict[str, list[Any] | None]] = []
        self.decode_rope_deltas: list[list[int] | None] = []

    def prefill_forward(self, *args: Any, **kwargs: Any) -> Any:
        known = {
            "tokens", "page_table", "kv_cache", "enable_trace", "prompt_lens", "start_pos",
            "page_tables_per_group", "sampling_params", "empty_slots",
        }  # fmt: skip
        self.prefill_mm.append({k: kwargs.pop(k) for k in list(kwargs) if k not in known})
        out = super().prefill_forward(*args, **kwargs)
        ends = [int(e) for e in kwargs["prompt_lens"]]
        return out, torch.tensor([rope_delta_of(e) for e in ends])

    def decode_forward(
        self, *args: Any, rope_deltas_all_users: torch.Tensor | None = None, **kwargs: Any
    ) -> Any:
        deltas = rope_deltas_all_users
        self.decode_rope_deltas.append(None if deltas is None else [int(d) for d in deltas])
        return super().decode_forward(*args, **kwargs)
