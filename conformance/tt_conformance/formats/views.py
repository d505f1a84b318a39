"""What the templated pages show, arranged once for both of their formats (Markdown, HTML).

Data comes from matrix.py (cells, concern states), history.py (runs, groups, trends) and
gate.compare; this module only arranges it into rows and page contexts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tt_conformance.gate import GateResult, compare
from tt_conformance.history import (
    UNKNOWN,
    CellStory,
    Run,
    Trend,
    compare_pairs,
    group_by_commit,
    trends,
)
from tt_conformance.identity import AXES, differences, identity_rows, profile_key, unlike
from tt_conformance.matrix import (
    KEY_PERF,
    MatrixCell,
    concern_not_run,
    concern_status,
    not_run_concerns,
    tier_of,
)
from tt_conformance.names import path_component
from tt_conformance.report import Report
from tt_conformance.tiers import perf_is_informational

__all__ = [
    "Comparison",
    "MatrixRow",
    "Pivot",
    "PivotCell",
    "check_counts",
    "compare_slug",
    "comparisons",
    "history_context",
    "history_slug",
    "matrix_rows",
    "pivot",
    "run_context",
    "run_href",
    "sparkline",
    "trend_change",
    "unknown_versions",
]


def history_slug(model: str, device: str) -> str:
    return f"{path_component(model)}--{path_component(device)}"


def compare_slug(a: Run, b: Run) -> str:
    return f"{history_slug(*b.key)}--{a.report.run_id}--{b.report.run_id}"


def check_counts(cell: MatrixCell) -> str:
    t = cell.report.counts
    passed = t["pass"] + t["flaky"] + t["xpass"]
    text = f"{passed}/{t['total']} passed"
    extras = [(t["xfail"], "expected failures"), (t["skip"], "not run")]
    not_run = not_run_concerns(cell.report)
    tail = f"; not run: {', '.join(not_run)}" if not_run else ""
    return text + "".join(f", {n} {label}" for n, label in extras if n) + tail


@dataclass(frozen=True)
class MatrixRow:
    cell: MatrixCell
    concerns: dict[str, str]
    not_run: dict[str, tuple[str, ...]]  # concern -> "check: reason" of its skipped checks
    history: str  # relative link of the history page
    unknown_versions: tuple[str, ...]
    counts: str


def unknown_versions(report: Report) -> tuple[str, ...]:
    v = report.versions
    return tuple(
        name
        for name, value in (
            ("vLLM", v.vllm),
            ("plugin", v.plugin),
            ("ttnn", v.ttnn),
            ("tt-metal", v.tt_metal),
        )
        if value == UNKNOWN
    )


def matrix_rows(cells: Sequence[MatrixCell], concerns: Sequence[str]) -> list[MatrixRow]:
    return [
        MatrixRow(
            cell,
            {c: concern_status(cell.report, c) for c in concerns},
            {c: concern_not_run(cell.report, c) for c in concerns},
            f"history/{history_slug(cell.model, cell.device)}.html",
            unknown_versions(cell.report),
            check_counts(cell),
        )
        for cell in cells
    ]


def run_href(report: Report) -> str:
    """A run's page, relative to the site's root."""
    return f"runs/{path_component(report.run_id)}.html"


@dataclass(frozen=True)
class PivotCell:
    cell: MatrixCell
    story: CellStory | None  # None: no history at hand (the standalone matrix), or no full run
    href: str | None  # the run's page on the site


@dataclass(frozen=True)
class Pivot:
    """Model x device column, TT hardware first; emulated and other non-TT columns apart. A
    cell lists one entry per configuration profile the model was run with there."""

    models: tuple[str, ...]
    hardware: tuple[str, ...]
    apart: tuple[str, ...]
    cells: dict[tuple[str, str], list[PivotCell]]

    def regressed(self, model: str, device: str) -> bool:
        return any(p.story is not None and p.story.regressed for p in self.cells[(model, device)])


def pivot(
    cells: Sequence[MatrixCell],
    stories: dict[tuple[str, str, str], CellStory | None] | None = None,
    links: bool = False,
) -> Pivot:
    """``stories`` by history series (model, column, profile key: history.Run.series)."""
    hardware: set[str] = set()
    apart: set[str] = set()
    for c in cells:
        (apart if perf_is_informational(c.report.device) else hardware).add(c.device)
    grid: dict[tuple[str, str], list[PivotCell]] = {}
    for c in cells:
        story = (stories or {}).get((c.model, c.device, profile_key(c.report)))
        href = run_href(c.report) if links else None
        grid.setdefault((c.model, c.device), []).append(PivotCell(c, story, href))
    return Pivot(
        models=tuple(sorted({c.model for c in cells})),
        hardware=tuple(sorted(hardware)),
        apart=tuple(sorted(apart)),
        cells=grid,
    )


def run_context(run: Run, generated_at: str) -> dict[str, Any]:
    """A run's page: its verdict, identity, coverage, TT's figures, accuracy and checks."""
    report = run.report
    tt_figures = [
        (label, fig)
        for label, prefix in KEY_PERF
        for name, fig in sorted(report.perf.items())
        if name.startswith(prefix)
    ]
    return {
        "r": report,
        "tier": tier_of(report),
        "identity": identity_rows(report),
        "tt_figures": tt_figures,
        "history": f"history/{history_slug(*run.key)}.html",
        "generated_at": generated_at,
    }


def sparkline(trend: Trend, width: int = 160, height: int = 36) -> str:
    """SVG polyline points for a trend (empty when fewer than two values)."""
    values = trend.values()
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = width / (len(values) - 1)
    return " ".join(
        f"{i * step:.1f},{height - 2 - (v - low) / span * (height - 4):.1f}"
        for i, v in enumerate(values)
    )


def trend_change(trend: Trend) -> str:
    values = trend.values()
    if len(values) < 2 or values[0] == 0 or not math.isfinite(values[0]):
        return "—"
    rel = (values[-1] - values[0]) / abs(values[0])
    worse = rel < 0 if trend.better == "higher" else rel > 0
    word = "worse" if worse and rel else ("better" if rel else "unchanged")
    return f"{abs(rel) * 100:.1f}% {word} (first -> last)"


@dataclass(frozen=True)
class Comparison:
    slug: str
    older: Run
    newer: Run
    result: GateResult


def comparisons(runs: Sequence[Run]) -> list[Comparison]:
    """Consecutive runs side by side. The site shows differences, not a verdict: no
    expectations, no tolerance, every identity axis allowed and listed. Between unlike runs
    (another profile, mesh, weights: identity.unlike) no figure gets a percentage change."""
    out = []
    for a, b in compare_pairs(runs):
        if not a.report.checks:
            continue
        result = compare(a.report, b.report, axes=frozenset(AXES), floors=False)
        if unlike(differences(a.report, b.report)):
            result.perf = [
                replace(p, worse_by=None, verdict="unlike runs") if p.candidate is not None else p
                for p in result.perf
            ]
            result.improvements = [i for i in result.improvements if not i.startswith("perf ")]
            result.regressions = [i for i in result.regressions if not i.startswith("perf ")]
        out.append(Comparison(compare_slug(a, b), a, b, result))
    return out


def history_context(
    model: str,
    device: str,
    history: Sequence[Run],
    pairs: Sequence[Comparison],
    generated_at: str,
) -> dict[str, Any]:
    """The history page's context (the same for its Markdown and HTML forms)."""
    return {
        "model": model,
        "device": device,
        "groups": group_by_commit(history),
        "trends": [(t, sparkline(t), trend_change(t)) for t in trends(history)],
        "compare_of": {c.newer.report.run_id: c.slug for c in pairs},
        "unknown_of": {r.report.run_id: unknown_versions(r.report) for r in history},
        "generated_at": generated_at,
    }
