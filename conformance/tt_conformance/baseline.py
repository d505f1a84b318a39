"""Hardware baselines: promote a run to the baseline of its model and device, find the baseline
a run is gated against, gate a run against it (``--tt-gate``, ``tt-conformance summary --gate``).

``promote`` copies a report to ``<baselines>/<model>/<device>/baseline.json`` and writes (or
extends) ``expectations.json`` next to it. A baseline decides what later gates accept (a check
failing in it is "still failing" later, never a regression), so it refuses: an aborted run, a run
that did not complete (pytest exit status other than 0 or 1, no check run), a run with failing,
expected-failing or flaky checks the expectations do not cover, and a run that started before
the baseline it would replace (``allow_older`` overrides). With ``write_todo_entries`` the
uncovered checks get entries whose reasons are placeholders (``TODO: ...``); the gate refuses the
file, naming the entries, until a person has written why each check fails on that model and
device (Mesa's deqp-runner model: the failures file is checked in as the next baseline,
reviewed). TODO entries the promoted run does not need (written for the baseline it replaces,
e.g. a newer one replaced with ``allow_older``) are removed and listed.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tt_conformance.committed import NotCommitted, head_file
from tt_conformance.expectations import (
    EXPECTATIONS_KIND,
    EXPECTATIONS_SCHEMA_VERSION,
    PLACEHOLDER_PREFIX,
    Expectations,
    ExpectationsError,
    load_expectations,
)
from tt_conformance.formats.escape import one_line
from tt_conformance.formats.text import (
    JudgedAgainst,
    content_digest,
    expectations_digest,
    render_gate,
)
from tt_conformance.gate import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_REGRESSION,
    GateInputError,
    compare,
)
from tt_conformance.identity import DEFAULT_AXES
from tt_conformance.matrix import column_dir
from tt_conformance.rederive import require_consistent
from tt_conformance.report import (
    FAILING,
    CheckResult,
    Report,
    ReportError,
    load_report,
)
from tt_conformance.selection import derive_coverage
from tt_conformance.writers import atomic_write_text

__all__ = [
    "BASELINE_NAME",
    "EXPECTATIONS_NAME",
    "PromoteError",
    "Promoted",
    "RunGate",
    "baseline_dir",
    "baseline_dir_of",
    "committed_gate_inputs",
    "find_baseline",
    "gate_run",
    "placeholder_reason",
    "promote",
    "refuse_gate_baseline",
    "same_selection",
]

BASELINE_NAME = "baseline.json"
EXPECTATIONS_NAME = "expectations.json"


class PromoteError(Exception):
    """The run cannot be promoted; the message names the file and the problem."""


@dataclass(frozen=True)
class Promoted:
    baseline: Path
    expectations: Path
    added: tuple[str, ...]  # check ids given a placeholder entry by this promotion
    replaced_run: str | None  # run id of the baseline this one replaced
    # Placeholder (TODO) entries of the replaced baseline this run does not need: removed, so a
    # stale TODO neither blocks the gate nor excuses a later failure of that check.
    dropped: tuple[str, ...] = ()


def baseline_dir(baselines_dir: Path, model: str, device: str, lanes: int = 1) -> Path:
    """<baselines>/<model>/<device>; a lane-DP run (lanes > 1) has its own baseline,
    <device>-lanes<N> (as reports/baselines/<model>/emulated-GALAXY-lanes4), like its own matrix
    column."""
    return column_dir(baselines_dir, model, device, lanes)


def baseline_dir_of(baselines_dir: Path, report: Report) -> Path:
    return baseline_dir(baselines_dir, report.model, report.device, report.server.lanes)


def find_baseline(baselines_dir: Path, report: Report) -> Path | None:
    path = baseline_dir_of(baselines_dir, report) / BASELINE_NAME
    return path if path.is_file() else None


def committed_gate_inputs(baselines_dir: Path, report: Report) -> JudgedAgainst:
    """What a gate OK of ``report`` must have judged it against to title its summary: the
    baseline `find_baseline` gives it under ``baselines_dir`` and the expectations next to it,
    both as committed at HEAD of the harness's repository (ReportError / ExpectationsError when
    they do not load: no OK is read against them). A directory outside that repository,
    untracked files or ones edited since their commit are no committed inputs: anyone can
    write a baseline failing what their run fails, and expectations excusing it."""
    path = baseline_dir_of(baselines_dir, report) / BASELINE_NAME
    exp_path = path.parent / EXPECTATIONS_NAME
    try:
        held = head_file(path), head_file(exp_path)
    except NotCommitted as exc:
        return JudgedAgainst(None, expectations_digest(None), uncommitted=str(exc))
    if held[0] is None:
        return JudgedAgainst(None, expectations_digest(None))
    # head_file has just found the work tree's files to be HEAD's bytes.
    expectations = load_expectations(exp_path) if held[1] is not None else None
    return JudgedAgainst(content_digest(load_report(path)), expectations_digest(expectations))


def placeholder_reason(outcome: str, device: str) -> str:
    return f"{PLACEHOLDER_PREFIX}: why is this check {outcome} on {device}? (write it, then gate)"


def promote(
    report_path: Path,
    baselines_dir: Path,
    *,
    write_todo_entries: bool = False,
    allow_older: bool = False,
    allow_partial: bool = False,
) -> Promoted:
    """Make the run the baseline of its model/device; PromoteError says why it cannot be.
    ``allow_partial``: only for a baseline whose gate always runs the same selection (the
    emulated lanes run, ``-m lanes``), where the unselected checks are no one's baseline."""
    # A report whose stored verdicts disagree with its checks is never a baseline (rederive.py).
    report = require_consistent(load_report(report_path), str(report_path))
    _refuse_incomplete(report, report_path, allow_partial)
    target = baseline_dir_of(baselines_dir, report)
    baseline = target / BASELINE_NAME
    replaced_report = load_report(baseline) if baseline.is_file() else None
    if replaced_report is not None and not allow_older:
        _refuse_older(report, report_path, replaced_report, baseline)
    exp_path = target / EXPECTATIONS_NAME
    existing = load_expectations(exp_path) if exp_path.is_file() else None
    uncovered = _uncovered(report, existing or Expectations())
    if uncovered and not write_todo_entries:
        listed = ", ".join(f"{c.id} ({c.outcome})" for _, c in uncovered)
        raise PromoteError(
            f"{report_path}: {len(uncovered)} failing, expected-failing or flaky check(s) not "
            f"covered by the "
            f"expectations {exp_path}: {listed}; a baseline failing them lets every later run "
            "fail them too. Write their entries with the reason, or pass --write-todo-entries "
            "for TODO placeholders (the gate refuses them until each reason is written)"
        )
    data, added = _skeleton(report, existing, exp_path, uncovered)
    dropped = _drop_stale_placeholders(data, report)
    target.mkdir(parents=True, exist_ok=True)
    # The report first: a crash before the expectations leaves a baseline the gate can still
    # read with the old expectations (or none).
    tmp = baseline.with_suffix(".json.tmp")
    shutil.copyfile(report_path, tmp)
    tmp.replace(baseline)
    atomic_write_text(exp_path, json.dumps(data, indent=2) + "\n")
    replaced = replaced_report.run_id if replaced_report is not None else None
    return Promoted(baseline, exp_path, tuple(added), replaced, dropped)


