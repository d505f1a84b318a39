"""Is the candidate an independent run of the server? The gate's self-compare floor.

A run gated against itself always passes, so the gate refuses a candidate that is the
baseline's own run under another name. Run ids and dates are cheap to edit; what a copy cannot
fake cheaply is what a real run measures afresh every time:

- every check's duration (microsecond resolution): two runs never time most of their checks
  identically, nor all of them in one ratio (a copy with its durations scaled);
- the serving figures: a mean or median over many timed requests is never reproduced to the
  last bit by another run, nor are all its measured latencies moved by one factor;
- the run's own clock: the checks' recorded start and end lie inside the run's window, no
  timed check took longer than the whole run, nor longer than its own start-to-end.

What none of this sees: a copy whose every number is redrawn on its own within run-to-run
noise, its check times made to agree with their durations and its derived figures recomputed
from the redrawn ones. A report keeps statistics, not the samples behind them, so nothing in it
tells a redrawn figure from a measured one; only an attestation of who ran it could.

`copy_evidence` names what matched (None: independent as far as the evidence goes);
`clock_problems` names where one report's timings contradict its own window.
"""

from __future__ import annotations

import math
import statistics
from datetime import timedelta

from tt_conformance.report import Report, parse_utc

__all__ = [
    "CLOCK_SLACK_S",
    "MIN_EVIDENCE",
    "MIN_TIMED_S",
    "clock_problems",
    "copy_evidence",
]

# Durations shorter than this are mostly the harness's own overhead (a skip at setup) and can
# coincide between honest runs at microsecond resolution; longer ones include server round trips.
MIN_TIMED_S = 0.01
# Fewer matching measurements than this is no evidence either way.
MIN_EVIDENCE = 5
# Stored durations are rounded to the microsecond: a scaled copy keeps its ratio to this.
_ROUNDING_S = 2e-6
_RATIO_TOLERANCE = 1e-4
# Latencies measured per request or gap; the other figures are rates computed from them.
_MEASURED_TIMES = frozenset({"ttft", "tpot", "itl", "e2el"})
# Run and check times are stored to the second.
CLOCK_SLACK_S = 1.0
# Durations come from a monotonic clock, times from the wall clock, which NTP may slew by up to
# 500 ppm; twice that is allowed between them.
_SLEW = 1e-3


def copy_evidence(baseline: Report, candidate: Report) -> str | None:
    """What shows the candidate to be a copy of the baseline, or None."""
    found = [e for e in (_durations(baseline, candidate), _figures(baseline, candidate)) if e]
    return "; ".join(found) or None


def _durations(baseline: Report, candidate: Report) -> str | None:
    before = {c.id: c.duration_s for c in baseline.checks if c.duration_s >= MIN_TIMED_S}
    pairs = [
        (before[c.id], c.duration_s)
        for c in candidate.checks
        if c.id in before and c.duration_s >= MIN_TIMED_S
    ]
    if len(pairs) < MIN_EVIDENCE:
        return None
    same = sum(1 for b, c in pairs if b == c)
    if 2 * same >= len(pairs):
        return f"{same} of {len(pairs)} timed checks have the baseline's exact duration"
    ratio = statistics.median(c / b for b, c in pairs)
    scaled = sum(1 for b, c in pairs if abs(c - ratio * b) <= _ROUNDING_S + _RATIO_TOLERANCE * c)
    if 2 * scaled >= len(pairs):
        return (
            f"{scaled} of {len(pairs)} timed checks have the baseline's duration times "
            f"{ratio:.6g} (a copy with its timings scaled)"
        )
    return None


def _figures(baseline: Report, candidate: Report) -> str | None:
    # Only figures computed from several measured samples: a count or a single value may repeat.
    shared = [
        (fig.value, candidate.perf[name].value)
        for name, fig in baseline.perf.items()
        if name in candidate.perf and (fig.samples or 0) >= 2
    ]

    def enough(n: int) -> bool:
        return n >= MIN_EVIDENCE or (n >= 3 and 2 * n >= len(shared))

    same = sum(1 for b, c in shared if b == c)
    if enough(same):
        return f"{same} of {len(shared)} serving figures equal the baseline's to the last digit"
    # Scaled: the measured times all moved by one factor. Rates are left out: an honest run
    # moves tokens/s/user and TT's t/s with the TPOT they are computed from.
    timed = [
        (fig.value, candidate.perf[name].value)
        for name, fig in baseline.perf.items()
        if name in candidate.perf and (fig.samples or 0) >= 2 and fig.metric in _MEASURED_TIMES
    ]
    factors = [c / b for b, c in timed if b != c]
    common = statistics.median(factors) if factors else 1.0
    scaled = sum(1 for f in factors if math.isclose(f, common, rel_tol=1e-9))
    if scaled >= MIN_EVIDENCE and 2 * scaled >= len(timed):
        return (
            f"{scaled} of {len(timed)} measured latencies are the baseline's times "
            f"{common:.6g} (a copy with its figures scaled)"
        )
    return None


def clock_problems(report: Report) -> list[str]:
    """Where the report's check timings contradict its own start and end (a copy whose run
    dates were edited, its checks' left as they were)."""
    try:
        return _clock_problems(report)
    except OverflowError:  # refused on reading (report.py); a hand-built Report may hold one
        return [
            f"field 'started_at'/'finished_at': {report.started_at} .. {report.finished_at} is "
            "out of range"
        ]


def _clock_problems(report: Report) -> list[str]:
    try:
        start, end = parse_utc(report.started_at), parse_utc(report.finished_at)
    except ValueError as exc:  # validated on reading; a hand-built Report may still hold one
        return [f"field 'started_at'/'finished_at': {exc}"]
    slack = timedelta(seconds=CLOCK_SLACK_S)
    out: list[str] = []
    if end < start:
        out.append(f"field 'finished_at': {report.finished_at} is before {report.started_at}")
    outside = [
        c.id
        for c in report.checks
        for stamp in (c.started_at, c.finished_at)
        if stamp is not None and not start - slack <= parse_utc(stamp) <= end + slack
    ]
    if outside:
        first = sorted(set(outside))
        out.append(
            f"field 'checks[].started_at'/'finished_at': {len(first)} check(s) timed outside the "
            f"run's window {report.started_at} .. {report.finished_at}, e.g. {first[0]}"
        )
    # Checks may run in parallel (xdist), but none can take longer than the whole run.
    wall = (end - start).total_seconds()
    longer = [c for c in report.checks if c.started_at and c.duration_s > wall + 2 * CLOCK_SLACK_S]
    if longer:
        out.append(
            f"field 'checks[].duration_s': {len(longer)} check(s) took longer than the run's "
            f"{wall:.0f} s, e.g. {longer[0].id} ({longer[0].duration_s:.1f} s)"
        )
    # A check's duration is the sum of its pytest phases, each inside the check's own start and
    # end (stored truncated to the second): it never exceeds that span by more than the slack
    # and what the wall clock's slewing can take off the span (_SLEW).
    overrun = [
        c
        for c in report.checks
        if c.started_at
        and c.finished_at
        and c.duration_s * (1 - _SLEW) > _span_s(c.started_at, c.finished_at) + 2 * CLOCK_SLACK_S
    ]
    if overrun:
        c = overrun[0]
        out.append(
            f"field 'checks[].duration_s': {len(overrun)} check(s) took longer than their own "
            f"start-to-end, e.g. {c.id} ({c.duration_s:.1f} s from {c.started_at} to "
            f"{c.finished_at})"
        )
    return out


def _span_s(start: str, end: str) -> float:
    return (parse_utc(end) - parse_utc(start)).total_seconds()
