"""The runner's one check of a step's rows against the kind its scheduler chose
(model_runner.misfit_rows), and the scheduler's one rule for a prefill pass that scheduled only
decode-shaped rows (scheduler.scheduled_kind)."""

from __future__ import annotations

import pytest
from vllm import SamplingParams

from vllm_tt_plugin.input_batch import TTRequestState
from vllm_tt_plugin.model_runner import _ScheduledRow, misfit_rows
from vllm_tt_plugin.policy.step_kind import StepKind

PROMPT = 10


def row(req_id: str, start: int, tokens: int, slot: int | None = None) -> _ScheduledRow:
    state = TTRequestState(
        req_id=req_id,
        prompt_token_ids=list(range(PROMPT)),
        sampling_params=SamplingParams(),
        block_ids=([1],),
        num_computed_tokens=start,
        lane=0,
        device_seed=0,
        generator=None,
        slot=slot,
    )
    return _ScheduledRow(state, start, tokens)


PROMPT_CHUNK = row("chunk", 0, 6)
LAST_CHUNK = row("last", 6, 4)
DECODING = row("decoding", PROMPT + 3, 1, slot=2)
RESUMED = row("resumed", PROMPT + 3, 1, slot=None)  # from the waiting queue: no slot yet


@pytest.mark.parametrize(
    ("kind", "rows", "block", "misfits"),
    [
        (StepKind.DECODE, [DECODING, RESUMED], False, []),
        (StepKind.DECODE, [DECODING, LAST_CHUNK], False, ["last"]),
        (StepKind.DECODE, [row("two", PROMPT + 3, 2, slot=1)], False, ["two"]),
        (StepKind.PREFILL, [PROMPT_CHUNK, LAST_CHUNK, RESUMED], False, []),
        (StepKind.PREFILL, [PROMPT_CHUNK, DECODING], False, ["decoding"]),
        (StepKind.IDLE, [DECODING], False, ["decoding"]),
        # A block-output model decodes its whole last canvas: tokens after the prompt.
        (StepKind.DECODE, [row("canvas", PROMPT + 8, 8, slot=0)], True, []),
        (StepKind.DECODE, [row("canvas", PROMPT + 8, 8, slot=0), LAST_CHUNK], True, ["last"]),
        (StepKind.PREFILL, [row("canvas", PROMPT + 8, 8, slot=0), PROMPT_CHUNK], True, ["canvas"]),
    ],
)
def test_rows_that_do_not_fit_the_step_kind_are_named(
    kind: StepKind, rows: list[_ScheduledRow], block: bool, misfits: list[str]
) -> None:
    assert misfit_rows(kind, rows, block) == misfits


def test_a_prefill_pass_of_resumed_decode_shaped_rows_only_is_a_decode_step() -> None:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

    from vllm_tt_plugin.scheduler import scheduled_kind

    def request(req_id: str, computed: int) -> Request:
        r = Request(
            request_id=req_id,
            prompt_token_ids=list(range(PROMPT)),
            sampling_params=SamplingParams(max_tokens=8),
            pooling_params=None,
        )
        r.num_computed_tokens = computed  # as the pass left it (advanced by what it scheduled)
        return r

    requests = {"resumed": request("resumed", PROMPT + 4), "new": request("new", 6)}

    def output(scheduled: dict[str, int]) -> SchedulerOutput:
        out = SchedulerOutput.make_empty()
        out.num_scheduled_tokens = scheduled
        out.total_num_scheduled_tokens = sum(scheduled.values())
        return out

    resumed_only = output({"resumed": 1})
    assert scheduled_kind(StepKind.PREFILL, resumed_only, requests, False) is StepKind.DECODE
    with_a_prompt = output({"resumed": 1, "new": 6})
    assert scheduled_kind(StepKind.PREFILL, with_a_prompt, requests, False) is StepKind.PREFILL
    # Only a prefill choice is refined; the policy's decode and idle stand.
    assert scheduled_kind(StepKind.IDLE, output({}), requests, False) is StepKind.IDLE
    assert scheduled_kind(StepKind.DECODE, with_a_prompt, requests, False) is StepKind.DECODE
