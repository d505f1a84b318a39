"""The mutation suite: serve each model-side mutant and check that the conformance suite and its
gate kill it (`tox -e mutants`).

    python tools/run_mutants.py [--mutant NAME ...] [--ci] [--out DIR] [--workers 2]
                                [--timeout S] [--list] [-- EXTRA PYTEST ARGS]

For each mutant of ``tests/mutants/catalog.py`` (all by default; ``--ci`` the subset ``.ci/run``
serves; ``--mutant`` names some) it runs ``tools/run_emu_conformance.py`` (the driver of
``tox -e emu``: the same server options, suite and gate) with
``TT_MODEL_CLASS_OVERRIDES=<bundled arch>=<mutant class>``, writing the reports under
``--out/<mutant>/`` and gating them against the committed baselines. The plugin is unchanged.
Extra pytest arguments (after ``--``) narrow the suite for a quick look (``-- -k logprobs``);
the kill rate of record is the full suite's.

A mutant is
- ``killed`` when the run fails: the checks that fail here and pass in the baseline are named,
  or the gate found a regression (exit 1) beyond the checks (accuracy, a gated figure);
- ``survived`` when the suite and the gate pass: a fault no check sees;
- ``invalid`` when the mutant did not serve: no report was written, or the report's server
  provenance (``model_class``, read from the server's ``tt_plugin_info``) names another class;
  or when the run failed without being judged (a usage error, the gate refusing its input with
  exit 2, a suite timeout) and no check that passed in the baseline failed. A broken mutant, or
  an unjudged run, proves nothing either way.
Prints one line per mutant and the kill rate, writes ``--out/summary.json``; exits 1 unless every
mutant was killed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.mutants.catalog import MUTANTS, Mutant, by_name  # noqa: E402
from tt_conformance.history import run_files  # noqa: E402

sys.path.insert(0, str(REPO / "tools"))
from run_emu_conformance import DEVICE  # noqa: E402  (where the driver files the run)

MODEL = "tt-reference-llama"
FAILED = ("fail", "error")


@dataclass(frozen=True)
class Verdict:
    mutant: str
    concern: str
    status: str  # killed | survived | invalid
    killed_by: tuple[str, ...]  # checks failing here that pass in the baseline
    exit_status: int
    seconds: float
    note: str = ""


def read_run(report: Path) -> tuple[dict[str, str], str | None]:
    """A report's check outcomes by id, and the model class its server said it serves (the
    report's server provenance, from ``tt_plugin_info``)."""
    data = json.loads(report.read_text())
    served = (data.get("server") or {}).get("model_class")
    outcomes = {c["id"]: c["outcome"] for c in data.get("checks", [])}
    return outcomes, served if isinstance(served, str) else None


def failing_checks(report: Path, baseline: Path) -> list[str]:
    """The checks failing in ``report`` that do not fail in the baseline (all failing ones when
    there is no baseline)."""
    got = read_run(report)[0]
    before = read_run(baseline)[0] if baseline.is_file() else {}
    return sorted(c for c, o in got.items() if o in FAILED and before.get(c) not in FAILED)


def judge(mutant: Mutant, rc: int, report: Path | None, baseline: Path, seconds: float) -> Verdict:
    """Classify one run from its exit status and report."""

    def verdict(status: str, killed_by: Sequence[str] = (), note: str = "") -> Verdict:
        return Verdict(
            mutant.name, mutant.concern, status, tuple(killed_by), rc, round(seconds, 1), note
        )

    if report is None:
        return verdict("invalid", note=f"no report written (exit {rc})")
    served = read_run(report)[1]
    if served != mutant.dotted:
        return verdict("invalid", note=f"the server served {served}, not {mutant.dotted}")
    failing = failing_checks(report, baseline)
    if rc == 0:
        return verdict("survived", note="suite and gate passed")
    if failing:
        return verdict("killed", failing)
    if rc == 1:  # the gate's regression code: an accuracy or gated-figure regression
        return verdict("killed", note="the gate found a regression with no new failing check")
    # A usage error, a gate refusing its input (exit 2) or a suite timeout judged nothing.
    return verdict("invalid", note=f"exit {rc} with no new failing check: the run was not judged")


def run_one(
    mutant: Mutant, out: Path, workers: int, timeout: float, extra: Sequence[str] = ()
) -> Verdict:
    where = out / mutant.name
    where.mkdir(parents=True, exist_ok=True)
    log_path = where / "server.log"
    env = dict(os.environ)
    env["TT_MODEL_CLASS_OVERRIDES"] = mutant.override
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    cmd = [
        sys.executable, str(REPO / "tools" / "run_emu_conformance.py"),
        "--reports", str(where / "reports"),
        "--baselines", str(REPO / "reports" / "baselines"),
        "--server-log", str(log_path),
        "--workers", str(workers),
        "--timeout", str(timeout),
    ]  # fmt: skip
    if extra:
        cmd += ["--", *extra]
    started = time.monotonic()
    with (where / "driver.log").open("w") as driver_log:
        rc = subprocess.call(cmd, cwd=REPO, env=env, stdout=driver_log, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    runs = run_files(where / "reports" / MODEL / DEVICE)
    report = runs[-1] if runs else None
    baseline = REPO / "reports" / "baselines" / MODEL / DEVICE / "baseline.json"
    return judge(mutant, rc, report, baseline, seconds)


def line(v: Verdict) -> str:
    what = ", ".join(c.split("::", 1)[-1] for c in v.killed_by[:3])
    if len(v.killed_by) > 3:
        what += f" (+{len(v.killed_by) - 3} more)"
    return f"{v.status:8} {v.mutant:28} {v.concern:16} {v.seconds:6.0f} s  {what or v.note}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mutant", action="append", default=[], help="only this mutant")
    parser.add_argument("--ci", action="store_true", help="only the subset .ci/run serves")
    parser.add_argument("--out", type=Path, default=REPO / ".mutants", help="output directory")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers")
    parser.add_argument("--timeout", type=float, default=1200.0, help="per-mutant suite timeout")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- extra pytest arguments")
    args = parser.parse_args(argv)
    extra = list(args.pytest_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    try:
        chosen = by_name(args.mutant) if args.mutant else MUTANTS
    except ValueError as exc:
        parser.error(f"--mutant: {exc}")
    if args.ci:
        chosen = tuple(m for m in chosen if m.ci)
    if args.list:
        for m in chosen:
            print(f"{m.name:28} {m.concern:16} {'ci' if m.ci else ''}")
        return 0
    verdicts: list[Verdict] = []
    for m in chosen:
        print(f"[mutants] serving {m.name} ({m.concern})", flush=True)
        verdicts.append(run_one(m, args.out, args.workers, args.timeout, extra))
        print(line(verdicts[-1]), flush=True)
    killed = sum(v.status == "killed" for v in verdicts)
    print(f"[mutants] kill rate {killed}/{len(verdicts)}")
    for v in verdicts:
        print(line(v))
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"killed": killed, "total": len(verdicts), "mutants": [asdict(v) for v in verdicts]}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if killed == len(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
