"""The reference model's paged KV cache, head-sharded over the devices of each lane.

Layout, as a tt-metal model keeps it: one cache per lane (``tt_data_parallel`` lanes), and per
layer K and V block tensors ``[num_blocks, kv_heads_per_device, block_size, head_dim]`` on each
device of the lane. KV heads are split over ``min(devices_per_lane, num_kv_heads)`` shards; a lane
with more devices than KV heads replicates the shards (device ``d`` holds shard ``d % shards``).
Replicas of a shard hold identical data, so one tensor per shard is stored and every replica
device views it.

Block ids are lane-local. Block 0 is vLLM's null block: real rows never need it for a position
they attend to (checked), and warm-up uses it as scratch because nothing ever reads it as data.

Each layer belongs to a KV cache group (one page table per group, ``page_tables_per_group``).
Plain Llama has one full-attention group; a layer with a ``sliding_window`` attends to the last
``sliding_window`` positions only, which is where the hybrid variant plugs in.

Besides K/V, each group keeps the token id written at every (block, offset): the device-side
record of which tokens a cached prefix holds, used to rebuild penalty history on prefix hits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

KV_DTYPE = torch.float32  # see reference_llama's docstring: storage stays float32 for HF parity
NULL_BLOCK = 0


class KVCacheError(ValueError):
    """A KV allocation request or a page table does not fit this model's cache."""


@dataclass(frozen=True)
class HeadSharding:
    """How one lane's KV (and matching query) heads are split over its devices."""

    devices_per_lane: int
    num_shards: int
    kv_heads_per_shard: int
    q_heads_per_shard: int

    @classmethod
    def for_lane(cls, devices_per_lane: int, num_kv_heads: int, q_per_kv: int) -> HeadSharding:
        shards = min(devices_per_lane, num_kv_heads)
        if num_kv_heads % shards:
            raise KVCacheError(
                f"num_key_value_heads={num_kv_heads} cannot be split evenly over {shards} "
                f"devices of a lane"
            )
        per_shard = num_kv_heads // shards
        return cls(devices_per_lane, shards, per_shard, per_shard * q_per_kv)

    def shard_of_device(self, device: int) -> int:
        return device % self.num_shards

    def kv_heads(self, shard: int) -> slice:
        return slice(shard * self.kv_heads_per_shard, (shard + 1) * self.kv_heads_per_shard)

    def q_heads(self, shard: int) -> slice:
        return slice(shard * self.q_heads_per_shard, (shard + 1) * self.q_heads_per_shard)


@dataclass(frozen=True)
class LayerLayout:
    group_id: int
    num_blocks: int
    block_size: int
    sliding_window: int | None = None


class LaneKVCache:
    """One lane: K/V per layer and shard, plus the token record per group."""

    def __init__(self, layers: Sequence[LayerLayout], sharding: HeadSharding, head_dim: int):
        self.keys: list[list[torch.Tensor]] = []
        self.values: list[list[torch.Tensor]] = []
        for layout in layers:
            shape = (layout.num_blocks, sharding.kv_heads_per_shard, layout.block_size, head_dim)
            self.keys.append(
                [torch.zeros(shape, dtype=KV_DTYPE) for _ in range(sharding.num_shards)]
            )
            self.values.append(
                [torch.zeros(shape, dtype=KV_DTYPE) for _ in range(sharding.num_shards)]
            )
        blocks_per_group: dict[int, tuple[int, int]] = {}
        for layout in layers:
            blocks_per_group.setdefault(layout.group_id, (layout.num_blocks, layout.block_size))
        self.tokens: dict[int, torch.Tensor] = {
            g: torch.full((nb, bs), -1, dtype=torch.int64)
            for g, (nb, bs) in sorted(blocks_per_group.items())
        }


