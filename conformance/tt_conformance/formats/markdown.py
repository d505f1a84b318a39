"""Markdown renderings: a run's report (tabulate), the support matrix, history and compare
pages and the CI step summary (jinja2 templates, shared with the HTML pages through `views`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from tt_conformance.formats.cells import OUTCOME_ORDER, md_cell, shape_text
from tt_conformance.formats.templates import render_template
from tt_conformance.formats.text import JudgedAgainst, content_digest, gate_headline
from tt_conformance.formats.views import (
    Comparison,
    check_counts,
    matrix_rows,
    pivot,
    story_text,
    unknown_versions,
)
from tt_conformance.history import CellStory
from tt_conformance.matrix import (
    KEY_PERF,
    MatrixCell,
    all_concerns,
    concern_status,
    fold,
    short_check,
)
from tt_conformance.mutation import NO_CAMPAIGN, PublishedScore
from tt_conformance.numfmt import format_number
from tt_conformance.report import OUTCOMES, PerfFigure, Report
from tt_conformance.tiers import perf_is_informational
from tt_conformance.ttmetrics import SITUATION_WORDS

__all__ = [
    "render_compare_markdown",
    "render_history_markdown",
    "render_matrix_markdown",
    "render_report_markdown",
    "render_step_summary",
]


def render_report_markdown(report: Report) -> str:
    """The run's report page (<run>.md): provenance, totals, checks, accuracy, perf."""
    totals = report.counts
    tier = report.tier
    run = report.run
    lines = [
        f"# Conformance report: {md_cell(report.model)} on {md_cell(report.device)}",
        "",
        tabulate(
            [
                [
                    "status",
                    "**ABORTED**: " + md_cell(report.aborted.reason, 600)
                    if report.aborted
                    else "complete run",
                ],
                ["tier", md_cell(tier.tier if tier else "not derived")],
                ["tier reason", md_cell(tier.reason if tier else "")],
                ["next tier needs", md_cell((tier.next_blocker if tier else None) or "—")],
                ["run", md_cell(report.run_id)],
                ["started / finished", md_cell(f"{report.started_at} / {report.finished_at}")],
                ["command", md_cell(" ".join(run.command) if run else "unknown", 600)],
                ["host", md_cell(run.host if run else "unknown")],
                [
                    "device / mesh shape",
                    f"{md_cell(report.device)} / {md_cell(report.mesh_shape or 'n/a')}",
                ],
                ["vLLM", md_cell(report.versions.vllm)],
                ["plugin", md_cell(report.versions.plugin)],
                ["ttnn", md_cell(report.versions.ttnn)],
                ["tt-metal", md_cell(report.versions.tt_metal)],
                ["harness", md_cell(report.versions.harness)],
                ["server", md_cell(report.server.url)],
                ["max_num_seqs / lanes", f"{report.server.max_num_seqs} / {report.server.lanes}"],
                ["max_model_len", str(report.server.max_model_len or "unknown")],
                ["model class", md_cell(report.server.model_class or "unknown")],
                [
                    "read from the server",
                    md_cell(", ".join(report.server.discovered) or "nothing (flags/defaults)"),
                ],
                [
                    "server options",
                    md_cell(report.server_options if report.server_options is not None else ""),
                ],
                ["expectations", md_cell(report.expectations_file or "none")],
                ["pytest exit status", str(report.exit_status)],
            ],
            headers=["run", "value"],
            tablefmt="github",
        ),
        "",
        "## Totals",
        "",
        tabulate(
            [[totals[o] for o in OUTCOMES] + [totals["total"]]],
            headers=[*OUTCOMES, "total"],
            tablefmt="github",
        ),
        "",
    ]
    if report.collection_errors:
        lines += ["## Collection errors", ""]
        lines.append(
            tabulate(
                [[md_cell(e.nodeid), md_cell(e.message)] for e in report.collection_errors],
                headers=["module", "error"],
                tablefmt="github",
            )
        )
        lines.append("")
    lines += ["## Checks", ""]
    ordered = sorted(report.checks, key=lambda c: (OUTCOME_ORDER.get(c.outcome, 99), c.id))
    if ordered:
        lines.append(
            tabulate(
                [
                    [
                        md_cell(c.outcome),
                        md_cell(c.concern),
                        md_cell(c.id),
                        f"{c.duration_s:.2f}",
                        c.attempts,
                        md_cell(c.reason),
                    ]
                    for c in ordered
                ],
                headers=["outcome", "concern", "check", "seconds", "attempts", "reason"],
                tablefmt="github",
                disable_numparse=True,
            )
        )
    else:
        lines.append("No checks ran.")
    lines += ["", "## Accuracy", ""]
    if report.accuracy:
        lines.append(
            tabulate(
                [
                    [
                        md_cell(a.task),
                        md_cell(a.verdict),
                        f"{a.score:.3f}",
                        f"{a.ci_low:.3f} to {a.ci_high:.3f}",
                        str(a.num_samples),
                        "—" if a.reference is None else f"{a.reference:.3f}",
                        "—" if a.threshold is None else f"{a.threshold:.3f}",
                        f"{a.tolerance:.3f}",
                    ]
                    for a in report.accuracy
                ],
                headers=[
                    "task",
                    "verdict",
                    "score",
                    "95% CI",
                    "samples",
                    "reference",
                    "threshold",
                    "tolerance",
                ],
                tablefmt="github",
                disable_numparse=True,
            )
        )
    else:
        lines.append("No accuracy verdict (no accuracy entry in the expectations).")
    lines += ["", "## Serving performance", ""]
    if report.perf:
        lines.append(
            tabulate(
                [
                    [
                        md_cell(p.name),
                        format_number(p.value),
                        md_cell(p.unit),
                        shape_text(p),
                        md_cell(p.source),
                        md_cell(p.flag or ""),
                    ]
                    for _, p in sorted(report.perf.items())
                ],
                headers=["figure", "value", "unit", "in/out @ conc", "source", "flag"],
                tablefmt="github",
                disable_numparse=True,
            )
        )
    else:
        lines.append("No performance figures recorded.")
    if report.perf_targets:
        lines += ["", "### Perf targets", ""]
        lines.append(
            tabulate(
                [
                    [
                        md_cell(t.figure),
                        format_number(t.reference),
                        md_cell(t.source),
                        "n/a" if t.fraction is None else f"{t.fraction:.1%}",
                        f"{t.functional:.0%} / {t.complete:.0%} / {t.target:.0%}",
                        md_cell(t.met),
                    ]
                    for t in report.perf_targets
                ],
                headers=[
                    "figure",
                    "reference",
                    "source",
                    "achieved",
                    "functional / complete / target",
                    "met",
                ],
                tablefmt="github",
                disable_numparse=True,
            )
        )
    lines += _situation_lines(report.situations)
    lines += _cell_lines(report.matrix_cells)
    if report.warnings:
        lines += ["", "## Warnings", ""]
        lines += [f"- {md_cell(w, 1000)}" for w in report.warnings]
    return "\n".join(lines) + "\n"


