"""The CI driver behind `.ci/run`: runs the steps of `.ci/plan.json` on a schedule, times each
one, and fails naming the step that ran past its recorded budget.

    python3 tools/ci_run.py [--plan .ci/plan.json] [--only STEP ...] [--out DIR]
    python3 tools/ci_run.py --record DIR/ci-times.json [--plan .ci/plan.json]

The plan (tools/ci_plan.py reads and checks it) lists each step (`bash .ci/steps.sh STEP` runs
it, in the tree that holds the plan), the steps it needs, how many cores it keeps busy (`cpu`: 0
for a step that mostly waits on the network or a disk) and its budget in seconds. The driver starts
a step once its needs have passed and its cores are free, so downloads and installs overlap the
CPU-bound test steps; it never oversubscribes the cores, because on a 2-core machine two CPU-bound
steps at once take as long as one after the other and make both noisy.

Each step's output goes to DIR/logs/STEP.log (default DIR: reports/artifacts/ci; cleared at the
start); a finished step prints its tail, a failed one its last 300 lines. At the end the driver
writes DIR/ci-times.json (every step's window and seconds, and every test's time from the JUnit
files the steps name) and prints the step table and the slowest tests.

What fails the run (exit 1), each named on a ``CI FAILED:`` line:
- a step that exits non-zero, or never ran (a need failed);
- a step that declares JUnit files but wrote none during its own run, ran no test, or has a
  failing test in them (a step's exit status alone can hide both);
- the budget check: a step whose time exceeds ``budget_s + max(margin.ratio * budget_s,
  margin.min_s)``, even when its own command passed, and a run past ``total_budget_s``; a step
  still running at twice its allowance is stopped (SIGTERM to its process group, SIGKILL 20 s
  later), so a hang is named long before CI's hard limit;
- a driver error (printed as such, with every step's process group stopped).
A step's leftover processes are killed when it ends and noted. ``--record`` rewrites each step's
``budget_s`` from the ci-times.json of a whole passing run (rounded up to 10 s): run it after a
deliberate change of a step's cost and commit the plan with that change.

Exit status: 0 when every step passed within its budget, 1 otherwise, 2 for a bad plan, times
file or arguments. The last line is the tests' total across the steps' JUnit files
("ci: N passed, N failed, N skipped").
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ci_plan import Plan, PlanError, Step, load_plan, record, select

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PLAN = REPO / ".ci" / "plan.json"
DEFAULT_OUT = REPO / "reports" / "artifacts" / "ci"
POLL_S = 0.25
TAIL_OK = 12
TAIL_FAILED = 300
TAIL_BYTES = 256 * 1024
LINE_CHARS = 2000
HARD_STOP_FACTOR = 2.0
KILL_AFTER_S = 20.0
EXIT_BAD_INPUT = 2


class Stopped(Exception):
    """The driver itself was told to stop (SIGTERM / SIGINT)."""


@dataclass(frozen=True)
class TestTime:
    step: str
    id: str
    seconds: float
    outcome: str  # passed | failed | skipped


@dataclass
class StepRun:
    step: Step
    allowed_s: float
    status: str = "pending"  # pending | running | passed | failed | skipped
    rc: int | None = None
    started: float = 0.0  # seconds since the run began
    ended: float = 0.0
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    tests: list[TestTime] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    term_at: float | None = None  # when SIGTERM went to a hung step's group

    @property
    def seconds(self) -> float:
        return 0.0 if self.status == "pending" else round(self.ended - self.started, 1)

    @property
    def over_budget(self) -> bool:
        return self.status in ("passed", "failed") and self.seconds > self.allowed_s


def _tail(path: Path, lines: int) -> str:
    """The last LINES lines of a log, reading at most its last TAIL_BYTES, each line capped."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - TAIL_BYTES))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    kept = text.splitlines()[-lines:]
    return "\n".join(ln if len(ln) <= LINE_CHARS else ln[:LINE_CHARS] + " [...]" for ln in kept)


def _signal_group(pid: int, sig: int) -> bool:
    """Send SIG to the process group PID leads; False when none of it is left."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _group_members(pgid: int) -> list[str]:
    """The live processes of group PGID as 'pid:name', read from /proc (the note names what a
    step left behind, so the next run says which test forgot to stop it)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # comm is in parentheses and may hold spaces: the fields after the last ')' are fixed.
        name = text[text.find("(") + 1 : text.rfind(")")]
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            found.append(f"{stat.parent.name}:{name}")
    return sorted(found)


def _seconds(raw: str | None) -> float:
    try:
        value = float(raw or 0.0)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) and value >= 0 else 0.0


