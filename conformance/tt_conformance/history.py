"""Run history per model and device: the index of every kept run, grouping by tt-metal commit,
perf trends and the run pairs the site compares; and the published history store.

The pages are rendered by formats/ and written by writers.py. The index (``index.json`` per
model/device directory, kind ``tt-conformance-run-index``, formats/json.py) is rewritten by
``writers.write_report`` after each run and by the site build from whatever report files it finds
(runs, latest, baselines, reports/history).

The store (``reports/history/``, committed) keeps every run, aborted ones too (a crash or a hang
under a new tt-metal is part of the story), so the published history grows beyond the newest
run: ``<store>/<model>/<device>/<run_id>.json``, a lane-DP run under ``<device>-lanes<N>`` like
its baseline. Its directories are only a filing order: a column is keyed by the report's own
model and matrix column (`Run.key`), a series by the column and the setup (`Run.series`:
identity.profile_key). `add_run` files a run (``tt-conformance history add``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tt_conformance.datafile import DataFileError, read_json_file
from tt_conformance.gate import HARDWARE_PERF_TOLERANCE
from tt_conformance.identity import differences, profile_key, profile_label, unlike
from tt_conformance.matrix import (
    KEY_PERF,
    STATUS_ABORTED,
    MatrixError,
    column_dir,
    column_of,
    coverage_rank,
    find_reports,
    status_of,
)
from tt_conformance.numfmt import format_number, pct
from tt_conformance.rederive import require_consistent
from tt_conformance.report import (
    REPORT_KIND,
    TIERS,
    Report,
    ReportError,
    parse_utc,
    report_from_dict,
)
from tt_conformance.tiers import perf_is_informational

__all__ = [
    "HISTORY_STORE",
    "INDEX_KIND",
    "INDEX_NAME",
    "TREND_FIGURES",
    "UNKNOWN",
    "CellStory",
    "CommitGroup",
    "HistoryError",
    "Run",
    "Stored",
    "Trend",
    "TrendPoint",
    "add_run",
    "by_model_device",
    "by_series",
    "cell_story",
    "compare_pairs",
    "distinct_runs",
    "group_by_commit",
    "run_files",
    "store_dir",
    "stories",
    "trends",
]

INDEX_KIND = "tt-conformance-run-index"
INDEX_NAME = "index.json"
UNKNOWN = "unknown"
HISTORY_STORE = Path("reports") / "history"
# The figures whose trend the history page plots: (label, figure name prefix).
TREND_FIGURES: tuple[tuple[str, str], ...] = (
    ("TTFT median", "ttft_median@"),
    ("T/S/U", "tps_user_median@"),
    ("T/S", "tt_tps@"),
)


def run_files(directory: Path) -> list[Path]:
    """The per-run report files of a report directory (not latest.json, not the index)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.json") if p.name not in ("latest.json", INDEX_NAME))


@dataclass(frozen=True)
class Run:
    path: Path
    report: Report

    @property
    def key(self) -> tuple[str, str]:
        # The matrix's column: a lane-DP server has its own history, like its own column.
        return (self.report.model, column_of(self.report))

    @property
    def series(self) -> tuple[str, str, str]:
        """A history series: the column and the configuration profile (identity.profile_key);
        trends, comparisons and a matrix cell's story stay within one."""
        return (*self.key, profile_key(self.report))

    @property
    def tt_metal(self) -> str:
        return self.report.versions.tt_metal

    @property
    def stack(self) -> tuple[str, str]:
        """What a tt-metal bump changes: the tt-metal commit and the ttnn version."""
        return (self.report.versions.tt_metal, self.report.versions.ttnn)


def distinct_runs(found: Iterable[tuple[Path, Report]]) -> list[Run]:
    """One Run per run id (latest.json, the run file and a baseline copy are the same run);
    the run's own file is preferred over latest.json."""
    best: dict[str, Run] = {}
    for path, report in found:
        current = best.get(report.run_id)
        if current is None or (current.path.name == "latest.json" and path.name != "latest.json"):
            best[report.run_id] = Run(path, report)
    return sorted(best.values(), key=lambda r: (parse_utc(r.report.finished_at), r.report.run_id))


def by_series(runs: Iterable[Run]) -> dict[tuple[str, str, str], list[Run]]:
    out: dict[tuple[str, str, str], list[Run]] = {}
    for run in runs:
        out.setdefault(run.series, []).append(run)
    return dict(sorted(out.items()))


def by_model_device(runs: Iterable[Run]) -> dict[tuple[str, str], list[Run]]:
    out: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        out.setdefault(run.key, []).append(run)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class CommitGroup:
    tt_metal: str
    runs: tuple[Run, ...]
    ttnn: str = UNKNOWN  # a ttnn wheel bump under an unknown tt-metal commit is its own group

    @property
    def unknown(self) -> bool:
        return self.tt_metal == UNKNOWN


