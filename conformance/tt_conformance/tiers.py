"""Status tiers in Tenstorrent's vocabulary, derived from a report alone.

TT's own definitions (tt-inference-server's README, "Tenstorrent E2E Inference Model Statuses"):
Complete: passing accuracy evals, performance optimised on TT hardware; Functional: passing
accuracy evals, performance order-of-magnitude ok on TT hardware; Experimental: work in
progress. Here, "performance ok" is the expectations' perf targets (fractions of a published or
theoretical figure) met on hardware, so no run gets a hardware tier without hardware
performance evidence.

    fail          a check failed or errored, a check module did not collect, the accuracy
                  verdict is fail, or the run was aborted
    partial       nothing failed, but the run did not cover the suite (selection.py: -k, -m,
                  a node id, a missing or edited check module, an applicable concern that did
                  not run, e.g. waived by the expectations): not a tier, and never certified
    emulated      nothing failed on a host-emulated mesh: no TT hardware, so no TT tier; the
                  reason says whether accuracy passed
    experimental  the checks pass, but accuracy has no passing verdict (its check an expected
                  failure; a run where the accuracy concern did not run is partial), or no
                  hardware performance evidence (no perf targets, or one below its
                  functional fraction), or the server is not a TT server (device
                  ``not-tt``), or the device is not a TT system (cpu, gpu, unknown)
    functional    checks pass (expected failures allowed), accuracy passes, and every perf
                  target reaches its functional fraction on TT hardware
    complete      functional, with no expected failures, no waivers (checks skipped by the
                  expectations), no other skips (only those the harness rules not applicable
                  from the server's identity, selection.skip_kind, whatever their reason's
                  wording) and every perf target at its complete fraction

Every tier comes with the reason and what blocks the next tier, for the report and the matrix.
Perf targets are evaluated against the expectations once, when a report is written
(`evaluate_targets`), and stored in the report; the tier is then a function of the report.
Coverage is never taken from the report: it is rebuilt from the checks (selection.py), so a
stored ``full`` cannot lift a run out of partial, and a stored tier is never read
(rederive.py refuses a report whose stored tier disagrees with this one).

Stored bars vouched for by nothing but the report (bars.bar_check: no expectations file or
digest, the file gone or rewritten and no committed copy with the recorded digest) are
*self-asserted*: `derive_tier` never lets them lift a run to functional or complete, and says
so in the reason. `stated_tier` is the tier the report's own bars give (what the run stored,
rederive.py compares it); every reader that ranks a run (matrix, history, gate) uses
`derive_tier`.
"""

from __future__ import annotations

from typing import Protocol

from tt_conformance.bars import bar_check
from tt_conformance.expectations import Expectations
from tt_conformance.longtasks import PASSKEY_TASK
from tt_conformance.names import EMULATED_DEVICE, NOT_TT_DEVICE, is_emulated
from tt_conformance.report import FAILING, PerfFigure, PerfMet, PerfTargetResult, Report, Tier
from tt_conformance.selection import concern_coverage, concern_of, derive_coverage, skip_kind

__all__ = [
    "INFORMATIONAL_DEVICES",
    "derive_tier",
    "evaluate_fraction",
    "evaluate_targets",
    "perf_is_informational",
    "stated_tier",
]

INFORMATIONAL_DEVICES = frozenset({EMULATED_DEVICE, "cpu", "gpu", "unknown", NOT_TT_DEVICE})
_RANK = {"functional": 1, "complete": 2, "target": 3}


# Highest first: a figure meets the first level its fraction of the reference reaches.
_MET_LEVELS: tuple[PerfMet, ...] = ("target", "complete", "functional")


def perf_is_informational(device: str) -> bool:
    return device in INFORMATIONAL_DEVICES or is_emulated(device)


class _Levels(Protocol):
    reference: float
    functional: float
    complete: float
    target: float


def evaluate_fraction(fig: PerfFigure | None, target: _Levels) -> tuple[float | None, PerfMet]:
    """A figure's fraction of a target's reference (direction-aware, 4 places) and the level
    it meets: the one rule for writing a report's targets and re-deriving them (rederive.py)."""
    if fig is None:
        return None, "missing"
    if fig.flag:
        return None, "unreliable"
    if fig.better == "higher":
        fraction: float | None = fig.value / target.reference
    else:
        fraction = target.reference / fig.value if fig.value > 0 else None
    met: PerfMet = "below"
    if fraction is not None:
        for level in _MET_LEVELS:
            if fraction >= getattr(target, level):
                met = level
                break
    return (None if fraction is None else round(fraction, 4)), met


