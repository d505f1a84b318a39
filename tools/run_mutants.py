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
- ``killed`` when a check that passes in the baseline fails here (named), on a run whose suite
  finished (pytest exit 0 or 1), that the gate as the shipped class accepts as input (same
  vLLM, weights, device, options) and that was not aborted; or when the gate finds a
  regression beyond the checks (accuracy, a gated figure, lost coverage) on a run of record:
  full coverage, not aborted, every check passing in the baseline passing here (a narrowed,
  partial or aborted run, or a check skipped or flaky here, makes a gate regression no
  sighting of the fault);
- ``survived`` when the suite and the gate pass on a run of record: a fault no check sees. The
  driver's own gate refuses every mutant run (``model_class`` is a fixed axis: another class is
  another baseline), so a run whose suite finished is gated here as the shipped class it
  changes one method of (``gate_as_shipped``: the server's ``model_class`` restated to the
  baseline's, coverage and tier re-derived from the checks);
- ``invalid`` otherwise: this run wrote no report (an earlier run's report in the directory is
  never read), the report's server provenance (``model_class``, read from the server's
  ``tt_plugin_info``) names another class, the suite did not finish (a timeout, a usage error),
  the report or the baseline cannot be read, the gate refused its input, or the run is not of
  record and no check failed. A broken mutant, or an unjudged run, proves nothing either way.
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
from tt_conformance.report import Report, load_report  # noqa: E402
from tt_conformance.selection import derive_coverage  # noqa: E402
from tt_conformance.tiers import derive_tier  # noqa: E402
from tt_conformance.writers import write_report  # noqa: E402

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


def not_of_record(report: Path, baseline: Path) -> str | None:
    """Why a run cannot say a mutant survived or was seen by the gate alone: aborted, not
    full coverage (a narrowed or partial suite), or a check passing in the baseline that did
    not run cleanly here (skipped, flaky, missing): a gate regression there is no sighting of
    the fault. None for a run of record."""
    data = json.loads(report.read_text())
    if data.get("aborted"):
        return "the run was aborted"
    coverage = data.get("coverage")
    if not isinstance(coverage, dict):
        return "the run recorded no coverage"
    # Coverage as the shipped class: the harness reads a class name holding "Block" as a
    # block-output model's (selection._BLOCK_CLASS), which a mutant's name may hold (rt46d B1).
    if coverage.get("full") is not True and not _full_as_shipped(report, baseline):
        return "the run is not full coverage (narrowed or partial)"
    got = read_run(report)[0]
    before = read_run(baseline)[0]
    unclean = sorted(c for c, o in before.items() if o == "pass" and got.get(c) != "pass")
    unclean = [c for c in unclean if got.get(c) not in FAILED]
    if unclean:
        return f"{len(unclean)} check(s) passing in the baseline did not pass here: {unclean[0]}"
    return None


def _full_as_shipped(report: Path, baseline: Path) -> bool:
    try:
        coverage = as_shipped(report, baseline).coverage
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return False
    return coverage is not None and coverage.full is True


def failing_checks(report: Path, baseline: Path) -> list[str]:
    """The checks failing in ``report`` that pass in the baseline (a check the baseline lacks
    or skipped may fail on the shipped class too: no sighting of the fault; rt46d)."""
    got = read_run(report)[0]
    before = read_run(baseline)[0]
    return sorted(c for c, o in got.items() if o in FAILED and before.get(c) == "pass")


def suite_exit(driver_log: str) -> int | None:
    """pytest's exit status as the driver printed it, None when the suite did not finish."""
    marker = "(pytest exit "
    for line in reversed(driver_log.splitlines()):
        if line.startswith("[emu] suite finished") and marker in line:
            code = line.rsplit(marker, 1)[1].split(")", 1)[0]
            return int(code) if code.isdigit() else None
    return None


