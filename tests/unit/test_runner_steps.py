"""TTModelRunner step behaviour with the real reference model, driven as vLLM's engine core does.

Each test starts a TTWorker on a tiny generated checkpoint (reference Llama on the emulated mesh)
and the TT scheduler over the worker's KV cache config, then runs the engine loop in-process:
``schedule -> execute_model -> sample_tokens -> update_from_output``. The reference model records
every accepted contract call in ``model.call_log``, which is what most assertions read:

- trace_mode reaches the serving prefill_forward / decode_forward calls (not only warm-up);
- slot compaction: a decode call carries ``slot_remap`` exactly once per layout change with
  holes, the runner counts it, and every request generates what it generates alone;
- a legacy (contract v0) model gets ``reset_batch``, never ``slot_remap``, and one warning;
- a refused prefill_forward / decode_forward does not leave slots owned by the rows that took
  them for that step.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import AsyncModelRunnerOutput
from vllm.v1.request import Request

from tests.unit.fakes.runner_models import FailOnDemandModel, InjectedModelFailure
from tests.unit.tiny_checkpoint import (
    BLOCK_HASHER,
    start_worker_and_scheduler,
    write_tiny_checkpoint,
)
from vllm_tt_plugin.model_runner import TTModelRunner
from vllm_tt_plugin.observability import host_phases
from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.policy.step_output import TTSchedulerOutput, UnscheduledStepError
from vllm_tt_plugin.scheduler import TTSchedulerBase
from vllm_tt_plugin.test_models.calls import CallRecord
from vllm_tt_plugin.test_models.core import ReferenceLlamaCore
from vllm_tt_plugin.worker import TTWorker

LEGACY_MODEL = "vllm_tt_plugin.test_models.variants:LegacyDecodeContract"
FAILING_MODEL = "tests.unit.fakes.runner_models:FailOnDemandModel"
LEGACY_WARNING = "predates the decode reload contract"

_ids = itertools.count()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("runner-steps"))


# --- the in-process engine loop -------------------------------------------------------------
@dataclass
class Serving:
    worker: TTWorker
    sched: TTSchedulerBase

    @property
    def runner(self) -> TTModelRunner:
        runner = self.worker.model_runner
        assert runner is not None
        return runner

    @property
    def model(self) -> ReferenceLlamaCore:
        model = self.worker.get_model()
        assert isinstance(model, ReferenceLlamaCore)
        return model

    def execute(self, out: SchedulerOutput) -> None:
        """The worker half of one engine step, then the scheduler's bookkeeping."""
        result = self.worker.execute_model(out)
        if result is None:  # a step with work: the model runs in sample_tokens
            result = self.worker.sample_tokens(None)
        if isinstance(result, AsyncModelRunnerOutput):
            result = result.get_output()
        self.sched.update_from_output(out, result)

    def step(self) -> TTSchedulerOutput:
        out = self.sched.schedule()
        self.execute(out)
        return out

    def run(self, requests: list[Request], max_steps: int = 500) -> list[list[int]]:
        """Serve ``requests`` to completion; each request's generated tokens."""
        for r in requests:
            self.sched.add_request(r)
        for _ in range(max_steps):
            if not self.sched.has_requests():
                break
            self.step()
        assert not self.sched.has_requests(), "requests still pending after max_steps"
        return [list(r.output_token_ids) for r in requests]

    def run_pipelined(self, requests: list[Request], max_steps: int = 500) -> list[list[int]]:
        """``run`` as vLLM's engine core runs async scheduling (``step_with_batch_queue``, a
        queue of two): step k+1 is scheduled and submitted before step k's output is read."""
        for r in requests:
            self.sched.add_request(r)
        queue: deque[tuple[SchedulerOutput, Any]] = deque()
        for _ in range(max_steps):
            if self.sched.has_requests():
                out = self.sched.schedule()
                result = self.worker.execute_model(out)
                if result is None:
                    result = self.worker.sample_tokens(None)
                queue.appendleft((out, result))
                if len(queue) < 2:
                    continue
            elif not queue:
                break
            out, result = queue.pop()
            if isinstance(result, AsyncModelRunnerOutput):
                result = result.get_output()
            self.sched.update_from_output(out, result)
        assert not self.sched.has_requests() and not queue, "requests pending after max_steps"
        return [list(r.output_token_ids) for r in requests]

    def serving_calls(self, method: str) -> list[CallRecord]:
        return [r for r in self.model.call_log if r.method == method]

    def owned_slots(self) -> list[str | None]:
        return [owner for lane in self.runner.batch.slots for owner in lane.owner]


