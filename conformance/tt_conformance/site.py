"""The published site: static HTML + Markdown from jinja2 templates (templates/).

    out/index.html, out/MATRIX.md          the matrix: a column per concern, tiers, versions
    out/history/<model>--<device>.html|md  every run, grouped by tt-metal commit, perf trends
    out/history/<model>--<device>.json     the run index of that model and device
    out/compare/<model>--<device>--<a>--<b>.html|md   two runs through the gate's comparison
    out/compare/index.html                 every comparison

Data comes from matrix.py (cells, concern states), history.py (runs, groups, trends) and
gate.compare; this module only arranges it for the templates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined

from tt_conformance._names import path_component
from tt_conformance.gate import GateResult, compare
from tt_conformance.history import (
    UNKNOWN,
    Run,
    Trend,
    by_model_device,
    compare_pairs,
    distinct_runs,
    group_by_commit,
    index_entry,
    trends,
    write_index,
)
from tt_conformance.matrix import (
    CONCERN_STATES,
    KEY_PERF,
    MatrixCell,
    all_concerns,
    check_counts,
    concern_not_run,
    concern_status,
    fold,
    render_markdown,
    short_check,
)
from tt_conformance.render import format_number
from tt_conformance.report import Report, atomic_write_text

CONCERN_CLASS = {
    "pass": "c-pass",
    "pass with expected failures": "c-expected",
    "pass, some not run": "c-partial",
    "fail": "c-fail",
    "not run": "c-notrun",
}
TIER_CLASS = {
    "complete": "s-complete",
    "functional": "s-functional",
    "experimental": "s-experimental",
    "fail": "s-fail",
    "aborted": "s-fail",
}


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("tt_conformance", "templates"),
        autoescape=lambda name: bool(name and name.endswith(".html.jinja")),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = lambda v: "—" if v is None else format_number(float(v))
    env.filters["short"] = short_check
    env.filters["slug"] = path_component
    env.filters["md"] = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
    env.globals["UNKNOWN"] = UNKNOWN
    env.globals["CONCERN_CLASS"] = CONCERN_CLASS
    env.globals["TIER_CLASS"] = TIER_CLASS
    env.globals["CONCERN_STATES"] = CONCERN_STATES
    return env


ENV = _environment()


def render_template(name: str, **context: object) -> str:
    return ENV.get_template(name).render(**context)


def history_slug(model: str, device: str) -> str:
    return f"{path_component(model)}--{path_component(device)}"


def compare_slug(a: Run, b: Run) -> str:
    return f"{history_slug(*b.key)}--{a.report.run_id}--{b.report.run_id}"


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


def render_matrix_html(cells: Sequence[MatrixCell], generated_at: str, links: bool) -> str:
    concerns = all_concerns([c.report for c in cells])
    return render_template(
        "matrix.html.jinja",
        rows=matrix_rows(cells, concerns),
        concerns=concerns,
        generated_at=generated_at,
        key_perf=[label for label, _ in KEY_PERF],
        links=links,
    )


def render_matrix_markdown(cells: Sequence[MatrixCell], generated_at: str, links: bool) -> str:
    concerns = all_concerns([c.report for c in cells])
    return render_template(
        "matrix.md.jinja",
        rows=matrix_rows(cells, concerns),
        concerns=concerns,
        generated_at=generated_at,
        links=links,
    )


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


def _change(trend: Trend) -> str:
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
    # The site shows differences, not a verdict: no expectations, no tolerance.
    return [Comparison(compare_slug(a, b), a, b, compare(a.report, b.report)) for a, b in
            compare_pairs(runs) if a.report.checks]  # fmt: skip


def build_site(
    found: Sequence[tuple[Path, Report]], out: Path, generated_at: str
) -> dict[str, list[Path]]:
    """Write the whole site; returns the written pages by kind."""
    runs = distinct_runs(found)
    cells = fold([(r.path, r.report) for r in runs])
    written: dict[str, list[Path]] = {"matrix": [], "history": [], "compare": []}
    matrix_html = out / "index.html"
    atomic_write_text(matrix_html, render_matrix_html(cells, generated_at, links=True))
    matrix_md = out / "MATRIX.md"
    atomic_write_text(matrix_md, render_markdown(cells, generated_at, links=True))
    written["matrix"] += [matrix_html, matrix_md]
    all_comparisons: list[Comparison] = []
    for (model, device), history in by_model_device(runs).items():
        slug = history_slug(model, device)
        pairs = comparisons(history)
        all_comparisons += pairs
        context = {
            "model": model,
            "device": device,
            "groups": group_by_commit(history),
            "trends": [(t, sparkline(t), _change(t)) for t in trends(history)],
            "compare_of": {c.newer.report.run_id: c.slug for c in pairs},
            "unknown_of": {r.report.run_id: unknown_versions(r.report) for r in history},
            "generated_at": generated_at,
        }
        for ext in ("html", "md"):
            page = out / "history" / f"{slug}.{ext}"
            atomic_write_text(page, render_template(f"history.{ext}.jinja", **context))
            written["history"].append(page)
        write_index(
            out / "history" / f"{slug}.json",
            model,
            device,
            [index_entry(r.report, str(r.path)) for r in history],
        )
        for comp in pairs:
            ctx = {"c": comp, "generated_at": generated_at}
            for ext in ("html", "md"):
                page = out / "compare" / f"{comp.slug}.{ext}"
                atomic_write_text(page, render_template(f"compare.{ext}.jinja", **ctx))
                written["compare"].append(page)
    index = out / "compare" / "index.html"
    atomic_write_text(
        index,
        render_template("compare_index.html.jinja", comparisons=all_comparisons,
                        generated_at=generated_at),
    )  # fmt: skip
    written["compare"].append(index)
    return written


def render_step_summary(report: Report, gate_text: str | None = None) -> str:
    """Markdown for $GITHUB_STEP_SUMMARY: tier, concerns, failures, key perf, the gate."""
    concerns = all_concerns([report])
    cells = fold([(Path(report.run_id), report)])
    return render_template(
        "summary.md.jinja",
        r=report,
        cell=cells[0],
        concerns={c: concern_status(report, c) for c in concerns},
        unknown=unknown_versions(report),
        key_perf=[label for label, _ in KEY_PERF],
        gate_text=gate_text,
    )
