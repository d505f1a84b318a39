"""Fold a tree of reports into the model support matrix: cells and concern states (data only).

`find_reports` searches a directory recursively for report JSON files (other JSON, such as
expectations, is ignored; so is the ``baselines/`` subtree unless asked for). `fold` keeps the
newest report per model x device (a lane-DP server, lanes > 1, is its own column). The matrix
is rendered by formats/markdown.py and formats/html.py; the command is `cli.matrix`.
`dropped_rows` reads a published MATRIX.md back, so the command never silently publishes a
matrix with fewer rows than the one it replaces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path

from tt_conformance.identity import differences, profile_key, profile_label, unlike
from tt_conformance.names import path_component
from tt_conformance.rederive import require_consistent
from tt_conformance.report import (
    FAILING,
    REPORT_KIND,
    PerfFigure,
    PerfTargetResult,
    Report,
    ReportError,
    Tier,
    load_report,
    parse_utc,
)
from tt_conformance.selection import derive_coverage, skip_kind
from tt_conformance.tiers import derive_tier

__all__ = [
    "CONCERN_EXPECTED",
    "CONCERN_FAIL",
    "CONCERN_NOT_RUN",
    "CONCERN_PARTIAL",
    "CONCERN_PASS",
    "CONCERN_STATES",
    "CONCERN_WAIVED",
    "KEY_PERF",
    "STATUS_ABORTED",
    "STATUS_COMPLETE",
    "STATUS_EMULATED",
    "STATUS_EXPERIMENTAL",
    "STATUS_FAIL",
    "STATUS_FUNCTIONAL",
    "STATUS_PARTIAL",
    "TARGET_PERF",
    "MatrixCell",
    "MatrixError",
    "all_concerns",
    "column_dir",
    "column_of",
    "concern_not_run",
    "concern_status",
    "coverage_rank",
    "dropped_rows",
    "find_reports",
    "fold",
    "is_partial",
    "not_run_concerns",
    "published_rows",
    "short_check",
    "status_of",
    "tier_of",
]

# A cell's status is the report's tier (tiers.py): TT's vocabulary.
STATUS_COMPLETE = "complete"
STATUS_FUNCTIONAL = "functional"
STATUS_EXPERIMENTAL = "experimental"
STATUS_FAIL = "fail"
STATUS_PARTIAL = "partial"  # not a tier: the run did not cover the suite (selection.py)
STATUS_EMULATED = "emulated"  # not a TT tier: no TT hardware (tiers.py)
# A run stopped because the server under test went away (abort.py): shown as such, whatever its
# tier (which is "fail"); it counts as failing.
STATUS_ABORTED = "aborted"
# A skipped check (not exercised on this launch, not applicable on a non-TT server, needs
# lanes) never counts as passed: the counts say "not run" and the notes give each reason.
# Key perf figures are picked by name prefix (see tt_record_perf's naming convention): TT's three,
# as tt-metal's LLM table defines them (TTFT; T/S/U = 1 / inter-token latency; T/S = T/S/U x
# batch), measured through the vLLM server at each shape (iINoOUTcBATCH); medians, which the gate
# can hold (gate.default_gating).
KEY_PERF: tuple[tuple[str, str], ...] = (
    ("TTFT (ms)", "ttft_median@"),
    ("T/S/U", "tps_user_median@"),
    ("T/S", "tt_tps@"),
)
# The figure a perf target for TT's table is set on (the matrix's target and fraction columns).
TARGET_PERF = "tps_user_median@"


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
    targets: tuple[PerfTargetResult, ...] = ()  # the perf targets on TT's T/S/U (TARGET_PERF)
    profile: str = ""  # the configuration profile (identity.profile_label): part of the row
    # A newer run of the same model and column has another setup: this row is superseded; the
    # newer row's profile and how the setups differ (identity.differences), for the reader.
    superseded_by: str | None = None
    superseded_because: tuple[str, ...] = ()

    @property
    def target_text(self) -> str:
        """ "<shape>: <target T/S/U>" per target on TT's T/S/U ("" when none is set)."""
        return "; ".join(f"{t.figure.partition('@')[2]}: {t.reference:g}" for t in self.targets)

    @property
    def fraction_text(self) -> str:
        """The achieved fraction of each target ("" when none is set)."""
        return "; ".join(
            f"{t.figure.partition('@')[2]}: "
            + ("n/a" if t.fraction is None else f"{t.fraction:.0%}")
            for t in self.targets
        )

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


def column_dir(root: Path, model: str, device: str, lanes: int = 1) -> Path:
    """Where a model x column's files live under ``root`` (baselines, the history store):
    <root>/<model>/<device>, a lane-DP column under <device>-lanes<N>."""
    where = device if lanes <= 1 else f"{device}-lanes{lanes}"
    return root / path_component(model) / path_component(where)


