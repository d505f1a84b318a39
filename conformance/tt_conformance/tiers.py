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
                  a node id, a missing check module): not a tier, and never certified
    emulated      nothing failed on a host-emulated mesh: no TT hardware, so no TT tier; the
                  reason says whether accuracy passed
    experimental  the checks pass, but accuracy has no passing verdict, or there is no
                  hardware performance evidence (no perf targets, or one below its functional
                  fraction), or the server is not a TT server (device ``not-tt``), or the device
                  is not a TT system (cpu, gpu, unknown)
    functional    checks pass (expected failures allowed), accuracy passes, and every perf
                  target reaches its functional fraction on TT hardware
    complete      functional, with no expected failures and every perf target at its complete
                  fraction

Every tier comes with the reason and what blocks the next tier, for the report and the matrix.
Perf targets are evaluated against the expectations once, when a report is written
(`evaluate_targets`), and stored in the report; the tier is then a function of the report.
"""

from __future__ import annotations

from tt_conformance.expectations import Expectations
from tt_conformance.longtasks import PASSKEY_TASK
from tt_conformance.names import EMULATED_DEVICE, NOT_TT_DEVICE, is_emulated
from tt_conformance.report import FAILING, PerfMet, PerfTargetResult, Report, Tier

__all__ = [
    "INFORMATIONAL_DEVICES",
    "derive_tier",
    "evaluate_targets",
    "perf_is_informational",
]

INFORMATIONAL_DEVICES = frozenset({EMULATED_DEVICE, "cpu", "gpu", "unknown", NOT_TT_DEVICE})
_RANK = {"functional": 1, "complete": 2, "target": 3}


# Highest first: a figure meets the first level its fraction of the reference reaches.
_MET_LEVELS: tuple[PerfMet, ...] = ("target", "complete", "functional")


def perf_is_informational(device: str) -> bool:
    return device in INFORMATIONAL_DEVICES or is_emulated(device)


def evaluate_targets(report: Report, expectations: Expectations) -> tuple[PerfTargetResult, ...]:
    """Each perf target of the expectations against the report's figure of the same name."""
    out = []
    for name, target in sorted(expectations.perf_targets.items()):
        fig = report.perf.get(name)
        fraction: float | None = None
        met: PerfMet
        if fig is None:
            met = "missing"
        elif fig.flag:
            met = "unreliable"
        else:
            if fig.better == "higher":
                fraction = fig.value / target.reference
            else:
                fraction = target.reference / fig.value if fig.value > 0 else None
            met = "below"
            if fraction is not None:
                for level in _MET_LEVELS:
                    if fraction >= getattr(target, level):
                        met = level
                        break
        out.append(
            PerfTargetResult(
                figure=name,
                reference=target.reference,
                source=target.source,
                functional=target.functional,
                complete=target.complete,
                target=target.target,
                fraction=None if fraction is None else round(fraction, 4),
                met=met,
            )
        )
    return tuple(out)


def derive_tier(report: Report) -> Tier:
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
    if report.coverage is not None and not report.coverage.full:
        return Tier(
            tier="partial",
            reason="partial run, not certified: " + "; ".join(report.coverage.partial_because),
            next_blocker="a tier needs the whole suite: run it without -k, -m or node ids",
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
    measured = [a for a in report.accuracy if a.task != PASSKEY_TASK]
    if is_emulated(report.device):
        accuracy_text = (
            "accuracy passes (" + ", ".join(f"{a.task} {a.score:.3f}" for a in measured) + ")"
            if measured
            else "accuracy not measured"
        )
        return Tier(
            tier="emulated",
            reason=f"checks pass, {accuracy_text}, on a host-emulated mesh: no TT hardware tier",
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
    if short or xfails:
        blockers = []
        if short:
            blockers.append(f"perf at the complete fraction ({_targets_text(short)})")
        if xfails:
            blockers.append(f"no expected failures ({len(xfails)}: {', '.join(xfails[:2])})")
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