@contextmanager
def serving(
    make_config: Callable[..., Any],
    checkpoint: Path,
    *,
    model_class: str | None = None,
    max_num_seqs: int = 4,
    max_model_len: int = 256,
    tt: dict[str, Any] | None = None,
    **engine_args: Any,
) -> Iterator[Serving]:
    """A started TTWorker (the engine's start-up sequence, warm-up included) and a TTScheduler.

    ``model_class=None`` serves the registered reference model; otherwise the class path is
    selected through TT_MODEL_CLASS_OVERRIDES.
    """
    options: dict[str, Any] = {"emulated_mesh": True, **(tt or {})}
    if model_class is None:
        options["register_test_models"] = True
    config = make_config(
        model=checkpoint,
        model_class=model_class,
        tt=options,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        **engine_args,
    )
    worker, sched = start_worker_and_scheduler(config)
    try:
        yield Serving(worker, sched)
    finally:
        worker.shutdown()


def prompt(seed: int, length: int) -> list[int]:
    """Distinct token ids per seed (no accidental prefix-cache hits between prompts)."""
    return [(11 * seed + 7 * j + j * j) % 120 + 5 for j in range(length)]


def request(tokens: list[int], max_tokens: int) -> Request:
    return Request(
        request_id=f"req{next(_ids)}",
        prompt_token_ids=list(tokens),
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0),
        pooling_params=None,
        block_hasher=BLOCK_HASHER,
    )


def solo_outputs(s: Serving, prompts: list[list[int]], max_tokens: list[int]) -> list[list[int]]:
    """Each prompt served alone, one after the other, through the same loop."""
    return [s.run([request(p, m)])[0] for p, m in zip(prompts, max_tokens, strict=True)]


# --- 0. the step the runner takes ----------------------------------------------------------
def test_a_step_no_tt_scheduler_made_is_refused(
    make_config: Callable[..., Any], checkpoint: Path
) -> None:
    """The runner reads each step's kind from the TT scheduler's typed output; vLLM's own
    SchedulerOutput carries none, so it is refused by name instead of being taken as decode."""
    with serving(make_config, checkpoint) as s:
        with pytest.raises(
            UnscheduledStepError, match="got a SchedulerOutput, not a TTSchedulerOutput"
        ):
            s.worker.execute_model(SchedulerOutput.make_empty())
        first = s.sched.schedule()  # nothing waiting: an idle step, still typed
        assert isinstance(first, TTSchedulerOutput) and first.step_kind is StepKind.IDLE
        s.sched.add_request(request(prompt(1, 20), 2))
        kinds = [s.step().step_kind for _ in range(3)]
        assert kinds == [StepKind.PREFILL, StepKind.DECODE, StepKind.IDLE]


# --- 1. trace_mode on the serving calls -----------------------------------------------------
@pytest.mark.parametrize(
    ("trace_mode", "prefill_trace", "decode_trace"),
    [("all", True, True), ("decode_only", False, True), ("none", False, False)],
)
def test_trace_mode_reaches_serving_prefill_and_decode_calls(
    make_config: Callable[..., Any],
    checkpoint: Path,
    trace_mode: str,
    prefill_trace: bool,
    decode_trace: bool,
) -> None:
    with serving(make_config, checkpoint, tt={"trace_mode": trace_mode}) as s:
        s.run([request(prompt(1, 12), 4), request(prompt(2, 20), 3)])
        prefills = s.serving_calls("prefill_forward")
        decodes = s.serving_calls("decode_forward")
    assert prefills and decodes
    assert {r.enable_trace for r in prefills} == {prefill_trace}
    assert {r.enable_trace for r in decodes} == {decode_trace}


# --- 2. slot compaction ---------------------------------------------------------------------
# Four requests prefilled together into slots 0..3; request i finishes after MAX_TOKENS[i] - 1
# decode steps (prefill samples the first token). Short prompts: no request grows past one
# KV block, so only finishing requests change the layout.
MAX_TOKENS = [3, 9, 5, 12]
PROMPTS = [prompt(10 + i, n) for i, n in enumerate((9, 14, 6, 11))]
# Decode step (1-based) -> slot_remap it must carry, derived from MAX_TOKENS (a hole in front
# takes the last row: LaneSlots.compaction):
#   3: slot 0 left            [_, B, C, D] -> [D, B, C, _]
#   5: C (slot 2) left        [D, B, _, _]    already packed
#   9: B (slot 1) left        [D, _, _, _]    already packed
# Every other decode keeps the layout and carries none (a trailing hole needs no move).
EXPECTED_REMAPS = {3: (3, 1, 2, 0)}
DEPARTURES = (3, 5, 9)  # the decode steps in which a request leaves
NUM_DECODES = max(MAX_TOKENS) - 1


