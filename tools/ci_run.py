"""The CI driver behind `.ci/run`: runs the steps of `.ci/plan.json` on a schedule, times each
one, and fails naming the step that ran past its recorded budget.

    python3 tools/ci_run.py [--plan .ci/plan.json] [--only STEP ...] [--out DIR]
    python3 tools/ci_run.py --record DIR/ci-times.json [--plan .ci/plan.json]

The plan lists each step (`bash .ci/steps.sh STEP` runs it), the steps it needs, how many cores
it keeps busy (`cpu`: 0 for a step that mostly waits on the network or a disk) and its budget in
seconds. The driver starts a step once its needs have passed and its cores are free (the machine's
`cores`, from the plan), so downloads and installs overlap the CPU-bound test steps; it never
oversubscribes the cores, because on a 2-core machine two CPU-bound steps at once take as long as
one after the other and make both of them noisy.

Each step's output goes to DIR/logs/STEP.log (default DIR: reports/artifacts/ci); a finished step
prints its tail, a failed one its last 300 lines. At the end the driver writes DIR/ci-times.json
(every step's start, end and seconds, and every test's time from the JUnit files the steps name)
and prints the step table and the slowest tests.

The budget check: a step whose time exceeds ``budget_s + max(margin.ratio * budget_s,
margin.min_s)`` fails the run, naming the step, its time and its allowance, even when its own
command passed; so does a run past ``total_budget_s``. A step still running at twice its
allowance is stopped (its whole process group) and fails, so a hang is named long before CI's hard
limit. ``--record`` rewrites each step's ``budget_s`` from a ci-times.json (rounded up to 10 s):
run it on a representative machine after a deliberate change of a step's cost, and commit the
plan with the change that caused it.

Exit status: 0 when every step passed within its budget, 1 otherwise, 2 for a bad plan or
arguments. The last line is the tests' total across the steps' JUnit files
("ci: N passed, N failed, N skipped").
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import math
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PLAN = REPO / ".ci" / "plan.json"
DEFAULT_OUT = REPO / "reports" / "artifacts" / "ci"
POLL_S = 0.25
TAIL_OK = 12
TAIL_FAILED = 300
HARD_STOP_FACTOR = 2.0
EXIT_BAD_PLAN = 2


class PlanError(ValueError):
    """The plan cannot be run as written; the message names the step and field."""


@dataclass(frozen=True)
class Margin:
    ratio: float
    min_s: float

    def allowance(self, budget_s: float) -> float:
        """How long a step with this budget may take before the run fails."""
        return budget_s + max(self.ratio * budget_s, self.min_s)


@dataclass(frozen=True)
class Step:
    name: str
    budget_s: float
    cpu: int = 1
    needs: tuple[str, ...] = ()
    junit: tuple[str, ...] = ()  # glob patterns, relative to the repository
    why: str = ""


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    margin: Margin
    total_budget_s: float
    cores: int
    script: Path

    def step(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise PlanError(f"no step named {name!r} in the plan")


def _number(raw: dict[str, Any], key: str, where: str, minimum: float = 0.0) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise PlanError(f"{where}: {key!r} must be a number >= {minimum:g}, got {value!r}")
    return float(value)


def _names(raw: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PlanError(f"{where}: {key!r} must be a list of non-empty strings, got {value!r}")
    return tuple(value)


def parse_plan(data: Any, script: Path) -> Plan:
    """A plan from its JSON form, refused with the offending step and field named."""
    if not isinstance(data, dict):
        raise PlanError("the plan must be a JSON object")
    margin_raw = data.get("margin")
    if not isinstance(margin_raw, dict):
        raise PlanError("'margin' must be an object with 'ratio' and 'min_s'")
    margin = Margin(_number(margin_raw, "ratio", "margin"), _number(margin_raw, "min_s", "margin"))
    cores = int(_number(data, "cores", "plan", minimum=1))
    total = _number(data, "total_budget_s", "plan", minimum=1)
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise PlanError("'steps' must be a non-empty list")
    steps: list[Step] = []
    known = {"name", "budget_s", "cpu", "needs", "junit", "why"}
    for i, raw in enumerate(raw_steps):
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
            raise PlanError(f"steps[{i}]: each step needs a non-empty 'name'")
        where = f"step {raw['name']!r}"
        unknown = sorted(set(raw) - known)
        if unknown:
            raise PlanError(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}")
        cpu = raw.get("cpu", 1)
        if isinstance(cpu, bool) or not isinstance(cpu, int) or not 0 <= cpu <= cores:
            raise PlanError(f"{where}: 'cpu' must be an integer from 0 to {cores}, got {cpu!r}")
        steps.append(
            Step(
                name=raw["name"],
                budget_s=_number(raw, "budget_s", where, minimum=1),
                cpu=cpu,
                needs=_names(raw, "needs", where),
                junit=_names(raw, "junit", where),
                why=str(raw.get("why", "")),
            )
        )
    names = [s.name for s in steps]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PlanError(f"step names must be unique: {dupes}")
    for step in steps:
        for need in step.needs:
            if need not in names:
                raise PlanError(f"step {step.name!r} needs {need!r}, which is not a step")
            if names.index(need) > names.index(step.name):
                raise PlanError(
                    f"step {step.name!r} needs {need!r}, listed after it: list steps in an "
                    "order that runs (this also rules out cycles)"
                )
    return Plan(tuple(steps), margin, total, cores, script)


def load_plan(path: Path) -> Plan:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PlanError(f"cannot read the plan {path}: {exc}") from exc
    return parse_plan(data, path.parent / "steps.sh")


def select(plan: Plan, only: Sequence[str]) -> Plan:
    """The named steps and everything they need (for a local run of part of CI)."""
    if not only:
        return plan
    wanted: set[str] = set()
    todo = list(only)
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend(plan.step(name).needs)
    return Plan(
        tuple(s for s in plan.steps if s.name in wanted),
        plan.margin,
        plan.total_budget_s,
        plan.cores,
        plan.script,
    )


# --- running ---------------------------------------------------------------------------------


@dataclass
class StepRun:
    step: Step
    allowed_s: float
    status: str = "pending"  # pending | running | passed | failed | skipped
    rc: int | None = None
    started: float = 0.0  # seconds since the run began
    ended: float = 0.0
    note: str = ""
    log: str = ""
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def seconds(self) -> float:
        return round(self.ended - self.started, 1) if self.status not in ("pending",) else 0.0

    @property
    def over_budget(self) -> bool:
        return self.status in ("passed", "failed") and self.seconds > self.allowed_s


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Runner:
    def __init__(self, plan: Plan, out: Path, env: dict[str, str] | None = None) -> None:
        self.plan = plan
        self.out = out
        self.logs = out / "logs"
        self.env = {**os.environ, **(env or {}), "CI_ARTIFACTS": str(out)}
        self.runs = {s.name: StepRun(s, plan.margin.allowance(s.budget_s)) for s in plan.steps}
        self.t0 = time.monotonic()
        self.wall0 = time.time()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        print(f"[ci {self.now():6.0f}s] {text}", flush=True)

    def busy_cores(self) -> int:
        return sum(r.step.cpu for r in self.runs.values() if r.status == "running")

    def _start(self, run: StepRun) -> None:
        run.log = str(self.logs / f"{run.step.name}.log")
        handle = open(run.log, "wb")  # noqa: SIM115  (closed when the step ends)
        run.proc = subprocess.Popen(
            ["bash", str(self.plan.script), run.step.name],
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )
        handle.close()
        run.status, run.started = "running", self.now()
        others = [r.step.name for r in self.runs.values() if r.status == "running" and r is not run]
        alongside = f", alongside {', '.join(others)}" if others else ""
        budget = f"budget {run.step.budget_s:.0f} s"
        self.say(f"start {run.step.name} (cpu {run.step.cpu}, {budget}{alongside})")

    def _stop(self, run: StepRun) -> None:
        assert run.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.proc.pid, signal.SIGTERM)
        try:
            run.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait()

    def _finish(self, run: StepRun, rc: int) -> None:
        run.rc, run.ended = rc, self.now()
        run.status = "passed" if rc == 0 else "failed"
        if run.over_budget:
            run.note = (
                f"over budget: {run.seconds:.0f} s > {run.allowed_s:.0f} s allowed "
                f"(budget {run.step.budget_s:.0f} s + margin)"
            )
        verdict = run.status.upper() if run.status == "failed" else "ok"
        self.say(
            f"end {run.step.name}: {verdict} in {run.seconds:.0f} s "
            f"(budget {run.step.budget_s:.0f} s, allowed {run.allowed_s:.0f} s)"
            + (f" -- {run.note}" if run.note else "")
        )
        tail = _tail(Path(run.log), TAIL_FAILED if rc else TAIL_OK)
        if tail:
            print(tail, flush=True)

    def _skip_blocked(self) -> None:
        for run in self.runs.values():
            if run.status != "pending":
                continue
            broken = [n for n in run.step.needs if self.runs[n].status in ("failed", "skipped")]
            if broken:
                run.status, run.note = "skipped", f"not run: it needs {', '.join(broken)}"
                self.say(f"skip {run.step.name}: {run.note}")

    def run(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        while True:
            self._skip_blocked()
            for run in self.runs.values():
                if run.status != "pending":
                    continue
                if any(self.runs[n].status != "passed" for n in run.step.needs):
                    continue
                busy = self.busy_cores()
                # A step wider than the machine still runs, alone.
                if busy and busy + run.step.cpu > self.plan.cores:
                    continue
                self._start(run)
            running = [r for r in self.runs.values() if r.status == "running"]
            if not running:
                break
            time.sleep(POLL_S)
            for run in running:
                assert run.proc is not None
                rc = run.proc.poll()
                if rc is None and self.now() - run.started > HARD_STOP_FACTOR * run.allowed_s:
                    self.say(
                        f"stopping {run.step.name}: still running at {HARD_STOP_FACTOR:g} x its "
                        f"allowance ({run.allowed_s:.0f} s)"
                    )
                    self._stop(run)
                    rc = 124
                if rc is not None:
                    self._finish(run, rc)


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestTime:
    step: str
    id: str
    seconds: float
    outcome: str  # passed | failed | skipped


def junit_tests(
    step: str, patterns: Sequence[str], since: float = 0.0, root: Path = REPO
) -> list[TestTime]:
    """Every test case of the step's JUnit files (pytest's --junitxml) written at or after
    ``since`` (a file an earlier run left in the tree is not this run's)."""
    found: list[TestTime] = []
    for pattern in patterns:
        for name in sorted(glob.glob(str(root / pattern), recursive=True)):
            if os.path.getmtime(name) < since:
                continue
            try:
                tree = ET.parse(name)
            except (OSError, ET.ParseError):
                continue
            for case in tree.iter("testcase"):
                outcome = "passed"
                if case.find("failure") is not None or case.find("error") is not None:
                    outcome = "failed"
                elif case.find("skipped") is not None:
                    outcome = "skipped"
                ident = f"{case.get('classname', '')}::{case.get('name', '')}"
                found.append(TestTime(step, ident, float(case.get("time") or 0.0), outcome))
    return found


def verdict(runner: Runner) -> list[str]:
    """Why the run fails (empty when it passes)."""
    reasons = []
    for run in runner.runs.values():
        if run.status == "failed":
            reasons.append(f"step {run.step.name} failed (exit {run.rc})")
        elif run.status == "skipped":
            reasons.append(f"step {run.step.name} {run.note}")
        if run.over_budget:
            reasons.append(f"step {run.step.name} is {run.note}")
    total = runner.now()
    if total > runner.plan.total_budget_s:
        reasons.append(
            f"the run took {total:.0f} s, over the total budget of "
            f"{runner.plan.total_budget_s:.0f} s"
        )
    return reasons


def write_times(runner: Runner, tests: list[TestTime], reasons: list[str]) -> Path:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()
    data = {
        "commit": commit or None,
        "cores": runner.plan.cores,
        "total_s": round(runner.now(), 1),
        "total_budget_s": runner.plan.total_budget_s,
        "margin": asdict(runner.plan.margin),
        "verdict": "passed" if not reasons else "failed",
        "reasons": reasons,
        "steps": [
            {
                "name": r.step.name,
                "status": r.status,
                "exit": r.rc,
                "started_s": round(r.started, 1),
                "ended_s": round(r.ended, 1),
                "seconds": r.seconds,
                "budget_s": r.step.budget_s,
                "allowed_s": r.allowed_s,
                "cpu": r.step.cpu,
                "note": r.note,
                "tests": sum(1 for t in tests if t.step == r.step.name),
            }
            for r in runner.runs.values()
        ],
        "tests": [asdict(t) for t in sorted(tests, key=lambda t: -t.seconds)],
    }
    path = runner.out / "ci-times.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def print_summary(runner: Runner, tests: list[TestTime], reasons: list[str]) -> None:
    print("\nstep                 status    seconds  budget  allowed  cpu  window", flush=True)
    for r in runner.runs.values():
        flag = "  OVER" if r.over_budget else ""
        print(
            f"{r.step.name:<20} {r.status:<8} {r.seconds:8.0f} {r.step.budget_s:7.0f} "
            f"{r.allowed_s:8.0f} {r.step.cpu:4d}  {r.started:.0f}-{r.ended:.0f}{flag}"
        )
    print(f"total {runner.now():.0f} s of {runner.plan.total_budget_s:.0f} s")
    if tests:
        print("\nslowest tests:")
        for t in sorted(tests, key=lambda t: -t.seconds)[:15]:
            print(f"  {t.seconds:7.1f} s  [{t.step}] {t.id}")
    for reason in reasons:
        print(f"CI FAILED: {reason}")
    counts = {k: sum(1 for t in tests if t.outcome == k) for k in ("passed", "failed", "skipped")}
    print(f"ci: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")


def record(plan_path: Path, times_path: Path) -> list[str]:
    """Rewrite the plan's budgets from a ci-times.json; returns the changed lines."""
    data = json.loads(plan_path.read_text())
    times = {s["name"]: s for s in json.loads(times_path.read_text())["steps"]}
    changes = []
    for raw in data["steps"]:
        got = times.get(raw["name"])
        if got is None or got["status"] != "passed":
            continue
        budget = max(10, math.ceil(got["seconds"] / 10.0) * 10)
        if budget != raw["budget_s"]:
            changes.append(f"{raw['name']}: {raw['budget_s']} -> {budget} s")
            raw["budget_s"] = budget
    plan_path.write_text(json.dumps(data, indent=1) + "\n")
    return changes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", type=Path, default=DEFAULT_PLAN)
    parser.add_argument("--only", nargs="+", default=[], metavar="STEP")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--record", type=Path, metavar="CI_TIMES_JSON")
    args = parser.parse_args(argv)
    try:
        plan = load_plan(args.plan)
        if args.record:
            for line in record(args.plan, args.record):
                print(line)
            return 0
        plan = select(plan, args.only)
    except PlanError as exc:
        print(f"ci: bad plan: {exc}", file=sys.stderr)
        return EXIT_BAD_PLAN
    runner = Runner(plan, args.out.resolve())
    runner.run()
    tests = [t for s in plan.steps for t in junit_tests(s.name, s.junit, runner.wall0)]
    reasons = verdict(runner)
    path = write_times(runner, tests, reasons)
    print(f"\ntimes: {path}")
    print_summary(runner, tests, reasons)
    return 1 if reasons else 0


if __name__ == "__main__":
    raise SystemExit(main())
