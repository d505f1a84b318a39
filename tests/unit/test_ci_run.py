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
step_no_junit() { echo "tested nothing"; }
step_leaves() { (sleep 30; echo late) & echo "$!" > "$CI_ARTIFACTS/left.pid"; }
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
    ci = tmp_path / ".ci"  # the plan's tree is tmp_path: steps run there
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
    assert re.search(r"CI FAILED: step slow: over budget: \d+ s > 2 s allowed", proc.stdout)
    assert "step fast" not in proc.stdout.split("CI FAILED", 1)[1]
    steps = by_name(times)
    # The step's own command passed: only the budget check fails it.
    assert steps["slow"]["status"] == "passed" and steps["slow"]["seconds"] >= 1.9
    assert steps["slow"]["allowed_s"] == 1.5 and "over budget" in steps["slow"]["failures"][0]
    assert steps["fast"]["failures"] == [] and times["verdict"] == "failed"
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
    assert "CI FAILED: step fails: exit 3" in proc.stdout
    assert "CI FAILED: step after-fail: not run: it needs fails" in proc.stdout
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
    hangs = by_name(times)["hangs"]
    assert hangs["exit"] == -15 and hangs["status"] == "failed"
    assert "CI FAILED: step hangs: exit -15" in proc.stdout


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