@pytest.mark.parametrize("sample_on_device_mode", [None, "all"])
def test_finished_requests_compact_slots_once_and_outputs_match_solo_runs(
    make_config: Callable[..., Any], checkpoint: Path, sample_on_device_mode: str | None
) -> None:
    with serving(make_config, checkpoint, tt={"sample_on_device_mode": sample_on_device_mode}) as s:
        reqs = [request(p, m) for p, m in zip(PROMPTS, MAX_TOKENS, strict=True)]
        for r in reqs:
            s.sched.add_request(r)
        first = s.step()
        assert set(first.num_scheduled_tokens) == {r.request_id for r in reqs}
        assert s.owned_slots() == [r.request_id for r in reqs]
        s.run([])
        batched = [list(r.output_token_ids) for r in reqs]
        remaps = s.runner.stats.slot_remaps
        decodes = s.serving_calls("decode_forward")
        solo = solo_outputs(s, PROMPTS, MAX_TOKENS)

    assert len(decodes) == NUM_DECODES
    carried = {i + 1: r.slot_remap for i, r in enumerate(decodes) if r.slot_remap is not None}
    assert carried == EXPECTED_REMAPS
    assert remaps == len(EXPECTED_REMAPS)
    # A remap moves resident state, so the step that carries it reloads the inputs too.
    assert all(decodes[i - 1].reload_inputs for i in EXPECTED_REMAPS)
    assert [len(t) for t in batched] == MAX_TOKENS
    assert batched == solo


def test_async_scheduled_finishes_compact_slots_once_and_outputs_match_solo_runs(
    make_config: Callable[..., Any], checkpoint: Path
) -> None:
    """Under async scheduling a finished request is left out of the next step a step before
    vLLM reports it finished (and the runner frees its slot): the live requests must still
    move to the front then, or the hole stays behind the released slot for good."""
    tt = {"sample_on_device_mode": "all"}
    with serving(make_config, checkpoint, tt=tt, async_scheduling=True) as s:
        kinds: list[str] = []
        run = s.runner.adapter.watchdog.run

        def counted(call: Any, fn: Any) -> Any:
            kinds.append(call.kind)
            return run(call, fn)

        s.runner.adapter.watchdog.run = counted  # type: ignore[method-assign]
        reqs = [request(p, m) for p, m in zip(PROMPTS, MAX_TOKENS, strict=True)]
        batched = s.run_pipelined(reqs)
        stats = s.runner.stats
        assert stats.overlapped_decodes == stats.decode_steps > 0, "the steps never overlapped"
        # Each submit reads the step before it back in the same device call: a read-back call
        # of its own only where the runner drains, and for the last step.
        assert kinds.count("decode") == stats.decode_steps
        assert kinds.count("decode read-back") == stats.drains + 1 < stats.decode_steps / 2
        remaps = s.runner.stats.slot_remaps
        carried = [r.slot_remap for r in s.serving_calls("decode_forward") if r.slot_remap]
        solo = [
            s.run_pipelined([request(p, m)])[0] for p, m in zip(PROMPTS, MAX_TOKENS, strict=True)
        ]

    # The same three moves as the synchronous loop (their steps differ), each carried once.
    # Only the live requests' order is fixed: where an unreported finished one goes is free.
    assert remaps == len(carried) == len(EXPECTED_REMAPS), carried
    assert batched == solo and [len(t) for t in batched] == MAX_TOKENS


