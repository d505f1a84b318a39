"""KV cache capacity and allocation for TT models.

TT does not profile device memory. The KV pool of one lane is sized from the model's declared
token budget (``get_max_tokens_all_users``), plus headroom: one block per sequence for vLLM's
worst-case allocation (every sequence may hold one partially filled block) and, for hybrid
models, the blocks sliding-window groups can hold per sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheSpec,
    SlidingWindowSpec,
)

from vllm_tt_plugin.contract import DEFAULT_MAX_TOKENS_ALL_USERS, TTLayerKVSpec
from vllm_tt_plugin.log import get_logger

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = get_logger(__name__)

# KV cache element type the byte budget is expressed in (TT caches are bfloat16/bfp8).
DEFAULT_KV_DTYPE = torch.bfloat16


@dataclass(frozen=True)
class BlockBudget:
    """How the per-lane block count was derived (logged, and checked by tests)."""

    max_tokens_all_users: int
    block_size: int
    seqs_per_lane: int
    budget_blocks: int
    sequence_headroom: int
    sliding_headroom: int
    # vLLM keeps block 0 as its null block: it is in the pool but never holds tokens.
    null_blocks: int = 1

    @property
    def num_blocks(self) -> int:
        return (
            self.budget_blocks + self.sequence_headroom + self.sliding_headroom + self.null_blocks
        )

    @property
    def usable_tokens(self) -> int:
        """Tokens one request can hold when it has the whole pool (full attention)."""
        return (self.num_blocks - self.null_blocks) * self.block_size


def sliding_windows(specs: dict[str, KVCacheSpec]) -> list[int]:
    """Distinct sliding windows among the layer specs (one per sliding KV group)."""
    return sorted({s.sliding_window for s in specs.values() if isinstance(s, SlidingWindowSpec)})


def compute_block_budget(
    max_tokens_all_users: int,
    block_size: int,
    seqs_per_lane: int,
    windows: list[int] | None = None,
    max_in_flight_tokens: int = 0,
) -> BlockBudget:
    """Blocks of one lane's pool.

    Sliding-window groups draw from the same pool: per sliding group, every sequence holds at
    most its window of settled tokens (``ceil(window / block) + 1`` blocks, the +1 because the
    window need not start on a block boundary) and all sequences together at most
    ``max_in_flight_tokens`` scheduled-but-unsettled tokens (vLLM frees out-of-window blocks on
    the processed-token basis).
    """
    if max_tokens_all_users <= 0:
        raise ValueError(f"max_tokens_all_users must be positive, got {max_tokens_all_users}")
    per_group_in_flight = math.ceil(max_in_flight_tokens / block_size)
    sliding = sum(
        seqs_per_lane * (math.ceil(w / block_size) + 1) + per_group_in_flight for w in windows or []
    )
    return BlockBudget(
        max_tokens_all_users=max_tokens_all_users,
        block_size=block_size,
        seqs_per_lane=seqs_per_lane,
        budget_blocks=math.ceil(max_tokens_all_users / block_size),
        sequence_headroom=seqs_per_lane,
        sliding_headroom=sliding,
    )


def model_max_tokens_all_users(
    model_cls: type,
    model_name: str,
    num_devices: int,
    tt_data_parallel: int,
    max_model_len: int,
    max_num_seqs: int,
) -> int:
    getter = getattr(model_cls, "get_max_tokens_all_users", None)
    if getter is None:
        return DEFAULT_MAX_TOKENS_ALL_USERS
    value = getter(
        model_name,
        num_devices,
        tt_data_parallel,
        max_model_len,
        max_num_seqs=max_num_seqs,
    )
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"{model_cls.__qualname__}.get_max_tokens_all_users returned {value!r}; "
            "it must be a positive integer token count"
        )
    return value


def uniform_kv_cache_spec(vllm_config: VllmConfig) -> dict[str, KVCacheSpec]:
    """One full-attention spec per decoder layer (models without get_kv_cache_spec)."""
    model_config = vllm_config.model_config
    num_layers = model_config.get_num_layers(vllm_config.parallel_config)
    spec = FullAttentionSpec(
        block_size=vllm_config.cache_config.block_size,
        num_kv_heads=model_config.get_total_num_kv_heads(),
        head_size=model_config.get_head_size(),
        dtype=DEFAULT_KV_DTYPE,
    )
    return {layer_name(i): spec for i in range(num_layers)}


def layer_name(index: int) -> str:
    return f"model.layers.{index}.self_attn"


def pool_bytes_per_block(vllm_config: VllmConfig, specs: dict[str, KVCacheSpec]) -> int:
    """Bytes one block costs across the pool, as vLLM's KV planner will count it.

    Uses vLLM's own grouping so that ``bytes // pool_bytes_per_block`` is exactly our block
    count in the engine-side planner (which may run in another process than this worker).
    """
    from vllm.v1.core import kv_cache_utils

    groups = kv_cache_utils.get_kv_cache_groups(vllm_config, dict(specs))
    return kv_cache_utils._pool_bytes_per_block(vllm_config, groups)


def layer_specs_for_model(
    kv_cache_config: KVCacheConfig, devices_per_lane: int
) -> list[TTLayerKVSpec]:
    """Per-layer allocation requests, in layer order, heads divided over a lane's devices."""
    out: list[TTLayerKVSpec] = []
    for group_id, group in enumerate(kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        if not isinstance(spec, AttentionSpec):
            raise TypeError(f"TT supports attention KV caches only, got {type(spec).__name__}")
        window = spec.sliding_window if isinstance(spec, SlidingWindowSpec) else None
        heads = spec.num_kv_heads // min(devices_per_lane, spec.num_kv_heads)
        for name in group.layer_names:
            out.append(
                TTLayerKVSpec(
                    layer_name=name,
                    group_id=group_id,
                    num_blocks=kv_cache_config.num_blocks,
                    block_size=spec.block_size,
                    num_kv_heads=heads,
                    head_size=spec.head_size,
                    dtype=spec.dtype,
                    sliding_window=window,
                )
            )
    out.sort(key=lambda s: _layer_index(s.layer_name))
    return out


def _layer_index(name: str) -> tuple[int, str]:
    for part in name.split("."):
        if part.isdigit():
            return (int(part), name)
    return (0, name)


def allocate_kv_cache(model: Any, specs: list[TTLayerKVSpec]) -> Any:
    """Allocate through the preferred per-layer hook, or the legacy uniform one."""
    if hasattr(model, "allocate_kv_cache_per_layer"):
        return model.allocate_kv_cache_per_layer(specs)
    if not specs:
        raise ValueError("no KV cache layers to allocate")
    first = specs[0]
    shape = (first.num_blocks, first.num_kv_heads, first.block_size, first.head_size)
    for spec in specs:
        if (spec.num_blocks, spec.num_kv_heads, spec.block_size, spec.head_size) != shape or (
            spec.sliding_window is not None
        ):
            raise ValueError(
                f"{type(model).__qualname__} only has the legacy allocate_kv_cache, which needs "
                "uniform full-attention layers; implement allocate_kv_cache_per_layer"
            )
    return model.allocate_kv_cache(shape, first.dtype, len(specs))