def group_by_commit(runs: Sequence[Run]) -> list[CommitGroup]:
    """Consecutive runs on the same tt-metal commit and ttnn version form one group, oldest
    first (installed ttnn wheels often report no tt-metal commit: their version tells the
    bumps apart); a stack that comes back after another one starts a new group."""
    groups: list[list[Run]] = []
    for run in runs:
        if groups and groups[-1][0].stack == run.stack:
            groups[-1].append(run)
        else:
            groups.append([run])
    return [CommitGroup(g[0].tt_metal, tuple(g), g[0].report.versions.ttnn) for g in groups]


@dataclass(frozen=True)
class TrendPoint:
    run_id: str
    finished_at: str
    value: float | None
    flag: str | None


@dataclass(frozen=True)
class Trend:
    figure: str
    label: str
    unit: str
    better: str
    points: tuple[TrendPoint, ...]

    def values(self) -> list[float]:
        return [p.value for p in self.points if p.value is not None]


def trends(runs: Sequence[Run]) -> list[Trend]:
    """One trend per key figure and history series (configuration profile), a point per run of
    the series (None where it is missing): a figure of another max_num_seqs or context is
    another line, never a step in this one."""
    series = by_series(runs)
    out: list[Trend] = []
    for runs_of in series.values():
        out += _series_trends(runs_of, profile_label(runs_of[0].report) if len(series) > 1 else "")
    return out


def _series_trends(runs: Sequence[Run], profile: str) -> list[Trend]:
    names = sorted({name for run in runs for name in run.report.perf})
    out: list[Trend] = []
    for label, prefix in TREND_FIGURES:
        for name in names:
            if not name.lower().startswith(prefix):
                continue
            sample = next(r.report.perf[name] for r in runs if name in r.report.perf)
            points = []
            for run in runs:
                fig = run.report.perf.get(name)
                points.append(
                    TrendPoint(
                        run.report.run_id,
                        run.report.finished_at,
                        None if fig is None else fig.value,
                        None if fig is None else fig.flag,
                    )
                )
            shape = name.partition("@")[2]
            title = f"{label} @{shape}" + (f" ({profile})" if profile else "")
            out.append(Trend(name, title, sample.unit, sample.better, tuple(points)))
    return out


_NOT_GOOD = frozenset({"fail", STATUS_ABORTED})


def _rank(status: str) -> int:
    return TIERS.index("fail" if status == STATUS_ABORTED else status)


@dataclass(frozen=True)
class CellStory:
    """A model x device column's status over its history: what the pivot cell says besides the
    status itself. Partial runs are left out (they certify nothing); aborted runs are in (a
    crash or a hang under a new tt-metal is the news)."""

    status: str
    since: Run  # the first run of the newest unbroken streak at this status
    last_good: Run | None  # the newest run that neither failed nor was aborted
    previous: str | None  # the status of the run before the newest
    # The status the cell dropped from, while it has not recovered to it (None: no drop): a
    # drop stays marked over every later run below that status.
    dropped_from: str | None = None
    # Key figures worse than before the drop by more than the hardware tolerance, while they
    # stay so ("T/S @i128o128c32: 412 -> 350 (15 % worse)"); never on emulated or other
    # non-TT devices, whose figures are informational.
    perf_drops: tuple[str, ...] = ()

    @property
    def regressed(self) -> bool:
        return self.dropped_from is not None or bool(self.perf_drops)


def _perf_drops(newer: Report, reference: Report) -> list[str]:
    out = []
    for label, prefix in KEY_PERF:
        for name, fig in sorted(newer.perf.items()):
            base = reference.perf.get(name)
            # As the gate: a flagged reference is no measure, but a run's own flag on its newer
            # figure does not hide a drop (no raw samples are stored to re-derive the flag).
            if not name.startswith(prefix) or base is None or base.flag:
                continue
            if base.value <= 0 or fig.unit != base.unit or fig.better != base.better:
                continue
            worse = (fig.value - base.value) / base.value
            worse = -worse if fig.better == "higher" else worse
            if worse > HARDWARE_PERF_TOLERANCE:
                out.append(
                    f"{label} @{name.partition('@')[2]}: {format_number(base.value)} -> "
                    f"{format_number(fig.value)} ({pct(worse)} worse)"
                    + (f", flagged unreliable by the run: {fig.flag}" if fig.flag else "")
                )
    return out


