"""The TT model contract (version 2) as typed Protocols (docs/TT_MODEL_CONTRACT.md).

tt-metal model classes (``models/...generator_vllm.py``) are duck-typed and implement subsets;
many declare ``(*args, **kwargs)`` wrappers. These Protocols document the surface
``model_adapter.ModelAdapter`` calls, with tt-metal's argument names; the adapter is the only
caller, and it reads what a class offers once (``AdapterProfile``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

# The version rule lives in a standard-library module the parity checker applies too.
from vllm_tt_plugin.contract.contract_version import (
    DECODE_RELOAD_CONTRACT_VERSION as DECODE_RELOAD_CONTRACT_VERSION,
)
from vllm_tt_plugin.contract.contract_version import (
    decode_contract_version as decode_contract_version,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheSpec

    from vllm_tt_plugin.contract.sampling_params import TTSamplingParams

# Budget used when a model class has no get_max_tokens_all_users.
DEFAULT_MAX_TOKENS_ALL_USERS = 131072

# One per_layer_specs entry: (shape (blocks, kv_heads_per_device, block, head), dtype, tensor_idx).
PerLayerSpec = tuple[tuple[int, int, int, int], torch.dtype, int]


class TTModelClass(Protocol):
    """Class-level surface: capabilities, sizing and construction."""

    # A class attribute (not ClassVar) so that the class object itself satisfies the Protocol.
    model_capabilities: dict[str, Any]

    # Three positional, the rest by keyword: tt-metal classes differ in what sits between
    # (n_layers, defaults), and the adapter passes vllm_config only where the signature has it.
    @classmethod
    def initialize_vllm_model(
        cls,
        hf_config: PretrainedConfig,
        mesh_device: Any,
        max_batch_size: int,
        /,
        *,
        max_seq_len: int,
        tt_data_parallel: int,
        optimizations: str | None,
    ) -> Any: ...

    @classmethod
    def get_max_tokens_all_users(
        cls,
        *,
        model_name: str,
        num_devices: int,
        tt_data_parallel: int,
        max_model_len: int,
        max_num_seqs: int,
    ) -> int: ...


class TTHybridModelClass(Protocol):
    """Models with mixed sliding/full attention opt into vLLM's hybrid KV cache manager."""

    @classmethod
    def get_kv_cache_spec(cls, vllm_config: VllmConfig) -> dict[str, KVCacheSpec]: ...


class TTModel(Protocol):
    """Instance-level surface used every step (all by keyword)."""

    def prefill_forward(
        self,
        *,
        tokens: torch.Tensor,  # int32 [rows, max(prompt_lens)], from position 0
        page_table: torch.Tensor,
        kv_cache: Any,
        enable_trace: bool,
        prompt_lens: list[int],  # end of this chunk
        start_pos: list[int],  # tokens already in KV
        sampling_params: TTSamplingParams | None = ...,
        empty_slots: list[int] = ...,
        **kwargs: Any,  # page_tables_per_group / _per_layer, multimodal kwargs
    ) -> Any: ...

    def decode_forward(
        self,
        *,
        tokens: torch.Tensor,  # int32 [pad, 1]
        page_table: torch.Tensor,
        kv_cache: Any,
        start_pos: torch.Tensor,  # int32 [pad], -1 on padding rows
        enable_trace: bool,
        read_from_device: bool,
        **kwargs: Any,  # sampling, penalty history, slot_remap, reload commands, ...
    ) -> Any: ...


class TTAsyncReadback(Protocol):
    """Read-back of a decode submitted with ``read_from_device=False``."""

    def read_decode_output(self, tt_out: Any, async_read: bool = ...) -> tuple[Any, Any]: ...

    def process_decode_output_host(self, tt_out: Any, is_tokens: bool = ...) -> Any: ...


class TTKVAllocator(Protocol):
    def allocate_kv_cache_per_layer(self, per_layer_specs: Sequence[PerLayerSpec]) -> Any: ...


class TTLegacyKVAllocator(Protocol):
    def allocate_kv_cache(
        self, kv_cache_shape: tuple[int, ...], dtype: Any, num_layers: int
    ) -> Any: ...


class TTWarmup(Protocol):
    def warmup_model_prefill(
        self, *, kv_cache: Any, enable_trace: bool, can_sample_on_device: bool
    ) -> None: ...

    def warmup_model_decode(
        self,
        *,
        kv_cache: Any,
        enable_trace: bool,
        max_batch_size: int,
        num_blocks: int,
        can_sample_on_device: bool,
    ) -> None: ...
