"""The TT model contract as typed Protocols (docs: TT_MODEL_CONTRACT / DECODE_RELOAD_CONTRACT).

tt-metal model classes (``models/...generator_vllm.py``) are duck-typed: the plugin calls them by
keyword with the argument names tt-metal uses. These Protocols document and type-check that
surface; the optional parts (hybrid KV specs, async read-back, the decode reload contract) are
probed with ``hasattr``/attributes at the call sites, because real classes implement subsets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheSpec

# Version of the decode input-update contract the plugin speaks (docs/DECODE_RELOAD_CONTRACT.md).
DECODE_RELOAD_CONTRACT_VERSION = 1

# Budget used when a model class has no get_max_tokens_all_users.
DEFAULT_MAX_TOKENS_ALL_USERS = 131072


@runtime_checkable
class TTModelClass(Protocol):
    """Class-level surface: capabilities, sizing and construction."""

    model_capabilities: ClassVar[dict[str, Any]]

    @classmethod
    def initialize_vllm_model(
        cls,
        hf_config: PretrainedConfig,
        mesh_device: Any,
        max_batch_size: int,
        max_seq_len: int = ...,
        tt_data_parallel: int = ...,
        optimizations: str | None = ...,
    ) -> TTModel: ...


class TTModelSizing(Protocol):
    @classmethod
    def get_max_tokens_all_users(
        cls,
        model_name: str,
        num_devices: int,
        tt_data_parallel: int,
        max_model_len: int,
        max_num_seqs: int = ...,
    ) -> int: ...


class TTHybridModelClass(Protocol):
    """Models with mixed sliding/full attention opt into vLLM's hybrid KV cache manager."""

    @classmethod
    def get_kv_cache_spec(cls, vllm_config: VllmConfig) -> dict[str, KVCacheSpec]: ...


@runtime_checkable
class TTModel(Protocol):
    """Instance-level surface used every step."""

    def prefill_forward(
        self,
        tokens: torch.Tensor,
        page_table: torch.Tensor,
        kv_cache: Any,
        enable_trace: bool,
        prompt_lens: list[int] | torch.Tensor,
        start_pos: list[int] | torch.Tensor,
        **kwargs: Any,
    ) -> Any: ...

    def decode_forward(
        self,
        tokens: torch.Tensor,
        page_table: torch.Tensor,
        kv_cache: Any,
        start_pos: torch.Tensor,
        enable_trace: bool = ...,
        read_from_device: bool = ...,
        **kwargs: Any,
    ) -> Any: ...


class TTAsyncReadback(Protocol):
    """Split submit/read-back for async decode (models that return device tensors)."""

    def read_decode_output(self, tt_out: Any, async_read: bool = ...) -> tuple[Any, Any]: ...

    def process_decode_output_host(self, tt_out: Any, is_tokens: bool = ...) -> Any: ...


class TTKVAllocator(Protocol):
    def allocate_kv_cache_per_layer(self, per_layer_specs: Any) -> Any: ...


class TTLegacyKVAllocator(Protocol):
    def allocate_kv_cache(
        self, kv_cache_shape: tuple[int, ...], dtype: Any, num_layers: int
    ) -> Any: ...


class TTWarmup(Protocol):
    def warmup_model_prefill(
        self, kv_cache: Any, enable_trace: bool, can_sample_on_device: bool
    ) -> None: ...

    def warmup_model_decode(
        self,
        kv_cache: Any,
        enable_trace: bool,
        max_batch_size: int,
        num_blocks: int,
        can_sample_on_device: bool,
    ) -> None: ...


def decode_contract_version(model: object) -> int:
    """0 for legacy models (``reset_batch``), 1 for the resident-input reload contract."""
    version = getattr(model, "decode_input_update_contract", 0) or 0
    if not isinstance(version, int) or version < 0:
        raise TypeError(
            f"{type(model).__qualname__}.decode_input_update_contract must be a non-negative "
            f"integer, got {version!r}"
        )
    return version


@dataclass(frozen=True)
class TTLayerKVSpec:
    """One layer's KV cache as the plugin asks a model to allocate it (per lane)."""

    layer_name: str
    group_id: int
    num_blocks: int
    block_size: int
    num_kv_heads: int  # already divided over the devices of one lane
    head_size: int
    dtype: torch.dtype
    sliding_window: int | None = None
