"""Typed calls into a TT model and typed results back (built by runner and worker, executed by
``model_adapter.ModelAdapter``). Tensors here are already in the contract's layouts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from vllm_tt_plugin.contract.reload_contract import ReloadCommand
from vllm_tt_plugin.contract.sampling_params import TTSamplingParams


@dataclass(frozen=True)
class LoadCall:
    hf_config: Any
    mesh_device: Any
    max_batch_size: int  # engine max_num_seqs (lane-DP: lanes x per-lane); never times DP
    max_seq_len: int
    tt_data_parallel: int  # lanes; 1 on every standard-DP rank
    optimizations: str | None
    vllm_config: Any = None  # passed only when the class's signature names it


@dataclass(frozen=True)
class KVSizingCall:
    model_name: str
    num_devices: int  # devices of the whole opened mesh
    tt_data_parallel: int
    max_model_len: int
    max_num_seqs: int  # per lane / per rank


@dataclass(frozen=True)
class WarmupPlan:
    kv_cache: Any
    max_batch_size: int
    num_blocks: int  # one request's page-table width, capped by the pool
    prefill_on_device: bool  # sample_on_device_mode == "all"
    decode_on_device: bool  # sample_on_device_mode in ("all", "decode_only")
    trace_prefill: bool  # trace_mode == "all"
    trace_decode: bool  # trace_mode in ("all", "decode_only")


@dataclass(frozen=True)
class PrefillCall:
    tokens: torch.Tensor  # int32 [rows, max(prompt_lens)], each row from position 0
    page_tables: list[torch.Tensor]  # per KV group, int32 [rows, width]
    kv_cache: Any
    enable_trace: bool
    prompt_lens: list[int]  # end of this chunk
    start_pos: list[int]  # tokens already in KV
    empty_slots: list[int]
    sampling_params: TTSamplingParams | None = None
    want_logprobs: bool = False
    multimodal: dict[str, Any] = field(default_factory=dict)
    uses_mrope: bool = False
    layer_groups: tuple[int, ...] | None = None  # KV group of each layer (per-layer tables)


# DecodeCall, DecodeSubmission and ModelOutput are built on every decode step, so they are
# plain slots dataclasses (nothing mutates them): a frozen dataclass's __init__ goes through
# object.__setattr__ per field, ~10x the cost (3 us against 0.3 us for DecodeCall's fields).
@dataclass(slots=True)
class DecodeCall:
    tokens: torch.Tensor  # int32 [pad, 1]
    start_pos: torch.Tensor  # int32 [pad], -1 on padding rows
    page_tables: list[torch.Tensor]  # per KV group, int32 [pad, max blocks per request]
    kv_cache: Any
    enable_trace: bool
    command: ReloadCommand
    slot_remap: torch.Tensor | None = None
    sampling_params: TTSamplingParams | None = None
    want_logprobs: bool = False
    prompt_tokens: torch.Tensor | None = None  # int32, -1 padded (active penalties only)
    output_tokens: torch.Tensor | None = None
    uses_mrope: bool = False
    rope_deltas: torch.Tensor | None = None  # per row when the layout changed, else None
    layer_groups: tuple[int, ...] | None = None
    rows: int | None = None  # slots with a request (else counted from start_pos)


@dataclass(slots=True)  # built every decode step (above)
class DecodeSubmission:
    raw: Any  # what decode_forward(read_from_device=False) returned
    on_device: bool
    want_logprobs: bool
    batch_size: int | None = None  # rows with a request (for the watchdog's error line)
    submit_ns: int = 0  # host time the model call took to return (host_phases)
    host_ready: bool = False  # a device call already ran process_decode_output_host on it
    host_output: Any = None  # what it returned
    call_ns: int = 0  # the whole device call (with the read-back when it read in the call)


@dataclass(frozen=True)
class DeviceLogprobs:
    """Logprobs a device returned: the flat sampled-token form or GPT-OSS's top-32 pair."""

    flat: torch.Tensor | None  # float32 [B]
    top_values: torch.Tensor | None  # float32 [B, 32], descending
    top_indices: torch.Tensor | None  # int64 [B, 32]


@dataclass(slots=True)  # built every decode step (above)
class ModelOutput:
    """A normalised prefill/decode result: host logits, or device tokens (+ logprobs)."""

    logits: torch.Tensor | None  # float [B, V], input-row (prefill) or slot (decode) order
    tokens: list[int] | None  # the token sampled on the device, per row
    logprobs: DeviceLogprobs | None
    rope_deltas: list[int] | None = None
    # Block-output models: int64 [B, canvas], the committed canvas of each row.
    blocks: torch.Tensor | None = None
