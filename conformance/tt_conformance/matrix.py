"""Fold a tree of reports into the model support matrix (Markdown + self-contained HTML).

Usage: tt-conformance-matrix [REPORT_DIR] [--out-md FILE] [--out-html FILE] [--include-baselines]

REPORT_DIR (default ``reports``) is searched recursively for report JSON files (other JSON, such
as expectations, is ignored; so is the ``baselines/`` subtree unless --include-baselines). The
newest report per model x device is shown (a lane-DP server, lanes > 1, is its own column).
Outputs default to REPORT_DIR/MATRIX.md and REPORT_DIR/matrix.html. Exit codes: 0 written,
2 bad input (missing directory, malformed report).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from tt_conformance.render import format_number, md_cell
from tt_conformance.report import (
    FAILING,
    REPORT_KIND,
    PerfFigure,
    Report,
    ReportError,
    Tier,
    atomic_write_text,
    load_report,
    utc_now_iso,
)
from tt_conformance.tiers import derive_tier

EXIT_OK = 0
EXIT_BAD_INPUT = 2

# A cell's status is the report's tier (tiers.py): TT's vocabulary.
STATUS_COMPLETE = "complete"
STATUS_FUNCTIONAL = "functional"
STATUS_EXPERIMENTAL = "experimental"
STATUS_FAIL = "fail"
# A run stopped because the server under test went away (abort.py): shown as such, whatever its
# tier (which is "fail"); it counts as failing.
STATUS_ABORTED = "aborted"
# A skipped check (not exercised on this launch, not applicable on a non-TT server, needs
# lanes) never counts as passed: the counts say "not run" and the notes give each reason.
# Key perf figures are picked by name prefix (see record_perf's naming convention): the means,
# as TT's tables quote them.
KEY_PERF: tuple[tuple[str, str], ...] = (
    ("TTFT (ms)", "ttft_mean@"),
    ("tok/s/user", "tps_user_mean@"),
    ("tok/s", "tps@"),
)


class MatrixError(Exception):
    """Bad input for the matrix: the message names the directory or file."""


@dataclass(frozen=True)
class MatrixCell:
    report: Report
    path: Path
    status: str
    tier: Tier
    failing: tuple[str, ...]
    expected: tuple[str, ...]
    flaky: tuple[str, ...]
    improvements: tuple[str, ...]
    key_perf: dict[str, tuple[PerfFigure, ...]]
    not_run: tuple[str, ...] = ()  # "<check>: <reason>"

    @property
    def model(self) -> str:
        return self.report.model

    @property
    def device(self) -> str:
        return column_of(self.report)


def column_of(report: Report) -> str:
    """The matrix column: the device, split by lanes (a lane-DP server is its own column)."""
    lanes = report.server.lanes
    return report.device if lanes <= 1 else f"{report.device} ({lanes} lanes)"


def tier_of(report: Report) -> Tier:
    """The report's stored tier; derived for reports written before tiers existed."""
    return report.tier or derive_tier(report)


def status_of(report: Report) -> str:
    return STATUS_ABORTED if report.aborted is not None else tier_of(report).tier


def not_run_concerns(report: Report) -> tuple[str, ...]:
    """Concerns the report holds checks of, all of them skipped: shown as not run, never pass."""
    outcomes: dict[str, set[str]] = {}
    for check in report.checks:
        outcomes.setdefault(check.concern, set()).add(check.outcome)
    return tuple(sorted(c for c, seen in outcomes.items() if seen == {"skip"}))


# Per-concern cell states of the matrix (the legend's vocabulary).
CONCERN_PASS = "pass"
CONCERN_EXPECTED = "pass with expected failures"
CONCERN_PARTIAL = "pass, some not run"
CONCERN_FAIL = "fail"
CONCERN_NOT_RUN = "not run"
CONCERN_STATES = (CONCERN_PASS, CONCERN_EXPECTED, CONCERN_PARTIAL, CONCERN_FAIL, CONCERN_NOT_RUN)


def concern_status(report: Report, concern: str) -> str:
    """fail if any check of the concern failed or errored; not run when the report has none of
    its checks or all of them were skipped (not exercised, not applicable, needs lanes); pass
    with expected failures when some xfailed; pass, some not run when some were skipped: a
    skipped check never reads as a plain pass."""
    outcomes = {c.outcome for c in report.checks if c.concern == concern}
    if outcomes & set(FAILING):
        return CONCERN_FAIL
    if not outcomes - {"skip"}:
        return CONCERN_NOT_RUN
    if "xfail" in outcomes:
        return CONCERN_EXPECTED
    if "skip" in outcomes:
        return CONCERN_PARTIAL
    return CONCERN_PASS


def concern_not_run(report: Report, concern: str) -> tuple[str, ...]:
    """The skipped checks of a concern with their reasons (the cell's tooltip and notes)."""
    return tuple(
        f"{short_check(c.id)}: {c.reason}"
        for c in sorted(report.checks, key=lambda c: c.id)
        if c.concern == concern and c.outcome == "skip"
    )


def all_concerns(reports: Sequence[Report]) -> tuple[str, ...]:
    return tuple(sorted({c.concern for r in reports for c in r.checks if c.concern}))