def gate_as_shipped(report: Path, baseline: Path, where: Path) -> int:
    """The gate's exit status for the run restated as the shipped class: the mutant is that class
    with one method changed, and the gate (rightly) never compares two classes. Only the class
    name and what the checks derive from it (coverage, tier) are restated; the restated report
    is written under ``where/as-shipped`` for review."""
    restated = write_report(as_shipped(report, baseline), where / "as-shipped").json
    cmd = [sys.executable, "-m", "tt_conformance.cli.gate", "--baseline", str(baseline)]
    cmd += ["--candidate", str(restated), "--axis", "plugin"]
    expectations = baseline.parent / "expectations.json"
    if expectations.is_file():
        cmd += ["--expectations", str(expectations)]
    # The gate's output holds non-ASCII; under an ASCII locale it would crash with exit 1, the
    # code of a regression (rt46d G01). A traceback is never a verdict.
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONUTF8": "1"}
    log_path = where / "gate-as-shipped.log"
    with log_path.open("w", encoding="utf-8") as log:
        code = subprocess.call(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if "Traceback (most recent call last)" in log_path.read_text(
        encoding="utf-8", errors="replace"
    ):
        return 2
    return code


def as_shipped(report: Path, baseline: Path) -> Report:
    """The run restated as the shipped class: its class name and what the checks derive from
    it (coverage, tier)."""
    shipped = load_report(baseline).server.model_class
    run = load_report(report)
    run = run.replace(server=run.server.model_copy(update={"model_class": shipped}))
    run = run.replace(coverage=derive_coverage(run))
    return run.replace(tier=derive_tier(run))


def judge(
    mutant: Mutant,
    rc: int,
    report: Path | None,
    baseline: Path,
    seconds: float,
    gate: int | None = None,
) -> Verdict:
    """Classify one run from its exit status and report; ``gate`` is the exit status of the
    gate as the shipped class (``gate_as_shipped``) when the suite finished (pytest exit 0 or
    1), None otherwise: a run whose suite did not finish is judged by nothing it left."""

    def verdict(status: str, killed_by: Sequence[str] = (), note: str = "") -> Verdict:
        return Verdict(
            mutant.name, mutant.concern, status, tuple(killed_by), rc, round(seconds, 1), note
        )

    if report is None:
        return verdict("invalid", note=f"no report written by this run (exit {rc})")
    if gate is None:
        return verdict(
            "invalid", note=f"exit {rc}: the suite did not finish, the run was not judged"
        )
    try:
        served = read_run(report)[1]
        failing = failing_checks(report, baseline)
        unjudged = not_of_record(report, baseline)
    except (OSError, ValueError, TypeError, AttributeError, KeyError) as exc:
        return verdict("invalid", note=f"unreadable report or baseline: {exc!r}")
    if served != mutant.dotted:
        return verdict("invalid", note=f"the server served {served}, not {mutant.dotted}")
    if gate not in (0, 1):  # the gate refused the run (another vLLM, weights, device, options)
        return verdict(
            "invalid", note=f"exit {rc}, gate as the shipped class exit {gate}: not judged"
        )
    aborted = unjudged == "the run was aborted"
    if failing and not aborted:
        return verdict("killed", failing)
    if unjudged is not None:
        return verdict("invalid", note=f"not a run of record: {unjudged}")
    if gate == 0:
        return verdict("survived", note="suite and gate (as the shipped class) passed")
    # The gate's regression code on a full, clean run: accuracy, a gated figure, lost coverage.
    return verdict("killed", note="the gate found a regression with no new failing check")


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
    # Only a report this run writes is its evidence: an earlier run's stays in the directory.
    earlier = set(run_files(where / "reports" / MODEL / DEVICE))
    started = time.monotonic()
    with (where / "driver.log").open("w") as driver_log:
        rc = subprocess.call(cmd, cwd=REPO, env=env, stdout=driver_log, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    runs = [r for r in run_files(where / "reports" / MODEL / DEVICE) if r not in earlier]
    report = runs[-1] if runs else None
    baseline = REPO / "reports" / "baselines" / MODEL / DEVICE / "baseline.json"
    gate = None
    finished = suite_exit((where / "driver.log").read_text(errors="replace"))
    if report is not None and finished in (0, 1) and baseline.is_file():
        try:
            gate = gate_as_shipped(report, baseline, where)
        except (OSError, ValueError, TypeError, AttributeError, KeyError) as exc:  # malformed
            print(f"[mutants] {mutant.name}: report not gated: {exc}", flush=True)
            gate = 2
    return judge(mutant, rc, report, baseline, seconds, gate)


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
