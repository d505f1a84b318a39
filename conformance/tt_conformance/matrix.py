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
import html
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
    return tier_of(report).tier


def not_run_concerns(report: Report) -> tuple[str, ...]:
    """Concerns the report holds checks of, all of them skipped: shown as not run, never pass."""
    outcomes: dict[str, set[str]] = {}
    for check in report.checks:
        outcomes.setdefault(check.concern, set()).add(check.outcome)
    return tuple(sorted(c for c, seen in outcomes.items() if seen == {"skip"}))


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


def _counts(cell: MatrixCell) -> str:
    t = cell.report.totals
    passed = t["pass"] + t["flaky"] + t["xpass"]
    text = f"{passed}/{t['total']} passed"
    extras = [(t["xfail"], "expected failures"), (t["skip"], "not run")]
    not_run = not_run_concerns(cell.report)
    tail = f"; not run: {', '.join(not_run)}" if not_run else ""
    return text + "".join(f", {n} {label}" for n, label in extras if n) + tail


# ----------------------------------------------------------------------------- Markdown


def render_markdown(cells: Sequence[MatrixCell], generated_at: str) -> str:
    models = sorted({c.model for c in cells})
    devices = sorted({c.device for c in cells})
    by_key = {(c.model, c.device): c for c in cells}
    lines = [
        "# Model support matrix",
        "",
        f"Generated {generated_at} from {len(cells)} reports.",
        "",
    ]
    if not cells:
        lines.append("No reports found.")
        return "\n".join(lines) + "\n"
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
                _counts(c),
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

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem; color: #1d2330;
       background: #fafbfc; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
p.meta { color: #5a6272; margin-top: 0; }
table { border-collapse: collapse; margin: 1rem 0 2rem; background: #fff;
        box-shadow: 0 1px 3px rgba(0,0,0,.08); }
th, td { border: 1px solid #dde1e7; padding: .45rem .6rem; text-align: left; vertical-align: top;
         font-size: .9rem; }
th { background: #eef1f5; position: sticky; top: 0; }
td.status { font-weight: 600; white-space: nowrap; }
.s-complete { background: #c4ecd0; color: #0f5122; }
.s-functional { background: #e1f4e6; color: #17632c; }
.s-experimental { background: #fff1c7; color: #7a5600; }
.s-fail { background: #fbd9d9; color: #8c1c1c; }
.s-none { background: #eceef1; color: #5a6272; }
ul { margin: 0; padding-left: 1.1rem; }
code { font-size: .82rem; }
.legend span { display: inline-block; padding: .15rem .5rem; margin-right: .4rem;
               border-radius: 3px; }
"""

_STATUS_CLASS = {
    STATUS_COMPLETE: "s-complete",
    STATUS_FUNCTIONAL: "s-functional",
    STATUS_EXPERIMENTAL: "s-experimental",
    STATUS_FAIL: "s-fail",
}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _list(items: Sequence[str], code: bool = True) -> str:
    if not items:
        return "—"
    wrap = (lambda s: f"<code>{_e(s)}</code>") if code else _e
    return "<ul>" + "".join(f"<li>{wrap(i)}</li>" for i in items) + "</ul>"


def render_html(cells: Sequence[MatrixCell], generated_at: str) -> str:
    models = sorted({c.model for c in cells})
    devices = sorted({c.device for c in cells})
    by_key = {(c.model, c.device): c for c in cells}
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Model support matrix</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Model support matrix</h1>",
        f'<p class="meta">Generated {_e(generated_at)} from {len(cells)} reports.</p>',
        '<p class="legend">'
        + "".join(f'<span class="{cls}">{_e(name)}</span>' for name, cls in _STATUS_CLASS.items())
        + "</p>",
    ]
    if not cells:
        out += ["<p>No reports found.</p>", "</body></html>"]
        return "\n".join(out) + "\n"
    out.append("<table><thead><tr><th>model</th>")
    out += [f"<th>{_e(d)}</th>" for d in devices]
    out.append("</tr></thead><tbody>")
    for m in models:
        out.append(f"<tr><th>{_e(m)}</th>")
        for d in devices:
            cell = by_key.get((m, d))
            if cell is None:
                out.append('<td class="status s-none">—</td>')
            else:
                out.append(
                    f'<td class="status {_STATUS_CLASS[cell.status]}">{_e(cell.status)}'
                    f"<br><small>{_e(_counts(cell))}</small></td>"
                )
        out.append("</tr>")
    out.append("</tbody></table>")
    headers = [
        "model", "device", "tier", "why / next tier needs", "accuracy", "checks",
        "failing checks", "expected failures", "flaky", "not run",
        *[label for label, _ in KEY_PERF], "versions", "run",
    ]  # fmt: skip
    out.append("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers))
    out.append("</tr></thead><tbody>")
    for c in cells:
        v = c.report.versions
        mesh = f"<br><small>mesh {_e(c.report.mesh_shape)}</small>" if c.report.mesh_shape else ""
        out.append(
            "<tr>"
            f"<td>{_e(c.model)}</td><td>{_e(c.device)}{mesh}"
            f'</td><td class="status {_STATUS_CLASS[c.status]}">{_e(c.status)}</td>'
            f"<td>{_e(c.tier.reason)}<br><small>next: {_e(c.tier.next_blocker or '—')}</small></td>"
            f"<td>{_e(_accuracy_text(c))}</td>"
            f"<td>{_e(_counts(c))}</td>"
            f"<td>{_list([short_check(x) for x in c.failing])}</td>"
            f"<td>{_list([short_check(x) for x in c.expected])}</td>"
            f"<td>{_list([short_check(x) for x in c.flaky])}</td>"
            f"<td>{_list(list(c.not_run), code=False)}</td>"
            + "".join(
                f"<td>{_list(_perf_text(c.key_perf[label]), code=False)}</td>"
                for label, _ in KEY_PERF
            )
            + f"<td>vLLM {_e(v.vllm)}<br>plugin {_e(v.plugin)}<br>ttnn {_e(v.ttnn)}"
            f"<br>tt-metal {_e(v.tt_metal)}</td>"
            f"<td><small>{_e(c.report.run_id)}<br>{_e(c.report.finished_at)}</small></td>"
            "</tr>"
        )
    out += ["</tbody></table>", "</body></html>"]
    return "\n".join(out) + "\n"


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
        "--include-baselines",
        action="store_true",
        help="also consider reports under baselines/ directories",
    )
    args = parser.parse_args(argv)
    try:
        cells = fold(find_reports(args.report_dir, args.include_baselines))
    except MatrixError as exc:
        print(f"tt-conformance-matrix: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    generated = utc_now_iso()
    out_md = args.out_md or args.report_dir / "MATRIX.md"
    out_html = args.out_html or args.report_dir / "matrix.html"
    atomic_write_text(out_md, render_markdown(cells, generated))
    atomic_write_text(out_html, render_html(cells, generated))
    failing = sum(1 for c in cells if c.status == STATUS_FAIL)
    print(f"matrix: {len(cells)} model x device entries ({failing} failing)")
    print(f"markdown: {out_md}\nhtml: {out_html}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
