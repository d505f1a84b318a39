"""Re-derive, never trust: a report's verdicts recomputed from its own checks and figures.

A report file carries its tier, its coverage, its totals and its perf-target and accuracy
verdicts, all decided when the run was written. Whatever reads a report to publish, promote or
gate it recomputes them here: tier (tiers.derive_tier), coverage (selection.derive_coverage),
each perf target's fraction and level from the figure it names, each accuracy verdict from its
score and bar (and the score from its counts); the bars themselves are held against the
expectations file the report names when it can be read (bars.py). A stored value that disagrees
makes the report *inconsistent* (edited by hand, written by a careless tool, or forged):
`inconsistencies` names every such field, and `require_consistent` refuses the report (the
commands exit 2). Totals are checked on reading already (report.py). Reports older than schema
version 4 carry no tier to compare (report.migrate_report drops theirs: it is derived again).
"""

from __future__ import annotations

import math

from tt_conformance.bars import file_bar_differences
from tt_conformance.names import KNOWN_MESH_SHAPES, is_emulated
from tt_conformance.report import Coverage, Report, ReportError
from tt_conformance.restated import contradictions
from tt_conformance.selection import derive_coverage, foreign_suite, yardstick_for
from tt_conformance.situation_record import record_problems
from tt_conformance.tiers import derive_tier, evaluate_fraction, stated_tier

__all__ = ["InconsistentReport", "inconsistencies", "require_consistent"]

# Stored figures are rounded (fractions to 4 places, scores to 6).
_FRACTION_SLACK = 1e-3
_SCORE_SLACK = 1e-5


class InconsistentReport(ReportError):
    """A report whose stored verdicts disagree with what its checks and figures give."""


def _coverage_fields(stored: Coverage, derived: Coverage, shipped: tuple[str, ...]) -> list[str]:
    out = []
    names = ["full", "selected", "missing_modules", "missing_checks"]
    names += ["not_applicable", "skipped_other"]
    if stored.suite:  # written by a harness that records the suite, waivers and concerns
        names += ["suite", "modified_modules", "waived", "concerns_not_run"]
    if stored.suite and not foreign_suite(stored.suite, shipped):
        # Judged against the manifest its harness commit shipped when git has it, else this
        # harness's (selection.yardstick_for): name the difference.
        foreign = sorted(set(stored.suite) - set(derived.suite))
        lacking = sorted(set(derived.suite) - set(stored.suite))
        if foreign:
            out.append(
                f"field 'coverage.suite': modules the harness does not ship: {_short(foreign)}"
            )
        if lacking:
            # Its harness commit's manifest (git's word, not the report's) lists them, or none
            # could be read: regenerate it with this harness.
            out.append(
                f"field 'coverage.suite': lacks modules the harness ships: {_short(lacking)}"
            )
        names.remove("suite")
    for name in names:
        got, want = getattr(stored, name), getattr(derived, name)
        if got != want:
            out.append(
                f"field 'coverage.{name}': stored {_short(got)}, the checks give {_short(want)}"
            )
    return out


def _short(value: object) -> str:
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= 120 else text[:117] + "..."


# The ttnn the repository's host stub reports (host_stubs/ttnn): no TT hardware behind it.
_HOST_STUB = "+host.stub"


_EMULATED_KEY = "emulated_mesh"
# What a hand-edited record may spell "true" as: evidence all the same (the plugin writes a
# JSON boolean; any other spelling is also malformed, _malformed_emulation).
_TRUTHY = frozenset({"true", "yes", "on", "1", "1.0", "y", "t"})
_FALSY = frozenset({"false", "no", "off", "0", "0.0", "n", "f", ""})


def _emulated_entries(report: Report) -> list[tuple[str, object]]:
    """The tt_options entries naming emulated_mesh in any case or separator spelling."""
    options = report.server.tt_options
    if not isinstance(options, dict):
        return []
    return [
        (str(k), v)
        for k, v in options.items()
        if str(k).strip().casefold().replace("-", "_") == _EMULATED_KEY
    ]


