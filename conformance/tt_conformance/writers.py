"""Every file the harness writes: the run's report files, run indexes, the matrix and the site.

Writing is atomic (a temp file in the same directory + os.replace): a reader, a matrix build or
CI never sees half a file. The texts come from formats/; nothing here decides content.

    <report_dir>/<run_id>.json|.md|.xml, latest.*, index.json      write_report
    MATRIX.md, matrix.html                                         write_matrix
    <site>/index.html, MATRIX.md, history/*, compare/*             build_site
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tt_conformance.formats.html import (
    render_compare_html,
    render_compare_index_html,
    render_history_html,
    render_matrix_html,
    render_run_html,
)
from tt_conformance.formats.json import index_entry, index_json, report_json
from tt_conformance.formats.junit import render_junit
from tt_conformance.formats.markdown import (
    render_compare_markdown,
    render_history_markdown,
    render_matrix_markdown,
    render_report_markdown,
)
from tt_conformance.formats.views import (
    Comparison,
    comparisons,
    history_context,
    history_slug,
    run_href,
)
from tt_conformance.history import (
    INDEX_NAME,
    by_model_device,
    distinct_runs,
    stories,
)
from tt_conformance.matrix import MatrixCell, fold
from tt_conformance.mutation import NO_CAMPAIGN, PublishedScore
from tt_conformance.report import Report

# The file that marks a directory as a site this command built: --site refuses to write into
# a directory that has files but not this one (an unrelated index.html stays untouched).
SITE_MARKER = ".tt-conformance-site"

__all__ = [
    "SITE_MARKER",
    "WrittenReport",
    "atomic_write_text",
    "build_site",
    "update_index",
    "write_index",
    "write_matrix",
    "write_report",
]


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same directory + os.replace: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class WrittenReport:
    json: Path
    markdown: Path
    junit: Path
    latest_json: Path
    latest_markdown: Path
    latest_junit: Path


def write_report(
    report: Report, report_dir: Path, *, stem: str | None = None, refresh_latest: bool = True
) -> WrittenReport:
    """Write <run_id>.json/.md/.xml (never overwriting an earlier run) and refresh latest.*.

    ``stem`` rewrites an existing run's files in place (import-bench folds figures into a run);
    ``refresh_latest=False`` leaves latest.* alone (an older run was amended).
    """
    report_dir.mkdir(parents=True, exist_ok=True)
    if stem is None:
        stem = report.run_id
        suffix = 0
        while any((report_dir / f"{stem}{ext}").exists() for ext in (".json", ".md", ".xml")):
            suffix += 1
            stem = f"{report.run_id}-{suffix}"
    payload = report_json(report)
    markdown = render_report_markdown(report)
    junit = render_junit(report)
    paths = WrittenReport(
        json=report_dir / f"{stem}.json",
        markdown=report_dir / f"{stem}.md",
        junit=report_dir / f"{stem}.xml",
        latest_json=report_dir / "latest.json",
        latest_markdown=report_dir / "latest.md",
        latest_junit=report_dir / "latest.xml",
    )
    for target in (paths.json, paths.markdown, paths.junit):
        if target.parent.resolve() != report_dir.resolve():
            raise ValueError(f"field 'run_id': {target} is not a file of {report_dir}: refused")
    # The run files first, latest.* last: a crash in between leaves latest.* at the previous run.
    atomic_write_text(paths.json, payload)
    atomic_write_text(paths.markdown, markdown)
    atomic_write_text(paths.junit, junit)
    update_index(report_dir, report, paths.json)
    if not refresh_latest:
        return paths
    atomic_write_text(paths.latest_json, payload)
    atomic_write_text(paths.latest_markdown, markdown)
    atomic_write_text(paths.latest_junit, junit)
    return paths


def update_index(report_dir: Path, report: Report, json_path: Path) -> Path:
    """Add (or refresh) the run's entry in report_dir/index.json, oldest run first."""
    path = report_dir / INDEX_NAME
    entries: list[dict[str, object]] = []
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = list(data.get("runs", [])) if isinstance(data, dict) else []
        except (OSError, json.JSONDecodeError):
            entries = []  # a damaged index is rebuilt from the runs it can still see
    entries = [e for e in entries if isinstance(e, dict) and e.get("run_id") != report.run_id]
    entries.append(index_entry(report, json_path.name))
    entries.sort(key=lambda e: (str(e.get("finished_at")), str(e.get("run_id"))))
    write_index(path, report.model, report.device, entries)
    return path


