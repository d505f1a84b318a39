"""The runner's step recorder (observability/step_recorder.py) and the schedulers' timer
(host_phases.ScheduleTimer) on a scripted clock: what each mark, drain and
model call adds to the phase table, the step's CPU time and the decode intervals."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from vllm_tt_plugin.contract.reload_contract import ReloadCommand
from vllm_tt_plugin.observability import host_phases
from vllm_tt_plugin.observability.host_phases import Part, Phase
from vllm_tt_plugin.observability.step_recorder import StepRecorder
from vllm_tt_plugin.policy.sampling_route import Route, RouteDecision
from vllm_tt_plugin.policy.step_kind import StepKind

PREFILL, DECODE = StepKind.PREFILL, StepKind.DECODE


class Clocks:
    """Wall and CPU clocks that move only when told."""

    def __init__(self) -> None:
        self.wall = 1_000
        self.cpu = 500
        self.table = host_phases.PhaseClock()  # stands in for host_phases.CLOCK
        self.table._thread = object()  # type: ignore[assignment]  # never starts publishing

    def tick(self, wall: int, cpu: int = 0) -> None:
        self.wall += wall
        self.cpu += cpu


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clocks]:
    c = Clocks()
    monkeypatch.setattr(host_phases, "now", lambda: c.wall)
    monkeypatch.setattr(host_phases, "cpu_now", lambda: c.cpu)
    monkeypatch.setattr("vllm_tt_plugin.observability.step_recorder.CLOCK", c.table)
    monkeypatch.setattr(host_phases, "CLOCK", c.table)  # the schedulers' ScheduleTimer
    yield c


def decision(on_device: bool = True) -> RouteDecision:
    route = Route.DEVICE if on_device else Route.HOST
    return RouteDecision(route, "" if on_device else "test")


def test_marks_split_the_step_and_a_drain_counts_for_the_drained_steps(clocks: Clocks) -> None:
    rec = StepRecorder(lanes=1)
    rec.sampling_started()
    rec.open_step(PREFILL)
    clocks.tick(10, 3)
    rec.drain(lambda: clocks.tick(1_000, 400))  # earlier decodes finish: their time, not ours
    clocks.tick(20, 5)
    rec.mark(Phase.SAMPLING_ROUTE)
    clocks.tick(7, 1)
    rec.mark(Phase.INPUT_BUILD)
    clocks.tick(30, 6)
    rec.mark(Phase.MODEL_SUBMIT)
    clocks.tick(500)
    rec.mark(Phase.OUTPUT_BUILD)
    clocks.tick(40, 8)
    rec.close_step()
    rec.sampling_done(PREFILL)
    t = clocks.table
    got = {p: t.get_ns(PREFILL, p) for p in Phase if t.get_ns(PREFILL, p)}
    assert got == {
        Phase.INPUT_BUILD: 10 + 20 + 30,
        Phase.SAMPLING_ROUTE: 7,
        Phase.MODEL_SUBMIT: 500,
        Phase.OUTPUT_BUILD: 40,
    }
    assert t.get_cpu_ns(PREFILL, Part.PLUGIN) == 3 + 5 + 1 + 6 + 8
    assert rec.stats.drains == 1


def test_a_decode_call_is_submit_and_read_back_and_intervals_start_at_the_third_decode(
    clocks: Clocks,
) -> None:
    rec = StepRecorder(lanes=2)
    command = ReloadCommand(reload_inputs=False, reload_page_table=True)
    starts = []
    for _ in range(4):
        clocks.tick(1_000)
        rec.open_step(DECODE)
        starts.append(clocks.wall)
        clocks.tick(5)
        rec.model_call(submit_ns=100, call_ns=300)
        clocks.tick(300 + 2)  # the call's time, then bookkeeping
        rec.decode_done(command, decision(), overlap=False, lanes={0, 1})
        rec.close_step()
    t = clocks.table
    assert t.get_ns(DECODE, Phase.INPUT_BUILD) == 4 * (5 + 2)
    assert t.get_ns(DECODE, Phase.MODEL_SUBMIT) == 4 * 100
    assert t.get_ns(DECODE, Phase.READ_BACK) == 4 * 200
    assert (t.intervals, t.interval_ns) == (2, starts[3] - starts[1])
    stats = rec.stats
    assert (stats.decode_steps, stats.device_sampled_steps, stats.page_table_reloads) == (4, 4, 4)
    assert stats.multi_lane_steps == 0  # decode_lanes counts those, before the call
    rec.prefill_started()  # a prefill ends the run: the next two decodes are not periods
    for _ in range(2):
        rec.open_step(DECODE)
        rec.decode_done(command, decision(False), overlap=False, lanes={0})
    assert t.intervals == 2 and stats.host_sampled_steps == 2


def test_the_update_and_a_finish_count_their_own_phases(clocks: Clocks) -> None:
    rec = StepRecorder(lanes=1)
    rec.update_started()
    clocks.tick(25, 9)
    so = SimpleNamespace(
        preempted_req_ids=(), scheduled_cached_reqs=SimpleNamespace(resumed_req_ids=())
    )
    rec.update_done(so, DECODE)  # type: ignore[arg-type]
    marks = rec.finish
    marks.open(DECODE, Phase.READ_BACK)
    clocks.tick(60)
    marks.mark(Phase.OUTPUT_BUILD)
    clocks.tick(15)
    marks.close()
    t = clocks.table
    assert t.get_ns(DECODE, Phase.STATE_UPDATE) == 25
    assert t.get_cpu_ns(DECODE, Part.PLUGIN) == 9
    assert (t.get_ns(DECODE, Phase.READ_BACK), t.get_ns(DECODE, Phase.OUTPUT_BUILD)) == (60, 15)


def test_a_schedule_span_charges_vllm_calls_and_absorbed_lanes_to_vllm_the_rest_to_policy(
    clocks: Clocks,
) -> None:
    timer, lane_a, lane_b = (host_phases.ScheduleTimer() for _ in range(3))
    lane_a.vllm_ns = lane_b.vllm_ns = 999  # left over from an earlier step: cleared below
    timer.begin()
    for lane in (lane_a, lane_b):
        lane.clear()
    clocks.tick(5, 2)
    got = timer.vllm(lambda n: clocks.tick(100, 40) or n * 2, 21)  # a steady pass
    assert got == 42
    lane_a.vllm(lambda: clocks.tick(50, 20))
    lane_b.vllm(lambda: clocks.tick(30, 10))
    clocks.tick(7, 3)
    for lane in (lane_a, lane_b):
        timer.absorb(lane)
    timer.finish(DECODE)
    table = clocks.table
    assert table.get_ns(DECODE, Phase.VLLM_SCHEDULE) == 180
    assert table.get_ns(DECODE, Phase.SCHEDULE_POLICY) == 12
    assert table.get_cpu_ns(DECODE, Part.VLLM) == 70
    assert table.get_cpu_ns(DECODE, Part.PLUGIN) == 5
    assert table.get_ns(PREFILL, Phase.VLLM_SCHEDULE) == 0


def test_an_output_span_charges_vllm_updates_to_vllm_output_and_the_merge_to_output_build(
    clocks: Clocks,
) -> None:
    timer = host_phases.ScheduleTimer()
    timer.vllm(lambda: clocks.tick(1_000, 1_000))  # an earlier span's call: begin zeroes it
    timer.begin()
    timer.vllm(lambda: clocks.tick(60, 25))
    clocks.tick(9, 4)  # the coordinator merging its lanes' outputs
    timer.finish_output(PREFILL)
    table = clocks.table
    assert table.get_ns(PREFILL, Phase.VLLM_OUTPUT) == 60
    assert table.get_ns(PREFILL, Phase.OUTPUT_BUILD) == 9
    assert table.get_cpu_ns(PREFILL, Part.VLLM) == 25
    assert table.get_cpu_ns(PREFILL, Part.PLUGIN) == 4


def test_a_lone_schedulers_output_span_is_all_vllm(clocks: Clocks) -> None:
    timer = host_phases.ScheduleTimer()
    timer.begin()
    clocks.tick(80, 30)
    timer.finish_vllm_output(DECODE)
    assert clocks.table.get_ns(DECODE, Phase.VLLM_OUTPUT) == 80
    assert clocks.table.get_ns(DECODE, Phase.OUTPUT_BUILD) == 0
    assert clocks.table.get_cpu_ns(DECODE, Part.VLLM) == 30
    assert clocks.table.get_cpu_ns(DECODE, Part.PLUGIN) == 0
