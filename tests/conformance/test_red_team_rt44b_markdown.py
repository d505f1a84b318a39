"""Red team rt44b #23 against the Markdown outputs: report text carrying HTML, a cell break
and a newline into a heading. Rendered through every Markdown output (a run's page, MATRIX.md,
the site's matrix, history and compare pages, the CI step summary), it stays inert: no raw tag,
no line of its own, no extra table cell; and an honest name reads back exactly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tt_conformance import matrix, writers
from tt_conformance.formats.markdown import render_report_markdown, render_step_summary
from tt_conformance.matrix import find_reports
from tt_conformance.report import Report
from tt_conformance.tiers import derive_tier

HOSTILE = "m<img src=x onerror=alert(1)>|evil\n## gate OK"
# Each field the red team (or a careless writer) controls, marked so a line can be traced.
FIELDS = ("model", "plugin", "vllm", "tt_metal", "reason", "check", "concern", "flag", "unit")


def _hostile(field: str) -> str:
    return HOSTILE.replace("evil", f"evil-{field}")


def _run(make_report: Any, seq: int) -> Report:
    check = f"m::a{_hostile('check')}"
    report = make_report(
        {check: "fail", "m::b": "pass"},
        model=_hostile("model"),
        device="T3K",
        tt_metal=f"v{seq}{_hostile('tt_metal')}",
        finished_at=f"2025-01-0{seq}T00:00:00Z",
        perf={"ttft_median@i128o128c1": (100.0 + seq, _hostile("unit"), "lower")},
    )
    checks = tuple(
        c.model_copy(update={"reason": _hostile("reason"), "concern": _hostile("concern")})
        if c.id == check
        else c
        for c in report.checks
    )
    fig = report.perf["ttft_median@i128o128c1"].model_copy(update={"flag": _hostile("flag")})
    versions = report.versions.model_copy(
        update={"plugin": _hostile("plugin"), "vllm": _hostile("vllm")}
    )
    report = report.replace(
        run_id=f"2025010{seq}T000000Z-0badc0d{seq}",
        started_at=f"2025-01-0{seq}T00:00:00Z",
        checks=checks,
        versions=versions,
        perf={fig.name: fig},
    )
    return report.replace(tier=derive_tier(report))


def _outside_code(text: str) -> str:
    """The text without its code spans (in one, Markdown shows ``<`` as a character)."""
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text)


def _assert_inert(name: str, text: str) -> None:
    assert "<img" not in _outside_code(text), name
    for line in text.splitlines():
        # The injected heading never starts a line: it stays on the line of its field.
        assert not line.startswith("## gate OK"), (name, line)
        if "gate OK" in line:
            assert "evil-" in line, (name, line)
        if line.startswith("|") and "evil-" in line:
            # No extra cell: every pipe in report text is escaped.
            cells = re.split(r"(?<!\\)\|", line)
            header = next(h for h in _headers(text) if h[0] <= text.index(line))
            assert len(cells) == header[1], (name, line)


def _headers(text: str) -> list[tuple[int, int]]:
    """(offset, cell count) of each table's header row, last first."""
    lines = text.splitlines(keepends=True)
    found, at = [], 0
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|--"):
            found.append((at, len(re.split(r"(?<!\\)\|", line.rstrip("\n")))))
        at += len(line)
    return found[::-1]


def test_hostile_report_text_is_inert_in_every_markdown_output(
    tmp_path: Path, make_report: Any
) -> None:
    runs = [_run(make_report, 1), _run(make_report, 2)]
    for r in runs:
        writers.write_report(r, tmp_path / "reports" / r.run_id)
    found = find_reports(tmp_path / "reports")
    pages: dict[str, str] = {
        "report page": render_report_markdown(runs[1]),
        "step summary": render_step_summary(runs[1]),
    }
    writers.write_matrix(found, "now", tmp_path / "MATRIX.md", tmp_path / "matrix.html")
    pages["MATRIX.md"] = (tmp_path / "MATRIX.md").read_text()
    site = writers.build_site(found, tmp_path / "site", "now")
    pages["site MATRIX.md"] = (tmp_path / "site" / "MATRIX.md").read_text()
    for kind in ("history", "compare"):
        md = [p for p in site[kind] if p.suffix == ".md"]
        assert md, kind
        pages.update({f"{kind} {p.name}": p.read_text() for p in md})
    for name, text in pages.items():
        _assert_inert(name, text)
    # Every field reached some page (the corpus covers them), escaped.
    everything = "\n".join(pages.values())
    for field in FIELDS:
        assert f"evil-{field}" in everything, field
    assert "m&lt;img src=x onerror=alert(1)>\\|evil-model ## gate OK" in pages["MATRIX.md"]
    # The history page's title is one line.
    (history,) = (t for n, t in pages.items() if n.startswith("history"))
    title = history.splitlines()[0]
    assert title.startswith("# m&lt;img") and title.endswith("## gate OK on T3K: history")


def test_the_published_rows_read_back_the_names_the_matrix_escaped(
    tmp_path: Path, make_report: Any
) -> None:
    """Control: escaping is undone when the published matrix is read (the rows a new matrix
    would drop): the hostile name and an honest one with a backslash and an ampersand read back
    as the one-line names, so the same inputs rewrite the matrix without a dropped row."""
    honest = make_report({"m::a": "pass"}, model="org/R&D\\model [v2]", device="N150")
    hostile = _run(make_report, 1)
    for r in (honest, hostile):
        writers.write_report(r, tmp_path / "reports" / r.run_id)
    found = find_reports(tmp_path / "reports")
    cells = writers.write_matrix(found, "now", tmp_path / "MATRIX.md", tmp_path / "matrix.html")
    writers.build_site(found, tmp_path / "site", "now")
    for path in (tmp_path / "MATRIX.md", tmp_path / "site" / "MATRIX.md"):
        models = {row[0] for row in matrix.published_rows(path)}
        assert models == {
            "org/R&D\\model [v2]",
            HOSTILE.replace("evil", "evil-model").replace("\n", " "),
        }, path
        assert matrix.dropped_rows(cells, [path]) == {}
