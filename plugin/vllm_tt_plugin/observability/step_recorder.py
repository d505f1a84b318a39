"""What the runner measures and counts per step, kept apart from the step's work.

One ``StepRecorder`` per runner owns its counters (``RunnerStats``), the metric hooks it calls
(``tt_metrics.observe_*``) and its host-phase time (``host_phases.CLOCK``, docs/METRICS.md).
Phases are marks: a mark closes the open phase and opens the next with one clock read, and
the time goes straight into the clock's preallocated table (nothing is allocated per step).

What a step's phases hold:

- a drain inside a step (finishing earlier decode steps) is cut out of the open phase and of
  the step's CPU time: the drained steps count it as their own (``finish`` marks, and
  ``cpu_counted`` for an overlapped step's CPU time);
- the model call of a decode is timed by the adapter (``DecodeSubmission.submit_ns`` and
  ``call_ns``): ``model_call`` counts it as submit and read-back and cuts it out of the open
  phase;
- the decode interval is the time between the starts of consecutive accepted decode steps,
  from the third decode after a prefill on (the second may start before the device paces
  the engine).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from vllm_tt_plugin.observability import host_phases, tt_metrics
from vllm_tt_plugin.observability.host_phases import CLOCK, Part, Phase
from vllm_tt_plugin.observability.situations import Situation
from vllm_tt_plugin.policy.step_kind import StepKind

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput

    from vllm_tt_plugin.contract.reload_contract import ReloadCommand
    from vllm_tt_plugin.policy.sampling_route import RouteDecision

T = TypeVar("T")
_NONE: Mapping[Situation, int] = {}


@dataclass
class RunnerStats:
    """Counters logged at shutdown (operators read them; engine tests assert on them)."""

    prefill_steps: int = 0
    # Prefill rows that ended before their prompt did (a chunk of a longer prompt).
    prefill_chunks: int = 0
    decode_steps: int = 0
    device_sampled_steps: int = 0
    host_sampled_steps: int = 0
    full_reloads: int = 0
    page_table_reloads: int = 0
    slot_remaps: int = 0
    overlapped_decodes: int = 0
    drains: int = 0
    # Steps whose rows came from more than one lane: lanes sharing one step mode (lane-DP).
    multi_lane_steps: int = 0
    # Requests admitted per lane (lane-DP placement).
    lane_admissions: list[int] = field(default_factory=list)
    # Situations the steps created (observability/situations.py), by name.
    situations: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.__dict__.items())


class PhaseMarks:
    """Consecutive phases of one span of work; each mark reads the clock once."""

    __slots__ = ("at", "kind", "phase")

    def __init__(self) -> None:
        self.kind = StepKind.IDLE
        self.phase = Phase.INPUT_BUILD
        self.at = 0  # when the open phase started (moved on past time cut out of it)

    def open(self, kind: StepKind, phase: Phase) -> int:
        self.kind = kind
        self.phase = phase
        self.at = at = host_phases.now()
        return at

    def mark(self, phase: Phase) -> None:
        """Close the open phase, open ``phase``."""
        at = host_phases.now()
        CLOCK.add(self.kind, self.phase, at - self.at)
        self.phase = phase
        self.at = at

    def close(self) -> None:
        CLOCK.add(self.kind, self.phase, host_phases.now() - self.at)


def cpu_counted(finish: Callable[[], T]) -> Callable[[], T]:
    """An overlapped decode finishes outside its own sample_tokens (when vLLM asks for its
    output, or in a later step's drain): it counts its engine-thread CPU time itself."""

    def run() -> T:
        start = host_phases.cpu_now()
        try:
            return finish()
        finally:
            CLOCK.add_cpu(StepKind.DECODE, Part.PLUGIN, host_phases.cpu_now() - start)

    return run


class StepRecorder:
    """The runner's measurement: phase marks, CPU time, decode intervals, stats and metrics."""

    def __init__(self, lanes: int) -> None:
        self.stats = RunnerStats(lane_admissions=[0] * lanes)
        self.step = PhaseMarks()  # the runner's step (sample_tokens)
        self.finish = PhaseMarks()  # a decode step's read-back and output (maybe drained later)
        self._update_at = 0
        self._update_cpu = 0
        self._cpu_start = 0
        self._drained_cpu = 0  # the engine thread's CPU time of drains in this sample_tokens
        self._step_start = 0  # when the current step's work started
        self._last_decode = 0  # start of the last accepted decode step
        self._decode_run = 0  # decode steps since the last prefill step

    # --- execute_model: folding the scheduler output into the request states -------------
    def update_started(self) -> None:
        self._update_at = host_phases.now()
        self._update_cpu = host_phases.cpu_now()

    def update_done(self, so: SchedulerOutput, kind: StepKind) -> None:
        tt_metrics.observe_schedule(so)  # metrics hook: preemptions, resumptions
        CLOCK.add(kind, Phase.STATE_UPDATE, host_phases.now() - self._update_at)
        CLOCK.add_cpu(kind, Part.PLUGIN, host_phases.cpu_now() - self._update_cpu)

    def admitted(self, lane: int) -> None:
        self.stats.lane_admissions[lane] += 1

    # --- sample_tokens: the step's CPU time, less the drains in it -------------------------
    def sampling_started(self) -> None:
        self._cpu_start = host_phases.cpu_now()
        self._drained_cpu = 0

    def sampling_done(self, kind: StepKind) -> None:
        cpu = host_phases.cpu_now() - self._cpu_start - self._drained_cpu
        CLOCK.add_cpu(kind, Part.PLUGIN, cpu)

    def open_step(self, kind: StepKind) -> None:
        """The step's work starts; its open phase is input building."""
        self._step_start = self.step.open(kind, Phase.INPUT_BUILD)

    def mark(self, phase: Phase) -> None:
        self.step.mark(phase)

    def close_step(self) -> None:
        self.step.close()

    def drain(self, drain: Callable[[], None]) -> None:
        """Run ``drain`` (finishing earlier steps), cut out of this step's time."""
        start, cpu_start = host_phases.now(), host_phases.cpu_now()
        self.stats.drains += 1
        drain()
        self.step.at += host_phases.now() - start
        self._drained_cpu += host_phases.cpu_now() - cpu_start

    def model_call(self, submit_ns: int, call_ns: int) -> None:
        """A decode's device call returned in the open phase: its submit and read-back."""
        kind = self.step.kind
        CLOCK.add(kind, Phase.MODEL_SUBMIT, submit_ns)
        CLOCK.add(kind, Phase.READ_BACK, call_ns - submit_ns)
        self.step.at += call_ns

    # --- what the steps did ----------------------------------------------------------------
    def lanes(self, lanes: Collection[int]) -> None:
        """A prefill or block step's rows came from these lanes."""
        self.stats.multi_lane_steps += int(len(lanes) > 1)
        tt_metrics.observe_lanes(lanes)  # metrics hook: lanes that carried rows

    def decode_lanes(self, lanes: Collection[int]) -> None:
        """A decode step's rows came from these lanes (``decode_done`` reports them)."""
        self.stats.multi_lane_steps += int(len(lanes) > 1)

    def block_step(self, decode: bool) -> None:
        stats = self.stats
        if decode:
            stats.decode_steps += 1
        else:
            stats.prefill_steps += 1
        stats.device_sampled_steps += 1  # a block model commits on the device

    def prefill_started(self) -> None:
        self._decode_run = 0

    def prefill_done(
        self,
        decision: RouteDecision | None,
        sampled_rows: int,
        chunks: int,
        found: Mapping[Situation, int] = _NONE,
    ) -> None:
        """An accepted prefill; ``decision`` is None when no row sampled; ``found``: the
        situations its rows created."""
        self.stats.prefill_steps += 1
        self.stats.prefill_chunks += chunks
        tt_metrics.observe_prefill(decision, sampled_rows, chunks)  # metrics hook
        if found:
            self._situations(found)
        if decision is not None:
            self._count_route(decision.on_device)

    def decode_done(
        self,
        command: ReloadCommand,
        decision: RouteDecision,
        overlap: bool,
        lanes: set[int],
        found: Mapping[Situation, int] = _NONE,
    ) -> None:
        """An accepted decode (the device now holds its layout)."""
        if found:
            self._situations(found)
        start = self._step_start
        if self._decode_run >= 2:
            CLOCK.add_interval(start - self._last_decode)
        self._decode_run += 1
        self._last_decode = start
        stats = self.stats
        stats.decode_steps += 1
        tt_metrics.observe_decode(command, decision, overlap, lanes)  # metrics hook
        self._count_route(decision.on_device)
        stats.full_reloads += int(command.reload_inputs)
        stats.page_table_reloads += int(command.reload_page_table)
        stats.slot_remaps += int(command.slot_remap is not None)
        stats.overlapped_decodes += int(overlap)

    def _situations(self, found: Mapping[Situation, int]) -> None:
        counts = self.stats.situations
        for situation, n in found.items():
            counts[situation.value] = counts.get(situation.value, 0) + n
        tt_metrics.observe_situations(found)  # metrics hook

    def _count_route(self, on_device: bool) -> None:
        if on_device:
            self.stats.device_sampled_steps += 1
        else:
            self.stats.host_sampled_steps += 1
