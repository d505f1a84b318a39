"""Run history per model and device: the index of every kept run, grouping by tt-metal commit,
perf trends and the run pairs the site compares.

Data only: the pages are rendered by formats/ and written by writers.py. The index
(``index.json`` per model/device directory, kind ``tt-conformance-run-index``, formats/json.py)
is rewritten by ``writers.write_report`` after each run and by the site build from whatever
report files it finds (runs, latest, baselines, reports/history).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tt_conformance.matrix import column_of
from tt_conformance.report import Report

__all__ = [
    "INDEX_KIND",
    "INDEX_NAME",
    "TREND_FIGURES",
    "UNKNOWN",
    "CommitGroup",
    "Run",
    "Trend",
    "TrendPoint",
    "by_model_device",
    "compare_pairs",
    "distinct_runs",
    "group_by_commit",
    "run_files",
    "trends",
]

INDEX_KIND = "tt-conformance-run-index"
INDEX_NAME = "index.json"
UNKNOWN = "unknown"
# The figures whose trend the history page plots: (label, figure name prefix).
TREND_FIGURES: tuple[tuple[str, str], ...] = (
    ("TTFT mean", "ttft_mean@"),
    ("tok/s/user mean", "tps_user_mean@"),
    ("tok/s", "tps@"),
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
    def tt_metal(self) -> str:
        return self.report.versions.tt_metal


def distinct_runs(found: Iterable[tuple[Path, Report]]) -> list[Run]:
    """One Run per run id (latest.json, the run file and a baseline copy are the same run);
    the run's own file is preferred over latest.json."""
    best: dict[str, Run] = {}
    for path, report in found:
        current = best.get(report.run_id)
        if current is None or (current.path.name == "latest.json" and path.name != "latest.json"):
            best[report.run_id] = Run(path, report)
    return sorted(best.values(), key=lambda r: (r.report.finished_at, r.report.run_id))


def by_model_device(runs: Iterable[Run]) -> dict[tuple[str, str], list[Run]]:
    out: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        out.setdefault(run.key, []).append(run)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class CommitGroup:
    tt_metal: str
    runs: tuple[Run, ...]

    @property
    def unknown(self) -> bool:
        return self.tt_metal == UNKNOWN


def group_by_commit(runs: Sequence[Run]) -> list[CommitGroup]:
    """Consecutive runs on the same tt-metal commit form one group, oldest first; a commit that
    comes back after another one starts a new group (the history stays in time order)."""
    groups: list[list[Run]] = []
    for run in runs:
        if groups and groups[-1][0].tt_metal == run.tt_metal:
            groups[-1].append(run)
        else:
            groups.append([run])
    return [CommitGroup(g[0].tt_metal, tuple(g)) for g in groups]


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
    """One trend per key figure any run recorded, a point per run (None where it is missing)."""
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
            out.append(Trend(name, f"{label} @{shape}", sample.unit, sample.better, tuple(points)))
    return out


def compare_pairs(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """Each run against the one before it (same model and device, time order)."""
    return [(runs[i - 1], runs[i]) for i in range(1, len(runs))]
