"""The gate's verdict as plain text: what `tt-conformance-gate` prints and --tt-gate shows."""

from __future__ import annotations

from tabulate import tabulate

from tt_conformance.gate import GateResult
from tt_conformance.numfmt import format_number, pct
from tt_conformance.report import Report
from tt_conformance.tiers import perf_is_informational

__all__ = ["GATE_PREFIX", "change_text", "gate_headline", "render_gate"]

GATE_PREFIX = "tt-conformance gate: "


def change_text(worse_by: float | None) -> str:
    if worse_by is None:
        return "—"
    if worse_by > 0:
        return f"{pct(worse_by)} worse"
    if worse_by < 0:
        return f"{pct(-worse_by)} better"
    return "unchanged"


def gate_headline(text: str) -> str:
    """The verdict a gate's output states (what `render_gate` and `baseline.gate_run` write),
    for a title: a text that states none is "not recognised", never taken for a pass."""
    for line in text.splitlines():
        if line.startswith(GATE_PREFIX):
            return "gate " + line.removeprefix(GATE_PREFIX).strip()
    if "bad input, failing closed" in text:
        return "gate BAD INPUT (failing closed)"
    if "ABORTED" in text and "failing the gate" in text:
        return "gate FAILED (run aborted)"
    if "not gated" in text:
        return "not gated (no baseline)"
    return "gate output not recognised"


def render_gate(result: GateResult, baseline: Report, candidate: Report) -> str:
    """The gate's verdict as plain text (stdout, the pytest summary, the CI step summary)."""
    bv, cv = baseline.versions, candidate.versions
    verdict = (
        f"REGRESSION ({len(result.regressions)} found)"
        if result.regressions
        else "OK (no regression)"
    )
    lines = [
        f"{GATE_PREFIX}{verdict}",
        f"model {candidate.model}, device {candidate.device}",
        f"baseline  {baseline.run_id}: tt-metal {bv.tt_metal}, vLLM {bv.vllm}, plugin {bv.plugin}",
        f"candidate {candidate.run_id}: tt-metal {cv.tt_metal}, vLLM {cv.vllm}, plugin {cv.plugin}",
        "",
    ]
    if result.identity:
        lines.append("Identity (everything else is equal):")
        lines += [f"  * {item}" for item in result.identity]
        lines.append("")
    else:
        lines += ["Identity: the two runs are alike on every axis", ""]
    for title, marker, items in (
        ("Regressions", "-", result.regressions),
        ("Improvements", "+", result.improvements),
        ("Expected failures (not regressions)", "~", result.expected),
        ("Flaky, passed on retry (not regressions)", "~", result.flaky),
        ("Notes", " ", result.notes),
    ):
        if items:
            lines.append(f"{title} ({len(items)}):")
            lines += [f"  {marker} {item}" for item in items]
            lines.append("")
    if result.perf:
        informational = perf_is_informational(candidate.device)
        # Emulated (and other non-TT) figures measure no TT hardware: say so where they show.
        lines.append(
            f"Performance (informational: {candidate.device} is not TT hardware; a figure is "
            "gated only where a tolerance is set):"
            if informational
            else "Performance:"
        )
        lines.append(
            tabulate(
                [
                    [
                        p.name,
                        f"{format_number(p.baseline)} {p.unit}",
                        "—" if p.candidate is None else f"{format_number(p.candidate)} {p.unit}",
                        change_text(p.worse_by),
                        "—" if p.tolerance is None else pct(p.tolerance),
                        p.verdict,
                    ]
                    for p in result.perf
                ],
                headers=["figure", "baseline", "candidate", "change", "tolerance", "verdict"],
                disable_numparse=True,
            )
        )
    return "\n".join(lines).rstrip() + "\n"