def find_reports(root: Path, include_baselines: bool = False) -> list[tuple[Path, Report]]:
    if not root.is_dir():
        raise MatrixError(f"{root}: report directory does not exist")
    found: list[tuple[Path, Report]] = []
    for path in sorted(root.rglob("*.json")):
        if not include_baselines and "baselines" in path.relative_to(root).parts[:-1]:
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise MatrixError(f"{path}: cannot read as JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("kind") != REPORT_KIND:
            continue  # expectations files and other JSON live in the same tree
        try:
            found.append((path, load_report(path)))
        except ReportError as exc:
            raise MatrixError(str(exc)) from None
    return found


def fold(reports: Sequence[tuple[Path, Report]]) -> list[MatrixCell]:
    """Newest report per (model, device column); latest.json and its run file count once."""
    newest: dict[tuple[str, str], tuple[Path, Report]] = {}
    for path, report in reports:
        key = (report.model, column_of(report))
        current = newest.get(key)
        rank = (report.finished_at, report.run_id, path.name != "latest.json")
        if current is None or rank > (
            current[1].finished_at,
            current[1].run_id,
            current[0].name != "latest.json",
        ):
            newest[key] = (path, report)
    return [_cell(path, report) for _, (path, report) in sorted(newest.items())]


def _cell(path: Path, report: Report) -> MatrixCell:
    key_perf = {
        label: tuple(
            fig for name, fig in sorted(report.perf.items()) if name.lower().startswith(prefix)
        )
        for label, prefix in KEY_PERF
    }
    return MatrixCell(
        report=report,
        path=path,
        status=status_of(report),
        tier=tier_of(report),
        failing=tuple(
            [f"collection: {e.nodeid}" for e in report.collection_errors]
            + sorted(c.id for c in report.checks_with(*FAILING))
        ),
        expected=tuple(sorted(c.id for c in report.checks_with("xfail"))),
        flaky=tuple(sorted(c.id for c in report.checks_with("flaky"))),
        improvements=tuple(sorted(c.id for c in report.checks_with("xpass"))),
        key_perf=key_perf,
        not_run=tuple(
            f"{short_check(c.id)}: {c.reason}"
            for c in sorted(report.checks_with("skip"), key=lambda c: c.id)
        ),
    )


def short_check(check_id: str) -> str:
    return check_id.removeprefix("tt_conformance.checks.")


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


def check_counts(cell: MatrixCell) -> str:
    t = cell.report.counts
    passed = t["pass"] + t["flaky"] + t["xpass"]
    text = f"{passed}/{t['total']} passed"
    extras = [(t["xfail"], "expected failures"), (t["skip"], "not run")]
    not_run = not_run_concerns(cell.report)
    tail = f"; not run: {', '.join(not_run)}" if not_run else ""
    return text + "".join(f", {n} {label}" for n, label in extras if n) + tail


# ----------------------------------------------------------------------------- Markdown


def render_markdown(cells: Sequence[MatrixCell], generated_at: str, links: bool = False) -> str:
    """The concern table (templates/matrix.md.jinja), then the details per model and device."""
    from tt_conformance.site import render_matrix_markdown  # site imports this module

    head = render_matrix_markdown(cells, generated_at, links)
    if not cells:
        return head
    lines = [head.rstrip("\n")]
    # Tier per model x device column at a glance (a lane-DP server is its own column).
    models = sorted({c.model for c in cells})
    devices = sorted({c.device for c in cells})
    by_key = {(c.model, c.device): c for c in cells}
    lines += ["", "## Tier by device", ""]
    lines.append(
        tabulate(
            [
                [md_cell(m)]
                + [md_cell(by_key[(m, d)].status) if (m, d) in by_key else "—" for d in devices]
                for m in models
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
                "tier",
                "why",
                "next tier needs",
                "accuracy",
                "checks",
                "failing checks",
                "expected failures",
                *[label for label, _ in KEY_PERF],
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
        f"- {md_cell(c.model)} on {md_cell(c.device)}: not run: {md_cell(line, 300)}"
        for c in cells
        for line in c.not_run
    ]
    if notes:
        lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- HTML


def render_html(cells: Sequence[MatrixCell], generated_at: str) -> str:
    """The standalone matrix page (templates/matrix.html.jinja, without site links)."""
    from tt_conformance.site import render_matrix_html  # site imports this module

    return render_matrix_html(cells, generated_at, links=False)


# ----------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tt-conformance-matrix",
        description="Fold conformance reports into a model x device support matrix.",
    )
    parser.add_argument("report_dir", nargs="?", default="reports", type=Path)
    parser.add_argument("--out-md", type=Path, default=None, help="default REPORT_DIR/MATRIX.md")
    parser.add_argument(
        "--out-html", type=Path, default=None, help="default REPORT_DIR/matrix.html"
    )
    parser.add_argument(
        "--site",
        type=Path,
        default=None,
        help="also build the site (matrix, history and compare pages) into this directory",
    )
    parser.add_argument(
        "--include-baselines",
        action="store_true",
        help="also consider reports under baselines/ directories",
    )
    args = parser.parse_args(argv)
    try:
        found = find_reports(args.report_dir, args.include_baselines)
        cells = fold(found)
    except MatrixError as exc:
        print(f"tt-conformance-matrix: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    generated = utc_now_iso()
    out_md = args.out_md or args.report_dir / "MATRIX.md"
    out_html = args.out_html or args.report_dir / "matrix.html"
    atomic_write_text(out_md, render_markdown(cells, generated))
    atomic_write_text(out_html, render_html(cells, generated))
    failing = sum(1 for c in cells if c.status in (STATUS_FAIL, STATUS_ABORTED))
    print(f"matrix: {len(cells)} model x device entries ({failing} failing)")
    print(f"markdown: {out_md}\nhtml: {out_html}")
    if args.site is not None:
        from tt_conformance.site import build_site

        pages = build_site(found, args.site, generated)
        print(
            f"site: {args.site / 'index.html'} ({len(pages['history']) // 2} history pages, "
            f"{(len(pages['compare']) - 1) // 2} comparisons)"
        )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
