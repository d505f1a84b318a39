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
    is_partial,
    not_run_concerns,
    tier_of,
)
from tt_conformance.mutation import NO_CAMPAIGN, PublishedScore, floor_percent
from tt_conformance.names import path_component
from tt_conformance.report import Report
from tt_conformance.selection import derive_coverage, skip_kind
from tt_conformance.tiers import perf_is_informational
from tt_conformance.ttmetrics import SITUATION_WORDS

__all__ = [
    "Comparison",
    "MatrixRow",
    "Pivot",
    "PivotCell",
    "check_counts",
    "compare_slug",
    "comparisons",
    "flag_legend",
    "history_context",
    "history_slug",
    "matrix_rows",
    "pivot",
    "run_context",
    "run_href",
    "sparkline",
    "story_text",
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
    waived = sum(
        1
        for c in cell.report.checks_with("skip")
        if skip_kind(c, cell.report.device, cell.report.server.lanes) == "waived"
    )
    extras = [
        (t["xfail"], "expected failures"),
        (waived, "waived by the expectations"),
        (t["skip"] - waived, "not run"),
    ]
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
        """The column's leading setup (its newest run) dropped and has not recovered."""
        lead = self.cells[(model, device)][0]
        return lead.story is not None and lead.story.regressed


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
    # The newest setup leads each cell; superseded setups follow, marked.
    for c in sorted(cells, key=lambda c: c.superseded_by is not None):
        story = (stories or {}).get((c.model, c.device, profile_key(c.report)))
        href = run_href(c.report) if links else None
        grid.setdefault((c.model, c.device), []).append(PivotCell(c, story, href))
    return Pivot(
        models=tuple(sorted({c.model for c in cells})),
        hardware=tuple(sorted(hardware)),
        apart=tuple(sorted(apart)),
        cells=grid,
    )


def story_text(cell: MatrixCell, story: CellStory | None) -> str:
    """A pivot cell in words (the Markdown matrix): status, drop, since, last good, setup."""
    parts = [cell.status]
    if story is not None:
        if story.dropped_from is not None:
            parts[0] += f" ↓ from {story.dropped_from}"
        since = story.since.report
        parts[0] += (
            f" since tt-metal {since.versions.tt_metal}, ttnn {since.versions.ttnn} "
            f"({since.finished_at[:10]})"
        )
        if is_partial(since):
            parts[0] += " (partial run)"  # a failing run enters the story however little ran
        if story.perf_drops:
            parts.append("perf ↓ " + "; ".join(story.perf_drops))
        good = story.last_good
        parts.append(
            "last good: "
            + (
                f"{good.report.finished_at[:10]}, tt-metal {good.report.versions.tt_metal}"
                if good
                else "none"
            )
        )
    if cell.superseded_by is not None:
        parts.append(f"superseded by {cell.superseded_by}")
    parts.append(cell.profile)
    return "; ".join(parts)


def _same_commit(a: str, b: str) -> bool:
    """Two recorded commits name the same code (either may be abbreviated; "+dirty" is not)."""
    a, b = a.lower(), b.lower()
    if a.endswith("dirty") or b.endswith("dirty") or min(len(a), len(b)) < 7:
        return False
    return a.startswith(b) or b.startswith(a)


def run_context(
    run: Run, generated_at: str, mutation: PublishedScore = NO_CAMPAIGN
) -> dict[str, Any]:
    """A run's page: its verdict, identity, coverage, TT's figures, accuracy, checks and how
    much the last plugin mutation campaign says its plugin's tests catch."""
    report = run.report
    record = mutation.record
    killed = sum(c.killed for c in record.concerns) if record else 0
    judged = sum(c.judged for c in record.concerns) if record else 0
    commit = report.versions.plugin_commit
    same = None if not commit or not record else _same_commit(commit, record.plugin_commit)
    tt_figures = [
        (label, fig)
        for label, prefix in KEY_PERF
        for name, fig in sorted(report.perf.items())
        if name.startswith(prefix)
    ]
    return {
        "r": report,
        "tier": tier_of(report),
        "coverage": derive_coverage(report),
        "identity": identity_rows(report),
        "tt_figures": tt_figures,
        "SITUATION_WORDS": SITUATION_WORDS,
        "mutation": mutation,
        "mutation_killed": killed,
        "mutation_judged": judged,
        "mutation_score": f"{floor_percent(killed, judged)}%" if judged else "no judged mutant",
        "mutation_same": same,
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

    @property
    def informational(self) -> bool:
        """Figures of an emulated or non-TT device: shown, never a verdict."""
        return perf_is_informational(self.newer.report.device) or perf_is_informational(
            self.older.report.device
        )

    @property
    def unlike(self) -> bool:
        return bool(unlike(differences(self.older.report, self.newer.report)))


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
        "flags": flag_legend(history),
        "informational": any(perf_is_informational(r.report.device) for r in history),
        "generated_at": generated_at,
    }


def flag_legend(history: Sequence[Run]) -> list[str]:
    """Why the values marked * in a history's trends are unreliable (each reason once)."""
    seen: dict[str, None] = {}
    for run in history:
        for fig in run.report.perf.values():
            if fig.flag:
                seen.setdefault(fig.flag, None)
    return list(seen)