def test_a_steps_leftover_processes_are_killed_and_noted(tmp_path: Path) -> None:
    proc, times = drive(tmp_path, plan([{"name": "leaves", "budget_s": 5}]))
    assert proc.returncode == 0, proc.stdout
    pid = int((tmp_path / "out" / "left.pid").read_text())
    # The note names what was left (the subshell and its sleep), so a CI log says which test
    # forgot to stop a process.
    (note,) = by_name(times)["leaves"]["notes"]
    assert note.startswith("left processes running when it ended (killed): "), note
    assert f"{pid}:" in note and "sleep" in note, note
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_a_stopped_driver_stops_its_steps_and_fails(tmp_path: Path) -> None:
    ci = tmp_path / ".ci"
    ci.mkdir()
    (ci / "steps.sh").write_text(SCRIPT)
    (ci / "plan.json").write_text(json.dumps(plan([{"name": "hangs", "budget_s": 100}])))
    driver = subprocess.Popen(
        [sys.executable, str(REPO / "tools" / "ci_run.py"), "--plan", str(ci / "plan.json"),
         "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.5)
    driver.terminate()
    out, _ = driver.communicate(timeout=30)
    assert driver.returncode == 1
    assert "CI FAILED: driver error: Stopped: the driver got signal 15" in out
    assert "CI FAILED: step hangs: stopped: the driver ended while it ran" in out
    left = subprocess.run(["pgrep", "-f", "sleep 60"], capture_output=True, text=True)
    assert str(tmp_path) not in left.stdout


def junit_xml(*cases: str) -> str:
    return '<testsuites><testsuite name="pytest">' + "".join(cases) + "</testsuite></testsuites>"


OK_CASE = '<testcase classname="tests.a" name="test_ok" time="1.5"/>'
SKIP_CASE = (
    '<testcase classname="tests.b" name="test_skip" time="0"><skipped message="y"/></testcase>'
)
FAIL_CASE = (
    '<testcase classname="tests.a" name="test_bad" time="0.2"><failure message="x"/></testcase>'
)


def run_junit(tmp_path: Path, xml: str | None) -> tuple[subprocess.CompletedProcess[str], Any]:
    src = tmp_path / "src.xml"
    if xml is not None:
        src.write_text(xml)
    out = tmp_path / "out"
    step = "junit" if xml is not None else "no-junit"
    data = plan([{"name": step, "budget_s": 5, "junit": [f"{out}/junit.xml"]}])
    return drive(tmp_path, data, {"JUNIT_SRC": str(src)})


def test_tests_are_counted_and_timed_from_the_steps_junit_files(tmp_path: Path) -> None:
    proc, times = run_junit(tmp_path, junit_xml(OK_CASE, SKIP_CASE))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == "ci: 1 passed, 0 failed, 1 skipped"
    assert times["tests"][0] == {
        "step": "junit",
        "id": "tests.a::test_ok",
        "seconds": 1.5,
        "outcome": "passed",
    }
    assert by_name(times)["junit"]["tests"] == 2


JUNIT_REFUSED = [
    (junit_xml(OK_CASE, FAIL_CASE), "1 test(s) failed, first: tests.a::test_bad"),
    (junit_xml(), "ran no test"),
    (junit_xml(SKIP_CASE), "ran no test"),
    ("<testsuites><testsuite", "unreadable JUnit file"),
    (None, "wrote no JUnit file"),
]


@pytest.mark.parametrize(("xml", "why"), JUNIT_REFUSED, ids=[w for _, w in JUNIT_REFUSED])
def test_a_step_whose_tests_failed_or_did_not_run_fails_though_it_exited_0(
    tmp_path: Path, xml: str | None, why: str
) -> None:
    proc, _ = run_junit(tmp_path, xml)
    assert proc.returncode == 1, proc.stdout
    assert re.search(rf"CI FAILED: step (no-)?junit: {re.escape(why)}", proc.stdout), proc.stdout


def test_an_earlier_runs_junit_file_is_not_this_runs(tmp_path: Path) -> None:
    """A file left by an earlier run (even dated in the future) is removed before the step."""
    out = tmp_path / "out"
    out.mkdir()
    stale = out / "junit.xml"
    stale.write_text(junit_xml(OK_CASE))
    os.utime(stale, (time.time() + 3600, time.time() + 3600))
    proc, _ = run_junit(tmp_path, None)
    assert proc.returncode == 1 and "wrote no JUnit file" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == "ci: 0 passed, 0 failed, 0 skipped"


def test_one_file_named_twice_counts_once(tmp_path: Path) -> None:
    src = tmp_path / "src.xml"
    src.write_text(junit_xml(OK_CASE))
    out = tmp_path / "out"
    data = plan([{"name": "junit", "budget_s": 5, "junit": [f"{out}/junit.xml", f"{out}/*.xml"]}])
    proc, _ = drive(tmp_path, data, {"JUNIT_SRC": str(src)})
    assert proc.stdout.rstrip().splitlines()[-1] == "ci: 1 passed, 0 failed, 0 skipped"


def one(**step: Any) -> dict[str, Any]:
    return plan([{"name": "a", "budget_s": 5, **step}])


BAD_PLANS = [
    (one(needs=["nope"]), "step 'a' needs 'nope', which is not a step"),
    (one(needs=["a"]), "step 'a' needs 'a', which is not listed before it"),
    (
        plan([{"name": "a", "needs": ["b"], "budget_s": 5}, {"name": "b", "budget_s": 5}]),
        "step 'a' needs 'b', which is not listed before it",
    ),
    (
        plan([{"name": "a", "budget_s": 5}, {"name": "a", "budget_s": 5}]),
        "step names must be unique: ['a']",
    ),
    (one(cpu=3), "step 'a': 'cpu' must be an integer from 0 to 2"),
    (one(cpu=1.0), "step 'a': 'cpu' must be an integer from 0 to 2"),
    (one(budget_s=0), "step 'a': 'budget_s' must be a finite number >= 1"),
    (one(budget_s="5"), "step 'a': 'budget_s' must be a finite number >= 1"),
    (one(budget_s=float("nan")), "step 'a': 'budget_s' must be a finite number >= 1"),
    (one(budget_s=float("inf")), "step 'a': 'budget_s' must be a finite number >= 1"),
    (one(budget_s=10**400), "step 'a': 'budget_s' must be a finite number >= 1"),
    (one(budget_s=601), "and <= 600"),
    (one(bugdet=1), "unknown field(s) ['bugdet']"),
    (plan([{"name": "x/y", "budget_s": 5}]), "steps[0]: 'name' must match"),
    (plan([{"name": "a_b", "budget_s": 5}]), "steps[0]: 'name' must match"),
    (plan([{"name": "../up", "budget_s": 5}]), "steps[0]: 'name' must match"),
    ({**one(), "margin": {"ratio": -1, "min_s": 0}}, "margin: 'ratio'"),
    ({**one(), "margin": {"ratio": float("nan"), "min_s": 0}}, "margin: 'ratio'"),
    ({**one(), "margin": {"ratio": 0, "min_s": 0, "max_s": 1}}, "unknown field(s) ['max_s']"),
    ({**one(), "total_budget_s": float("nan")}, "plan: 'total_budget_s'"),
    ({**one(), "cores": 1.9}, "plan: 'cores' must be an integer"),
    ({**one(), "hard_stop": 1}, "plan: unknown field(s) ['hard_stop']"),
    ({"steps": []}, "'margin' must be an object"),
]


@pytest.mark.parametrize(("data", "message"), BAD_PLANS, ids=[m for _, m in BAD_PLANS])
def test_a_bad_plan_is_refused_before_any_step_runs(
    tmp_path: Path, data: dict[str, Any], message: str
) -> None:
    proc, times = drive(tmp_path, data)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert times == {} and not (tmp_path / "out" / "logs").exists()


def test_a_plan_read_from_elsewhere_runs_its_own_trees_steps(tmp_path: Path) -> None:
    """A relative --plan resolves to its own tree: that tree's steps.sh runs, in that tree."""
    ci = tmp_path / ".ci"
    ci.mkdir()
    (ci / "steps.sh").write_text('step_where() { pwd > "$CI_ARTIFACTS/where"; }\n"step_$1"\n')
    (ci / "plan.json").write_text(json.dumps(plan([{"name": "where", "budget_s": 5}])))
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "ci_run.py"), "--plan", ".ci/plan.json",
         "--out", "out"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "out" / "where").read_text().strip() == str(tmp_path)