def read_junit(step: str, path: Path) -> list[TestTime]:
    """The test cases of one JUnit file (pytest's --junitxml); raises ET.ParseError / OSError."""
    found = []
    for case in ET.parse(path).iter("testcase"):
        outcome = "passed"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        ident = f"{case.get('classname', '')}::{case.get('name', '')}"
        found.append(TestTime(step, ident, _seconds(case.get("time")), outcome))
    return found


class Runner:
    def __init__(self, plan: Plan, out: Path) -> None:
        self.plan = plan
        self.out = out
        self.logs = out / "logs"
        self.env = {**os.environ, "CI_ARTIFACTS": str(out)}
        self.runs = {s.name: StepRun(s, plan.margin.allowance(s.budget_s)) for s in plan.steps}
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.claimed: set[Path] = set()  # JUnit files already counted for a step
        self.driver_error = ""

    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        print(f"[ci {self.now():6.0f}s] {text}", flush=True)

    def running(self) -> list[StepRun]:
        return [r for r in self.runs.values() if r.status == "running"]

    def junit_files(self, step: Step) -> list[Path]:
        files: set[Path] = set()
        for pattern in step.junit:
            base = pattern if os.path.isabs(pattern) else str(self.plan.repo / pattern)
            files.update(Path(p).resolve() for p in glob.glob(base, recursive=True))
        return sorted(files)

    def _start(self, run: StepRun) -> None:
        for stale in self.junit_files(run.step):  # only this run's files may count
            stale.unlink(missing_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{run.step.name}.log").open("wb") as handle:
            run.proc = subprocess.Popen(
                ["bash", str(self.plan.script), run.step.name],
                cwd=self.plan.repo,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        others = [r.step.name for r in self.running()]
        run.status, run.started = "running", self.now()
        alongside = f", alongside {', '.join(others)}" if others else ""
        budget = f"budget {run.step.budget_s:.0f} s"
        self.say(f"start {run.step.name} (cpu {run.step.cpu}, {budget}{alongside})")

    def _watch(self, run: StepRun) -> None:
        """Stop a step running past twice its allowance, without blocking the others."""
        assert run.proc is not None
        elapsed = self.now() - run.started
        if run.term_at is None and elapsed > HARD_STOP_FACTOR * run.allowed_s:
            self.say(
                f"stopping {run.step.name}: still running at {HARD_STOP_FACTOR:g} x its "
                f"allowance ({run.allowed_s:.0f} s)"
            )
            run.failures.append(f"stopped at {HARD_STOP_FACTOR:g} x its allowance")
            run.term_at = self.now()
            _signal_group(run.proc.pid, signal.SIGTERM)
        elif run.term_at is not None and self.now() - run.term_at > KILL_AFTER_S:
            _signal_group(run.proc.pid, signal.SIGKILL)

    def _finish(self, run: StepRun, rc: int) -> None:
        assert run.proc is not None
        run.rc, run.ended = rc, self.now()
        left = _group_members(run.proc.pid)
        # killpg also succeeds on members that already exited but are not yet reaped (zombies
        # the init process collects a moment later): only live members are worth a note.
        if _signal_group(run.proc.pid, signal.SIGKILL) and left:
            named = ", ".join(left[:8])
            run.notes.append(f"left processes running when it ended (killed): {named}")
        if rc != 0:
            run.failures.insert(0, f"exit {rc}")
        elif run.step.junit:
            self._judge_junit(run)
        run.status = "failed" if run.failures else "passed"
        if run.over_budget:
            run.failures.append(
                f"over budget: {run.seconds:.0f} s > {run.allowed_s:.0f} s allowed "
                f"(budget {run.step.budget_s:.0f} s + margin)"
            )
        verdict = "FAILED" if run.failures else "ok"
        said = "; ".join([*run.failures, *run.notes])
        self.say(
            f"end {run.step.name}: {verdict} in {run.seconds:.0f} s "
            f"(budget {run.step.budget_s:.0f} s, allowed {run.allowed_s:.0f} s)"
            + (f" -- {said}" if said else "")
        )
        tail = _tail(self.logs / f"{run.step.name}.log", TAIL_FAILED if run.failures else TAIL_OK)
        if tail:
            print(tail, flush=True)

    def _judge_junit(self, run: StepRun) -> None:
        """A step declaring JUnit files must have written them during its run, with tests in
        them, none failing."""
        lo = self.wall0 + run.started - 1.0
        hi = self.wall0 + run.ended + 1.0
        files = [
            p
            for p in self.junit_files(run.step)
            if p not in self.claimed and lo <= p.stat().st_mtime <= hi
        ]
        if not files:
            run.failures.append(f"wrote no JUnit file ({', '.join(run.step.junit)})")
            return
        for path in files:
            self.claimed.add(path)
            try:
                run.tests.extend(read_junit(run.step.name, path))
            except (OSError, ET.ParseError) as exc:
                run.failures.append(f"unreadable JUnit file {path}: {exc}")
        failed = [t.id for t in run.tests if t.outcome == "failed"]
        if failed:
            run.failures.append(f"{len(failed)} test(s) failed, first: {failed[0]}")
        elif not any(t.outcome == "passed" for t in run.tests):
            run.failures.append("ran no test (no passing test case in its JUnit files)")

    def _skip_blocked(self) -> None:
        for run in self.runs.values():
            if run.status != "pending":
                continue
            broken = [n for n in run.step.needs if self.runs[n].status in ("failed", "skipped")]
            if broken:
                run.status = "skipped"
                run.failures.append(f"not run: it needs {', '.join(broken)}")
                self.say(f"skip {run.step.name}: it needs {', '.join(broken)}")

    def _loop(self) -> None:
        while True:
            self._skip_blocked()
            for run in self.runs.values():
                if run.status != "pending":
                    continue
                if any(self.runs[n].status != "passed" for n in run.step.needs):
                    continue
                busy = sum(r.step.cpu for r in self.running())
                # A step wider than the machine still runs, alone.
                if self.running() and busy + run.step.cpu > self.plan.cores:
                    continue
                self._start(run)
            running = self.running()
            if not running:
                return
            time.sleep(POLL_S)
            for run in running:
                assert run.proc is not None
                rc = run.proc.poll()
                if rc is None:
                    self._watch(run)
                else:
                    self._finish(run, rc)

    def run(self) -> None:
        shutil.rmtree(self.logs, ignore_errors=True)  # an earlier run's logs are not this run's
        self.logs.mkdir(parents=True, exist_ok=True)
        try:
            with _stop_on_signals():
                self._loop()
        except Exception as exc:  # named in the verdict, never a bare traceback
            self.driver_error = f"{type(exc).__name__}: {exc}"
        finally:
            for run in self.running():
                assert run.proc is not None
                _signal_group(run.proc.pid, signal.SIGKILL)
                run.proc.wait()
                run.status, run.ended = "failed", self.now()
                run.failures.append("stopped: the driver ended while it ran")
        for run in self.runs.values():
            if run.status == "pending":
                run.failures.append("never ran")


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(f"the driver got signal {signum}")

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


# --- results ---------------------------------------------------------------------------------


def verdict(runner: Runner) -> list[str]:
    """Why the run fails (empty when it passes)."""
    reasons = []
    if runner.driver_error:
        reasons.append(f"driver error: {runner.driver_error}")
    for run in runner.runs.values():
        reasons.extend(f"step {run.step.name}: {failure}" for failure in run.failures)
    total = runner.now()
    if total > runner.plan.total_budget_s:
        reasons.append(
            f"the run took {total:.0f} s, over the total budget of "
            f"{runner.plan.total_budget_s:.0f} s"
        )
    return reasons


def all_tests(runner: Runner) -> list[TestTime]:
    return [t for r in runner.runs.values() for t in r.tests]


def write_times(runner: Runner, reasons: list[str]) -> Path:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        cwd=runner.plan.repo,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    tests = all_tests(runner)
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
                "failures": r.failures,
                "notes": r.notes,
                "tests": len(r.tests),
            }
            for r in runner.runs.values()
        ],
        "tests": [asdict(t) for t in sorted(tests, key=lambda t: -t.seconds)],
    }
    runner.out.mkdir(parents=True, exist_ok=True)
    path = runner.out / "ci-times.json"
    path.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    return path


def print_summary(runner: Runner, reasons: list[str]) -> None:
    tests = all_tests(runner)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", type=Path, default=DEFAULT_PLAN)
    parser.add_argument("--only", nargs="+", default=[], metavar="STEP")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--record", type=Path, metavar="CI_TIMES_JSON")
    args = parser.parse_args(argv)
    try:
        if args.record:
            if args.only:
                raise PlanError("--record takes a whole run's times; --only does not apply")
            for line in record(args.plan, args.record):
                print(line)
            return 0
        plan = select(load_plan(args.plan), args.only)
    except PlanError as exc:
        print(f"ci: bad input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    runner = Runner(plan, args.out.resolve())
    runner.run()
    reasons = verdict(runner)
    path = write_times(runner, reasons)
    print(f"\ntimes: {path}")
    print_summary(runner, reasons)
    return 1 if reasons else 0


if __name__ == "__main__":
    raise SystemExit(main())
