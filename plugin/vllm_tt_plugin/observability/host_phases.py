"""Host time per step, by phase, counted in the engine without a profiler (docs/METRICS.md).

The scheduler, runner and adapter time their phases with ``time.perf_counter_ns`` and add the
nanoseconds to one in-process table (a list add per phase and step, never per row). A daemon
thread publishes the table as the counter ``tt_host_seconds_total{kind, phase}`` every
``FLUSH_INTERVAL_S``, and flushes the process's other counters with it (tt_metrics), so the
mmap writes of the metrics files stay off the step path; a scrape sees the totals at most that
much later. Dividing by ``tt_steps_total{kind=...}`` gives the time per step.

Wall time inflates whenever the engine thread is descheduled (the API server, the client and the
device thread share the host's cores), so the engine thread's CPU time is counted too, in two
parts: the plugin's (scheduling policy, state update, the runner's step with its input and
output building and the device-call hand-off, lane routing) and vLLM core's (its scheduling
pass and ``update_from_output``), as ``tt_host_cpu_seconds_total{kind, part}``: what the host
code itself costs, whatever else the machine runs.

Phases: the plugin's own (``PLUGIN_PHASES``), the model call's host side (``MODEL_PHASES``:
the submit, which includes the model's own input handling and the watchdog hand-off, and the
read-back wait, which on a synchronous decode includes the device time) and vLLM core's share
in the engine process (``VLLM_PHASES``: its scheduling pass and its output processing,
``update_from_output``).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from vllm_tt_plugin.observability import tt_metrics
from vllm_tt_plugin.policy.step_kind import StepKind

_T = TypeVar("_T")


class Phase(str, enum.Enum):
    SCHEDULE_POLICY = "schedule_policy"  # step kind choice, hiding/restoring the other kind
    STATE_UPDATE = "state_update"  # folding the scheduler output into the request states
    INPUT_BUILD = "input_build"  # tokens, positions, page tables, sampling params, commands
    SAMPLING_ROUTE = "sampling_route"  # the per-batch device/host sampling decision
    OUTPUT_BUILD = "output_build"  # tokens and logprobs into vLLM's runner output
    MODEL_SUBMIT = "model_submit"  # the model call until it returns (host side of a submit)
    READ_BACK = "read_back"  # waiting for and converting the model's output
    VLLM_SCHEDULE = "vllm_schedule"  # vLLM's scheduling pass
    VLLM_OUTPUT = "vllm_output"  # vLLM's update_from_output


class Part(str, enum.Enum):
    PLUGIN = "plugin"
    VLLM = "vllm"


PLUGIN_PHASES = (
    Phase.SCHEDULE_POLICY,
    Phase.STATE_UPDATE,
    Phase.INPUT_BUILD,
    Phase.SAMPLING_ROUTE,
    Phase.OUTPUT_BUILD,
)
MODEL_PHASES = (Phase.MODEL_SUBMIT, Phase.READ_BACK)
VLLM_PHASES = (Phase.VLLM_SCHEDULE, Phase.VLLM_OUTPUT)

FLUSH_INTERVAL_S = 0.25

HOST_SECONDS = tt_metrics.Counter(
    "tt_host_seconds",
    "Host time spent per phase of TT steps, by step kind (docs/METRICS.md); divide by "
    "tt_steps_total for the time per step",
    ("kind", "phase"),
)

DECODE_INTERVAL_SECONDS = tt_metrics.Counter(
    "tt_decode_interval_seconds",
    "Wall time between the starts of consecutive decode steps, from the third decode after a "
    "prefill on (the decode step period: the device time when the host keeps up)",
)
HOST_CPU_SECONDS = tt_metrics.Counter(
    "tt_host_cpu_seconds",
    "Engine-thread CPU time of TT steps, by step kind and part (plugin: scheduling policy, "
    "state update, input/output building, device-call hand-off; vllm: its scheduling pass and "
    "update_from_output); divide by tt_steps_total for the time per step",
    ("kind", "part"),
)

DECODE_INTERVALS = tt_metrics.Counter(
    "tt_decode_intervals", "Decode step periods summed in tt_decode_interval_seconds_total"
)

_PHASES = tuple(Phase)
_KINDS = tuple(StepKind)
_INDEX = {(k, p): i * len(_PHASES) + j for i, k in enumerate(_KINDS) for j, p in enumerate(_PHASES)}
_PARTS = tuple(Part)
_CPU_INDEX = {
    (k, p): i * len(_PARTS) + j for i, k in enumerate(_KINDS) for j, p in enumerate(_PARTS)
}


class PhaseClock:
    """Nanoseconds per (kind, phase) in this process; published by a daemon thread."""

    def __init__(self) -> None:
        self.ns = [0] * (len(_KINDS) * len(_PHASES))
        self._published = [0] * len(self.ns)
        self.cpu_ns = [0] * len(_CPU_INDEX)
        self._published_cpu = [0] * len(self.cpu_ns)
        self.interval_ns = 0
        self.intervals = 0
        self._published_interval = (0, 0)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def add(self, kind: StepKind, phase: Phase, ns: int) -> None:
        self.ns[_INDEX[(kind, phase)]] += ns
        if self._thread is None:
            self._start()

    def add_cpu(self, kind: StepKind, part: Part, ns: int) -> None:
        self.cpu_ns[_CPU_INDEX[(kind, part)]] += ns

    def get_cpu_ns(self, kind: StepKind, part: Part) -> int:
        return self.cpu_ns[_CPU_INDEX[(kind, part)]]

    def add_interval(self, ns: int) -> None:
        self.interval_ns += ns
        self.intervals += 1

    def get_ns(self, kind: StepKind, phase: Phase) -> int:
        return self.ns[_INDEX[(kind, phase)]]

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._publish_forever, name="tt-host-phases", daemon=True
                )
                self._thread.start()

    def _publish_forever(self) -> None:
        while True:
            time.sleep(FLUSH_INTERVAL_S)
            self.publish()

    def publish(self) -> None:
        """Add what accumulated since the last publish to the counter."""
        with self._lock:
            for (kind, phase), i in _INDEX.items():
                delta = self.ns[i] - self._published[i]
                if delta:
                    self._published[i] += delta
                    HOST_SECONDS.inc(kind.value, phase.value, amount=delta / 1e9)
            for (kind, part), i in _CPU_INDEX.items():
                delta = self.cpu_ns[i] - self._published_cpu[i]
                if delta:
                    self._published_cpu[i] += delta
                    HOST_CPU_SECONDS.inc(kind.value, part.value, amount=delta / 1e9)
            ns, count = self.interval_ns, self.intervals
            done_ns, done_count = self._published_interval
            if count != done_count:
                DECODE_INTERVAL_SECONDS.inc(amount=(ns - done_ns) / 1e9)
                DECODE_INTERVALS.inc(amount=count - done_count)
                self._published_interval = (ns, count)
        # These and every other counter of this process (the steps' decisions) into the file.
        tt_metrics.flush()

    def touch(self) -> None:
        """Create the decode and prefill series at zero (a scrape shows them from the start)."""
        for kind in (StepKind.PREFILL, StepKind.DECODE):
            for phase in _PHASES:
                HOST_SECONDS.touch(kind.value, phase.value)
            for part in _PARTS:
                HOST_CPU_SECONDS.touch(kind.value, part.value)
        DECODE_INTERVAL_SECONDS.touch()
        DECODE_INTERVALS.touch()


CLOCK = PhaseClock()
tt_metrics.at_publish(CLOCK.touch)
now = time.perf_counter_ns
cpu_now = time.thread_time_ns  # this thread's CPU time (a syscall, ~0.3 us: a few per step)


class ScheduleTimer:
    """A scheduler's step split between vLLM's calls and the plugin's work around them.

    ``begin`` starts a span; each call into vLLM's scheduler runs through ``vllm`` (its wall and CPU
    time are summed); ``absorb`` adds another timer's sums (the lane coordinator's lanes).
    ``finish`` charges a ``schedule()`` span to ``CLOCK`` (vLLM's sum as ``VLLM_SCHEDULE``, the rest
    as ``SCHEDULE_POLICY``), ``finish_output`` an ``update_from_output()`` span (vLLM's sum as
    ``VLLM_OUTPUT``, the rest, merging lanes' outputs, as ``OUTPUT_BUILD``; ``finish_vllm_output``:
    all of it as ``VLLM_OUTPUT``); CPU time the same way into ``Part.VLLM`` and ``Part.PLUGIN``. Two
    clock pairs per call into vLLM and per span, nothing per row."""

    __slots__ = ("_cpu_start", "_start", "vllm_cpu_ns", "vllm_ns")

    def __init__(self) -> None:
        self.vllm_ns = 0
        self.vllm_cpu_ns = 0
        self._start = 0
        self._cpu_start = 0

    def begin(self) -> None:
        self._start, self._cpu_start = now(), cpu_now()
        self.vllm_ns = self.vllm_cpu_ns = 0

    def clear(self) -> None:
        """Zero the sums without starting a span (a lane, whose coordinator times the step)."""
        self.vllm_ns = self.vllm_cpu_ns = 0

    def vllm(self, run: Callable[..., _T], *args: Any) -> _T:
        """``run(*args)``, a call into vLLM's scheduler, with its time added to the sums."""
        start, cpu_start = now(), cpu_now()
        result = run(*args)
        self.vllm_ns += now() - start
        self.vllm_cpu_ns += cpu_now() - cpu_start
        return result

    def absorb(self, other: ScheduleTimer) -> None:
        self.vllm_ns += other.vllm_ns
        self.vllm_cpu_ns += other.vllm_cpu_ns

    def finish(self, kind: StepKind) -> None:
        self._charge(kind, Phase.VLLM_SCHEDULE, Phase.SCHEDULE_POLICY)

    def finish_output(self, kind: StepKind) -> None:
        self._charge(kind, Phase.VLLM_OUTPUT, Phase.OUTPUT_BUILD)

    def finish_vllm_output(self, kind: StepKind) -> None:
        """Charge the whole span to ``VLLM_OUTPUT``: a lone scheduler's ``update_from_output``
        is vLLM's own, with nothing of the plugin's to split off (and no ``vllm`` wrapper)."""
        CLOCK.add(kind, Phase.VLLM_OUTPUT, now() - self._start)
        CLOCK.add_cpu(kind, Part.VLLM, cpu_now() - self._cpu_start)

    def _charge(self, kind: StepKind, vllm_phase: Phase, own_phase: Phase) -> None:
        wall, cpu = now() - self._start, cpu_now() - self._cpu_start
        CLOCK.add(kind, vllm_phase, self.vllm_ns)
        CLOCK.add(kind, own_phase, wall - self.vllm_ns)
        CLOCK.add_cpu(kind, Part.VLLM, self.vllm_cpu_ns)
        CLOCK.add_cpu(kind, Part.PLUGIN, cpu - self.vllm_cpu_ns)