def _situation_lines(situations: dict[str, int] | None) -> list[str]:
    lines = ["", "## Situations the run created", ""]
    if situations is None:
        return [*lines, "Not counted (the server publishes no TT situations, or see Warnings)."]
    lines.append(
        "Counted by the plugin on the server over the run (server-wide: another client's "
        "traffic counts too). A situation at 0 was not created, so no check saw it."
    )
    lines.append("")
    rows = [
        [md_cell(name), md_cell(SITUATION_WORDS.get(name, "")), str(n) if n else "0: not created"]
        for name, n in situations.items()
    ]
    lines.append(tabulate(rows, headers=["situation", "what", "count"], tablefmt="github"))
    return lines


def _cell_lines(cells: dict[str, tuple[str, ...]] | None) -> list[str]:
    if not cells:
        return []
    lines = ["", "## Situation-matrix cells that ran", ""]
    lines.append(
        "Per concern, the generated cases (tt_conformance.situation_matrix) its checks served "
        "and compared in this run."
    )
    lines.append("")
    rows = [
        [md_cell(c), str(len(labels)), md_cell("; ".join(labels), 4000)]
        for c, labels in cells.items()
    ]
    lines.append(tabulate(rows, headers=["concern", "cells", "which"], tablefmt="github"))
    return lines


def _perf_text(figures: Sequence[PerfFigure]) -> list[str]:
    out = []
    for f in figures:
        shape = f.name.partition("@")[2] or f.name
        mark = " (unreliable)" if f.flag else ""
        out.append(f"{shape}: {format_number(f.value)}{mark}")
    return out


def _accuracy_text(cell: MatrixCell) -> str:
    acc = cell.report.accuracy
    if not acc:
        return "—"
    return "; ".join(
        f"{a.task} {a.score:.3f} [{a.ci_low:.2f}, {a.ci_high:.2f}] {a.verdict}" for a in acc
    )


def render_matrix_markdown(
    cells: Sequence[MatrixCell],
    generated_at: str,
    links: bool = False,
    stories: dict[tuple[str, str, str], CellStory | None] | None = None,
    mutation: PublishedScore = NO_CAMPAIGN,
) -> str:
    """The concern table (templates/matrix.md.jinja), then the tier per model and device with
    each cell's story (``stories``: since, last good, drops; history.stories), then the
    details per row, then the plugin's mutation score (templates/mutation.md.jinja)."""
    score = render_template("mutation.md.jinja", mutation=mutation).strip("\n")
    return (
        _matrix_markdown(cells, generated_at, links, stories).rstrip("\n") + "\n\n" + score + "\n"
    )


