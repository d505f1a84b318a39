"""The CI driver (tools/ci_run.py): schedule, budgets, the budget check, the times file.

Each run here is the real driver as `.ci/run` starts it (a subprocess over a plan and a steps
script written to tmp_path), with steps that sleep instead of testing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.tool_modules import load_tool

ci_run = load_tool("ci_run")

SCRIPT = """#!/usr/bin/env bash
set -euo pipefail
step_fast() { echo fast-ran; }
step_slow() { sleep 2; echo slow-ran; }
step_fails() { echo broken >&2; exit 3; }
step_after_fail() { echo never; }
step_nap_a() { sleep 1; }
step_nap_b() { sleep 1; }
step_heavy_a() { sleep 0.6; }
step_heavy_b() { sleep 0.6; }
step_hangs() { sleep 60; }
step_junit() { cp "$JUNIT_SRC" "$CI_ARTIFACTS/junit.xml"; }
"step_${1//-/_}"
"""


def plan(steps: list[dict[str, Any]], ratio: float = 0.0, min_s: float = 0.5) -> dict[str, Any]:
    return {
        "cores": 2,
        "total_budget_s": 600,
        "margin": {"ratio": ratio, "min_s": min_s},
        "steps": steps,
    }


def drive(
    tmp_path: Path, data: dict[str, Any], env: dict[str, str] | None = None, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    ci = tmp_path / "ci"
    ci.mkdir(exist_ok=True)
    (ci / "steps.sh").write_text(SCRIPT)
    (ci / "plan.json").write_text(json.dumps(data))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "ci_run.py"), "--plan", str(ci / "plan.json"),
         "--out", str(out), *args],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    times_file = out / "ci-times.json"
    times = json.loads(times_file.read_text()) if times_file.is_file() else {}
    return proc, times


def by_name(times: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in times["steps"]}


def test_a_deliberately_slowed_step_fails_the_run_naming_the_step(tmp_path: Path) -> None:
    data = plan([{"name": "fast", "budget_s": 5}, {"name": "slow", "budget_s": 1}])
    proc, times = drive(tmp_path, data)
    assert proc.returncode == 1, proc.stdout
    assert re.search(r"CI FAILED: step slow is over budget: \d+ s > 2 s allowed", proc.stdout)
    assert "step fast" not in proc.stdout.split("CI FAILED", 1)[1]
    steps = by_name(times)
    # The step's own command passed: only the budget check fails it.
    assert steps["slow"]["status"] == "passed" and steps["slow"]["seconds"] >= 1.9
    assert steps["slow"]["allowed_s"] == 1.5 and "over budget" in steps["slow"]["note"]
    assert steps["fast"]["note"] == "" and times["verdict"] == "failed"
    assert proc.stdout.rstrip().splitlines()[-1] == "ci: 0 passed, 0 failed, 0 skipped"


def test_the_same_step_within_its_budget_passes(tmp_path: Path) -> None:
    data = plan([{"name": "fast", "budget_s": 5}, {"name": "slow", "budget_s": 5}])
    proc, times = drive(tmp_path, data)
    assert proc.returncode == 0, proc.stdout
    assert "CI FAILED" not in proc.stdout and times["verdict"] == "passed"
    assert "slow-ran" in proc.stdout  # a finished step prints its log's tail
    assert (tmp_path / "out" / "logs" / "slow.log").read_text().strip() == "slow-ran"


def test_a_failed_step_fails_the_run_and_its_dependents_do_not_run(tmp_path: Path) -> None:
    data = plan(
        [
            {"name": "fails", "budget_s": 5},
            {"name": "after-fail", "needs": ["fails"], "budget_s": 5},
            {"name": "fast", "budget_s": 5},
        ]
    )
    proc, times = drive(tmp_path, data)
    assert proc.returncode == 1
    assert "CI FAILED: step fails failed (exit 3)" in proc.stdout
    assert "CI FAILED: step after-fail not run: it needs fails" in proc.stdout
    assert "broken" in proc.stdout  # a failed step prints its log
    steps = by_name(times)
    assert steps["after-fail"]["status"] == "skipped" and steps["fast"]["status"] == "passed"
    assert not (tmp_path / "out" / "logs" / "after-fail.log").exists()


def test_a_hung_step_is_stopped_at_twice_its_allowance(tmp_path: Path) -> None:
    started = time.monotonic()
    proc, times = drive(tmp_path, plan([{"name": "hangs", "budget_s": 1}]))
    assert time.monotonic() - started < 30  # not the step's 60 s
    assert proc.returncode == 1
    assert "stopping hangs: still running at 2 x its allowance (2 s)" in proc.stdout
    assert by_name(times)["hangs"]["exit"] == 124


def test_steps_overlap_only_while_their_cores_fit(tmp_path: Path) -> None:
    data = plan(
        [
            {"name": "nap-a", "cpu": 0, "budget_s": 5},
            {"name": "nap-b", "cpu": 0, "budget_s": 5},
            {"name": "heavy-a", "cpu": 2, "needs": ["nap-a", "nap-b"], "budget_s": 5},
            {"name": "heavy-b", "cpu": 2, "needs": ["nap-a", "nap-b"], "budget_s": 5},
        ]
    )
    proc, times = drive(tmp_path, data)
    assert proc.returncode == 0, proc.stdout
    s = by_name(times)
    # Two steps that keep no core busy run together...
    assert s["nap-b"]["started_s"] < s["nap-a"]["ended_s"]
    # ...two that each fill the machine never do, and a step starts only after its needs.
    first, second = sorted((s["heavy-a"], s["heavy-b"]), key=lambda x: x["started_s"])
    assert second["started_s"] >= first["ended_s"]
    assert first["started_s"] >= max(s["nap-a"]["ended_s"], s["nap-b"]["ended_s"])


def test_only_runs_the_named_steps_and_their_needs(tmp_path: Path) -> None:
    data = plan(
        [
            {"name": "fast", "budget_s": 5},
            {"name": "nap-a", "cpu": 0, "needs": ["fast"], "budget_s": 5},
            {"name": "slow", "budget_s": 5},
        ]
    )
    proc, times = drive(tmp_path, data, None, "--only", "nap-a")
    assert proc.returncode == 0, proc.stdout
    assert [s["name"] for s in times["steps"]] == ["fast", "nap-a"]


def test_tests_are_counted_and_timed_from_this_runs_junit_files(tmp_path: Path) -> None:
    src = tmp_path / "src.xml"
    src.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.a" name="test_ok" time="1.5"/>'
        '<testcase classname="tests.a" name="test_bad" time="0.2">'
        '<failure message="x"/></testcase>'
        '<testcase classname="tests.b" name="test_skip" time="0.0">'
        '<skipped message="y"/></testcase>'
        "</testsuite></testsuites>"
    )
    out = tmp_path / "out"
    stale = out / "stale.xml"  # an earlier run's file: not this run's tests
    stale.parent.mkdir(parents=True)
    stale.write_text(src.read_text())
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    data = plan(
        [{"name": "junit", "budget_s": 5, "junit": [f"{out}/junit.xml", f"{out}/stale.xml"]}]
    )
    proc, times = drive(tmp_path, data, {"JUNIT_SRC": str(src)})
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == "ci: 1 passed, 1 failed, 1 skipped"
    assert times["tests"][0] == {
        "step": "junit",
        "id": "tests.a::test_ok",
        "seconds": 1.5,
        "outcome": "passed",
    }
    assert by_name(times)["junit"]["tests"] == 3


BAD_PLANS = [
    (
        plan([{"name": "a", "needs": ["nope"], "budget_s": 5}]),
        "step 'a' needs 'nope', which is not a step",
    ),
    (
        plan([{"name": "a", "needs": ["b"], "budget_s": 5}, {"name": "b", "budget_s": 5}]),
        "step 'a' needs 'b', listed after it",
    ),
    (
        plan([{"name": "a", "budget_s": 5}, {"name": "a", "budget_s": 5}]),
        "step names must be unique: ['a']",
    ),
    (plan([{"name": "a", "cpu": 3, "budget_s": 5}]), "step 'a': 'cpu' must be an integer from 0"),
    (plan([{"name": "a", "budget_s": 0}]), "step 'a': 'budget_s' must be a number >= 1"),
    (plan([{"name": "a", "budget_s": "5"}]), "step 'a': 'budget_s' must be a number >= 1"),
    (plan([{"name": "a", "budget_s": 5, "bugdet": 1}]), "unknown field(s) ['bugdet']"),
    ({**plan([{"name": "a", "budget_s": 5}]), "margin": {"ratio": -1, "min_s": 0}}, "'ratio'"),
    ({"steps": []}, "'margin' must be an object"),
]


@pytest.mark.parametrize(("data", "message"), BAD_PLANS, ids=[m for _, m in BAD_PLANS])
def test_a_bad_plan_is_refused_before_any_step_runs(
    tmp_path: Path, data: dict[str, Any], message: str
) -> None:
    proc, times = drive(tmp_path, data)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert times == {} and not (tmp_path / "out" / "logs").exists()


def test_record_rewrites_budgets_from_a_times_file(tmp_path: Path) -> None:
    data = plan([{"name": "fast", "budget_s": 5}, {"name": "slow", "budget_s": 1}])
    drive(tmp_path, data)
    times_file = tmp_path / "out" / "ci-times.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "ci_run.py"), "--plan",
         str(tmp_path / "ci" / "plan.json"), "--record", str(times_file)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    written = json.loads((tmp_path / "ci" / "plan.json").read_text())
    recorded = {s["name"]: s["budget_s"] for s in written["steps"]}
    # Rounded up to 10 s: the slow step's 2 s gives 10; the fast one too.
    assert recorded == {"fast": 10, "slow": 10}
    assert "fast: 5 -> 10 s" in proc.stdout and "slow: 1 -> 10 s" in proc.stdout


# --- the committed plan ---------------------------------------------------------------------


def committed() -> Any:
    return ci_run.load_plan(REPO / ".ci" / "plan.json")


def test_the_committed_plan_and_steps_script_name_the_same_steps() -> None:
    steps_sh = (REPO / ".ci" / "steps.sh").read_text()
    functions = {m.replace("_", "-") for m in re.findall(r"^step_(\w+)\(\)", steps_sh, re.M)}
    assert {s.name for s in committed().steps} == functions


def test_ci_run_drives_the_committed_plan_and_it_runs_the_readme_test_command() -> None:
    run = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^exec python3 tools/ci_run\.py\b", run, re.M), run
    readme_test = (REPO / "README.md").read_text().split("```bash", 1)[1].splitlines()[2]
    command = readme_test.split("#", 1)[0].strip()
    steps_sh = (REPO / ".ci" / "steps.sh").read_text()
    unit_body = steps_sh.split("step_unit() {", 1)[1].split("\n}", 1)[0]
    assert command in unit_body, (command, unit_body)
    assert "unit" in {s.name for s in committed().steps}


def test_the_committed_budgets_fit_the_total_when_run_as_planned() -> None:
    """The critical path of the plan's budgets (each step after its needs, on the planned
    cores) fits the total: a plan whose own budgets cannot meet the 40 minutes is caught here,
    not by a late CI."""
    plan_ = committed()
    finish: dict[str, float] = {}
    for step in plan_.steps:
        finish[step.name] = max((finish[n] for n in step.needs), default=0.0) + step.budget_s
    busy = sum(s.budget_s * s.cpu for s in plan_.steps) / plan_.cores
    assert max(finish.values()) <= plan_.total_budget_s
    assert busy <= plan_.total_budget_s, f"{busy:.0f} core-seconds per core"
