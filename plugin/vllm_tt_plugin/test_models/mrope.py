"""Multimodal RoPE (Qwen2-VL's mRoPE) as pure functions: 3D positions, rope deltas, cos/sin.

A Qwen2-VL prompt's rotary positions have three components (temporal, height, width). Text
tokens use the same value in all three, counting on from the previous token; the tokens of an
image (its ``t x h/merge x w/merge`` merged patches, in row-major order) get ``start + t``,
``start + row``, ``start + column``, where ``start`` is the position the image begins at, and the
text after it continues from ``start + max(h, w) / merge``. A request's ``rope_delta`` is
``max position + 1 - sequence length``: every later token at sequence position ``p`` has rotary
position ``p + delta`` in all three components, which is all a decode step needs.

The rotary frequencies are split by ``mrope_section`` (summing to ``head_dim / 2``): chunk ``i``
of the frequency pairs rotates by component ``i % 3``. With equal components this is plain RoPE.

Facts from transformers' ``Qwen2VLModel.get_rope_index`` and ``Qwen2VLRotaryEmbedding``; the unit
tests compare against them. Nothing here knows about paging, slots or the plugin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


class MRopeError(ValueError):
    """A prompt's image placeholders do not match its image grids, or a bad mRoPE config."""


@dataclass(frozen=True)
class MRopeLayout:
    """What the position rule needs from a Qwen2-VL config."""

    image_token_id: int
    spatial_merge_size: int
    mrope_section: tuple[int, int, int]

    @classmethod
    def from_hf_config(cls, hf_config: Any, head_dim: int) -> MRopeLayout:
        text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        params = getattr(text, "rope_parameters", None) or {}
        section = params.get("mrope_section") if isinstance(params, dict) else None
        if not section or len(section) != 3:
            raise MRopeError(
                f"text_config.rope_parameters.mrope_section={section!r}: expected three sizes "
                "(temporal, height, width)"
            )
        if sum(section) != head_dim // 2:
            raise MRopeError(
                f"mrope_section={list(section)} sums to {sum(section)}, but head_dim={head_dim} "
                f"has {head_dim // 2} frequency pairs"
            )
        image_token_id = getattr(hf_config, "image_token_id", None)
        if image_token_id is None:
            raise MRopeError("hf_config has no image_token_id")
        merge = int(getattr(hf_config.vision_config, "spatial_merge_size", 0) or 0)
        if merge < 1:
            raise MRopeError(f"vision_config.spatial_merge_size={merge} must be >= 1")
        return cls(int(image_token_id), merge, (int(section[0]), int(section[1]), int(section[2])))

    def tokens_per_image(self, grid_thw: Sequence[int]) -> int:
        t, h, w = (int(x) for x in grid_thw)
        return t * (h // self.spatial_merge_size) * (w // self.spatial_merge_size)


@dataclass(frozen=True)
class RopeCursor:
    """Where a span's rotary positions start: ``position`` is where the next text token goes,
    or, with ``image_done`` > 0, the start of the image the span starts inside, of which
    ``image_done`` placeholders came before the span."""

    position: int = 0
    image_done: int = 0


def rope_span(
    input_ids: torch.Tensor,
    image_grid_thw: Sequence[Sequence[int]],
    layout: MRopeLayout,
    cursor: RopeCursor = RopeCursor(),
) -> tuple[torch.Tensor, RopeCursor]:
    """Rotary positions ``[3, T]`` (int64) of a span of tokens that may start and end inside an
    image, and the cursor after it. ``image_grid_thw``: the ``(t, h, w)`` patch grid of each
    image the span holds placeholders of, in prompt order (the one it starts inside first).
    Each run of image tokens is consumed image by image: the placeholders must match the grids,
    except that the span may stop before its last image is complete."""
    ids = input_ids.reshape(-1).tolist()
    grids = [tuple(int(x) for x in grid) for grid in image_grid_thw]
    merge = layout.spatial_merge_size
    columns: list[torch.Tensor] = []
    pos, done, i, image = cursor.position, cursor.image_done, 0, 0
    while i < len(ids):
        if ids[i] != layout.image_token_id and not done:
            j = i
            while j < len(ids) and ids[j] != layout.image_token_id:
                j += 1
            columns.append(torch.arange(pos, pos + j - i).expand(3, -1))
            pos += j - i
            i = j
            continue
        if image >= len(grids):
            raise MRopeError(
                f"image placeholder at position {i} but only {len(grids)} image grid(s) given"
            )
        t, h, w = grids[image][0], grids[image][1] // merge, grids[image][2] // merge
        count = t * h * w
        take = min(count - done, len(ids) - i)
        if ids[i : i + take] != [layout.image_token_id] * take:
            raise MRopeError(
                f"image {image} (grid {list(grids[image])}) needs {count - done} placeholders "
                f"from position {i}, the sequence has fewer"
            )
        tt, hh, ww = torch.meshgrid(
            torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij"
        )
        columns.append(torch.stack([tt, hh, ww]).reshape(3, -1)[:, done : done + take] + pos)
        i, done = i + take, done + take
        if done == count:
            pos, done, image = pos + max(h, w), 0, image + 1
    held = image + (1 if done else 0)
    if held != len(grids):
        raise MRopeError(
            f"{len(grids)} image grid(s) given but the sequence holds placeholders for {held}"
        )
    if not columns:
        return torch.zeros((3, 0), dtype=torch.int64), cursor
    return torch.cat(columns, dim=1).to(torch.int64), RopeCursor(pos, done)


def rope_index(
    input_ids: torch.Tensor,
    image_grid_thw: Sequence[Sequence[int]],
    layout: MRopeLayout,
    offset: int = 0,
) -> tuple[torch.Tensor, int]:
    """Rotary positions ``[3, T]`` (int64) of a span of whole images and text, and the rope
    delta it adds.

    ``input_ids``: the whole sequence from position 0, or a later span that starts outside any
    image, ``offset`` being the rotary position its first token gets; ``image_grid_thw``: the
    ``(t, h, w)`` patch grid of each image whose placeholders the span holds, in prompt order.
    The placeholders must add up exactly to the grids. The delta is ``last position + 1 -
    offset - span length``: for a whole sequence, the request's rope delta.
    """
    positions, after = rope_span(input_ids, image_grid_thw, layout, RopeCursor(offset))
    if after.image_done:
        grid = list(image_grid_thw[-1])
        raise MRopeError(
            f"image {len(image_grid_thw) - 1} (grid {grid}) is cut: the sequence ends after "
            f"{after.image_done} of its placeholders"
        )
    if not positions.numel():
        return positions, 0
    return positions, int(positions.max()) + 1 - offset - int(positions.shape[1])


def next_position(positions: torch.Tensor, offset: int) -> int:
    """The running rotary position after a span (where the next span's text continues)."""
    return int(positions.max()) + 1 if positions.numel() else offset


def decode_positions(positions: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
    """Rotary positions ``[3, N]`` of decode tokens at sequence positions ``positions`` [N]."""
    return (positions.to(torch.int64) + deltas.to(torch.int64)).expand(3, -1)


class MRopeRotary:
    """Drop-in for the decoder's ``Rotary`` (``cos_sin(positions)`` -> ``[T, D]`` each) whose
    rotary positions are 3D: the caller ``prepare``s them for the next call, since the decoder
    passes only the sequence positions (which the paged attention still uses as is)."""

    def __init__(self, head_dim: int, theta: float, mrope_section: Sequence[int]) -> None:
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
        self.inv_freq = 1.0 / (theta**exponents)
        self.section = [int(s) for s in mrope_section]
        self._next: torch.Tensor | None = None

    def prepare(self, rope_positions: torch.Tensor) -> None:
        self._next = rope_positions

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rope, self._next = self._next, None
        if rope is None or rope.shape != (3, positions.shape[0]):
            got = None if rope is None else tuple(rope.shape)
            raise MRopeError(
                f"mRoPE positions for {positions.shape[0]} token(s) were not prepared (got {got})"
            )
        return mrope_cos_sin(rope, self.inv_freq, self.section)


def mrope_cos_sin(
    rope_positions: torch.Tensor, inv_freq: torch.Tensor, section: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin ``[T, head_dim]`` for 3D positions ``[3, T]``: frequency chunk ``i`` of
    ``section`` rotates by component ``i % 3``; then duplicated for rotate-half."""
    freqs = rope_positions.to(torch.float32)[..., None] * inv_freq  # [3, T, D/2]
    chunks = freqs.split(list(section), dim=-1)
    mixed = torch.cat([chunk[i % 3] for i, chunk in enumerate(chunks)], dim=-1)
    emb = torch.cat((mixed, mixed), dim=-1)
    return emb.cos(), emb.sin()