def write_index(path: Path, model: str, device: str, entries: Sequence[dict[str, object]]) -> None:
    atomic_write_text(path, index_json(model, device, entries))


def write_matrix(
    found: Sequence[tuple[Path, Report]],
    generated_at: str,
    out_md: Path,
    out_html: Path,
    mutation: PublishedScore = NO_CAMPAIGN,
) -> list[MatrixCell]:
    """The standalone matrix (the committed MATRIX.md and matrix.html): Markdown and a
    self-contained HTML page without site links, with each cell's story (since, last good,
    drops) from every run found and the plugin's mutation score; returns the cells."""
    runs = distinct_runs(found)
    cells = fold([(r.path, r.report) for r in runs])
    told = stories(runs)
    atomic_write_text(
        out_md, render_matrix_markdown(cells, generated_at, stories=told, mutation=mutation)
    )
    atomic_write_text(
        out_html,
        render_matrix_html(cells, generated_at, links=False, stories=told, mutation=mutation),
    )
    return cells


def build_site(
    found: Sequence[tuple[Path, Report]],
    out: Path,
    generated_at: str,
    mutation: PublishedScore = NO_CAMPAIGN,
) -> dict[str, list[Path]]:
    """Write the whole site; returns the written pages by kind.

    out/index.html, out/MATRIX.md          the matrix: a column per concern, tiers, versions
    out/history/<model>--<device>.html|md  every run, grouped by tt-metal commit, perf trends
    out/history/<model>--<device>.json     the run index of that model and device
    out/compare/<model>--<device>--<a>--<b>.html|md   two runs through the gate's comparison
    out/compare/index.html                 every comparison
    out/runs/<run_id>.html                 a page per run: verdict, identity, coverage, figures
    """
    runs = distinct_runs(found)
    cells = fold([(r.path, r.report) for r in runs])
    written: dict[str, list[Path]] = {"matrix": [], "history": [], "compare": [], "runs": []}
    by_column = by_model_device(runs)
    told = stories(runs)
    atomic_write_text(out / SITE_MARKER, "written by tt-conformance-matrix --site\n")
    matrix_html = out / "index.html"
    atomic_write_text(
        matrix_html,
        render_matrix_html(cells, generated_at, links=True, stories=told, mutation=mutation),
    )
    matrix_md = out / "MATRIX.md"
    atomic_write_text(
        matrix_md,
        render_matrix_markdown(cells, generated_at, links=True, stories=told, mutation=mutation),
    )
    written["matrix"] += [matrix_html, matrix_md]
    all_comparisons: list[Comparison] = []
    for run in runs:
        page = out / run_href(run.report)
        atomic_write_text(page, render_run_html(run, generated_at, mutation))
        written["runs"].append(page)
    for (model, device), history in by_column.items():
        slug = history_slug(model, device)
        pairs = comparisons(history)
        all_comparisons += pairs
        context = history_context(model, device, history, pairs, generated_at)
        for ext, render in (("html", render_history_html), ("md", render_history_markdown)):
            page = out / "history" / f"{slug}.{ext}"
            atomic_write_text(page, render(context))
            written["history"].append(page)
        write_index(
            out / "history" / f"{slug}.json",
            model,
            device,
            [index_entry(r.report, str(r.path)) for r in history],
        )
        for comp in pairs:
            for ext, render_pair in (
                ("html", render_compare_html),
                ("md", render_compare_markdown),
            ):
                page = out / "compare" / f"{comp.slug}.{ext}"
                atomic_write_text(page, render_pair(comp, generated_at))
                written["compare"].append(page)
    index = out / "compare" / "index.html"
    atomic_write_text(index, render_compare_index_html(all_comparisons, generated_at))
    written["compare"].append(index)
    return written
