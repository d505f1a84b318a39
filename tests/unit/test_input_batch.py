"""Slot ownership, compaction, padding and page-table building."""

from __future__ import annotations

import pytest
import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

from vllm_tt_plugin.contract.reload_contract import apply_remap
from vllm_tt_plugin.contract.sampling_params import EMPTY_ROW, TTSamplingParams, encode_row
from vllm_tt_plugin.input_batch import (
    LaneSlots,
    TTInputBatch,
    TTRequestState,
    device_rows,
    make_request_state,
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


# --- a request's state from vLLM's scheduler data --------------------------------------------
def new_request(
    req_id: str = "r",
    prompt: list[int] | None = None,
    blocks: tuple[list[int], ...] = ([4, 5], [6]),
    params: SamplingParams | None = None,
    mm_features: list[object] | None = None,
    computed: int = 2,
) -> NewRequestData:
    return NewRequestData(
        req_id=req_id,
        prompt_token_ids=[1, 2, 3] if prompt is None else prompt,
        mm_features=mm_features,  # type: ignore[arg-type]  (vLLM may send None)
        sampling_params=SamplingParams() if params is None else params,
        pooling_params=None,
        block_ids=blocks,
        num_computed_tokens=computed,
        lora_request=None,
    )


def test_a_new_request_keeps_its_own_copies_of_the_scheduler_data() -> None:
    prompt, blocks, feature = [7, 8, 9], ([4, 5], [6]), object()
    params = SamplingParams(temperature=0.5)
    new = new_request("x", prompt, blocks, params, [feature], computed=2)
    s = make_request_state(new, lane=3)
    assert (s.req_id, s.prompt_token_ids, s.block_ids, s.num_computed_tokens, s.lane) == (
        "x",
        [7, 8, 9],
        ([4, 5], [6]),
        2,
        3,
    )
    assert s.sampling_params is params and s.mm_features == [feature]
    assert s.output_token_ids == [] and s.slot is None
    # Copies: the worker grows its lists without touching vLLM's.
    s.block_ids[0].append(99)
    s.prompt_token_ids.append(99)
    s.mm_features.append(99)
    assert blocks == ([4, 5], [6]) and prompt == [7, 8, 9] and new.mm_features == [feature]
    # vLLM may send no multimodal features at all.
    assert make_request_state(new_request(mm_features=None), lane=0).mm_features == []


def test_a_seeded_request_gets_vllms_generator_and_its_seed_on_the_device() -> None:
    seed = 2**31 + 5  # beyond the device's seed range: folded into it
    s = make_request_state(new_request(params=SamplingParams(seed=seed)), lane=0)
    assert s.device_seed == 6 and isinstance(s.device_seed, int)
    assert s.generator is not None and s.generator.device == torch.device("cpu")
    expected = torch.Generator().manual_seed(seed)
    assert torch.equal(
        torch.rand(4, generator=s.generator), torch.rand(4, generator=expected)
    )  # vLLM's per-request generator: the host draws what vLLM's sampler would
    assert make_request_state(new_request(params=SamplingParams(seed=3)), 0).device_seed == 3


def test_an_unseeded_request_draws_its_device_seed_from_torchs_generator() -> None:
    torch.manual_seed(1234)
    expected = int(torch.randint(0, 2**31 - 1, (1,)).item())
    torch.manual_seed(1234)
    s = make_request_state(new_request(), lane=0)
    assert s.generator is None
    assert s.device_seed == expected and isinstance(s.device_seed, int)
    assert s.device_row().seed is None  # the device draws its own randomness


def test_requests_without_sampling_params_or_prompt_tokens_are_refused() -> None:
    pooling = new_request("p")
    pooling.sampling_params = None
    with pytest.raises(ValueError, match=r"^request p: TT serves generation requests only$"):
        make_request_state(pooling, lane=0)
    embeds = new_request("e")
    embeds.prompt_token_ids = None
    with pytest.raises(ValueError, match=r"^request e: prompt embeddings are not supported on TT$"):
        make_request_state(embeds, lane=0)


# --- cached-request updates -------------------------------------------------------------------
def cached_step(
    rows: list[tuple[str, tuple[list[int], ...] | None, int]],
    resumed: tuple[str, ...] = (),
    all_token_ids: dict[str, list[int]] | None = None,
) -> SchedulerOutput:
    cached = CachedRequestData(
        req_ids=[r for r, _, _ in rows],
        resumed_req_ids=set(resumed),
        new_token_ids=[[] for _ in rows],
        all_token_ids=all_token_ids or {},
        new_block_ids=[b for _, b, _ in rows],
        num_computed_tokens=[c for _, _, c in rows],
        num_output_tokens=[0 for _ in rows],
    )
    return SchedulerOutput(
        scheduled_new_reqs=[],
        scheduled_cached_reqs=cached,
        num_scheduled_tokens={r: 1 for r, _, _ in rows},
        total_num_scheduled_tokens=len(rows),
        scheduled_spec_decode_tokens={},
        scheduled_encoder_inputs={},
        num_common_prefix_blocks=[],
        finished_req_ids=set(),
        free_encoder_mm_hashes=[],
    )


def two_group_state(req_id: str) -> TTRequestState:
    s = state(req_id, [1, 2])
    s.block_ids = ([1, 2], [3])
    return s


def test_growth_extends_each_group_in_place_and_marks_the_request() -> None:
    batch = TTInputBatch(lanes=1, seqs_per_lane=2, max_blocks_per_req=4)
    a, b = two_group_state("a"), two_group_state("b")
    batch.add(a)
    batch.add(b)
    groups = a.block_ids
    version = batch.blocks_version
    resumed = batch.apply_cached_updates(cached_step([("a", ([7], [8]), 5), ("b", None, 6)]))
    assert resumed == set()
    assert a.block_ids == ([1, 2, 7], [3, 8]) and a.block_ids is groups  # grown, not replaced
    assert (a.block_epoch, b.block_ids, b.block_epoch) == (0, ([1, 2], [3]), 0)
    assert (a.num_computed_tokens, b.num_computed_tokens) == (5, 6)
    assert batch.blocks_dirty == {"a"} and batch.blocks_version == version + 1
    # New block lists that are all empty are no change: nothing to catch up on.
    batch.blocks_dirty.clear()
    batch.apply_cached_updates(cached_step([("a", ([], []), 7), ("b", ([], [9]), 7)]))
    assert a.block_ids == ([1, 2, 7], [3, 8]) and b.block_ids == ([1, 2], [3, 9])
    assert batch.blocks_dirty == {"b"} and batch.blocks_version == version + 2


def test_a_resumed_request_starts_its_blocks_over_and_takes_the_schedulers_history() -> None:
    batch = TTInputBatch(lanes=1, seqs_per_lane=2, max_blocks_per_req=4)
    a, b = two_group_state("a"), two_group_state("b")
    a.output_token_ids.extend([10, 11, 12])
    outputs = a.output_token_ids  # vLLM's host InputBatch holds this very list
    batch.add(a)
    batch.add(b)
    new_blocks = ([20], [21])
    step = cached_step(
        [("b", ([30], []), 9), ("a", new_blocks, 4)],  # each change counts, in any order
        resumed=("a",),
        all_token_ids={"a": [1, 2, 3, 10, 40]},
    )
    version = batch.blocks_version
    assert batch.apply_cached_updates(step) == {"a"}
    assert a.block_ids == ([20], [21]) and a.block_epoch == 1
    a.block_ids[0].append(22)
    assert new_blocks == ([20], [21])  # its own lists
    assert a.output_token_ids is outputs and outputs == [10, 40]
    assert a.num_computed_tokens == 4
    assert b.block_ids == ([1, 2, 30], [3]) and b.block_epoch == 0  # not resumed: grown
    assert batch.blocks_dirty == {"a", "b"} and batch.blocks_version == version + 2


def test_a_resumed_request_without_blocks_or_history_keeps_its_outputs() -> None:
    batch = TTInputBatch(lanes=1, seqs_per_lane=1, max_blocks_per_req=4)
    a = two_group_state("a")
    a.output_token_ids.append(10)
    batch.add(a)
    version = batch.blocks_version
    assert batch.apply_cached_updates(cached_step([("a", None, 3)], resumed=("a",))) == {"a"}
    assert (a.block_ids, a.block_epoch, a.output_token_ids) == ((), 1, [10])
    assert batch.blocks_dirty == {"a"} and batch.blocks_version == version + 1
    # Preempted and resumed again: another epoch, so a reader that kept the last one rewrites.
    batch.apply_cached_updates(cached_step([("a", ([5], [6]), 3)], resumed=("a",)))
    assert (a.block_ids, a.block_epoch) == (([5], [6]), 2)
    assert batch.blocks_version == version + 2


def test_removing_a_request_frees_its_slot_for_the_next() -> None:
    batch = TTInputBatch(lanes=2, seqs_per_lane=2, max_blocks_per_req=4)
    a, b = state("a", [1], lane=1), state("b", [1], lane=1)
    batch.add(a)
    batch.add(b)
    assert (batch.ensure_slot(a), batch.ensure_slot(b)) == (2, 3)
    assert batch.remove("a") is a
    assert a.slot is None and "a" not in batch.requests
    assert batch.remove("a") is None  # already gone: nothing to release
    assert b.slot == 1 and batch.slots[1].owner == [None, "b"]
    c = state("c", [1], lane=1)
    batch.add(c)
    assert batch.ensure_slot(c) == 2
    # A preempted request keeps its state but gives its slot back; releasing twice is harmless.
    batch.release_slot(b)
    batch.release_slot(b)
    assert b.slot is None and batch.requests["b"] is b
    assert batch.slots[1].owner == ["c", None]
    assert [s.req_id if s else None for s in batch.slot_states()] == [None, None, "c", None]


def test_the_batch_reports_its_shape() -> None:
    batch = TTInputBatch(lanes=2, seqs_per_lane=3, max_blocks_per_req=5)
    assert (batch.lanes, batch.num_slots, batch.max_blocks_per_req) == (2, 6, 5)
    assert [lane.capacity for lane in batch.slots] == [3, 3]


# --- the encoded sampling row ----------------------------------------------------------------
def test_the_encoded_row_is_computed_once_per_vocabulary() -> None:
    s = state("a", [1], temperature=0.7, top_k=50, logprobs=2)
    row = s.encoded_sampling(256)
    assert row == encode_row(s.device_row(), 256)
    assert row[1] == 50
    assert s.encoded_sampling(32) == encode_row(s.device_row(), 32)  # top_k 50 >= 32: vocab
    assert s.encoded_sampling(32)[1] == 32
    # Computed once: the cached row is returned while the vocabulary is the same.
    s.sampling_params = SamplingParams(temperature=0.2)
    assert s.encoded_sampling(32) == encode_row(
        state("b", [1], temperature=0.7, top_k=50, logprobs=2).device_row(), 32
    )
    assert s.encoded_sampling(64) == encode_row(s.device_row(), 64)