def tier_of(report: Report) -> Tier:
    """The report's tier, always derived from its checks (a stored tier is never read: the
    readers that publish refuse a report whose stored tier disagrees, rederive.py)."""
    return derive_tier(report)


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
CONCERN_WAIVED = "pass with waivers"
CONCERN_FAIL = "fail"
CONCERN_NOT_RUN = "not run"
CONCERN_STATES = (
    CONCERN_PASS,
    CONCERN_EXPECTED,
    CONCERN_WAIVED,
    CONCERN_PARTIAL,
    CONCERN_FAIL,
    CONCERN_NOT_RUN,
)


def concern_status(report: Report, concern: str) -> str:
    """fail if any check of the concern failed or errored; not run when the report has none of
    its checks or all of them were skipped (not exercised, not applicable, needs lanes); pass
    with waivers when some were skipped by the expectations; pass with expected failures when
    some xfailed; pass, some not run when some were skipped: a
    skipped check never reads as a plain pass."""
    members = [c for c in report.checks if c.concern == concern]
    outcomes = {c.outcome for c in members}
    if outcomes & set(FAILING):
        return CONCERN_FAIL
    if not outcomes - {"skip"}:
        return CONCERN_NOT_RUN
    lanes = report.server.lanes
    if any(c.outcome == "skip" and skip_kind(c, report.device, lanes) == "waived" for c in members):
        return CONCERN_WAIVED
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
    """Every report under ``root``; MatrixError for an unreadable or inconsistent one (its
    stored verdicts disagree with its checks: rederive.py), which is never published."""
    try:
        is_dir = root.is_dir()
    except OSError as exc:  # a name too long for the file system (Python 3.11 raises)
        raise MatrixError(f"{root}: report directory cannot be read: {exc.strerror}") from None
    if not is_dir:
        raise MatrixError(f"{root}: report directory does not exist")
    found: list[tuple[Path, Report]] = []
    by_id: dict[str, tuple[Path, Report]] = {}
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
            report = require_consistent(load_report(path), str(path))
        except ReportError as exc:
            raise MatrixError(str(exc)) from None
        # latest.json and a baseline are copies of a run; two different runs under one id
        # would have the matrix pick one of them silently.
        first = by_id.setdefault(report.run_id, (path, report))
        if first[1] != report:
            raise MatrixError(
                f"{path}: field 'run_id': {report.run_id} is also the run id of {first[0]}, "
                "with other content; one run id names one run"
            )
        found.append((path, report))
    return found


def coverage_rank(report: Report) -> int:
    """2 for a full run, an aborted one or one that failed (a crash or a failing check is news
    however little ran: it always enters the story, e.g. a ``-k`` bump run that fails), 1 when
    coverage was not recorded (reports before version 4), 0 for a partial run that failed
    nothing (selection.py, re-derived from the checks): it never displaces a fuller one."""
    if report.aborted is not None or report.collection_errors or report.checks_with(*FAILING):
        return 2
    coverage = derive_coverage(report)
    if coverage is None:
        return 1
    return 2 if coverage.full else 0


def is_partial(report: Report) -> bool:
    """The run did not cover the suite (re-derived; an aborted run says so otherwise)."""
    coverage = derive_coverage(report)
    return report.aborted is None and coverage is not None and not coverage.full


def fold(reports: Sequence[tuple[Path, Report]]) -> list[MatrixCell]:
    """Per (model, device column, configuration profile): the newest of the fullest runs (a
    partial run shows only where no full run exists, labelled partial); latest.json and its run
    file count once. Runs with another max_num_seqs, context, scheduler switches or TT options
    measure something else: their own row, never one cell."""
    newest: dict[tuple[str, str, str], tuple[Path, Report]] = {}

    def rank(path: Path, report: Report) -> tuple[int, datetime, str, bool]:
        return (
            coverage_rank(report),
            parse_utc(report.finished_at),
            report.run_id,
            path.name != "latest.json",
        )

    for path, report in reports:
        key = (report.model, column_of(report), profile_key(report))
        current = newest.get(key)
        if current is None or rank(path, report) > rank(*current):
            newest[key] = (path, report)
    # Per model and column, the row of the newest run leads; rows of other setups are marked
    # superseded by it, naming how the setups differ.
    leader: dict[tuple[str, str], Report] = {}
    for (model, column, _), (path, report) in newest.items():
        best = leader.get((model, column))
        if best is None or rank(path, report)[:3] > rank(path, best)[:3]:
            leader[(model, column)] = report
    cells = []
    for (model, column, _), (path, report) in sorted(newest.items()):
        cell = _cell(path, report)
        lead = leader[(model, column)]
        if lead.run_id != report.run_id:
            why = tuple(str(d) for d in unlike(differences(report, lead)))
            cell = replace(cell, superseded_by=profile_label(lead), superseded_because=why)
        cells.append(cell)
    return cells


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
        targets=tuple(t for t in report.perf_targets if t.figure.startswith(TARGET_PERF)),
        profile=profile_label(report),
    )


