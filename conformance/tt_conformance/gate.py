"""Release gate: compare a candidate report with the stored baseline (data only).

`compare` returns a `GateResult`; `formats.text.render_gate` words it, `baseline.gate_run` gates
a run against its stored baseline, and the command is `tt-conformance-gate` (`cli.gate`).

Exit codes
    0  no regression (improvements, expected failures and flaky passes may be listed)
    1  regression: a check that passed in the baseline fails, errors or is skipped now; a
       baseline check is missing from the candidate; it is an expected failure (xfail) now
       although the expectations do not list it; the candidate has collection errors; a gated
       perf figure is worse than its tolerance (or missing); an accuracy score is lower than
       chance explains (paired.py: McNemar's exact test on the items both runs scored, Fisher's
       on the totals where a run stored none, p < ACCURACY_ALPHA), or lower on a task too small
       to call any drop chance, or a task the baseline scored is missing; the candidate ran
       fewer situation-matrix cells for a concern, or did not create a situation the baseline
       created (situation_record.coverage_regressions); or the candidate run was aborted (the
       server under test died or turned unhealthy mid-run)
    2  bad input: a report or the expectations file is missing or malformed, a report is
       inconsistent (its stored tier, coverage or verdicts disagree with its own checks and
       figures: rederive.py), the baseline has
       no checks, the two runs' identities differ outside the axes under test (identity.py:
       tt-metal and ttnn by default; model, weights, model class, device, mesh, configuration
       profile, TT options, launch options and environment (`identity.launch_options`) and the
       other versions must match unless named by --allow-difference), or a
       perf figure changed unit or direction. The gate fails closed: it never answers "ok" when
       it could not compare.
       Floors no option lowers: a run gated against itself (the same run id, or the same start
       and end; or a copy under new dates: the baseline's check timings or serving figures
       repeated, or checks timed outside the run's own window: independence.py), a difference
       on an axis under test that one run did not record (a "bump" to or from "unknown" tests
       nothing), a model, weights, model class, device or mesh difference (never under
       test, never allowed: another model or machine is another baseline), and an accuracy
       task scored on other items or another sample count (unless ``accuracy`` is allowed).
    An OK whose runs do not establish the same weights (recorded by neither, or the same
    unpinned name on both: `identity.weights_pinned`) says so on its verdict line,
    "OK (no regression; same weights not proven)".

Expectations default to ``expectations.json`` next to the baseline when that file exists.
A check the expectations list as an expected failure is not a regression when it fails; one
listed as flaky is not a regression when it passed on a retry (outcome "flaky"), but it is when
it failed every attempt. Only the gate's expectations can excuse a check that passed in the
baseline: an ``xfail`` the run got from elsewhere (a marker, other expectations) is a regression.

Serving figures of emulated (and other non-TT) runs are informational unless the gate sets a
tolerance; hardware runs are gated at HARDWARE_PERF_TOLERANCE (10 %) by default. Tolerance per
figure comes from the expectations (null = informational), else their default_perf_tolerance,
else --default-perf-tolerance, else the hardware default. A default tolerance (anything but an
entry for the figure itself) gates only robust statistics (`default_gating`: medians and
whole-wave throughput on >= GATED_MIN_SAMPLES values, a p99 on >= P99_MIN_SAMPLES); the others
are shown as informational. What a default tolerance gates is decided by the baseline's figure:
a candidate whose own figure reads ungateable (fewer samples, another statistic) is gated all the
same, and the verdict notes why. A figure the baseline flags unreliable (burst delivery, a
starved client) is not gated, only noted; a flag only the candidate carries is noted and the
figure gated (a report stores no raw samples to re-derive the flag from). Tolerances are
relative and direction-aware: for a "lower is better" figure, candidate > baseline *
(1 + tolerance) regresses; for "higher is better", candidate < baseline * (1 - tolerance) does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tt_conformance.bars import bar_check
from tt_conformance.expectations import Expectations
from tt_conformance.identity import (
    AXES,
    DEFAULT_AXES,
    LAUNCH_GROUPS,
    NEWER_AXES,
    Difference,
    differences,
    field_of,
    weights_pinned,
)
from tt_conformance.independence import clock_problems, copy_evidence
from tt_conformance.numfmt import format_number, pct
from tt_conformance.paired import (
    ACCURACY_ALPHA,
    ACCURACY_AXIS,
    AccuracyNotComparable,
    ItemSetChanged,
    compare_task,
)
from tt_conformance.rederive import inconsistencies
from tt_conformance.report import FAILING, PASSING, TIERS, AccuracyResult, PerfFigure, Report
from tt_conformance.restated import derived_source
from tt_conformance.situation_record import coverage_regressions
from tt_conformance.tiers import derive_tier, perf_is_informational

__all__ = [
    "ACCURACY_ALPHA",
    "DEFAULT_PERF_TOLERANCE",
    "EXIT_BAD_INPUT",
    "EXIT_OK",
    "EXIT_REGRESSION",
    "FIXED_AXES",
    "GATED_MIN_SAMPLES",
    "GATED_STATS",
    "HARDWARE_PERF_TOLERANCE",
    "P99_MIN_SAMPLES",
    "GateInputError",
    "GateResult",
    "PerfComparison",
    "compare",
    "default_gating",
    "derived_from",
]

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2
# Perf figures are informational unless the expectations or the CLI give a tolerance, or the
# run is on TT hardware: there a figure 10 % worse than the baseline is a regression.
DEFAULT_PERF_TOLERANCE: float | None = None
HARDWARE_PERF_TOLERANCE = 0.10
# A default tolerance gates only statistics that hold between two runs of the same server:
# medians and whole-wave throughput, on at least GATED_MIN_SAMPLES values; a p99 only from
# P99_MIN_SAMPLES values up (below, it is the slowest request or an interpolation next to it,
# and moves 12-15 % between identical runs); means follow their outliers. The rest is shown,
# not gated, unless the expectations name a tolerance for the figure itself.
GATED_STATS = frozenset({"median", "value"})
GATED_MIN_SAMPLES = 8
P99_MIN_SAMPLES = 100
# What a gate never tests nor allows: another model or machine is another baseline.
FIXED_AXES: frozenset[str] = frozenset({"model", "weights", "model_class", "device", "mesh_shape"})


class GateInputError(Exception):
    """The reports cannot be compared; the gate exits with EXIT_BAD_INPUT."""


@dataclass(frozen=True)
class PerfComparison:
    name: str
    unit: str
    better: str
    baseline: float
    candidate: float | None
    tolerance: float | None
    worse_by: float | None  # relative, > 0 means worse in the figure's direction
    verdict: str  # "ok", "regression", "improvement", "missing", "not gated"


@dataclass
class GateResult:
    regressions: list[str] = field(default_factory=list)
    improvements: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    perf: list[PerfComparison] = field(default_factory=list)
    # How the two runs' identities differ: on an axis under test, or allowed by name.
    identity: list[str] = field(default_factory=list)
    # Why "the same weights" is not established (recorded by neither run, or unpinned on
    # both): an OK then says so on its verdict line, never an unqualified OK.
    weights_unproven: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressions else EXIT_OK


def compare(
    baseline: Report,
    candidate: Report,
    expectations: Expectations | None = None,
    default_tolerance: float | None = DEFAULT_PERF_TOLERANCE,
    axes: frozenset[str] = DEFAULT_AXES,
    allowed: frozenset[str] = frozenset(),
    floors: bool = True,
) -> GateResult:
    """The gate's verdict. ``floors=False`` is for the site's compare pages, which list the
    differences of two consecutive runs whatever they are and give no verdict: no floor (self,
    fixed axes, unrecorded axes, other accuracy items) refuses them there."""
    for side, report in (("baseline", baseline), ("candidate", candidate)):
        # A report whose stored tier or coverage its own checks contradict is never gated.
        found = inconsistencies(report)
        if found:
            raise GateInputError(
                f"the {side} {report.run_id} is inconsistent (its stored verdicts disagree with "
                "its own checks and figures; regenerate it, never edit it): " + "; ".join(found)
            )
    if not baseline.checks:
        # Nothing to compare against would let any candidate through: fail closed instead.
        raise GateInputError(
            f"baseline {baseline.run_id} has no checks: it cannot gate anything (regenerate it)"
        )
    exp = expectations or Expectations()
    placeholders = exp.placeholders()
    if placeholders:
        # A skeleton from `baseline promote` excuses failures nobody has explained yet.
        names = "; ".join(f"{key}: {e.check}" for key, e in placeholders)
        raise GateInputError(
            f"expectations {exp.source or ''} still have placeholder reasons (write why, then "
            f"gate): {names}"
        )
    if floors:
        _refuse_self_compare(baseline, candidate)
    else:
        allowed = allowed | {ACCURACY_AXIS}
    result = GateResult()
    result.identity = _compare_identity(baseline, candidate, axes, allowed, floors)
    result.weights_unproven = _weights_unproven(baseline, candidate)
    if result.weights_unproven:
        result.identity.insert(0, result.weights_unproven)
    if candidate.aborted is not None:
        # An aborted run proves nothing about the checks it never ran: always a failure.
        missed = candidate.aborted.not_run
        result.regressions.append(
            f"the candidate run was ABORTED: {candidate.aborted.reason}"
            + ("" if missed is None else f"; {missed} check(s) did not run")
        )
    if default_tolerance is None and not perf_is_informational(candidate.device):
        default_tolerance = HARDWARE_PERF_TOLERANCE
    for error in candidate.collection_errors:
        result.regressions.append(
            f"collection error in {error.nodeid}: {_last_line(error.message)}"
        )
    ids = sorted({c.id for c in baseline.checks} | {c.id for c in candidate.checks})
    for check_id in ids:
        _compare_check(check_id, baseline, candidate, exp, result)
    for name, base in sorted(baseline.perf.items()):
        result.perf.append(_compare_perf(name, base, candidate, exp, default_tolerance, result))
    for name in sorted(set(candidate.perf) - set(baseline.perf)):
        fig = candidate.perf[name]
        result.notes.append(f"new perf figure {name} = {format_number(fig.value)} {fig.unit}")
    _one_cause_once(result)
    _compare_accuracy(baseline, candidate, result, allowed, floors)
    _compare_tier(baseline, candidate, result)
    # Situation coverage lost: matrix cells the baseline ran, situations it created.
    result.regressions += coverage_regressions(baseline, candidate)
    return result


def _compare_identity(
    baseline: Report,
    candidate: Report,
    axes: frozenset[str],
    allowed: frozenset[str],
    floors: bool = True,
) -> list[str]:
    """The identity lines of the verdict; GateInputError naming every difference the caller
    neither tests nor allows (a bump is judged with everything else held equal)."""
    fixed = sorted(n for n in axes | allowed if Difference(n, None, None).matches(FIXED_AXES))
    if fixed and floors:
        raise GateInputError(
            f"{', '.join(fixed)} cannot be under test or an allowed difference: another model, "
            "weights, model class, device or mesh is another baseline (gate against its own)"
        )
    found = differences(baseline, candidate)
    # A baseline written before an identity word existed lacks it: said, not held against it.
    predates = [
        d
        for d in found
        if d.axis in NEWER_AXES and d.candidate_recorded and not d.baseline_recorded
    ]
    found = [d for d in found if d not in predates]

    # Neither run recorded an axis under test ("unknown" against nothing): no bump to judge on
    # it, and the verdict says so rather than "alike".
    def unrecorded_by_both(axis: str) -> bool:
        d = Difference(axis, field_of(baseline, axis), field_of(candidate, axis))
        return not d.baseline_recorded and not d.candidate_recorded

    groups = ("tt_options", *LAUNCH_GROUPS)
    neither = sorted(a for a in axes if a in AXES and a not in groups and unrecorded_by_both(a))
    found = [d for d in found if d.baseline_recorded or d.candidate_recorded]
    unrecorded = [d for d in found if d.matches(axes) and not d.recorded]
    if unrecorded and floors:
        raise GateInputError(
            "an axis under test is not recorded by both runs, so the gate cannot tell what "
            "changed: "
            + "; ".join(str(d) for d in unrecorded)
            + ". Record it (the server's tt_plugin_info, or --tt-tt-metal-version) and re-run"
        )
    blocking = [d for d in found if not d.matches(axes | allowed)]
    if blocking:
        raise GateInputError(
            f"the runs differ outside the axes under test ({', '.join(sorted(axes))}): "
            + "; ".join(str(d) for d in blocking)
            + ". Gate like with like, name the axis under test with --axis, or accept a "
            "difference with --allow-difference NAME (the verdict records it)"
        )
    lines = [
        f"not recorded by either run: {axis} (the gate cannot tell whether it changed)"
        for axis in neither
    ]
    lines += [f"under test: {d}" for d in found if d.matches(axes)]
    lines += [f"allowed difference: {d}" for d in found if not d.matches(axes)]
    lines += [
        f"recorded by the candidate only: {d} (the baseline did not record it: written before "
        "it was recorded, or by a build without it; regenerate the baseline to compare it)"
        for d in predates
    ]
    return lines


def _weights_unproven(baseline: Report, candidate: Report) -> str | None:
    """Why two runs are not shown to serve the same checkpoint, when no difference says it.
    Weights are never under test, so no identity rule names them: a checkpoint swapped under
    the same model name, or a hub head that moved between two ``@unresolved`` runs, would
    otherwise pass as "alike"."""
    before, after = field_of(baseline, "weights"), field_of(candidate, "weights")
    d = Difference("weights", before, after)
    if not d.baseline_recorded and not d.candidate_recorded:
        return "weights not recorded on either side: cannot tell a checkpoint change"
    if before == after and not weights_pinned(before):
        return (
            f"weights unpinned on both sides ({before!r}: no commit and no digest of the files' "
            "bytes): the same name proves no same checkpoint; pin them (vllm serve --revision "
            "<commit>, or a local folder)"
        )
    return None


def _refuse_self_compare(baseline: Report, candidate: Report) -> None:
    """A run gated against itself always passes: the same run id, or a copy under another id
    (the same start, end, host, command and check durations; or, dates edited too, what a real
    re-run never reproduces: independence.py)."""

    def fingerprint(r: Report) -> tuple[object, ...] | None:
        timed = tuple((c.id, c.outcome, c.duration_s) for c in r.checks)
        return None if r.run is None else (r.started_at, r.finished_at, r.run, timed)

    for side, report in (("baseline", baseline), ("candidate", candidate)):
        clock = clock_problems(report)
        if clock:
            raise GateInputError(
                f"the {side} {report.run_id} contradicts its own run window (its dates edited, "
                "or its checks copied from another run): " + "; ".join(clock)
            )
    copied = copy_evidence(baseline, candidate)
    if baseline.run_id == candidate.run_id:
        what = f"run id {baseline.run_id}"
    elif fingerprint(baseline) is not None and fingerprint(baseline) == fingerprint(candidate):
        what = (
            f"run {baseline.run_id} renamed {candidate.run_id}: the same start, end, host, "
            "command and check durations"
        )
    elif copied is not None:
        what = f"run {baseline.run_id} copied as {candidate.run_id}: {copied}"
    else:
        return
    raise GateInputError(
        f"the candidate is the baseline's own run ({what}): a run gated against itself always "
        "passes; gate a new run"
    )


def _compare_tier(baseline: Report, candidate: Report, out: GateResult) -> None:
    # Tiers derived from each run's checks and figures, never the stored ones: a stored tier
    # removed (or never written) must not switch the rule off.
    base, cand = derive_tier(baseline), derive_tier(candidate)
    before, after = TIERS.index(base.tier), TIERS.index(cand.tier)
    if after < before:
        out.regressions.append(f"tier dropped from {base.tier} to {cand.tier}: {cand.reason}")
    elif after > before:
        out.improvements.append(f"tier rose from {base.tier} to {cand.tier}")
    # Self-asserted bars already cap the tiers above; the verdict also says whose bars they are.
    for role, report in (("baseline", baseline), ("candidate", candidate)):
        bars = bar_check(report)
        if not bars.checked:
            out.notes.append(
                f"{role}'s perf targets and accuracy bars are self-asserted: {bars.why}"
            )


def _compare_check(
    check_id: str, baseline: Report, candidate: Report, exp: Expectations, out: GateResult
) -> None:
    b = baseline.check(check_id)
    c = candidate.check(check_id)
    if c is None:
        assert b is not None
        out.regressions.append(f"{check_id}: missing from the candidate (baseline: {b.outcome})")
        return
    expected = exp.expected_failure(check_id)
    if b is None:
        note = f"{check_id}: new check, {c.outcome}"
        out.notes.append(f"{note}: {c.reason}" if c.reason else note)
        return
    transition = f"{b.outcome} -> {c.outcome}"
    if c.outcome in FAILING:
        if expected is not None:
            out.expected.append(f"{check_id}: {transition}, expected failure: {expected.reason}")
        elif b.outcome in PASSING:
            extra = " (listed as flaky, failed every attempt)" if exp.flaky_entry(check_id) else ""
            out.regressions.append(f"{check_id}: {transition}{extra}: {c.reason}")
        else:
            out.notes.append(f"{check_id}: still failing ({transition}): {c.reason}")
    elif c.outcome == "xfail":
        if b.outcome in PASSING and expected is None:
            # Only the gate's expectations may excuse a check that used to pass; an xfail from
            # a code marker or another expectations file would otherwise hide a regression.
            out.regressions.append(
                f"{check_id}: {transition}, not an expected failure in the gate's expectations: "
                f"{c.reason}"
            )
        else:
            why = "newly expected failure" if b.outcome in PASSING else "expected failure"
            out.expected.append(f"{check_id}: {transition}, {why}: {c.reason}")
    elif c.outcome == "skip":
        skip = exp.skip_entry(check_id)
        if skip is not None:
            out.notes.append(
                f"{check_id}: {transition}, skipped by the expectations: {skip.reason}"
            )
        elif b.outcome in PASSING:
            # A check that silently stops running hides whatever it used to verify.
            out.regressions.append(f"{check_id}: {transition}, no longer verified: {c.reason}")
        elif b.outcome != "skip":
            out.notes.append(f"{check_id}: {transition}: {c.reason}")
    elif c.outcome == "xpass":
        out.improvements.append(
            f"{check_id}: {transition}, expected failure now passes (update the expectations)"
        )
    elif c.outcome == "flaky":
        if b.outcome in PASSING and exp.flaky_entry(check_id) is None:
            # The harness retries only checks listed flaky: a pass that needed a retry the
            # gate's expectations do not allow is a check that failed.
            out.regressions.append(
                f"{check_id}: {transition}, not listed flaky in the gate's expectations: {c.reason}"
            )
        else:
            out.flaky.append(f"{check_id}: {c.reason}")
    elif b.outcome in FAILING or b.outcome in ("xfail", "skip"):
        out.improvements.append(f"{check_id}: {transition}")
    elif expected is not None:
        out.improvements.append(f"{check_id}: listed as expected failure but passes")


def _compare_perf(
    name: str,
    base: PerfFigure,
    candidate: Report,
    exp: Expectations,
    default_tolerance: float | None,
    out: GateResult,
) -> PerfComparison:
    tolerance = exp.tolerance(name, default_tolerance)
    cand = candidate.perf.get(name)
    if tolerance is not None and name not in exp.perf_tolerances:
        # The baseline decides what a default tolerance gates: a candidate cannot make its own
        # figure ungateable (fewer samples, another statistic) and so hide a drop in it.
        why = default_gating(base)
        if why is not None:
            out.notes.append(f"perf {name}: informational, not gated by default ({why})")
            tolerance = None
        elif cand is not None and (own := default_gating(cand)) is not None:
            out.notes.append(
                f"perf {name}: gated as in the baseline, although the candidate's {own}"
            )
    if cand is None:
        verdict = "missing" if tolerance is not None else "not gated"
        if tolerance is not None:
            out.regressions.append(f"perf {name}: missing from the candidate")
        return PerfComparison(
            name, base.unit, base.better, base.value, None, tolerance, None, verdict
        )
    if base.flag:
        out.notes.append(
            f"perf {name}: not gated, the baseline's is flagged unreliable: {base.flag}"
        )
        return PerfComparison(
            name, base.unit, base.better, base.value, cand.value, tolerance, None, "unreliable"
        )
    if cand.flag:
        # The report stores no raw samples to re-derive a flag from: the candidate's own word
        # that its figure is unreliable is said, never a reason to let a drop through.
        out.notes.append(f"perf {name}: the candidate flags it unreliable ({cand.flag}); gated")
    if cand.unit != base.unit or cand.better != base.better:
        raise GateInputError(
            f"perf figure {name!r} changed from {base.unit!r}/{base.better} in the baseline to "
            f"{cand.unit!r}/{cand.better} in the candidate: the figures are not comparable"
        )
    worse_by = _worse_by(base.value, cand.value, base.better)
    change = f"{format_number(base.value)} -> {format_number(cand.value)} {base.unit}".rstrip()
    if tolerance is None:
        verdict = "not gated"
    elif worse_by > tolerance:
        verdict = "regression"
        out.regressions.append(
            f"perf {name}: {change} ({pct(worse_by)} worse, tolerance {pct(tolerance)})"
        )
    elif worse_by < -tolerance:
        verdict = "improvement"
        out.improvements.append(f"perf {name}: {change} ({pct(-worse_by)} better)")
    else:
        verdict = "ok"
    return PerfComparison(
        name, base.unit, base.better, base.value, cand.value, tolerance, worse_by, verdict
    )


def derived_from(name: str) -> str | None:
    """The figure ``name`` is computed from (tokens/s/user is 1000 / TPOT of the same statistic,
    TT's t/s is 1000 / median TPOT x batch: restated.py), None for a measured one: one slower
    TPOT moves all three, and the verdict names that cause once."""
    return derived_source(name)


def _one_cause_once(result: GateResult) -> None:
    """A derived figure that moved with its source is folded into the source's line."""
    verdict = {p.name: p.verdict for p in result.perf}
    for kind, lines in (("regression", result.regressions), ("improvement", result.improvements)):
        followers: dict[str, list[str]] = {}
        for p in result.perf:
            source = derived_from(p.name)
            if p.verdict == kind and source is not None and verdict.get(source) == kind:
                followers.setdefault(source, []).append(p.name)
        derived = {name for names in followers.values() for name in names}
        kept = [ln for ln in lines if not any(ln.startswith(f"perf {n}: ") for n in derived)]
        for i, line in enumerate(kept):
            for source, names in followers.items():
                if line.startswith(f"perf {source}: "):
                    kept[i] = f"{line}; the same cause moves {', '.join(names)} (computed from it)"
        lines[:] = kept


def default_gating(fig: PerfFigure) -> str | None:
    """Why a default tolerance does not gate this figure (None: it does)."""
    stat, n = fig.stat, fig.samples
    if stat == "p99" and (fig.metric == "itl" or fig.name.startswith("itl_")):
        # A request's gaps move together (its decode steps, its batch's stalls): their p99 rests
        # on the slowest few requests, however many gaps there are (test_gate_statistics.py).
        return "p99 of inter-token gaps, correlated within each request; medians are gated"
    if stat == "p99":
        if n is None or n < P99_MIN_SAMPLES:
            got = "an unknown number of" if n is None else str(n)
            return f"p99 of {got} samples; gated from {P99_MIN_SAMPLES}"
        return None
    if stat is not None and stat not in GATED_STATS:
        return f"a {stat} follows its outliers; medians are gated"
    if n is not None and n < GATED_MIN_SAMPLES:
        return f"{n} samples; gated from {GATED_MIN_SAMPLES}"
    return None


def _compare_accuracy(
    baseline: Report,
    candidate: Report,
    out: GateResult,
    allowed: frozenset[str],
    floors: bool = True,
) -> None:
    """Each task the baseline scored (paired.py decides); a task it scored that the candidate
    did not is a regression, a task scored twice in one report bad input."""
    sides: dict[str, dict[str, AccuracyResult]] = {}
    for name, report in (("baseline", baseline), ("candidate", candidate)):
        tasks = [a.task for a in report.accuracy]
        twice = sorted({t for t in tasks if tasks.count(t) > 1})
        if twice:
            raise GateInputError(f"{name}: field 'accuracy': task(s) scored twice: {twice}")
        sides[name] = {a.task: a for a in report.accuracy}
    after = sides["candidate"]
    for task, base in sorted(sides["baseline"].items()):
        cand = after.get(task)
        if cand is None:
            out.regressions.append(f"accuracy on {task}: scored in the baseline, not now")
            continue
        try:
            change = compare_task(base, cand, allowed)
        except (ItemSetChanged, AccuracyNotComparable) as exc:
            if floors:
                raise GateInputError(str(exc)) from None
            out.notes.append(str(exc))
            continue
        if change is None:
            continue
        if change.identity is not None:
            out.identity.append(f"allowed difference: {change.identity}")
        {"regression": out.regressions, "improvement": out.improvements, "note": out.notes}[
            change.verdict
        ].append(change.text)
    for task in sorted(set(after) - set(sides["baseline"])):
        out.notes.append(f"accuracy on {task}: new task, {after[task].score:.3f}")


def _worse_by(baseline: float, candidate: float, better: str) -> float:
    """Relative change in the bad direction (0.2 = 20 % worse; negative = better)."""
    delta = candidate - baseline
    if better == "higher":
        delta = -delta
    if baseline == 0:
        return 0.0 if delta == 0 else math.copysign(math.inf, delta)
    return delta / abs(baseline)


def _last_line(text: str) -> str:
    """The last non-blank line of a collection error: pytest ends it with the exception."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else text