def evaluate_targets(report: Report, expectations: Expectations) -> tuple[PerfTargetResult, ...]:
    """Each perf target of the expectations against the report's figure of the same name."""
    out = []
    for name, target in sorted(expectations.perf_targets.items()):
        fraction, met = evaluate_fraction(report.perf.get(name), target)
        out.append(
            PerfTargetResult(
                figure=name,
                reference=target.reference,
                source=target.source,
                functional=target.functional,
                complete=target.complete,
                target=target.target,
                fraction=fraction,
                met=met,
            )
        )
    return tuple(out)


def derive_tier(report: Report) -> Tier:
    """The run's tier, never higher than experimental on self-asserted bars."""
    tier = stated_tier(report)
    if tier.tier not in ("functional", "complete"):
        return tier
    bars = bar_check(report)
    if bars.checked:
        return tier
    return Tier(
        tier="experimental",
        reason=f"{tier.reason}; but its perf targets and accuracy bars are self-asserted "
        f"({bars.why}): they cannot certify {tier.tier}",
        next_blocker="a report whose bars its expectations file (as recorded, or as committed "
        "at its harness commit) vouches for: rerun with the expectations file",
    )


def stated_tier(report: Report) -> Tier:
    """The tier the report's stored bars give, whoever vouches for them."""
    tier = _derive_tier(report)
    optional = _optional_not_run(report)
    if not optional or tier.tier == "fail":
        return tier
    # Optional concerns do not cap the tier, but the tier never hides that they did not run.
    note = f"; optional concerns not run: {', '.join(optional)}"
    return tier.model_copy(update={"reason": tier.reason + note})


def _optional_not_run(report: Report) -> list[str]:
    """Optional concerns (selection.OPTIONAL_CONCERNS) whose checks were all skipped for want
    of what they need (the forward reference without a checkpoint)."""
    server = report.server
    by_concern: dict[str, set[str]] = {}
    for c in report.checks:
        kind = (
            "ran"
            if c.outcome != "skip"
            else skip_kind(c, report.device, server.lanes, server.model_class)
        )
        by_concern.setdefault(concern_of(c), set()).add(kind)
    return sorted(
        k for k, kinds in by_concern.items() if "optional" in kinds and "ran" not in kinds
    )


