"""Capability variants of the reference Llama, generated from one declarative table.

Select one at launch without editing code::

    TT_MODEL_CLASS_OVERRIDES="TTReferenceLlamaForCausalLM=vllm_tt_plugin.test_models.variants:NoAsyncDecode"

A small KV pool is not a variant: set ``TT_REFERENCE_MAX_TOKENS_ALL_USERS``. Each variant
enforces what it declares (see ``core.py``), so a plugin that ignores a declaration fails loudly.
A hybrid sliding-window variant overrides ``layer_sliding_window`` (the KV cache, page-table
checks, attention masks and ``page_tables_per_group`` handling are already per group).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm_tt_plugin.test_models.core import ReferenceLlamaCore
from vllm_tt_plugin.test_models.reference_llama import (
    WithAsyncReadback,
    WithLegacyDecode,
    WithMRoPEDeltas,
    WithoutReadback,
    WithPerLayerKVAllocation,
    WithTopKLogprobs,
)


@dataclass(frozen=True)
class VariantSpec:
    name: str
    doc: str
    capabilities: dict[str, Any] = field(default_factory=dict)  # overrides of the full set
    decode_contract: int = 1  # 0 = legacy reset_batch
    per_layer_kv: bool = True  # has allocate_kv_cache_per_layer (else legacy allocate_kv_cache)
    async_readback: bool = True  # has read_decode_output / process_decode_output_host
    top_k_logprobs: bool = False  # GPT-OSS device logprobs: top-32 (values, indices)
    mrope: bool = False  # (output, rope_deltas) from prefill; needs an mRoPE checkpoint config


VARIANTS: tuple[VariantSpec, ...] = (
    VariantSpec(
        "HostSamplingOnly",
        "No device sampling: every step returns logits for vLLM's host sampler.",
        {"supports_sample_on_device": False},
    ),
    VariantSpec(
        "NoAsyncDecode",
        "Synchronous decode only: no read-back methods, so decode returns host tensors (bare "
        "logits or tokens) even with read_from_device=False; every decode reloads its inputs.",
        {"supports_async_decode": False},
        async_readback=False,
    ),
    VariantSpec(
        "NoPrefixCaching",
        "start_pos > 0 only to continue a chunked prefill.",
        {"supports_prefix_caching": False},
    ),
    VariantSpec(
        "NoChunkedPrefill",
        "Whole prompts per prefill; start_pos > 0 only at block-aligned prefix-cache hits.",
        {"supports_chunked_prefill": False},
    ),
    VariantSpec(
        "WholePromptPrefill",
        "Neither prefix caching nor chunked prefill: start_pos is always 0.",
        {"supports_prefix_caching": False, "supports_chunked_prefill": False},
    ),
    VariantSpec(
        "NoDevicePenalties",
        "Device sampling without presence/frequency/repetition penalties.",
        {"supports_device_penalties": False},
    ),
    VariantSpec(
        "LimitedDeviceSampler",
        "Device sampler limited to top_k <= 8 (stochastic rows outside 1..8 go to the host).",
        {"max_device_top_k": 8},
    ),
    VariantSpec(
        "LegacyDecodeContract",
        "Predates the reload contract: receives sticky reset_batch, allocates with the legacy "
        "allocate_kv_cache.",
        decode_contract=0,
        per_layer_kv=False,
    ),
    VariantSpec(
        "GptOssForCausalLM",
        "GPT-OSS-like: device logprobs as top-32 (values, indices); the plugin recognises the "
        "family by this class name, as it does tt-metal's GptOssForCausalLM.",
        {"max_device_top_k": 32},
        top_k_logprobs=True,
    ),
    VariantSpec(
        "MRoPEDeltas",
        "mRoPE surface: prefill returns (output, rope_deltas), decode takes "
        "rope_deltas_all_users; serve a checkpoint whose rope config has mrope_section.",
        mrope=True,
    ),
    VariantSpec(
        "LaneDataParallel",
        "Serves --data_parallel_size as in-process lanes (tt_data_parallel KV caches).",
        {"supports_lane_data_parallel": True},
    ),
)


def build_variant(spec: VariantSpec) -> type[ReferenceLlamaCore]:
    bases: list[type[ReferenceLlamaCore]] = []
    if spec.decode_contract == 0:
        bases.append(WithLegacyDecode)
    if spec.top_k_logprobs:
        bases.append(WithTopKLogprobs)
    if spec.mrope:
        bases.append(WithMRoPEDeltas)
    if spec.per_layer_kv:
        bases.append(WithPerLayerKVAllocation)
    bases.append(WithAsyncReadback if spec.async_readback else WithoutReadback)
    if not bases:
        bases.append(ReferenceLlamaCore)
    unknown = set(spec.capabilities) - set(_KNOWN_CAPABILITIES)
    if unknown:
        raise ValueError(f"variant {spec.name}: unknown capability keys {sorted(unknown)}")
    attrs: dict[str, Any] = {
        "__doc__": spec.doc,
        "__module__": __name__,
        "__qualname__": spec.name,
        "model_capabilities": {**ReferenceLlamaCore.model_capabilities, **spec.capabilities},
        "decode_input_update_contract": spec.decode_contract,
    }
    return type(spec.name, tuple(bases), attrs)


_KNOWN_CAPABILITIES = (
    "supports_sample_on_device",
    "supports_async_decode",
    "supports_prefix_caching",
    "supports_chunked_prefill",
    "supports_device_penalties",
    "supports_lane_data_parallel",
    "max_device_top_k",
)

VARIANT_CLASSES: dict[str, type[ReferenceLlamaCore]] = {
    spec.name: build_variant(spec) for spec in VARIANTS
}
globals().update(VARIANT_CLASSES)
__all__ = ["VARIANTS", "VARIANT_CLASSES", "VariantSpec", "build_variant", *VARIANT_CLASSES]