def cell_story(runs: Sequence[Run]) -> CellStory | None:
    """The story of one series' runs (time order) in the newest run's setup (runs on another
    mesh, profile or weights measure something else: identity.unlike); None when no run covered
    the suite or was aborted."""
    covered = [r for r in runs if coverage_rank(r.report) > 0]
    if not covered:
        return None
    newest = covered[-1].report
    certified = [r for r in covered if not unlike(differences(r.report, newest))]
    statuses = [status_of(r.report) for r in certified]
    first = len(certified) - 1
    while first > 0 and statuses[first - 1] == statuses[-1]:
        first -= 1
    good = [r for r, s in zip(certified, statuses, strict=True) if s not in _NOT_GOOD]
    # Walk the series: a run below the reference status is a drop (the reference stays until a
    # run reaches it again); the same for the key figures against the last run without a drop.
    reference: str | None = None
    dropped: str | None = None
    perf_ref: Report | None = None
    drops: list[str] = []
    hardware = not perf_is_informational(newest.device)
    for run, status in zip(certified, statuses, strict=True):
        if reference is not None and _rank(status) < _rank(reference):
            dropped = reference
        else:
            reference, dropped = status, None
        if not hardware or status == STATUS_ABORTED:
            continue  # an aborted run measured nothing to compare
        drops = _perf_drops(run.report, perf_ref) if perf_ref is not None else []
        if not drops:
            perf_ref = run.report
    if statuses[-1] == STATUS_ABORTED:
        drops = []
    return CellStory(
        status=statuses[-1],
        since=certified[first],
        last_good=good[-1] if good else None,
        previous=statuses[-2] if len(statuses) > 1 else None,
        dropped_from=dropped,
        perf_drops=tuple(drops),
    )


def compare_pairs(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """Each run against the one before it in its model and device column (time order). Runs
    of another setup are paired too: the compare page names the differences and gives no
    percentage between unlike runs (formats/views.comparisons)."""
    pairs = []
    for runs_of in by_model_device(runs).values():
        pairs += [(runs_of[i - 1], runs_of[i]) for i in range(1, len(runs_of))]
    return sorted(
        pairs, key=lambda pair: (parse_utc(pair[1].report.finished_at), pair[1].report.run_id)
    )


def stories(runs: Sequence[Run]) -> dict[tuple[str, str, str], CellStory | None]:
    """Each history series' story (by Run.series: model, column, setup key)."""
    return {key: cell_story(series) for key, series in by_series(runs).items()}


class HistoryError(Exception):
    """The run cannot go into the history store: the message names the file and the field."""


@dataclass(frozen=True)
class Stored:
    path: Path  # the run's file in the store
    added: bool  # False: the same run was already there, nothing written
    replaced: bool = False  # an earlier copy of the run (same run_id) was overwritten


def store_dir(store: Path, report: Report) -> Path:
    """<store>/<model>/<device>; a lane-DP run under <device>-lanes<N>, as its baseline."""
    return column_dir(store, report.model, report.device, report.server.lanes)


def add_run(report_path: Path, store: Path, *, replace: bool = False) -> Stored:
    """File a run in the store, aborted ones too (a crash or a hang is history); an
    inconsistent report (rederive.py) is refused. The same run again is a no-op (CI may retry
    a step); the same run_id with other content (amended by import-bench since) needs
    ``replace``."""
    report = _run_report(report_path)
    existing = _stored(store, report.run_id)
    target = store_dir(store, report) / f"{report.run_id}.json"
    # The run id is validated on load; this is the second lock: whatever names the file, it
    # lands inside the store or nowhere.
    if not target.resolve().is_relative_to(store.resolve()):
        raise HistoryError(f"{report_path}: field 'run_id': {target} is outside the store {store}")
    if existing is not None:
        target, stored = existing
        if stored == report:
            return Stored(target, added=False)
        if not replace:
            raise HistoryError(
                f"{report_path}: field 'run_id': run {report.run_id} is already in the history "
                f"store as {target} with other content (amended since?); pass --replace to "
                "overwrite it"
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    # The file as written (not re-serialised): the store keeps what the run wrote.
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(report_path, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Stored(target, added=True, replaced=existing is not None)


def _run_report(path: Path) -> Report:
    try:
        data = read_json_file(path, "report")
    except DataFileError as exc:
        raise HistoryError(str(exc)) from None
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind != REPORT_KIND:
        # Checked before the schema: "not a report" says more than its first missing field.
        raise HistoryError(
            f"{path}: field 'kind': {kind!r}, not a conformance report ({REPORT_KIND!r}); only "
            "a run's report JSON goes into the history"
        )
    try:
        # An aborted run (the server crashed or hung) is kept: it is what a bump did.
        return require_consistent(report_from_dict(data, str(path)), str(path))
    except ReportError as exc:
        raise HistoryError(str(exc)) from None


def _stored(store: Path, run_id: str) -> tuple[Path, Report] | None:
    """The store's copy of a run, by run_id (whatever its file is called)."""
    if not store.is_dir():
        return None
    try:
        found = find_reports(store)
    except MatrixError as exc:
        raise HistoryError(f"history store {store}: {exc}") from None
    return next(((p, r) for p, r in found if r.run_id == run_id), None)