# pytest's exit codes (pytest.ExitCode) other than OK and TESTS_FAILED: the run did not finish.
_UNFINISHED_EXIT = {
    2: "interrupted",
    3: "internal error",
    4: "usage error",
    5: "no tests collected",
}


def same_selection(baseline: Report, candidate: Report) -> bool:
    """Both runs asked pytest for the same checks (-k, -m, arguments): a partial baseline
    (the emulated lanes run, ``-m lanes``) gates only a run of that same selection."""
    b, c = baseline.coverage, candidate.coverage
    if b is None or c is None:
        return False
    return (b.keyword, b.markers, b.args) == (c.keyword, c.markers, c.args)


def refuse_gate_baseline(
    report: Report, path: Path, expectations: Expectations, allow_partial: bool = False
) -> None:
    """The gate's --baseline meets promote's bar: a file that was never promoted (aborted,
    partial, failing checks no expectation explains) would let every later run through."""
    require_consistent(report, str(path))
    _refuse_incomplete(report, path, allow_partial)
    uncovered = _uncovered(report, expectations)
    if uncovered:
        listed = ", ".join(f"{c.id} ({c.outcome})" for _, c in uncovered[:5])
        raise PromoteError(
            f"{path}: field 'checks': {len(uncovered)} failing, expected-failing or flaky "
            f"check(s) the gate's expectations do not cover: {listed}; promote would refuse "
            "this baseline, and a baseline failing them passes every run failing them too"
        )