def short_check(check_id: str) -> str:
    return check_id.removeprefix("tt_conformance.checks.")


# The first table of a MATRIX.md (formats/templates/matrix.md.jinja); matrices written before
# rows were keyed by configuration have no configuration column.
_MATRIX_TITLE = "# Model support matrix"
_ROWS_HEADER = "| model | device | configuration | tier |"
_OLD_ROWS_HEADER = "| model | device | tier |"
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
# The site's MATRIX.md links each model to its history page.
_LINKED = re.compile(r"^\[(?P<model>.*)\]\(history/[^()]*\.md\)$")


# What the template's `md` filter (formats.escape.md_text) escapes, undone: a backslash before
# a character, and the two entities it writes (the data model imports no format module).
_MD_ESCAPED = re.compile(r"\\(.)|&lt;|&amp;")
_MD_ENTITIES = {"&lt;": "<", "&amp;": "&"}


def _unescape(cell: str) -> str:
    return _MD_ESCAPED.sub(lambda m: m.group(1) or _MD_ENTITIES[m.group(0)], cell.strip())


_HTML_TITLE = "<title>Model support matrix</title>"


class _RowParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "tr" and found.get("class") == "model-row":
            self.rows.append(
                (found.get("data-model") or "", found.get("data-device") or "",
                 found.get("data-profile") or "")
            )  # fmt: skip


def _published_html_rows(path: Path) -> list[tuple[str, str, str]]:
    """The rows of a matrix.html this command wrote (the concern table's model rows)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{path}: cannot read the published matrix: {exc}") from None
    if _HTML_TITLE not in text:
        raise MatrixError(f"{path}: not a support matrix page (no {_HTML_TITLE!r})")
    parser = _RowParser()
    parser.feed(text)
    return parser.rows


def published_rows(path: Path) -> list[tuple[str, str, str]]:
    """The (model, device column, configuration) rows of a MATRIX.md or matrix.html this
    command wrote (none if absent; configuration "" in an older MATRIX.md). MatrixError for a
    file that is not one: overwriting it is the caller's decision."""
    if not path.is_file():
        return []
    if path.suffix.lower() in (".html", ".htm"):
        return _published_html_rows(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{path}: cannot read the published matrix: {exc}") from None
    if not lines or lines[0].strip() != _MATRIX_TITLE:
        raise MatrixError(f"{path}: not a support matrix (no {_MATRIX_TITLE!r} title)")
    rows: list[tuple[str, str, str]] = []
    start = next((i for i, line in enumerate(lines) if line.startswith(_ROWS_HEADER)), None)
    configured = start is not None
    if start is None:
        start = next((i for i, ln in enumerate(lines) if ln.startswith(_OLD_ROWS_HEADER)), None)
    if start is None:
        return rows  # "No reports found."
    for line in lines[start + 2 :]:  # past the header and its |---| rule
        if not line.startswith("|"):
            break
        cells = _CELL_SPLIT.split(line)
        if len(cells) < 4:
            raise MatrixError(f"{path}: malformed matrix row: {line!r}")
        model, device = _unescape(cells[1]), _unescape(cells[2])
        configuration = _unescape(cells[3]) if configured else ""
        linked = _LINKED.match(model)
        rows.append((linked.group("model") if linked else model, device, configuration))
    return rows


def _row_key(*parts: str) -> tuple[str, ...]:
    # As rendered: the `md` filter makes each whitespace run one space (any other control
    # character reads back as its escape: such a row reads as dropped, and nothing is written).
    return tuple(" ".join(p.split()) for p in parts)


def dropped_rows(cells: Sequence[MatrixCell], published: Iterable[Path]) -> dict[Path, list[str]]:
    """Per published MATRIX.md or matrix.html, its rows ("model / device / configuration")
    the new cells would drop; a row of an older matrix (no configuration) by model and device
    alone."""
    kept = {_row_key(c.model, c.device, c.profile) for c in cells}
    kept_columns = {key[:2] for key in kept}
    out: dict[Path, list[str]] = {}
    for path in published:
        lost = set()
        for model, device, configuration in published_rows(path):
            key = _row_key(model, device, configuration)
            if (key not in kept) if configuration else (key[:2] not in kept_columns):
                lost.add(key)
        if lost:
            out[path] = [" / ".join(p for p in key if p) for key in sorted(lost)]
    return out
