"""Slot ownership, compaction, padding and page-table building."""

from __future__ import annotations

import pytest
import torch
from vllm.sampling_params import SamplingParams

from vllm_tt_plugin.contract.reload_contract import apply_remap
from vllm_tt_plugin.contract.sampling_params import EMPTY_ROW, TTSamplingParams
from vllm_tt_plugin.input_batch import (
    LaneSlots,
    TTInputBatch,
    TTRequestState,
    device_rows,
    padded_token_lists,
)


def state(req_id: str, blocks: list[int], lane: int = 0, **params: object) -> TTRequestState:
    return TTRequestState(
        req_id=req_id,
        prompt_token_ids=[1, 2, 3],
        sampling_params=SamplingParams(**params),
        block_ids=(list(blocks),),
        num_computed_tokens=0,
        lane=lane,
        device_seed=7,
        generator=None,
    )


def test_slots_are_stable_and_reused() -> None:
    slots = LaneSlots(4)
    assert [slots.take_free(x) for x in "abc"] == [0, 1, 2]
    slots.release("b")
    assert slots.take_free("d") == 1
    assert slots.owner == ["a", "d", "c", None]


def test_full_lane_is_a_clear_error() -> None:
    slots = LaneSlots(2)
    slots.take_free("a")
    slots.take_free("b")
    with pytest.raises(
        RuntimeError,
        match=r"no free decode slot for request c: all 2 slots of the lane are taken \(the "
        "scheduler admitted more requests than max_num_seqs per lane",
    ):
        slots.take_free("c")


def test_compaction_fills_front_holes_with_the_last_rows() -> None:
    slots = LaneSlots(5)
    slots.owner = [None, "a", None, "b", None]
    remap = slots.compaction()
    assert remap is not None and sorted(remap) == list(range(5))
    assert apply_remap(slots.owner, remap) == ["b", "a", None, None, None]
    slots.apply(remap)
    assert slots.owner == ["b", "a", None, None, None]
    assert slots.compaction() is None


def test_one_departure_moves_one_row() -> None:
    # A finish in the middle of a full lane: the last row takes its slot, nobody else moves
    # (a stable shift would move every row behind it: their device state, tables, sampling).
    slots = LaneSlots(64)
    slots.owner = [f"r{i}" for i in range(64)]
    slots.release("r5")
    remap = slots.compaction()
    assert remap is not None
    assert [i for i, j in enumerate(remap) if i != j] == [5, 63]
    slots.apply(remap)
    assert slots.owner[5] == "r63" and slots.owner[63] is None
    assert slots.owner[:63] == [f"r{i}" for i in range(63) if i != 5][:5] + ["r63"] + [
        f"r{i}" for i in range(6, 63)
    ]
    # Two holes, two movers from the back; already packed afterwards.
    slots.release("r0")
    slots.release("r10")
    remap = slots.compaction()
    assert remap is not None
    assert sorted(i for i, j in enumerate(remap) if i != j) == [0, 10, 61, 62]
    slots.apply(remap)
    assert None not in slots.owner[:61] and slots.compaction() is None


def test_compaction_puts_idle_owners_behind_the_others() -> None:
    # "a" reached max_tokens in a step vLLM's async scheduler has not reported: it still owns
    # slot 0 but decodes no more.
    slots = LaneSlots(4)
    slots.owner = ["a", "b", None, "c"]
    remap = slots.compaction(idle={"a"})
    assert remap is not None
    slots.apply(remap)
    assert slots.owner == ["c", "b", None, "a"]
    # Its release a step later leaves the others packed: nothing more to move.
    slots.release("a")
    assert slots.compaction() is None
    # The others already in front: an idle owner behind them moves nothing.
    slots.owner = ["b", "a", None, None]
    assert slots.compaction(idle={"a"}) is None


def test_global_slots_across_lanes() -> None:
    batch = TTInputBatch(lanes=2, seqs_per_lane=3, max_blocks_per_req=4)
    a, b = state("a", [1], lane=0), state("b", [1], lane=1)
    batch.add(a)
    batch.add(b)
    assert batch.ensure_slot(a) == 0
    assert batch.ensure_slot(b) == 3
    assert [s.req_id if s else None for s in batch.slot_states()] == [
        "a",
        None,
        None,
        "b",
        None,
        None,
    ]