def _refuse_incomplete(report: Report, path: Path, allow_partial: bool = False) -> None:
    """A baseline stands for the whole suite: a run that stopped early would let every check it
    never ran (or never passed) through every later gate."""
    if report.aborted is not None:
        gone = report.aborted
        during = f" during {gone.during}" if gone.during else ""
        missed = "" if gone.not_run is None else f"; {gone.not_run} selected check(s) never ran"
        raise PromoteError(
            f"{path}: field 'aborted': the run was aborted{during} ({gone.reason}){missed}; an "
            "aborted run cannot be a baseline"
        )
    if not report.checks:
        raise PromoteError(f"{path}: the run has no checks; it cannot be a baseline")
    if report.collection_errors:
        first = report.collection_errors[0].nodeid
        raise PromoteError(
            f"{path}: the run has {len(report.collection_errors)} collection error(s) "
            f"(first: {first}); fix them before promoting"
        )
    if report.exit_status not in (0, 1):
        what = _UNFINISHED_EXIT.get(report.exit_status, "not a finished run")
        raise PromoteError(
            f"{path}: field 'exit_status': pytest exited {report.exit_status} ({what}): the run "
            "did not complete; it cannot be a baseline"
        )
    counts = report.counts
    if counts["total"] == counts["skip"]:
        raise PromoteError(
            f"{path}: field 'totals': all {counts['total']} checks were skipped, none ran; it "
            "cannot be a baseline"
        )
    coverage = derive_coverage(report)  # from the checks, never the stored "full"
    if (coverage is None or not coverage.full) and not allow_partial:
        why = "coverage not recorded" if coverage is None else "; ".join(coverage.partial_because)
        raise PromoteError(
            f"{path}: field 'coverage': a partial run ({why}) cannot be a baseline: every check "
            "it did not select would pass every later gate"
        )


def _refuse_older(report: Report, path: Path, current: Report, current_path: Path) -> None:
    """Replacing a baseline with an older run would gate new runs against old behaviour."""
    ours, theirs = _started(report, path), _started(current, current_path)
    if ours < theirs:
        raise PromoteError(
            f"{path}: field 'started_at': the run started {report.started_at} ({report.run_id}), "
            f"before the baseline it would replace, {current.started_at} ({current.run_id} in "
            f"{current_path}); pass --allow-older to replace it anyway"
        )


