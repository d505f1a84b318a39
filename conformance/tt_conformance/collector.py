"""Fold pytest's per-phase test reports into one CheckResult per check (controller side).

Under pytest-xdist the controller never sees items, only the reports the workers forward, so
everything the report needs travels in ``report.user_properties`` (which xdist serialises):
the stable check id, the concern, who declared an expected failure and the perf figures
recorded through `tt_record_perf`. Flaky checks are re-run by pytest-rerunfailures: its reports
carry the attempt (``rerun``) and mark a failed attempt that is run again as outcome "rerun".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, cast

from tt_conformance.report import (
    AccuracyResult,
    CheckResult,
    CollectionError,
    ExpectedBy,
    Outcome,
    PerfFigure,
    iso_utc,
)

__all__ = [
    "PROP_ACCURACY",
    "PROP_CELL",
    "PROP_CHECK",
    "PROP_CONCERN",
    "PROP_EXPECTED_BY",
    "PROP_PERF",
    "ResultCollector",
    "crash_message",
    "fallback_check_id",
]

PROP_CHECK = "tt_check"
PROP_CONCERN = "tt_concern"
PROP_EXPECTED_BY = "tt_expected_by"
PROP_PERF = "tt_perf"
PROP_ACCURACY = "tt_accuracy"
PROP_CELL = "tt_matrix_cell"  # [concern, cell label]: a situation-matrix cell that ran

_DETAILS_LIMIT = 4000


@dataclass
class _Pending:
    nodeid: str
    phases: dict[str, Any] = field(default_factory=dict)
    props: dict[str, Any] = field(default_factory=dict)
    perf: dict[str, dict[str, Any]] = field(default_factory=dict)
    accuracy: list[dict[str, Any]] = field(default_factory=list)
    cells: list[tuple[str, str]] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    attempts: int = 1


def fallback_check_id(nodeid: str) -> str:
    # pytest-xdist --dist loadgroup appends "@<group>" to node ids; it is not part of identity.
    head, sep, tail = nodeid.rpartition("@")
    plain_group = bool(tail) and all(ch.isalnum() or ch in "_-." for ch in tail)
    balanced = head.count("[") == head.count("]")
    return head if sep and "::" in head and plain_group and balanced else nodeid


class ResultCollector:
    """Accumulates TestReport / CollectReport objects (duck-typed) and builds the results."""

    def __init__(self) -> None:
        self._tests: dict[str, _Pending] = {}
        self._order: list[str] = []
        self.collection_errors: list[CollectionError] = []

    def add_test_report(self, report: Any) -> None:
        pending = self._tests.get(report.nodeid)
        if pending is None:
            pending = self._tests[report.nodeid] = _Pending(report.nodeid)
            self._order.append(report.nodeid)
        # pytest-rerunfailures: every report carries `rerun` (earlier attempts of the item);
        # a failed phase that will be run again has the outcome "rerun".
        attempt = int(getattr(report, "rerun", 0) or 0) + 1
        if attempt > pending.attempts:
            # A new attempt: only the last one's phases and figures count.
            pending.attempts = attempt
            pending.phases.clear()
            pending.perf.clear()
            pending.accuracy.clear()
            pending.cells.clear()
        if report.outcome == "rerun":
            pending.retried.append(f"attempt {attempt}: {crash_message(report)}")
            return
        pending.phases[report.when] = report
        for key, value in getattr(report, "user_properties", None) or ():
            if key == PROP_PERF:
                figure = json.loads(value)
                pending.perf[figure["name"]] = figure
            elif key == PROP_ACCURACY:
                result = json.loads(value)
                if result not in pending.accuracy:  # every phase report repeats the props
                    pending.accuracy.append(result)
            elif key == PROP_CELL:
                concern, cell = json.loads(value)
                if (concern, cell) not in pending.cells:  # every phase report repeats the props
                    pending.cells.append((concern, cell))
            elif key.startswith("tt_"):
                pending.props[key] = value

    def add_collect_report(self, report: Any) -> None:
        if report.failed:
            text = str(getattr(report, "longreprtext", "") or report.longrepr)
            self.collection_errors.append(
                CollectionError(nodeid=report.nodeid, message=_tail(text))
            )

    @property
    def executed(self) -> bool:
        """Whether any check ran (a --collect-only run, or one that selected nothing, did not)."""
        return bool(self._tests)

    def accuracy(self) -> list[AccuracyResult]:
        out: list[AccuracyResult] = []
        for nodeid in self._order:
            pending = self._tests[nodeid]
            check = str(pending.props.get(PROP_CHECK) or fallback_check_id(nodeid))
            out += [AccuracyResult(**{**a, "check": check}) for a in pending.accuracy]
        return out

    def cells(self) -> dict[str, tuple[str, ...]] | None:
        """The situation-matrix cells that ran, per concern (None: no check recorded one)."""
        found: dict[str, set[str]] = {}
        for nodeid in self._order:
            for concern, cell in self._tests[nodeid].cells:
                found.setdefault(concern, set()).add(cell)
        return {k: tuple(sorted(v)) for k, v in sorted(found.items())} or None

    def build(self) -> tuple[list[CheckResult], dict[str, PerfFigure], list[str]]:
        checks: list[CheckResult] = []
        perf: dict[str, PerfFigure] = {}
        warnings: list[str] = []
        seen_ids: dict[str, str] = {}
        for nodeid in self._order:
            pending = self._tests[nodeid]
            result = _fold(pending)
            if result.id in seen_ids:
                warnings.append(
                    f"check id {result.id!r} reported twice ({seen_ids[result.id]} and {nodeid});"
                    " keeping the first"
                )
                continue
            seen_ids[result.id] = nodeid
            checks.append(result)
            for name, fig in pending.perf.items():
                if name in perf:
                    warnings.append(
                        f"perf figure {name!r} recorded by both {perf[name].check} and {result.id};"
                        " keeping the first"
                    )
                    continue
                value = fig.get("value")
                if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                    # A zero or broken measurement is no figure (the report refuses one): the
                    # run says so instead of publishing it or losing every other result.
                    warnings.append(f"perf figure {name!r} of {result.id} not recorded: {value}")
                    continue
                perf[name] = PerfFigure(**{**fig, "name": name, "check": result.id})
        checks.sort(key=lambda c: c.id)
        return checks, perf, warnings


def _fold(p: _Pending) -> CheckResult:
    reports = [p.phases[w] for w in ("setup", "call", "teardown") if w in p.phases]
    # Phases pytest does not name (xdist's crash report uses "???") still count.
    reports += [r for w, r in p.phases.items() if w not in ("setup", "call", "teardown")]
    duration = sum(float(getattr(r, "duration", 0.0) or 0.0) for r in reports)
    attempts = p.attempts
    outcome: Outcome
    # The harness writes the property; CheckResult validates its value.
    expected_by: ExpectedBy | None = None
    details = ""
    failed = [r for r in reports if r.failed]
    skipped = [r for r in reports if r.skipped]
    xfailed = [r for r in skipped if getattr(r, "wasxfail", None) is not None]
    xpassed = [r for r in reports if r.passed and getattr(r, "wasxfail", None) is not None]
    if failed:
        first = failed[0]
        outcome = "fail" if first.when in ("call", "???") else "error"
        message = crash_message(first)
        reason = message if outcome == "fail" else f"error in {first.when}: {message}"
        details = _tail(str(getattr(first, "longreprtext", "") or ""))
    elif xfailed:
        outcome = "xfail"
        reason = str(xfailed[0].wasxfail)
        expected_by = cast("ExpectedBy", p.props.get(PROP_EXPECTED_BY, "marker"))
    elif skipped:
        outcome = "skip"
        reason = _skip_reason(skipped[0])
    elif xpassed:
        outcome = "xpass"
        reason = f"expected failure passed: {xpassed[0].wasxfail}"
        expected_by = cast("ExpectedBy", p.props.get(PROP_EXPECTED_BY, "marker"))
    elif attempts > 1:
        outcome = "flaky"
        reason = f"passed on attempt {attempts}"
        if p.retried:
            reason += f"; earlier: {p.retried[0]}"
    else:
        outcome = "pass"
        reason = ""
    if outcome in ("fail", "error") and attempts > 1:
        reason = f"failed all {attempts} attempts: {reason}"
    starts = [getattr(r, "start", None) for r in reports]
    stops = [getattr(r, "stop", None) for r in reports]
    started = min((t for t in starts if isinstance(t, (int, float))), default=None)
    stopped = max((t for t in stops if isinstance(t, (int, float))), default=None)
    return CheckResult(
        id=str(p.props.get(PROP_CHECK) or fallback_check_id(p.nodeid)),
        nodeid=p.nodeid,
        concern=str(p.props.get(PROP_CONCERN, "")),
        outcome=outcome,
        reason=reason,
        duration_s=duration,
        attempts=attempts,
        expected_by=expected_by,
        details=details,
        started_at=None if started is None else iso_utc(started),
        finished_at=None if stopped is None else iso_utc(stopped),
    )


def crash_message(report: Any) -> str:
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    message = getattr(crash, "message", None)
    if message:
        return " ".join(str(message).split())[:500]
    lines = [
        ln.strip() for ln in str(getattr(report, "longreprtext", "")).splitlines() if ln.strip()
    ]
    return lines[-1][:500] if lines else "failed"


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3:
        text = str(longrepr[2])
    else:
        text = str(getattr(report, "longreprtext", "") or longrepr or "")
    return text.removeprefix("Skipped: ").strip()


def _tail(text: str) -> str:
    return text if len(text) <= _DETAILS_LIMIT else "…" + text[-_DETAILS_LIMIT:]