def _matrix_markdown(
    cells: Sequence[MatrixCell],
    generated_at: str,
    links: bool,
    stories: dict[tuple[str, str, str], CellStory | None] | None,
) -> str:
    concerns = all_concerns([c.report for c in cells])
    head = render_template(
        "matrix.md.jinja",
        rows=matrix_rows(cells, concerns),
        concerns=concerns,
        generated_at=generated_at,
        links=links,
    )
    if not cells:
        return head
    lines = [head.rstrip("\n")]
    # Tier per model x device column at a glance (a lane-DP server is its own column): the
    # newest run's setup, with its story; superseded setups are marked in the rows above.
    grid = pivot(cells, stories)
    lines += ["", "## Tier by device", ""]
    lines.append(
        "The newest run of each model and device, with since (the first run of its current "
        "streak), last good (the newest run that neither failed nor was aborted) and ↓ (a "
        "drop, marked until the cell recovers; perf ↓: a key figure more than 10 % worse on "
        "TT hardware)."
    )
    lines.append("")
    devices = [*grid.hardware, *grid.apart]
    lines.append(
        tabulate(
            [
                [md_cell(m)]
                + [
                    md_cell(story_text(grid.cells[(m, d)][0].cell, grid.cells[(m, d)][0].story))
                    if (m, d) in grid.cells
                    else "—"
                    for d in devices
                ]
                for m in grid.models
            ],
            headers=["model", *[md_cell(d) for d in devices]],
            tablefmt="github",
        )
    )
    lines += ["", "## Details", ""]
    rows = []
    for c in cells:
        v = c.report.versions
        rows.append(
            [
                md_cell(c.model),
                md_cell(c.device),
                md_cell(
                    c.profile + (f" (superseded by {c.superseded_by})" if c.superseded_by else "")
                ),
                md_cell(c.status),
                md_cell(c.tier.reason, 400),
                md_cell(c.tier.next_blocker or "—", 400),
                md_cell(_accuracy_text(c)),
                check_counts(c),
                md_cell(", ".join(short_check(x) for x in c.failing) or "—", 600),
                md_cell(", ".join(short_check(x) for x in c.expected) or "—", 600),
                *[
                    md_cell("; ".join(_perf_text(c.key_perf[label])) or "—")
                    for label, _ in KEY_PERF
                ],
                md_cell(c.target_text or "—"),
                md_cell(c.fraction_text or "—"),
                md_cell(v.vllm),
                md_cell(v.plugin),
                md_cell(v.ttnn),
                md_cell(v.tt_metal),
                md_cell(c.report.finished_at),
            ]
        )
    lines.append(
        tabulate(
            rows,
            headers=[
                "model",
                "device",
                "configuration",
                "tier",
                "why",
                "next tier needs",
                "accuracy",
                "checks",
                "failing checks",
                "expected failures",
                *[label for label, _ in KEY_PERF],
                "target T/S/U",
                "fraction of target",
                "vLLM",
                "plugin",
                "ttnn",
                "tt-metal",
                "run finished",
            ],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    notes = [
        f"- {md_cell(c.model)} on {md_cell(c.device)}: flaky {md_cell(', '.join(c.flaky))}"
        for c in cells
        if c.flaky
    ] + [
        f"- {md_cell(c.model)} on {md_cell(c.device)}: expected failures now passing "
        f"{md_cell(', '.join(c.improvements))}"
        for c in cells
        if c.improvements
    ]
    notes += [
        f"- {md_cell(c.model)} on {md_cell(c.device)} ({md_cell(c.profile)}): superseded by "
        f"the newer setup {md_cell(c.superseded_by)}"
        + (
            f"; the setups differ: {md_cell('; '.join(c.superseded_because))}"
            if c.superseded_because
            else ""
        )
        for c in cells
        if c.superseded_by
    ]
    notes += [
        f"- {md_cell(c.model)} on {md_cell(c.device)}: not run: {md_cell(line, 300)}"
        for c in cells
        for line in c.not_run
    ]
    if notes:
        lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


def render_history_markdown(context: dict[str, Any]) -> str:
    """A model and device's history page (context: `views.history_context`)."""
    return render_template("history.md.jinja", **context)


def render_compare_markdown(comparison: Comparison, generated_at: str) -> str:
    return render_template("compare.md.jinja", c=comparison, generated_at=generated_at)


def render_step_summary(
    report: Report, gate_text: str | None = None, against: JudgedAgainst | None = None
) -> str:
    """Markdown for $GITHUB_STEP_SUMMARY: tier, concerns, failures, key perf, the gate; an OK
    titles it only when judged against ``against`` (`formats.text.gate_headline`)."""
    concerns = all_concerns([report])
    cells = fold([(Path(report.run_id), report)])
    # tt-metal and ttnn exist only on TT hardware: elsewhere no flag should label them.
    hardware = not perf_is_informational(report.device)
    unknown = tuple(
        v for v in unknown_versions(report) if hardware or v not in ("tt-metal", "ttnn")
    )
    return render_template(
        "summary.md.jinja",
        r=report,
        cell=cells[0],
        concerns={c: concern_status(report, c) for c in concerns},
        unknown=unknown,
        hardware=hardware,
        key_perf=[label for label, _ in KEY_PERF],
        gate_text=gate_text,
        gate=(
            gate_headline(gate_text, report.run_id, content_digest(report), against)
            if gate_text
            else None
        ),
    )