def _derive_tier(report: Report) -> Tier:
    failing = sorted(c.id for c in report.checks_with(*FAILING))
    if report.aborted is not None:
        not_run = report.aborted.not_run
        return Tier(
            tier="fail",
            reason=f"run aborted: {report.aborted.reason}"
            + ("" if not_run is None else f" ({not_run} check(s) did not run)"),
            next_blocker="a complete run: keep the server up for the whole suite",
        )
    if report.collection_errors:
        return Tier(
            tier="fail",
            reason=f"{len(report.collection_errors)} check module(s) did not collect",
            next_blocker="fix the collection errors",
        )
    if failing:
        return Tier(
            tier="fail",
            reason=f"{len(failing)} failing check(s): {', '.join(failing[:3])}"
            + (" …" if len(failing) > 3 else ""),
            next_blocker="experimental needs every check to pass or be an expected failure",
        )
    # A score recorded by an expected failure is that failure's evidence, already accepted by
    # the expectations (the tier below counts the xfail itself).
    expected = {c.id for c in report.checks_with("xfail")}
    bad_accuracy = [a for a in report.accuracy if a.verdict == "fail" and a.check not in expected]
    if bad_accuracy:
        a = bad_accuracy[0]
        return Tier(
            tier="fail",
            reason=f"accuracy on {a.task}: {a.score:.3f} below the bar ({a.reason})",
            next_blocker="experimental needs the accuracy verdict to pass",
        )
    if not report.checks:
        return Tier(tier="fail", reason="no checks ran", next_blocker="run the suite")
    coverage = derive_coverage(report)
    if coverage is not None:
        partial_because, waived = coverage.partial_because, coverage.waived
    else:
        # No selection recorded (a report before schema 4, or one whose coverage was removed):
        # what was selected is unknown, so nothing is certified.
        server = report.server
        waived = concern_coverage(
            report.checks, report.device, server.lanes, server.model_class
        ).waived
        partial_because = ("coverage not recorded (-k, -m and the suite unknown)",)
    if partial_because:
        return Tier(
            tier="partial",
            reason="partial run, not certified: " + "; ".join(partial_because),
            next_blocker="a tier needs the whole suite, every applicable concern run: no -k, "
            "-m or node ids, no concern skipped away by the expectations",
        )
    if report.device == NOT_TT_DEVICE:
        return Tier(
            tier="experimental",
            reason="generic checks pass, but the server shows no TT plugin (no tt_plugin_info "
            "on /metrics): its TT-path checks were not applicable, nothing TT is certified",
            next_blocker="functional needs a vllm-tt-plugin server publishing its metrics "
            "(TT_VLLM_METRICS not 0)",
        )
    # The long-context check's passkey score is accuracy too, but not on the expectations' task.
    # Only a passing verdict of a check that is not an expected failure is evidence: an xfail's
    # score was accepted as failing, not measured as good.
    measured = [
        a
        for a in report.accuracy
        if a.task != PASSKEY_TASK and a.verdict == "pass" and a.check not in expected
    ]
    if is_emulated(report.device):
        accuracy_text = (
            "accuracy passes (" + ", ".join(f"{a.task} {a.score:.3f}" for a in measured) + ")"
            if measured
            else "accuracy not measured"
        )
        waivers = f", {len(waived)} check(s) waived by the expectations" if waived else ""
        return Tier(
            tier="emulated",
            reason=f"checks pass{waivers}, {accuracy_text}, on a host-emulated mesh: no TT "
            "hardware tier",
            next_blocker="a TT hardware run: functional needs accuracy and perf targets met on "
            "TT hardware",
        )
    if not measured:
        return Tier(
            tier="experimental",
            reason="checks pass; accuracy not measured",
            next_blocker="functional needs a passing accuracy verdict: add an accuracy entry "
            "to the expectations",
        )
    accuracy = ", ".join(
        f"{a.task} {a.score:.3f}" for a in report.accuracy if a.check not in expected
    )
    reason = f"checks pass, accuracy passes ({accuracy})"
    if perf_is_informational(report.device):
        return Tier(
            tier="experimental",
            reason=f"{reason}; device {report.device} is not TT hardware: no performance evidence",
            next_blocker="functional needs a TT hardware run meeting the perf targets' "
            "functional fraction",
        )
    if not report.perf_targets:
        return Tier(
            tier="experimental",
            reason=f"{reason}; no hardware performance evidence (no perf targets in the "
            "expectations)",
            next_blocker="functional needs perf targets (fractions of a theoretical or "
            "published figure) in the expectations, met at their functional fraction",
        )
    low = [t for t in report.perf_targets if _RANK.get(t.met, 0) < _RANK["functional"]]
    if low:
        return Tier(
            tier="experimental",
            reason=f"{reason}; perf below the functional target: {_targets_text(low)}",
            next_blocker="functional needs every perf target at its functional fraction",
        )
    short = [t for t in report.perf_targets if _RANK[t.met] < _RANK["complete"]]
    xfails = sorted(c.id for c in report.checks_with("xfail"))
    flaky = sorted(c.id for c in report.checks_with("flaky"))
    server = report.server
    # A skip is "not applicable" only when the harness's rules bear it out from the server's
    # identity (selection.skip_kind), whatever its reason says; any other skip left a check
    # unrun and uncertified, however it is worded (a waiver reworded as "not exercised").
    unrun = sorted(
        c.id
        for c in report.checks_with("skip")
        if skip_kind(c, report.device, server.lanes, server.model_class) == "other"
    )
    if short or xfails or waived or flaky or unrun:
        blockers = []
        if short:
            blockers.append(f"perf at the complete fraction ({_targets_text(short)})")
        if xfails:
            blockers.append(f"no expected failures ({len(xfails)}: {', '.join(xfails[:2])})")
        if waived:
            # A waiver is an expected failure that was not even run: never complete.
            blockers.append(f"no waived checks ({len(waived)}: {', '.join(waived[:2])})")
        if flaky:
            # A pass that needed a retry is not a clean pass (promote refuses unlisted ones).
            blockers.append(f"no flaky checks ({len(flaky)}: {', '.join(flaky[:2])})")
        if unrun:
            blockers.append(
                f"no skipped checks but those not applicable to this server ({len(unrun)}: "
                f"{', '.join(unrun[:2])})"
            )
        return Tier(
            tier="functional",
            reason=f"{reason}; perf targets at the functional fraction",
            next_blocker="complete needs " + " and ".join(blockers),
        )
    return Tier(
        tier="complete",
        reason=f"{reason}; every perf target at its complete fraction",
        next_blocker=None,
    )


def _targets_text(targets: list[PerfTargetResult]) -> str:
    parts = []
    for t in targets[:3]:
        got = "n/a" if t.fraction is None else f"{t.fraction:.0%}"
        parts.append(f"{t.figure} {got} of {t.reference:g} ({t.met})")
    return "; ".join(parts)
