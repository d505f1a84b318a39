"""Persistent decode inputs: written by change, always equal to a build from scratch."""

from __future__ import annotations

import random

import pytest
import torch
from vllm.sampling_params import SamplingParams

from vllm_tt_plugin.contract.sampling_params import TTSamplingParams
from vllm_tt_plugin.input_batch import TTRequestState, device_rows
from vllm_tt_plugin.step.decode_inputs import PersistentDecodeInputs

VOCAB = 100
WIDTH = 6


def state(req_id: str, groups: int, rng: random.Random) -> TTRequestState:
    params = rng.choice(
        [
            {"temperature": 0.0},
            {"temperature": 0.7, "top_k": 5, "seed": rng.randrange(100)},
            {"temperature": 1.0, "top_p": 0.9, "repetition_penalty": 1.2},
            {"temperature": 0.0, "logprobs": 2, "presence_penalty": 0.5},
        ]
    )
    return TTRequestState(
        req_id=req_id,
        prompt_token_ids=[1, 2, 3],
        sampling_params=SamplingParams(**params),
        block_ids=tuple([rng.randrange(1, 500)] for _ in range(groups)),
        num_computed_tokens=3,
        lane=0,
        device_seed=11,
        generator=None,
    )


def tables_from_scratch(
    active: list[TTRequestState | None], groups: int, width: int
) -> list[torch.Tensor]:
    out = []
    for group in range(groups):
        table = torch.zeros((len(active), width), dtype=torch.int32)
        for slot, s in enumerate(active):
            ids = [] if s is None else s.block_ids[group][:width]
            table[slot, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        out.append(table)
    return out


def layout_of(active: list[TTRequestState | None]) -> tuple[str | None, ...]:
    return tuple(None if s is None else s.req_id for s in active)


def test_random_steps_equal_a_build_from_scratch() -> None:
    """Joins, leaves, compaction moves, idle slots, block growth (also between two steps of
    one layout), a resume with fewer blocks and a failed call, over 400 steps and two KV
    groups: the kept tables and sampling parameters always equal the ones built anew."""
    rng = random.Random(3)
    slots, groups = 8, 2
    inputs = PersistentDecodeInputs(slots, WIDTH, groups, VOCAB)
    active: list[TTRequestState | None] = [None] * slots
    dirty: set[str] = set()
    last_params: TTSamplingParams | None = None
    last_layout = None
    counter = 0
    for _ in range(400):
        action = rng.random()
        forgot = False
        if action < 0.2:  # a request joins a free slot
            free = [i for i, s in enumerate(active) if s is None]
            if free:
                counter += 1
                active[rng.choice(free)] = state(f"r{counter}", groups, rng)
        elif action < 0.3:  # one leaves (finished, or idle this step)
            taken = [i for i, s in enumerate(active) if s is not None]
            if taken:
                active[rng.choice(taken)] = None
        elif action < 0.37:  # compaction: a permutation of the slots
            active = rng.sample(active, len(active))
        elif action < 0.4:  # a failed call: the runner forgets what was sent
            inputs.forget_layout()
            forgot = True
        for s in active:
            if s is not None and rng.random() < 0.3:
                group = rng.randrange(groups)
                if rng.random() < 0.1:  # resumed after preemption: new (maybe fewer) blocks
                    s.replace_blocks(
                        tuple(
                            [rng.randrange(1, 500) for _ in range(rng.randrange(1, 4))]
                            for _ in range(groups)
                        )
                    )
                else:
                    s.block_ids[group].append(rng.randrange(1, 500))
                dirty.add(s.req_id)
        layout = layout_of(active)
        inputs.update_tables(active, layout, dirty)
        assert not dirty
        want = tables_from_scratch(active, groups, WIDTH)
        for got, expected in zip(inputs.tables, want, strict=True):
            assert torch.equal(got, expected)
        params = inputs.sampling_params(active, layout)
        assert params == TTSamplingParams.encode(device_rows(active), VOCAB)
        assert inputs.penalties == params.any_penalties
        if layout == last_layout and last_params is not None and not forgot:
            assert params is last_params  # one object per layout
        elif last_params is not None:
            assert params is not last_params
        last_params, last_layout = params, layout


def test_a_new_layout_leaves_the_previous_params_object_unchanged() -> None:
    """A model may keep the object it was sent (resident sampling state)."""
    rng = random.Random(0)
    inputs = PersistentDecodeInputs(4, WIDTH, 1, VOCAB)
    a, b = state("a", 1, rng), state("b", 1, rng)
    first = inputs.sampling_params([a, None, None, None], ("a", None, None, None))
    snapshot = TTSamplingParams.encode(device_rows([a, None, None, None]), VOCAB)
    inputs.sampling_params([a, b, None, None], ("a", "b", None, None))
    assert first == snapshot


def test_only_changed_slots_are_encoded() -> None:
    """A request's row is encoded once; a layout change re-reads only the slots that changed."""
    rng = random.Random(1)
    states = [state(f"r{i}", 1, rng) for i in range(4)]
    inputs = PersistentDecodeInputs(4, WIDTH, 1, VOCAB)
    inputs.sampling_params(states, layout_of(states))
    calls: list[str] = []
    for s in states:
        original = s.encoded_sampling

        def spy(vocab: int, s: TTRequestState = s, original=original) -> object:  # type: ignore[no-untyped-def]
            calls.append(s.req_id)
            return original(vocab)

        s.encoded_sampling = spy  # type: ignore[method-assign]
    moved: list[TTRequestState | None] = [states[0], states[1], None, states[3]]
    inputs.sampling_params(moved, layout_of(moved))
    assert calls == []  # slot 2 emptied: nothing to encode
    moved[2] = states[2]
    inputs.sampling_params(moved, layout_of(moved))
    assert calls == ["r2"]


def test_a_step_writes_only_what_changed() -> None:
    """The tables are written by change, not rebuilt: a mark left in a row survives every step
    that does not change that row (a steady step, another slot's growth or join, a compaction
    that moves the row whole), and a row that changes is written from its new blocks only."""
    rng = random.Random(1)
    inputs = PersistentDecodeInputs(4, WIDTH, 1, VOCAB)
    a, b, c = (state(name, 1, rng) for name in "abc")
    active: list[TTRequestState | None] = [a, None, b, None]
    inputs.update_tables(active, layout_of(active), set())
    table = inputs.tables[0]
    mark = -7
    table[0, WIDTH - 1] = mark  # beyond a's one block: no step of a's may touch it
    table[2, WIDTH - 1] = mark
    inputs.update_tables(active, layout_of(active), set())  # steady
    assert table[0, WIDTH - 1] == mark and table[2, WIDTH - 1] == mark
    b.block_ids[0].append(77)  # b grows by one block
    inputs.update_tables(active, layout_of(active), {"b"})
    assert table[2, :3].tolist() == [b.block_ids[0][0], 77, 0]
    assert table[2, WIDTH - 1] == mark and table[0, WIDTH - 1] == mark
    active[1] = c  # c joins
    inputs.update_tables(active, layout_of(active), set())
    assert table[1, 0] == c.block_ids[0][0]
    assert table[0, WIDTH - 1] == mark and table[2, WIDTH - 1] == mark
    active = [a, c, None, b]  # compaction: b moves to slot 3 with its row
    inputs.update_tables(active, layout_of(active), set())
    assert table[3, WIDTH - 1] == mark and table[0, WIDTH - 1] == mark
    assert table[2].tolist() == [0] * WIDTH


def test_token_and_position_buffers_start_empty_and_load_every_slot() -> None:
    """One int32 token column and one int32 position per slot; an empty slot holds token 0 at
    position -1, an occupied one its last token at its computed length."""
    rng = random.Random(2)
    inputs = PersistentDecodeInputs(3, WIDTH, 1, VOCAB)
    assert (tuple(inputs.tokens.shape), inputs.tokens.dtype) == ((3, 1), torch.int32)
    assert inputs.positions.dtype == torch.int32 and inputs.positions.tolist() == [-1, -1, -1]
    a = state("a", 1, rng)
    a.output_token_ids.append(42)
    a.num_computed_tokens = 4
    inputs.load_tokens([None, a, None])
    assert inputs.tokens[:, 0].tolist() == [0, 42, 0]
    assert inputs.positions.tolist() == [-1, 4, -1]


def test_reshape_starts_the_tables_over_only_when_the_shape_changes() -> None:
    rng = random.Random(4)
    inputs = PersistentDecodeInputs(2, WIDTH, 1, VOCAB)
    active: list[TTRequestState | None] = [state("a", 1, rng), None]
    inputs.update_tables(active, layout_of(active), set())
    kept = inputs.tables[0]
    inputs.reshape(WIDTH, 1)
    assert inputs.tables[0] is kept
    inputs.reshape(WIDTH + 2, 2)
    assert [tuple(t.shape) for t in inputs.tables] == [(2, WIDTH + 2), (2, WIDTH + 2)]
    assert all(not t.any() for t in inputs.tables)


def plain(req_id: str, blocks: list[int], **params: object) -> TTRequestState:
    return TTRequestState(
        req_id=req_id,
        prompt_token_ids=[1, 2, 3],
        sampling_params=SamplingParams(**params),
        block_ids=(list(blocks),),
        num_computed_tokens=3,
        lane=0,
        device_seed=11,
        generator=None,
    )


def test_the_tables_are_int32_as_the_device_takes_them() -> None:
    inputs = PersistentDecodeInputs(2, WIDTH, 2, VOCAB)
    assert [t.dtype for t in inputs.tables] == [torch.int32, torch.int32]
    inputs.reshape(WIDTH + 1, 1)
    assert [t.dtype for t in inputs.tables] == [torch.int32]


def test_a_slot_taken_over_in_one_step_holds_only_the_new_requests_blocks() -> None:
    """A finish and a join in the same step: the slot goes from one request to another without
    being empty in between; the new row starts at its first block."""
    inputs = PersistentDecodeInputs(2, WIDTH, 1, VOCAB)
    a, b = plain("a", [5, 6, 7]), plain("b", [9])
    inputs.update_tables([a, None], ("a", None), set())
    inputs.update_tables([b, None], ("b", None), set())
    assert inputs.tables[0].tolist() == [[9, 0, 0, 0, 0, 0], [0] * WIDTH]


def test_a_grown_request_not_decoding_now_is_written_when_it_returns() -> None:
    """Block growth of a request outside the layout (idle, preempted) is skipped, not an error,
    and does not stop the others' growth from being written."""
    for trial in range(20):  # the dirty set's order varies: the idle one is not always last
        names = [f"t{trial}-{i}" for i in range(4)]
        states = [plain(name, [10 * i + 1]) for i, name in enumerate(names)]
        active: list[TTRequestState | None] = [*states[:3], None]
        inputs = PersistentDecodeInputs(4, WIDTH, 1, VOCAB)
        inputs.update_tables(active, layout_of(active), set())
        for s in states:
            s.block_ids[0].append(99)
        dirty = set(names)
        inputs.update_tables(active, layout_of(active), dirty)
        assert not dirty
        assert inputs.tables[0][:, :2].tolist() == [[1, 99], [11, 99], [21, 99], [0, 0]]
        active[3] = states[3]  # the idle one back: written in full
        inputs.update_tables(active, layout_of(active), set())
        assert inputs.tables[0][3, :2].tolist() == [31, 99]


def test_growth_after_a_resume_or_a_move_writes_only_the_new_blocks() -> None:
    """A mark over a block already written survives that request's growth: after a resume
    (its row written anew with the new epoch) and after a compaction moved its row."""
    inputs = PersistentDecodeInputs(3, WIDTH, 1, VOCAB)
    table = inputs.tables[0]
    a, b = plain("a", [5]), plain("b", [6])
    active: list[TTRequestState | None] = [a, b, None]
    inputs.update_tables(active, layout_of(active), set())
    a.replace_blocks(([7, 8],))  # resumed with new blocks
    inputs.update_tables(active, layout_of(active), {"a"})
    assert table[0, :3].tolist() == [7, 8, 0]
    table[0, 0] = mark = -7
    a.block_ids[0].append(9)
    inputs.update_tables(active, layout_of(active), {"a"})
    assert table[0, :3].tolist() == [mark, 8, 9]  # only the new block
    active = [None, b, a]  # a moves with its row
    inputs.update_tables(active, layout_of(active), set())
    assert table[2, :3].tolist() == [mark, 8, 9]
    a.block_ids[0].append(10)
    inputs.update_tables(active, layout_of(active), {"a"})
    assert table[2, :4].tolist() == [mark, 8, 9, 10]
    # A growth the row already holds in full queues nothing: the mark stays.
    b.block_ids[0].append(11)
    inputs.update_tables(active, layout_of(active), {"b"})
    table[1, 0] = mark
    inputs.update_tables(active, layout_of(active), {"b"})
    assert table[1, :3].tolist() == [mark, 11, 0]


def test_a_vocabulary_of_one_is_the_smallest_accepted() -> None:
    PersistentDecodeInputs(1, WIDTH, 1, 1)
    with pytest.raises(ValueError, match=r"^vocab_size=0 must be positive$"):
        PersistentDecodeInputs(1, WIDTH, 1, 0)


def test_penalties_follow_the_penalized_requests_in_and_out() -> None:
    inputs = PersistentDecodeInputs(2, WIDTH, 1, VOCAB)
    p, q = plain("p", [1], presence_penalty=0.5), plain("q", [2])
    inputs.sampling_params([p, q], ("p", "q"))
    assert inputs.penalties
    inputs.sampling_params([None, q], (None, "q"))  # the penalized one leaves
    assert not inputs.penalties
    inputs.sampling_params([p, q], ("p", "q"))
    assert inputs.penalties
    inputs.forget_layout()  # a failed call: rebuilt from the states
    assert inputs.sampling_params([None, q], (None, "q")).presence_penalty == [0.0, 0.0]
    assert not inputs.penalties


def test_after_a_failed_call_even_an_empty_layout_gets_its_params_built() -> None:
    inputs = PersistentDecodeInputs(2, WIDTH, 1, VOCAB)
    empty = inputs.sampling_params([None, None], (None, None))
    inputs.forget_layout()
    again = inputs.sampling_params([None, None], (None, None))
    assert isinstance(again, TTSamplingParams) and again == empty and again is not empty