def _truthy(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().casefold() in _TRUTHY
    return value is not None and not isinstance(value, (list, dict)) and bool(value)


def _malformed_emulation(report: Report) -> list[str]:
    """emulated_mesh is a JSON boolean under its own key: any other value or key spelling is
    no record the harness reads as "not emulated" (it refuses it, naming the field)."""
    out = []
    for key, value in _emulated_entries(report):
        if key != _EMULATED_KEY or not isinstance(value, bool):
            out.append(
                f"field 'server.tt_options.{key}': {_short(value)} is malformed (the emulation "
                f"flag is a boolean under {_EMULATED_KEY!r})"
            )
    return out


def _emulation_evidence(report: Report) -> list[str]:
    """The fields of the report's own server record that say it ran on no TT hardware, in
    any spelling (a truthy "yes" or a key in capitals is the same word)."""
    out = [
        f"'server.tt_options.{key}' is {'true' if value is True else _short(value)}"
        for key, value in _emulated_entries(report)
        if _truthy(value) or (isinstance(value, str) and value.strip().casefold() not in _FALSY)
    ]
    if _HOST_STUB in report.versions.ttnn.casefold():
        out.append(f"'versions.ttnn' is the host stub's {report.versions.ttnn!r}")
    mesh = report.server.mesh_device
    if mesh is not None and is_emulated(mesh.strip().lower()):
        out.append(f"'server.mesh_device' is {mesh!r}")
    return out


def _device_contradiction(report: Report) -> list[str]:
    """A hardware device name on a report whose server record says emulated: the name alone
    would make an emulated run a TT tier (tiers.py reads the device)."""
    evidence = _emulation_evidence(report)
    if report.device not in KNOWN_MESH_SHAPES or not evidence:
        return []
    return [
        f"field 'device': {report.device!r} is TT hardware, but the run's own record says it "
        f"ran emulated: {', '.join(evidence)}"
    ]


def _concern_fields(report: Report) -> list[str]:
    """Checks whose stored concern is not the one the manifest gives their module: a concern
    is the harness's, never the report's (a relabelled check would borrow another concern's
    excuse, or hide its own concern from the summary)."""
    concerns = yardstick_for(report).concerns
    wrong = []
    for i, c in enumerate(report.checks):
        want = concerns.get(c.id.partition("::")[0])
        if want is not None and c.concern != want:
            wrong.append(
                f"field 'checks[{i}].concern' ({c.id}): stored {c.concern!r}, the manifest "
                f"gives its module {want!r}"
            )
    if len(wrong) > 3:
        return [*wrong[:3], f"field 'checks[].concern': {len(wrong) - 3} more relabelled"]
    return wrong


def inconsistencies(report: Report) -> list[str]:
    """Every stored verdict of the report that its own checks and figures contradict."""
    out = _malformed_emulation(report) + _device_contradiction(report) + _concern_fields(report)
    # The stored tier may be the one the report's own bars give (an honest run read where its
    # expectations file cannot be reached) or the one its vouched-for bars cap it at.
    derived_tier, stated = derive_tier(report), stated_tier(report)
    if report.tier is not None and report.tier.tier not in (derived_tier.tier, stated.tier):
        out.append(
            f"field 'tier.tier': stored {report.tier.tier!r}, the checks give "
            f"{stated.tier!r} ({stated.reason})"
        )
    if report.coverage is not None:
        derived = derive_coverage(report)
        assert derived is not None
        out += _coverage_fields(report.coverage, derived, yardstick_for(report).modules)
    out += file_bar_differences(report)
    for i, target in enumerate(report.perf_targets):
        fig = report.perf.get(target.figure)
        fraction, met = evaluate_fraction(fig, target)
        where = f"field 'perf_targets[{i}]' ({target.figure})"
        if met != target.met:
            out.append(f"{where}.met: stored {target.met!r}, the figure gives {met!r}")
        if (fraction is None) != (target.fraction is None) or (
            fraction is not None
            and target.fraction is not None
            and not math.isclose(fraction, target.fraction, abs_tol=_FRACTION_SLACK)
        ):
            out.append(f"{where}.fraction: stored {target.fraction}, the figure gives {fraction}")
    for i, acc in enumerate(report.accuracy):
        where = f"field 'accuracy[{i}]' ({acc.task})"
        if acc.correct is not None and acc.num_samples > 0 and acc.correct <= acc.num_samples:
            score = acc.correct / acc.num_samples
            if abs(score - acc.score) > _SCORE_SLACK:
                out.append(
                    f"{where}.score: stored {acc.score}, its counts give {acc.correct}/"
                    f"{acc.num_samples} = {score:.6f}"
                )
        if not acc.ci_low - _SCORE_SLACK <= acc.score <= acc.ci_high + _SCORE_SLACK:
            out.append(
                f"{where}.score: {acc.score} outside its interval [{acc.ci_low}, {acc.ci_high}]"
            )
        bar = acc.threshold if acc.reference is None else max(0.0, acc.reference - acc.tolerance)
        if bar is not None:
            if acc.verdict == "pass" and acc.score < bar - _SCORE_SLACK:
                out.append(f"{where}.verdict: stored 'pass', score {acc.score} is below {bar:.6f}")
            elif acc.verdict == "fail" and acc.score >= bar + _SCORE_SLACK:
                out.append(f"{where}.verdict: stored 'fail', score {acc.score} reaches {bar:.6f}")
    # What the report states twice (a figure's stat and its name, derived figures, a retried
    # pass): restated.py.
    out += contradictions(report)
    # What it says of the situation matrix's cells and the server's situation counts.
    out += record_problems(report)
    return out


def require_consistent(report: Report, source: str) -> Report:
    """The report, or InconsistentReport naming the file and every field that disagrees."""
    found = inconsistencies(report)
    if found:
        raise InconsistentReport(
            f"{source}: inconsistent report, refused (its stored verdicts disagree with its own "
            "checks and figures; regenerate it, never edit it): " + "; ".join(found)
        )
    return report