class ReferenceKVCache:
    """The opaque ``kv_cache`` object handed to the plugin (all lanes of one model)."""

    def __init__(
        self,
        layers: Sequence[LayerLayout],
        sharding: HeadSharding,
        head_dim: int,
        num_lanes: int,
        requested_dtype: torch.dtype,
        owner: int,
        allocated_by: str,
    ) -> None:
        self.layers = tuple(layers)
        self.sharding = sharding
        self.head_dim = head_dim
        self.requested_dtype = requested_dtype
        self.owner = owner  # id() of the model that allocated it
        self.allocated_by = allocated_by  # "allocate_kv_cache_per_layer" or "allocate_kv_cache"
        self.num_groups = 1 + max(layout.group_id for layout in layers)
        self.lanes = [LaneKVCache(layers, sharding, head_dim) for _ in range(num_lanes)]

    def group_layout(self, group_id: int) -> LayerLayout:
        return next(layout for layout in self.layers if layout.group_id == group_id)

    def device_tensors(
        self, lane: int, layer: int, device: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What device ``device`` of ``lane`` holds for ``layer``: ``(K, V)`` block tensors."""
        shard = self.sharding.shard_of_device(device)
        return self.lanes[lane].keys[layer][shard], self.lanes[lane].values[layer][shard]

    def history_group(self) -> int:
        """A full-attention group: its blocks hold every token of a sequence."""
        for g in range(self.num_groups):
            if self.group_layout(g).sliding_window is None:
                return g
        return 0

    def __repr__(self) -> str:
        layout = self.layers[0]
        return (
            f"ReferenceKVCache(lanes={len(self.lanes)}, layers={len(self.layers)}, "
            f"groups={self.num_groups}, blocks={layout.num_blocks}, block_size="
            f"{layout.block_size}, shards={self.sharding.num_shards})"
        )


def check_page_rows(
    rows: torch.Tensor,
    first_pos: torch.Tensor,
    last_pos: torch.Tensor,
    layout: LayerLayout,
    what: str,
    allow_null: bool = False,
) -> None:
    """Every block a row writes or attends to must exist, and must not be the null block.

    rows: int [n, W] block ids; first_pos / last_pos: int64 [n], the first and last query
    position of each row (a sliding-window layer needs blocks back to first - window + 1 only).
    """
    if rows.numel() == 0:
        return
    bs = layout.block_size
    width = rows.shape[1]
    need_last = last_pos // bs
    if int(need_last.max()) >= width:
        row = int(torch.argmax(need_last))
        raise KVCacheError(
            f"{what}: row {row} reaches position {int(last_pos[row])} but its page table has "
            f"only {width} blocks of {bs}"
        )
    index = torch.arange(width)[None, :]
    need = index <= need_last[:, None]
    if layout.sliding_window is not None:
        first = (first_pos - layout.sliding_window + 1).clamp(min=0) // bs
        need &= index >= first[:, None]
    bad_range = need & ((rows < 0) | (rows >= layout.num_blocks))
    if bool(bad_range.any()):
        row, col = (int(x) for x in bad_range.nonzero()[0])
        raise KVCacheError(
            f"{what}: row {row} block id {int(rows[row, col])} at page-table column {col} is "
            f"outside this lane's cache of {layout.num_blocks} blocks"
        )
    if not allow_null:
        bad_null = need & (rows == NULL_BLOCK)
        if bool(bad_null.any()):
            row, col = (int(x) for x in bad_null.nonzero()[0])
            raise KVCacheError(
                f"{what}: row {row} needs page-table column {col} (positions {col * bs}.."
                f"{col * bs + bs - 1}) but it holds the null block 0"
            )


def write_kv(
    lane: LaneKVCache,
    sharding: HeadSharding,
    layer: int,
    blocks: torch.Tensor,
    offsets: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> None:
    """Store k/v [T, Hkv, D] at (blocks[t], offsets[t]) on every shard of the lane."""
    for shard in range(sharding.num_shards):
        heads = sharding.kv_heads(shard)
        lane.keys[layer][shard][blocks, :, offsets] = k[:, heads]
        lane.values[layer][shard][blocks, :, offsets] = v[:, heads]


def write_tokens(
    lane: LaneKVCache, group: int, blocks: torch.Tensor, offsets: torch.Tensor, tokens: torch.Tensor
) -> None:
    lane.tokens[group][blocks, offsets] = tokens


def read_tokens(lane: LaneKVCache, group: int, row: torch.Tensor, length: int) -> torch.Tensor:
    """The token ids a page-table row holds for positions [0, length)."""
    bs = lane.tokens[group].shape[1]
    blocks = row[: (length + bs - 1) // bs].long()
    return lane.tokens[group][blocks].reshape(-1)[:length]


def paged_attention(
    lane: LaneKVCache,
    sharding: HeadSharding,
    layer: int,
    layout: LayerLayout,
    rows: torch.Tensor,
    q: torch.Tensor,
    q_pos: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Attention of queries over the cached keys a page table row addresses.

    rows: int [n, W]; q: [n, Tq, H, D]; q_pos: int64 [n, Tq] (the position of each query; keys
    at positions <= it are visible, within the sliding window if the layer has one).
    Returns [n, Tq, H * D], shards concatenated along heads as after the lane's all-gather.

    Like a TT kernel, each row reads only the page-table columns its queries can see: blocks
    before a sliding window are never addressed (vLLM frees them; their entries become the null
    block or are reused), and key/value slots no query of the row may see are zeroed before use,
    so whatever such a slot holds (garbage, NaN) cannot leak into the output.
    """
    n, tq, _, d = q.shape
    bs = layout.block_size
    last = q_pos.max(dim=1).values // bs  # [n]
    if layout.sliding_window is None:
        first = torch.zeros_like(last)
    else:
        first = (q_pos.min(dim=1).values - layout.sliding_window + 1).clamp(min=0) // bs
    width = int((last - first).max()) + 1
    cols = first[:, None] + torch.arange(width)[None, :]  # [n, width]
    in_range = cols <= last[:, None]
    cols = torch.minimum(cols, last[:, None])  # past a row's last column: masked below
    blocks = rows.long().gather(1, cols)
    t = width * bs
    key_pos = (cols[:, :, None] * bs + torch.arange(bs)).reshape(n, t)  # [n, t]
    key_ok = in_range[:, :, None].expand(n, width, bs).reshape(n, t)
    visible = (key_pos[:, None, :] <= q_pos[:, :, None]) & key_ok[:, None, :]
    if layout.sliding_window is not None:
        visible &= key_pos[:, None, :] > q_pos[:, :, None] - layout.sliding_window
    seen = visible.any(dim=1)  # [n, t]
    g = sharding.q_heads_per_shard // sharding.kv_heads_per_shard
    outputs = []
    for shard in range(sharding.num_shards):
        hk = sharding.kv_heads_per_shard
        keys = lane.keys[layer][shard][blocks].permute(0, 2, 1, 3, 4).reshape(n, hk, t, d)
        values = lane.values[layer][shard][blocks].permute(0, 2, 1, 3, 4).reshape(n, hk, t, d)
        keys = torch.where(seen[:, None, :, None], keys, 0.0)
        values = torch.where(seen[:, None, :, None], values, 0.0)
        qs = q[:, :, sharding.q_heads(shard)].reshape(n, tq, hk, g, d)
        scores = torch.einsum("nqhgd,nhtd->nhgqt", qs, keys) * scale
        scores = scores.masked_fill(~visible[:, None, None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = torch.einsum("nhgqt,nhtd->nqhgd", probs, values)
        outputs.append(out.reshape(n, tq, hk * g * d))
    return torch.cat(outputs, dim=-1)