# --- 3. legacy decode contract (v0) ---------------------------------------------------------
def test_legacy_model_gets_sticky_reset_batch_no_remap_and_one_warning(
    make_config: Callable[..., Any], checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # vLLM's "vllm" logger may not propagate to the root logger caplog listens on.
    plugin_logger = logging.getLogger("vllm.tt_plugin")
    plugin_logger.addHandler(caplog.handler)
    try:
        with (
            caplog.at_level(logging.WARNING, logger="vllm.tt_plugin"),
            serving(
                make_config,
                checkpoint,
                model_class=LEGACY_MODEL,
                tt={"sample_on_device_mode": "all"},
            ) as s,
        ):
            assert s.runner.served.contract_version == 0
            reqs = [request(p, m) for p, m in zip(PROMPTS, MAX_TOKENS, strict=True)]
            for r in reqs:
                s.sched.add_request(r)
            s.step()
            last_slot = s.runner.batch.requests[reqs[-1].request_id].slot
            s.run([])
            batched = [list(r.output_token_ids) for r in reqs]
            remaps = s.runner.stats.slot_remaps
            decodes = s.serving_calls("decode_forward")
            solo = solo_outputs(s, PROMPTS, MAX_TOKENS)
            final_slots = s.owned_slots()
    finally:
        plugin_logger.removeHandler(caplog.handler)

    # Whether vLLM's logger propagates to the root handler depends on when vLLM configured
    # logging, so the handler may have seen a record twice: count distinct records.
    distinct = {id(r): r for r in caplog.records if LEGACY_WARNING in r.getMessage()}
    warnings = list(distinct.values())
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].levelno == logging.WARNING
    assert "LegacyDecodeContract" in warnings[0].getMessage()

    assert len(decodes) == NUM_DECODES
    assert all(r.slot_remap is None for r in decodes)
    assert all(r.reload_inputs is None for r in decodes)  # v1 flags are never sent
    # reset_batch on the first decode after the prefill and whenever a request leaves (the
    # slots stay where they are: holes, no compaction); steady device decode otherwise.
    expected_reset = [i == 1 or i in DEPARTURES for i in range(1, NUM_DECODES + 1)]
    assert [r.reset_batch for r in decodes] == expected_reset
    assert remaps == 0
    assert last_slot == 3 and final_slots == [None] * 4
    assert batched == solo


# --- 4. refused model calls release the slots taken for that step ---------------------------
def test_refused_prefill_releases_only_the_new_rows_slots(
    make_config: Callable[..., Any], checkpoint: Path
) -> None:
    with serving(
        make_config, checkpoint, model_class=FAILING_MODEL, max_num_batched_tokens=64
    ) as s:
        model = s.model
        assert isinstance(model, FailOnDemandModel)
        long_req = request(prompt(30, 100), 4)
        new_req = request(prompt(31, 20), 4)
        s.sched.add_request(long_req)
        s.sched.add_request(new_req)
        first = s.step()  # the long prompt's first chunk takes the whole token budget
        assert dict(first.num_scheduled_tokens) == {long_req.request_id: 64}
        assert s.owned_slots() == [long_req.request_id, None, None, None]
        assert (s.runner.stats.prefill_steps, s.runner.stats.prefill_chunks) == (1, 1)

        out = s.sched.schedule()
        assert dict(out.num_scheduled_tokens) == {long_req.request_id: 36, new_req.request_id: 20}
        prefills_before = len(s.serving_calls("prefill_forward"))
        model.fail_next_prefill = True
        with pytest.raises(InjectedModelFailure):
            s.execute(out)
        assert len(s.serving_calls("prefill_forward")) == prefills_before
        # The continuing chunk keeps the slot it took with its first chunk; the new row's is free.
        assert s.owned_slots() == [long_req.request_id, None, None, None]
        assert s.runner.batch.requests[new_req.request_id].slot is None
        assert s.runner.stats.prefill_chunks == 1  # a refused step counts nothing


