"""The host-overhead benchmark's server configurations and the lane-scheduler benchmark's
schedulers: what each label launches, and that the lane benchmark times real steady decode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import idle_slowdown
from benchmarks.host_overhead import Config, label, markdown, server_for


@pytest.mark.parametrize(
    ("text", "config", "api_servers", "shown"),
    [
        ("128", Config(128), 1, "128"),
        ("4x32", Config(32, 4), 4, "4x32"),  # vLLM's default: one API server per DP rank
        ("4x32/1", Config(32, 4, 1), 1, "4x32/1"),
    ],
)
def test_config_labels_round_trip(text: str, config: Config, api_servers: int, shown: str) -> None:
    parsed = Config.parse(text)
    assert parsed == config
    assert parsed.api_server_count == api_servers
    assert label(parsed.seqs * parsed.lanes, parsed.lanes, parsed.api_server_count) == shown


def test_one_api_server_is_asked_of_vllm_only_when_chosen(tmp_path: Path) -> None:
    step, log = tmp_path / "step.ms", tmp_path / "server.log"
    default = server_for(Config.parse("4x32"), False, step, log).command()
    single = server_for(Config.parse("4x32/1"), False, step, log).command()
    assert "--api-server-count" not in default
    assert default[default.index("--data-parallel-size") + 1] == "4"
    assert single[single.index("--api-server-count") + 1] == "1"
    assert single[single.index("--max-num-seqs") + 1] == "32"


def test_the_machine_slowdown_is_measured_after_each_sleep_and_tabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``after_sleep`` times the workload after every sleep and relates it to back to back;
    the run's JSON carries it and the markdown tables it beside the rows."""
    slept: list[float] = []
    monkeypatch.setattr(idle_slowdown.time, "sleep", slept.append)  # no real waits
    figures = idle_slowdown.after_sleep(repeats=3)
    assert set(figures) == {"5", "17", "40"}
    assert sorted(set(slept)) == [0.005, 0.017, 0.04] and len(slept) == 9
    assert all(ratio > 0 for ratio in figures.values())
    before, after = {"5": 1.1, "17": 1.25, "40": 1.5}, {"5": 1.0, "17": 1.2, "40": 1.75}
    doc = {"rows": [], "machine_slowdown": {"before": before, "after": after}}
    table = markdown(doc).splitlines()
    assert "| before the run | 1.10 | 1.25 | 1.50 |" in table
    assert "| after the run | 1.00 | 1.20 | 1.75 |" in table
    assert markdown({"rows": []}).count("machine") == 0  # runs from before it still render


@pytest.fixture
def lane_benchmark_env(monkeypatch: pytest.MonkeyPatch, clean_registry: None) -> Any:
    """The lane benchmark's module with its environment set (restored after the test)."""
    from benchmarks import lane_scheduler as ls

    for key, value in ls.ENV.items():
        monkeypatch.setenv(key, value)
    # build_scheduler sets these for the layout it builds; monkeypatch restores them after.
    monkeypatch.setenv("MESH_DEVICE", "N150")
    monkeypatch.setenv("TT_MODEL_CLASS_OVERRIDES", "")
    return ls


def test_lane_benchmark_times_steady_decode_of_every_row(lane_benchmark_env: Any) -> None:
    from vllm_tt_plugin.lane_scheduler import TTLaneCoordinator
    from vllm_tt_plugin.scheduler import TTScheduler

    ls = lane_benchmark_env
    wide, lanes = ls.build_scheduler(1, 8), ls.build_scheduler(4, 2)
    assert type(wide) is TTScheduler
    assert isinstance(lanes, TTLaneCoordinator) and len(lanes.lanes) == 4
    for sched in (wide, lanes):
        ls.admit(sched, 8)
        before = sched.get_request_counts()
        sample = ls.timed(sched, 3)
        assert sched.get_request_counts() == before == (8, 0)  # all running, none waiting
        assert sample.step_us > 0
        assert sample.phases_us["vllm_schedule"] > 0 and sample.phases_us["vllm_output"] > 0
    # every row advanced one token per timed step, in both layouts
    for sched in (wide, *lanes.lanes):
        assert all(r.num_output_tokens == len(r.output_token_ids) for r in sched.running)
    assert {r.num_computed_tokens for r in wide.running} == {
        r.num_computed_tokens for lane in lanes.lanes for r in lane.running
    }


def test_lane_benchmark_segments_time_each_piece_per_pass(lane_benchmark_env: Any) -> None:
    ls = lane_benchmark_env

    def current() -> list[Any]:
        return [getattr(owner, attr) for owner, attr, _, _ in ls.segment_targets()]

    originals = current()
    wide, lanes = ls.build_scheduler(1, 8), ls.build_scheduler(4, 2)
    for sched in (wide, lanes):
        ls.admit(sched, 8)
    wide_part, lane_part = ls.timed_segments(wide, 4), ls.timed_segments(lanes, 4)
    # Steady decode steps: one check per scheduler and no readiness derivation; one timed
    # pass for the wide batch, one timed block of passes for the lanes, which alone merge.
    assert wide_part.calls == {
        "steady_check": 1,
        "readiness": 0,
        "work_facts": 0,
        "pass_glue": 1,
        "merge_outputs": 0,
        "merge_results": 0,
    }
    assert lane_part.calls == {
        "steady_check": 4,
        "readiness": 0,
        "work_facts": 0,
        "pass_glue": 1,
        "merge_outputs": 1,
        "merge_results": 1,
    }
    for part in (wide_part, lane_part):
        assert all((part.us[k] > 0) == (part.calls[k] > 0) for k in ls.SEGMENTS)
    # the wrappers are gone after the rounds
    assert current() == originals