def test_page_table_rows_zero_padded() -> None:
    batch = TTInputBatch(lanes=1, seqs_per_lane=3, max_blocks_per_req=4)
    rows = [state("a", [5, 9]), None, state("c", [2, 3, 4, 7, 8])]
    table = batch.page_table(rows, group=0, width=4)
    assert table.dtype == torch.int32
    assert table.tolist() == [[5, 9, 0, 0], [0, 0, 0, 0], [2, 3, 4, 7]]


def test_token_slice_spans_prompt_and_output() -> None:
    s = state("a", [1])
    s.output_token_ids.extend([10, 11])
    assert s.token_slice(0, 5) == [1, 2, 3, 10, 11]
    assert s.token_slice(2, 4) == [3, 10]
    assert s.token_slice(3, 5) == [10, 11]
    assert s.last_token() == 11


def test_device_rows_encode_as_tt_metal_sampling_params() -> None:
    """Per-row lists; padding rows neutral (temperature 0, top_k 1, top_p 1.0); top_k off or
    >= vocab -> vocab; unseeded -> None; enable_log_probs = num_logprobs >= 0."""
    rows = device_rows(
        [
            state("a", [1], temperature=0.8, top_k=5, logprobs=3, seed=11),
            None,
            state("b", [1], temperature=0.8, top_k=-1),
            state("c", [1], temperature=0.8, top_k=999, logprobs=0),
        ]
    )
    params = TTSamplingParams.encode(rows, vocab_size=256)
    assert params.temperature == pytest.approx([0.8, 0.0, 0.8, 0.8])
    assert params.top_k == [5, 1, 256, 256]
    assert params.top_p == [1.0, 1.0, 1.0, 1.0]
    assert params.num_logprobs == [3, -1, -1, 0]
    assert params.enable_log_probs == [True, False, False, True]
    assert rows[1] == EMPTY_ROW
    assert params.seed == [7, None, None, None]  # the request's device seed; unseeded None
    assert not params.any_penalties


def test_greedy_maps_to_zero_temperature() -> None:
    assert state("a", [1], temperature=0.0).device_row().temperature == 0.0


def test_padded_token_lists() -> None:
    out = padded_token_lists([[1, 2], [], [3]])
    assert out.tolist() == [[1, 2], [-1, -1], [3, -1]]


def test_token_slice_and_last_token_at_every_boundary() -> None:
    s = state("a", [1])
    assert s.last_token() == 3  # no output yet: the prompt's last token
    s.output_token_ids.extend([10, 11, 12])
    assert s.token_slice(4, 6) == [11, 12]  # starts inside the output
    assert s.token_slice(1, 3) == [2, 3]  # ends with the prompt
    assert s.last_token() == 12


def test_padded_token_lists_shape_and_dtype() -> None:
    """At least one column (an empty batch of histories is still a tensor the device takes),
    no more than the longest history, int32 throughout."""
    for lists, shape in (([], (0, 1)), ([[]], (1, 1)), ([[5]], (1, 1)), ([[5, 6], [7]], (2, 2))):
        out = padded_token_lists(lists)
        assert (tuple(out.shape), out.dtype) == (shape, torch.int32)


def test_global_slot_of_a_later_lane_and_of_a_request_without_one() -> None:
    batch = TTInputBatch(lanes=2, seqs_per_lane=3, max_blocks_per_req=4)
    first, second = state("a", [1], lane=1), state("b", [1], lane=1)
    batch.add(first)
    batch.add(second)
    assert (batch.ensure_slot(first), batch.ensure_slot(second)) == (3, 4)
    assert batch.num_slots == 6
    with pytest.raises(RuntimeError, match="request c has no decode slot"):
        batch.global_slot(state("c", [1]))


def test_device_row_carries_each_penalty_and_a_top_k_of_one() -> None:
    row = state(
        "a",
        [1],
        temperature=0.8,
        top_k=1,
        presence_penalty=0.5,
        frequency_penalty=0.25,
        repetition_penalty=1.5,
    ).device_row()
    assert (row.top_k, row.presence_penalty, row.frequency_penalty, row.repetition_penalty) == (
        1,
        0.5,
        0.25,
        1.5,
    )