def test_refused_decode_releases_slots_of_rows_that_had_none(
    make_config: Callable[..., Any], checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request resumed after preemption whose tokens are all cached but the last comes back
    as a decode row without a slot; its slot is taken in _run_decode and must be released when
    decode_forward refuses the step.

    KV pool: 128 budget tokens = 2 blocks, + 1 block per sequence (3) = 5 usable blocks of 64.
    A (2 blocks) and C (1 block) never grow past them; B (prompt 100, 2 blocks) needs a third
    block at position 128, finds none and, last in the running queue, preempts itself. When A
    finishes B resumes: its 128 tokens are prefix-cache hits, so it is scheduled 1 token.
    """
    monkeypatch.setenv("TT_REFERENCE_MAX_TOKENS_ALL_USERS", "128")
    with serving(make_config, checkpoint, model_class=FAILING_MODEL, max_num_seqs=3) as s:
        model = s.model
        assert isinstance(model, FailOnDemandModel)
        a = request(prompt(40, 70), 40)
        c = request(prompt(41, 5), 55)
        b = request(prompt(42, 100), 60)
        for r in (a, c, b):
            s.sched.add_request(r)
        refused: SchedulerOutput | None = None
        owners_before: list[str | None] = []
        for _ in range(200):
            out = s.sched.schedule()
            if b.request_id in out.scheduled_cached_reqs.resumed_req_ids:
                refused = out
                owners_before = s.owned_slots()
                model.fail_next_decode = True
                with pytest.raises(InjectedModelFailure):
                    s.execute(out)
                break
            s.execute(out)
        assert refused is not None, "B was never resumed"
        assert b.num_preemptions == 1
        assert dict(refused.num_scheduled_tokens) == {b.request_id: 1}
        assert b.num_computed_tokens - 1 >= b.num_prompt_tokens  # a decode row
        # The prefill pass admitted only B, decode-shaped: the scheduler made it a decode step.
        assert refused.step_kind is StepKind.DECODE
        assert b.request_id not in owners_before
        # The step also tells the runner that A finished (A's slot frees either way); C, not
        # scheduled, keeps its slot; B's slot, taken for the refused step, is free again.
        assert a.request_id in refused.finished_req_ids
        survivors = [o if o != a.request_id else None for o in owners_before]
        assert c.request_id in survivors
        assert s.owned_slots() == survivors
        assert s.runner.batch.requests[b.request_id].slot is None


def test_resumed_decode_shaped_row_admitted_with_a_prefill_is_prefilled_with_it(
    make_config: Callable[..., Any], checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by benchmarks/load_aborts.py (lane-DP under load): a request resumed after
    preemption whose tokens are all prefix-cache hits but the last is scheduled 1 token, like a
    decode, but it comes from the waiting queue, so a prefill pass admits it, next to new
    prompts. The runner must run that step (as a prefill: the resumed row holds no decode slot
    and is placed again) instead of refusing it as a prefill/decode mix, which killed the
    engine.

    The KV pool of the test above (5 usable blocks of 64, 3 sequences): B (prompt 100)
    preempts itself at position 128; D, added then, waits behind it. When A finishes, one
    prefill pass admits B (1 token: 128 cached) and D (a new prompt) together.
    """
    monkeypatch.setenv("TT_REFERENCE_MAX_TOKENS_ALL_USERS", "128")
    prompts = [prompt(40, 70), prompt(41, 5), prompt(42, 100), prompt(43, 30)]
    max_tokens = [40, 55, 60, 20]
    with serving(make_config, checkpoint, max_num_seqs=3) as s:
        a, c, b, d = (request(p, m) for p, m in zip(prompts, max_tokens, strict=True))
        for r in (a, c, b):
            s.sched.add_request(r)
        mixed: SchedulerOutput | None = None
        d_added = False
        for _ in range(300):
            if not s.sched.has_requests():
                break
            out = s.step()
            if b.num_preemptions == 1 and not d_added:
                s.sched.add_request(d)
                d_added = True
            if b.request_id in out.scheduled_cached_reqs.resumed_req_ids:
                mixed = out
        assert not s.sched.has_requests(), "requests still pending"
        batched = [list(r.output_token_ids) for r in (a, c, b, d)]
        solo = solo_outputs(s, prompts, max_tokens)
    assert mixed is not None, "B was never resumed"
    assert mixed.num_scheduled_tokens[b.request_id] == 1
    assert d.request_id in mixed.num_scheduled_tokens, "B and D were not admitted together"
    assert batched == solo


# --- 7. host phases: the plugin's own work is not counted as the device's --------------------
def test_decode_output_normalisation_counts_as_output_build_not_read_back(
    make_config: Callable[..., Any], checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turning the model's output form into tokens is the plugin's work: a decode step's
    ``normalise_decode`` runs after the read-back's time is taken and inside the span that
    output building's time covers. Checked by order (the phase clock's entries and the
    normalisation calls), not by timing."""
    clock = host_phases.CLOCK
    decode = StepKind.DECODE
    watched = {host_phases.Phase.READ_BACK: "read_back", host_phases.Phase.OUTPUT_BUILD: "build"}
    events: list[str] = []
    add = clock.add

    def recording_add(kind: StepKind, phase: host_phases.Phase, ns: int) -> None:
        if kind is decode and phase in watched:
            events.append(watched[phase])
        add(kind, phase, ns)

    with serving(make_config, checkpoint, tt={"sample_on_device_mode": "all"}) as s:
        adapter = s.runner.adapter
        normalise = adapter.normalise_decode

        def recording_normalise(submission: Any, out: Any) -> Any:
            events.append("normalise")
            return normalise(submission, out)

        monkeypatch.setattr(adapter, "normalise_decode", recording_normalise)
        monkeypatch.setattr(clock, "add", recording_add)
        got = s.run([request(prompt(50, 6), 6)])[0]
    assert len(got) == 6 and events.count("normalise") == 5  # the first token: the prefill's
    for at in [i for i, e in enumerate(events) if e == "normalise"]:
        assert events[at - 1] == "read_back" and events[at + 1] == "build", events
