"""mRoPE position rule and rotary (test_models/mrope.py) against transformers' Qwen2-VL."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from transformers import AutoConfig

from tests.conftest import REPO
from vllm_tt_plugin.test_models.mrope import (
    MRopeError,
    MRopeLayout,
    MRopeRotary,
    RopeCursor,
    decode_positions,
    mrope_cos_sin,
    next_position,
    rope_index,
    rope_span,
)

MODEL = REPO / "fixtures" / "models" / "tt-reference-qwen2vl"
START, END = 1024, 1025  # <|vision_start|>, <|vision_end|>


@functools.cache
def config() -> Any:
    return AutoConfig.from_pretrained(MODEL)


@functools.cache
def hf_model() -> Any:
    from transformers import Qwen2VLForConditionalGeneration

    return Qwen2VLForConditionalGeneration.from_pretrained(MODEL, dtype=torch.float32).eval()


def layout() -> MRopeLayout:
    return MRopeLayout.from_hf_config(config(), head_dim=32)


def prompt(grids: list[tuple[int, int, int]], texts: list[int]) -> list[int]:
    """texts[0] text tokens, then per image: start, its placeholders, end, texts[i + 1] tokens."""
    pad, ids = layout().image_token_id, list(range(10, 10 + texts[0]))
    for i, grid in enumerate(grids):
        ids += [START] + [pad] * layout().tokens_per_image(grid) + [END]
        ids += list(range(20, 20 + texts[i + 1]))
    return ids


CASES = [
    ([], [7]),
    ([(1, 4, 6)], [3, 5]),  # wider than tall
    ([(1, 8, 4)], [0, 4]),  # taller than wide, image first
    ([(1, 4, 4), (1, 2, 8)], [2, 3, 6]),
    ([(1, 6, 6), (1, 2, 2)], [5, 0, 1]),  # two images back to back (vision tokens between)
]


@pytest.mark.parametrize(("grids", "texts"), CASES)
def test_rope_index_equals_transformers(grids: list[Any], texts: list[int]) -> None:
    ids = prompt(grids, texts)
    got, delta = rope_index(torch.tensor(ids), grids, layout())
    input_ids = torch.tensor([ids])
    if grids:
        want, want_delta = hf_model().model.get_rope_index(
            input_ids,
            mm_token_type_ids=(input_ids == layout().image_token_id).int(),
            image_grid_thw=torch.tensor(grids),
        )
        assert torch.equal(got, want[:, 0]) and delta == int(want_delta)
    else:
        assert torch.equal(got, torch.arange(len(ids)).expand(3, -1)) and delta == 0
    if any(h != w for _, h, w in grids):
        assert delta != 0  # the deltas under test are not trivially zero


@pytest.mark.parametrize("cuts", [[3], [5, 9], [4, 5, 6, 7], [2, 11, 15, 16, 20]])
def test_spans_cut_anywhere_continue_the_whole_sequence(cuts: list[int]) -> None:
    """Consecutive spans (cut inside images too), each given the grids of the images it
    overlaps and the cursor the previous one left, give the whole sequence's positions."""
    grids = [(1, 4, 6), (1, 6, 4)]  # 6 placeholders each
    ids = prompt(grids, [3, 1, 2])
    pad = layout().image_token_id
    spans = [(4, 10), (13, 19)]
    assert [i for i, t in enumerate(ids) if t == pad] == [*range(4, 10), *range(13, 19)]
    whole, _ = rope_index(torch.tensor(ids), grids, layout())
    parts, cursor = [], RopeCursor()
    for start, end in zip([0, *cuts], [*cuts, len(ids)], strict=True):
        overlapped = [
            g for g, (lo, hi) in zip(grids, spans, strict=True) if lo < end and start < hi
        ]
        part, cursor = rope_span(torch.tensor(ids[start:end]), overlapped, layout(), cursor)
        parts.append(part)
    assert torch.equal(torch.cat(parts, dim=1), whole)
    assert cursor == RopeCursor(int(whole.max()) + 1)
    with pytest.raises(MRopeError, match=r"is cut: the sequence ends after 2 of its"):
        rope_index(torch.tensor(ids[:6]), grids[:1], layout())


def test_placeholders_must_match_the_grids() -> None:
    ids = torch.tensor(prompt([(1, 4, 4)], [1, 1]))
    with pytest.raises(MRopeError, match="only 0 image grid"):
        rope_index(ids, [], layout())
    with pytest.raises(MRopeError, match="2 image grid.* placeholders for 1"):
        rope_index(ids, [(1, 4, 4), (1, 2, 2)], layout())
    with pytest.raises(MRopeError, match=r"grid \[1, 8, 8\]\) needs 16 placeholders"):
        rope_index(ids, [(1, 8, 8)], layout())


def test_layout_refuses_a_section_that_does_not_fit_the_head() -> None:
    with pytest.raises(MRopeError, match="sums to 16, but head_dim=64 has 32"):
        MRopeLayout.from_hf_config(config(), head_dim=64)


def test_cos_sin_equal_transformers_and_plain_rope_on_text() -> None:
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    ids = prompt([(1, 4, 6), (1, 2, 8)], [3, 2, 4])
    positions, _ = rope_index(torch.tensor(ids), [(1, 4, 6), (1, 2, 8)], layout())
    rotary = MRopeRotary(32, 10000.0, layout().mrope_section)
    hf = Qwen2VLRotaryEmbedding(config().get_text_config())
    want_cos, want_sin = hf(torch.zeros(1, dtype=torch.float32), positions[:, None, :])
    cos, sin = mrope_cos_sin(positions, rotary.inv_freq, rotary.section)
    torch.testing.assert_close(cos, want_cos[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sin, want_sin[0], rtol=1e-6, atol=1e-6)
    # Equal components (text, decode) are plain RoPE at that position.
    text = decode_positions(torch.tensor([0, 5, 40]), torch.tensor([0, -3, 2]))
    cos, _ = mrope_cos_sin(text, rotary.inv_freq, rotary.section)
    freqs = torch.tensor([0, 2, 42], dtype=torch.float32)[:, None] * rotary.inv_freq
    torch.testing.assert_close(cos, torch.cat((freqs, freqs), -1).cos())


def test_rotary_needs_prepared_positions() -> None:
    rotary = MRopeRotary(32, 10000.0, (4, 6, 6))
    with pytest.raises(MRopeError, match="3 token.* not prepared"):
        rotary.cos_sin(torch.arange(3))
    rotary.prepare(torch.zeros((3, 2), dtype=torch.int64))
    with pytest.raises(MRopeError, match=r"got \(3, 2\)"):
        rotary.cos_sin(torch.arange(3))


def test_spans_continue_from_the_running_position() -> None:
    """A sequence cut outside its images: each span from the running position of the ones
    before gives the whole sequence's positions and, after the last, its delta."""
    grids = [(1, 4, 6), (1, 2, 8)]
    ids = torch.tensor(prompt(grids, [3, 2, 4]))
    whole, delta = rope_index(ids, grids, layout())
    cut = 3 + 1 + 6 + 1 + 2  # after the first image and the text behind it
    first, _ = rope_index(ids[:cut], grids[:1], layout())
    offset = next_position(first, 0)
    second, _ = rope_index(ids[cut:], grids[1:], layout(), offset)
    assert torch.equal(torch.cat([first, second], dim=1), whole)
    assert next_position(second, offset) - len(ids) == delta != 0