def record(tmp_path: Path, times_file: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "tools" / "ci_run.py"), "--plan",
         str(tmp_path / ".ci" / "plan.json"), "--record", str(times_file), *extra],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_record_rewrites_budgets_from_a_passing_run(tmp_path: Path) -> None:
    drive(tmp_path, plan([{"name": "fast", "budget_s": 5}, {"name": "slow", "budget_s": 5}]))
    proc = record(tmp_path, tmp_path / "out" / "ci-times.json")
    assert proc.returncode == 0, proc.stderr
    written = json.loads((tmp_path / ".ci" / "plan.json").read_text())
    recorded = {s["name"]: s["budget_s"] for s in written["steps"]}
    # Rounded up to 10 s: the slow step's 2 s gives 10; the fast one too.
    assert recorded == {"fast": 10, "slow": 10}
    assert "fast: 5 -> 10 s" in proc.stdout and "slow: 5 -> 10 s" in proc.stdout


def test_record_refuses_a_failed_a_partial_or_another_plans_run(tmp_path: Path) -> None:
    drive(tmp_path, plan([{"name": "fast", "budget_s": 5}, {"name": "slow", "budget_s": 1}]))
    times_file = tmp_path / "out" / "ci-times.json"
    before = (tmp_path / ".ci" / "plan.json").read_text()
    failed = record(tmp_path, times_file)
    assert failed.returncode == 2 and "record only a passing run" in failed.stderr
    times = json.loads(times_file.read_text())
    times["verdict"] = "passed"
    times["steps"] = times["steps"][:1]
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(times))
    refused = record(tmp_path, partial)
    assert refused.returncode == 2 and "missing ['slow']" in refused.stderr
    assert record(tmp_path, times_file, "--only", "fast").returncode == 2
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{")
    assert record(tmp_path, garbage).returncode == 2
    assert (tmp_path / ".ci" / "plan.json").read_text() == before


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
