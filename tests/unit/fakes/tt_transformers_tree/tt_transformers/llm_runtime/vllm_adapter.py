"""Stand-in for tt-transformers' ``src/tt_transformers/llm_runtime/vllm_adapter.py``.

What the plugin's calls meet there (02290fbb8dacb2173c8fa03a5493ecc3a60a09bc, decode keyword
``reset_batch``; 4fc26a3e033cc75f1df029fdb3719bdabe770763, the four reload commands): every
generator keeps a ``VLLMAdapter`` as ``self._adapter`` whose ``config.request_state_fields``
(default empty) lists the request-state keywords it forwards. Extra keywords may only be
``page_tables_per_layer`` / ``rope_deltas_all_users`` (ignored) or ``prompt_tokens`` /
``output_tokens`` / ``slot_remap``, forwarded only when listed and not None (at 4fc26a3e
``slot_remap`` always); anything else is a ``TypeError``. ``normalize_*`` returns
``(normalized keywords, enable_trace)``. The tensor dtype/shape normalisation is left out:
the target here is the plugin's reference model, which takes the plugin's tensors as sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_IGNORED_VLLM_KWARGS = frozenset({"page_tables_per_layer", "rope_deltas_all_users"})
_SAMPLING_STATE_VLLM_FIELD_ORDER = ("prompt_tokens", "output_tokens", "slot_remap")


@dataclass(frozen=True)
class VLLMAdapterConfig:
    request_state_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if any(name not in _SAMPLING_STATE_VLLM_FIELD_ORDER for name in self.request_state_fields):
            raise ValueError(
                f"request_state_fields must be drawn from {_SAMPLING_STATE_VLLM_FIELD_ORDER}"
            )


class VLLMAdapter:
    def __init__(self, config: VLLMAdapterConfig) -> None:
        self.config = config

    def normalize_prefill(
        self,
        tokens: Any,
        page_table: Any,
        *,
        enable_trace: bool,
        prompt_lens: Any = None,
        start_pos: Any = None,
        empty_slots: Any = None,
        kv_cache: Any = None,
        sampling_params: Any = None,
        compatibility_kwargs: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        _check_extra(compatibility_kwargs, "prefill")
        normalized = {
            "tokens": tokens,
            "page_table": page_table,
            "prompt_lens": prompt_lens,
            "start_pos": start_pos,
            "empty_slots": empty_slots,
            "kv_cache": kv_cache,
            "sampling_params": sampling_params,
        }
        self._copy_request_state(normalized, compatibility_kwargs)
        return normalized, enable_trace

    def normalize_decode(
        self,
        tokens: Any,
        start_pos: Any,
        page_table: Any,
        *,
        enable_trace: bool,
        kv_cache: Any = None,
        sampling_params: Any = None,
        compatibility_kwargs: Mapping[str, Any] | None = None,
        **decode_commands: bool,
    ) -> tuple[dict[str, Any], bool]:
        """``decode_commands``: ``reset_batch`` (02290fbb) or the four reload commands
        (4fc26a3e), as the generator of each era passes them."""
        _check_extra(compatibility_kwargs, "decode")
        normalized = {
            "tokens": tokens,
            "start_pos": start_pos,
            "page_table": page_table,
            "kv_cache": kv_cache,
            "sampling_params": sampling_params,
            **decode_commands,
        }
        self._copy_request_state(normalized, compatibility_kwargs)
        remap = (compatibility_kwargs or {}).get("slot_remap")
        if "reload_inputs" in decode_commands and remap is not None:
            normalized["slot_remap"] = remap
        return normalized, enable_trace

    def _copy_request_state(
        self, normalized: dict[str, Any], extra: Mapping[str, Any] | None
    ) -> None:
        for name in self.config.request_state_fields:
            value = (extra or {}).get(name)
            if value is not None:
                normalized[name] = value


def _check_extra(extra: Mapping[str, Any] | None, operation: str) -> None:
    known = _IGNORED_VLLM_KWARGS | frozenset(_SAMPLING_STATE_VLLM_FIELD_ORDER)
    unknown = sorted(name for name in extra or {} if name not in known)
    if unknown:
        raise TypeError(f"{operation} got an unexpected keyword argument {unknown[0]!r}")
