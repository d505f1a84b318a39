"""KV cache capacity and allocation for TT models.

TT does not profile device memory. The KV pool of one lane is sized from the model's declared
token budget (``get_max_tokens_all_users``), plus headroom: one block per sequence for vLLM's
worst-case allocation (every sequence may hold one partially filled block) and, for hybrid
models, the blocks sliding-window groups can hold per sequence.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheSpec,
    SlidingWindowSpec,
)

from vllm_tt_plugin.utils.log import get_logger

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
    # Block-output models: the tokens of one output canvas (0 for token-at-a-time models).
    canvas_tokens: int = 0
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

    @property
    def max_model_len_limit(self) -> int:
        """The longest max_model_len one request can be served with: the usable tokens, less
        one output canvas for a block-output model (its working canvas must fit too)."""
        return self.usable_tokens - self.canvas_tokens


def sliding_windows(specs: dict[str, KVCacheSpec]) -> list[int]:
    """Distinct sliding windows among the layer specs (one per sliding KV group)."""
    return sorted({s.sliding_window for s in specs.values() if isinstance(s, SlidingWindowSpec)})


def compute_block_budget(
    max_tokens_all_users: int,
    block_size: int,
    seqs_per_lane: int,
    windows: list[int] | None = None,
    max_in_flight_tokens: int = 0,
    canvas_tokens: int = 0,
) -> BlockBudget:
    """Blocks of one lane's pool.

    Sliding-window groups draw from the same pool: per sliding group, every sequence holds at
    most its window of settled tokens (``ceil(window / block) + 1`` blocks, the +1 because the
    window need not start on a block boundary) and all sequences together at most
    ``max_in_flight_tokens`` scheduled-but-unsettled tokens (vLLM frees out-of-window blocks on
    the processed-token basis).

    A block-output model (``canvas_tokens`` > 0) holds one working canvas per sequence beyond its
    committed tokens, so its per-sequence headroom is a canvas instead of one block.
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
        sequence_headroom=seqs_per_lane * max(1, math.ceil(canvas_tokens / block_size)),
        sliding_headroom=sliding,
        canvas_tokens=canvas_tokens,
    )


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
    per_block: int = kv_cache_utils._pool_bytes_per_block(vllm_config, groups)
    return per_block


def kv_tp_width(mesh_shape: tuple[int, int], lanes: int = 1) -> int:
    """TP width that KV heads are split over: the column count of one lane's mesh.

    Lanes split a mesh by rows when they can (Galaxy lane-DP), else by columns. On one-row
    meshes this equals the devices per lane; on a Blackhole Galaxy (8 x 4) it is 4, not 32.
    """
    rows, cols = mesh_shape
    if lanes <= 1 or rows % lanes == 0:
        return cols
    if cols % lanes == 0:
        return cols // lanes
    return cols


@dataclass(frozen=True)
class KVLayerEntry:
    """One ``per_layer_specs`` entry: a layer's block shape, dtype and buffer index."""

    layer_name: str
    layer_index: int
    shape: tuple[int, int, int, int]  # (num_blocks, kv_heads_per_device, block_size, head_size)
    dtype: torch.dtype
    tensor_idx: int

    def as_tuple(self) -> tuple[tuple[int, int, int, int], torch.dtype, int]:
        return (self.shape, self.dtype, self.tensor_idx)


class KVLayoutError(ValueError):
    """The KV cache config cannot be expressed as per-layer specs (names the layer)."""


def layer_index(name: str) -> int:
    """The decoder layer index in a layer name (``...layers.<i>...``)."""
    parts = name.split(".")
    for before, part in itertools.pairwise(parts):
        if before == "layers" and part.isdigit():
            return int(part)
    raise KVLayoutError(f"KV cache layer {name!r} has no 'layers.<index>' in its name")


def layer_specs_for_model(kv_cache_config: KVCacheConfig, tp_width: int) -> list[KVLayerEntry]:
    """``per_layer_specs`` in layer order (docs/TT_MODEL_CONTRACT.md, KV cache).

    One group: ``tensor_idx`` is the layer index (a UniformTypeKVCacheSpecs group gives each
    layer its own shape). Several groups: one index per ``kv_cache_tensors`` entry, shared by
    the layers in its ``shared_by``.
    """
    groups = kv_cache_config.kv_cache_groups
    shared_index: dict[str, int] = {}
    if len(groups) > 1:
        for idx, tensor in enumerate(kv_cache_config.kv_cache_tensors):
            for name in tensor.shared_by:
                shared_index.setdefault(name, idx)
    entries: dict[int, KVLayerEntry] = {}
    for group in groups:
        group_spec = group.kv_cache_spec
        per_layer = getattr(group_spec, "kv_cache_specs", None)  # UniformTypeKVCacheSpecs
        for name in group.layer_names:
            spec = per_layer[name] if per_layer is not None else group_spec
            if not isinstance(spec, AttentionSpec):
                raise KVLayoutError(
                    f"KV cache layer {name!r}: TT supports attention KV caches only, got "
                    f"{type(spec).__name__}"
                )
            index = layer_index(name)
            if index in entries:
                raise KVLayoutError(
                    f"KV cache layers {entries[index].layer_name!r} and {name!r} are both "
                    f"layer {index}"
                )
            if len(groups) > 1:
                if name not in shared_index:
                    raise KVLayoutError(
                        f"KV cache layer {name!r} is in no kv_cache_tensors entry's shared_by"
                    )
                tensor_idx = shared_index[name]
            else:
                tensor_idx = index
            heads = max(1, spec.num_kv_heads // max(tp_width, 1))
            entries[index] = KVLayerEntry(
                name,
                index,
                (kv_cache_config.num_blocks, heads, spec.block_size, spec.head_size),
                spec.dtype,
                tensor_idx,
            )
    missing = sorted(set(range(max(entries, default=-1) + 1)) - set(entries))
    if missing:
        raise KVLayoutError(f"KV cache config has no entry for layer(s) {missing}")
    return [entries[i] for i in sorted(entries)]