def _started(report: Report, path: Path) -> datetime:
    try:
        # fromisoformat reads a trailing "Z" only from Python 3.11.
        moment = datetime.fromisoformat(report.started_at.replace("Z", "+00:00"))
    except ValueError:
        raise PromoteError(
            f"{path}: field 'started_at': {report.started_at!r} is not an ISO 8601 time; "
            "pass --allow-older to skip the age check"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _uncovered(report: Report, covered: Expectations) -> list[tuple[str, CheckResult]]:
    """(expectations key, check) of each failing, expected-failing or flaky check no entry
    covers: in a baseline a failure is never a regression later, so each needs its reason."""
    out: list[tuple[str, CheckResult]] = []
    for check in sorted(report.checks, key=lambda c: c.id):
        if check.outcome in FAILING or check.outcome == "xfail":
            key = "expected_failures"
            known = covered.expected_failure(check.id) or covered.skip_entry(check.id)
        elif check.outcome == "flaky":
            key = "flaky"
            known = covered.flaky_entry(check.id)
        else:
            continue
        if known is None:
            out.append((key, check))
    return out


def _drop_stale_placeholders(data: dict[str, object], report: Report) -> tuple[str, ...]:
    """Remove TODO entries (expected failures, flaky) whose check the promoted run does not
    fail, expect to fail or retry: they were written for the baseline being replaced."""
    needed = {
        "expected_failures": {c.id for c in report.checks if c.outcome in FAILING | {"xfail"}},
        "flaky": {c.id for c in report.checks if c.outcome == "flaky"},
    }
    dropped: list[str] = []
    for key, ids in needed.items():
        entries = data.get(key)
        if not isinstance(entries, list):
            continue
        kept = []
        for entry in entries:
            reason = str(entry.get("reason", "")) if isinstance(entry, dict) else ""
            check = entry.get("check") if isinstance(entry, dict) else None
            if reason.upper().startswith(PLACEHOLDER_PREFIX) and check not in ids:
                dropped.append(str(check))
            else:
                kept.append(entry)
        data[key] = kept
    return tuple(dropped)


def _skeleton(
    report: Report,
    existing: Expectations | None,
    exp_path: Path,
    uncovered: list[tuple[str, CheckResult]],
) -> tuple[dict[str, object], list[str]]:
    if existing is not None:
        data = json.loads(exp_path.read_text(encoding="utf-8"))
    else:
        data = {
            "schema_version": EXPECTATIONS_SCHEMA_VERSION,
            "kind": EXPECTATIONS_KIND,
            "model": report.model,
            "device": report.device,
            "expected_failures": [],
            "flaky": [],
        }
    added: list[str] = []
    for key, check in uncovered:
        entry: dict[str, str] = {
            "check": check.id,
            "reason": placeholder_reason(check.outcome, report.device),
        }
        if check.reason:
            entry["observed"] = check.reason[:300]
        data.setdefault(key, []).append(entry)
        added.append(check.id)
    return data, added


@dataclass(frozen=True)
class RunGate:
    """The suite's own gate (``--tt-gate``): against the baseline of the run's model/device."""

    exit_code: int
    text: str
    baseline: Path | None


def gate_run(candidate: Report, baselines_dir: Path, axes: frozenset[str] = frozenset()) -> RunGate:
    """Gate a finished run against its stored baseline; ``axes`` are identity axes under test
    besides the default ones (tt-metal, ttnn)."""
    path = find_baseline(baselines_dir, candidate)
    if path is None and candidate.aborted is not None:
        return RunGate(
            EXIT_REGRESSION,
            one_line(
                f"the run was ABORTED ({candidate.aborted.reason}): failing the gate (and there "
                f"is no baseline for {candidate.model} on {candidate.device} under "
                f"{baselines_dir})"
            ),
            None,
        )
    if path is None:
        return RunGate(
            EXIT_OK,
            one_line(
                f"no baseline for {candidate.model} on {candidate.device} under {baselines_dir}: "
                "not gated (tt-conformance baseline promote REPORT makes one)"
            ),
            None,
        )
    exp_path = path.parent / EXPECTATIONS_NAME
    try:
        baseline = load_report(path)
        expectations = load_expectations(exp_path) if exp_path.is_file() else None
        partial_ok = same_selection(baseline, candidate)
        refuse_gate_baseline(baseline, path, expectations or Expectations(), partial_ok)
        result = compare(baseline, candidate, expectations, axes=DEFAULT_AXES | axes)
    except (ReportError, ExpectationsError, GateInputError, PromoteError) as exc:
        return RunGate(EXIT_BAD_INPUT, one_line(f"bad input, failing closed: {exc}"), path)
    # The verdict stays the first line (formats.text.gate_headline reads it there).
    verdict, _, rest = render_gate(result, baseline, candidate, expectations).partition("\n")
    return RunGate(result.exit_code, f"{verdict}\nbaseline: {path}\n{rest}", path)
