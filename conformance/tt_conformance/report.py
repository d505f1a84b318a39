"""The per-run report: typed pydantic models (the published schema) and reading them.

The result data model: it knows no output format (formats/ renders it, writers.py writes it).

The models below ARE the format: `report.schema.json` (shipped in this package under
``schemas/`` and in ``docs/``) is generated from them by ``python -m tt_conformance.schema``.
Schema version 4. Older reports are migrated on reading (`migrate_report`): version 1 (before
accuracy, tiers, provenance and parametrised perf), version 2 (before the top-level ``aborted``
status of a run stopped because the server under test died or turned unhealthy) and version 3
(before run identity and coverage: its coverage reads as not recorded).

Outcomes: pass, fail, error (setup/teardown failed), skip, xfail (expected failure), xpass (an
expected failure that passed: an improvement), flaky (failed, then passed on a retry).
"""

from __future__ import annotations

import math
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, NonNegativeInt, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from tt_conformance.datafile import DataFileError, Strict, read_json_file, validate_file_data
from tt_conformance.names import NOT_TT_DEVICE, normalize_device

__all__ = [
    "BETTER",
    "EXPECTED_BY",
    "FAILING",
    "OUTCOMES",
    "PASSING",
    "READABLE_VERSIONS",
    "REPORT_KIND",
    "RUN_ID_PATTERN",
    "SCHEMA_VERSION",
    "TIERS",
    "Aborted",
    "AccuracyResult",
    "Better",
    "CheckResult",
    "CollectionError",
    "Coverage",
    "ExpectedBy",
    "ItemOutcome",
    "Outcome",
    "PerfFigure",
    "PerfMet",
    "PerfTargetResult",
    "Report",
    "ReportError",
    "RunInfo",
    "ServerSnapshot",
    "Tier",
    "TierName",
    "Versions",
    "compute_totals",
    "iso_utc",
    "load_report",
    "migrate_report",
    "new_run_id",
    "parse_utc",
    "report_from_dict",
    "utc_now_iso",
]

SCHEMA_VERSION: Final = 4
READABLE_VERSIONS: Final[tuple[int, ...]] = (1, 2, 3, SCHEMA_VERSION)
REPORT_KIND: Final = "tt-conformance-report"
OUTCOMES: tuple[str, ...] = ("pass", "fail", "error", "skip", "xfail", "xpass", "flaky")
PASSING: frozenset[str] = frozenset({"pass", "xpass", "flaky"})
FAILING: frozenset[str] = frozenset({"fail", "error"})
BETTER: tuple[str, ...] = ("lower", "higher")
EXPECTED_BY: tuple[str, ...] = ("expectations", "marker")
# Lowest first (the gate compares ranks). "partial" and "emulated" are not TT's tiers: a run
# that did not cover the suite, or that ran on no TT hardware, is labelled so instead (tiers.py).
TIERS: tuple[str, ...] = ("fail", "partial", "emulated", "experimental", "functional", "complete")

# A run id names files in the report directory and the history store: anything else (a "/", a
# "..") would let a report choose where the harness writes.
RUN_ID_PATTERN: Final = r"^\d{8}T\d{6}Z-[0-9a-f]{8}$"


def parse_utc(text: str) -> datetime:
    """An ISO 8601 timestamp with its offset (the harness writes UTC, "...Z"); ValueError for
    anything else, a local time without offset included. Runs are ordered by this moment,
    never by the string."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 timestamp") from None
    if moment.utcoffset() is None:
        raise ValueError(f"{text!r} has no UTC offset (the harness writes UTC: end it in Z)")
    return moment


# The moments a run can have: none before this harness existed, none after now. A run dated
# 2099 would stay the newest of its cell forever and hide every later failure; year 1 or 9999
# overflows date arithmetic. A day of slack for a clock set a little ahead.
EARLIEST_RUN: Final = datetime(2020, 1, 1, tzinfo=timezone.utc)
CLOCK_AHEAD: Final = timedelta(days=1)


def _utc_or_none(value: str | None) -> str | None:
    if value is None:
        return value
    moment = parse_utc(value)
    try:
        latest = datetime.now(timezone.utc) + CLOCK_AHEAD
        plausible = EARLIEST_RUN <= moment <= latest
    except OverflowError:  # an offset that moves year 1 or 9999 out of datetime's range
        plausible = False
    if not plausible:
        raise ValueError(
            f"{value!r} is not a plausible run time (between {iso_utc(EARLIEST_RUN)} and a day "
            "after now)"
        )
    return value


Outcome = Literal["pass", "fail", "error", "skip", "xfail", "xpass", "flaky"]
Better = Literal["lower", "higher"]
ExpectedBy = Literal["expectations", "marker"]
PerfMet = Literal["target", "complete", "functional", "below", "missing", "unreliable"]
TierName = Literal["fail", "partial", "emulated", "experimental", "functional", "complete"]


class ReportError(DataFileError):
    """A report file is missing, unreadable or does not match the schema."""


class CheckResult(Strict):
    id: str = Field(min_length=1)
    nodeid: str = Field(min_length=1)
    concern: str
    outcome: Outcome
    reason: str = ""
    duration_s: float = Field(default=0.0, ge=0)
    attempts: int = Field(default=1, ge=1)
    expected_by: ExpectedBy | None = None
    details: str = ""
    started_at: str | None = Field(default=None, description="ISO 8601 UTC, first phase start")
    finished_at: str | None = Field(default=None, description="ISO 8601 UTC, last phase end")

    _utc = field_validator("started_at", "finished_at")(_utc_or_none)


class PerfFigure(Strict):
    """One serving figure. The identity keys (metric, stat, input_len, output_len, concurrency)
    say what was measured, so figures from other tools (vllm bench serve) line up."""

    name: SkipJsonSchema[str] = Field(default="", exclude=True)  # the key in Report.perf
    value: float
    unit: str
    better: Better
    check: str
    metric: str | None = Field(
        default=None,
        description="ttft, tpot, itl, e2el, tps_user, tt_tps, prefill_tps, output_throughput, "
        "request_throughput",
    )
    stat: str | None = Field(default=None, description="mean, median, p99 or value")
    input_len: int | None = Field(default=None, ge=0)
    output_len: int | None = Field(default=None, ge=0)
    concurrency: int | None = Field(default=None, ge=1)
    samples: int | None = Field(
        default=None, ge=0, description="values behind the statistic (requests, or gaps for ITL)"
    )
    source: Literal["harness", "vllm-bench"] = "harness"
    flag: str | None = Field(
        default=None, description="why the figure is unreliable (burst delivery, starved client)"
    )

    @field_validator("value")
    @classmethod
    def _measured(cls, value: float) -> float:
        # Every figure is a time, a rate or a count of something that happened: 0, a negative
        # or a non-finite value is a broken measurement, and would read as "inf % worse".
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{value} is not a positive finite measurement")
        return value


class CollectionError(Strict):
    nodeid: str
    message: str


class Versions(Strict):
    vllm: str = "unknown"
    plugin: str = "unknown"
    plugin_commit: str = Field(default="unknown", description="the plugin's git commit")
    ttnn: str = "unknown"
    tt_metal: str = Field(
        default="unknown",
        description="git describe --tags --dirty of tt-metal (older reports: the commit)",
    )
    vllm_commit: str = Field(default="unknown", description="the commit vLLM's build recorded")
    harness: str = "unknown"
    harness_commit: str = Field(default="unknown", description="the harness's git commit")


class ServerSnapshot(Strict):
    url: str
    max_num_seqs: int = Field(ge=1, description="per lane")
    lanes: int = Field(ge=1)
    max_model_len: int | None = Field(default=None, ge=1)
    model_class: str | None = None
    mesh_device: str | None = None
    tt_options: Any = None
    weights: str | None = Field(
        default=None,
        description='the served weights: "<repository>@<revision>" or "sha256:<digest>"',
    )
    async_scheduling: bool | None = None
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    tensor_parallel: int | None = Field(
        default=None, ge=1, description="TT's TP: devices per model instance"
    )
    data_parallel: int | None = Field(
        default=None, ge=1, description="TT's DP: model instances (lanes or DP ranks)"
    )
    discovered: tuple[str, ...] = Field(
        default=(), description="fields read from the server (tt_plugin_info, /v1/models)"
    )


class RunInfo(Strict):
    command: tuple[str, ...]
    host: str
    cwd: str


class ItemOutcome(Strict):
    """One scored item of an accuracy task: the gate pairs two runs' items by ``id``."""

    id: str = Field(min_length=1, description="a digest of the item (prompt and answer)")
    correct: bool


class AccuracyResult(Strict):
    task: str
    check: str
    score: float = Field(ge=0, le=1)
    ci_low: float = Field(ge=0, le=1)
    ci_high: float = Field(ge=0, le=1)
    # No samples measured nothing: such a result can neither pass nor be compared.
    num_samples: int = Field(ge=1)
    correct: int | None = Field(default=None, ge=0)
    reference: float | None = None
    threshold: float | None = None
    tolerance: float = Field(default=0.0, ge=0)
    verdict: Literal["pass", "fail"]
    reason: str = ""
    items: tuple[ItemOutcome, ...] | None = Field(
        default=None,
        description="every scored item with its outcome (null in reports written before them)",
    )

    @model_validator(mode="after")
    def _counts(self) -> AccuracyResult:
        # The gate reads these counts: a forged or garbled one is bad input (exit 2) here, never
        # an exception inside the gate (which would exit with the regression code).
        n, correct = self.num_samples, self.correct
        if correct is not None:
            if correct > n:
                raise ValueError(f"field 'correct': {correct} correct of {n} samples")
            if n and abs(self.score - correct / n) > 1e-6:
                raise ValueError(
                    f"field 'score': {self.score} is not correct / num_samples = {correct}/{n}"
                )
        if self.items is not None:
            if len(self.items) != n:
                raise ValueError(f"field 'items': {len(self.items)} items for {n} samples")
            if len({i.id for i in self.items}) != len(self.items):
                raise ValueError("field 'items': duplicate item ids")
            right = sum(i.correct for i in self.items)
            if correct is None or right != correct:
                raise ValueError(f"field 'correct': is {correct} but {right} items are correct")
        return self


class PerfTargetResult(Strict):
    figure: str
    reference: float = Field(gt=0)
    source: str
    functional: float
    complete: float
    target: float
    fraction: float | None = Field(description="achieved fraction of the reference")
    met: PerfMet


class Tier(Strict):
    tier: TierName
    reason: str
    next_blocker: str | None = Field(description="what keeps the run from the next tier")


class Coverage(Strict):
    """What the run selected of the harness's suite, and how (selection.py decides ``full``)."""

    full: bool = Field(
        description="every check module and every check of the manifest ran, nothing "
        "deselected or picked out"
    )
    selected: int = Field(ge=0, description="checks that ran")
    deselected: int = Field(ge=0, description="checks deselected by -k, -m or --deselect")
    keyword: str | None = Field(default=None, description="the -k expression")
    markers: str | None = Field(default=None, description="the -m expression")
    args: tuple[str, ...] = Field(default=(), description="the paths or modules given to pytest")
    missing_modules: tuple[str, ...] = Field(
        default=(), description="check modules of the suite with no check in the run"
    )
    missing_checks: tuple[str, ...] = Field(
        default=(),
        description="checks the manifest lists for a module that ran, absent from the run",
    )
    not_applicable: int = Field(ge=0, description="checks skipped: not applicable here")
    skipped_other: int = Field(ge=0, description="checks skipped for another reason")
    partial_because: tuple[str, ...] = Field(default=(), description="why the run is partial")
    suite: tuple[str, ...] = Field(
        default=(), description="the check modules of the harness's manifest (empty: not recorded)"
    )
    modified_modules: tuple[str, ...] = Field(
        default=(), description="check modules deleted or edited since the manifest was written"
    )
    waived: tuple[str, ...] = Field(
        default=(), description="checks skipped by the expectations file: waivers, not coverage"
    )
    concerns_not_run: tuple[str, ...] = Field(
        default=(), description="concerns that apply to this server and had no check run"
    )


class Aborted(Strict):
    """The run stopped early: the server under test died or turned unhealthy (abort.py)."""

    reason: str = Field(min_length=1, description="what the health probe saw")
    at: str = Field(description="ISO 8601 UTC, when the harness declared the server gone")
    during: str | None = Field(
        default=None, description="the check running (or last run) when it was declared gone"
    )
    not_run: int | None = Field(
        default=None, ge=0, description="selected checks that never ran because of the abort"
    )


class Report(Strict):
    schema_version: Literal[4] = SCHEMA_VERSION
    kind: Literal["tt-conformance-report"] = REPORT_KIND
    run_id: str = Field(pattern=RUN_ID_PATTERN, description='"<UTC yyyymmddTHHMMSSZ>-<8 hex>"')
    started_at: str
    finished_at: str
    model: str = Field(min_length=1)
    device: str = Field(min_length=1, description="normalised: N150, T3K, GALAXY, emulated, ...")
    mesh_shape: str | None
    versions: Versions
    server: ServerSnapshot
    run: RunInfo | None = None
    server_options: Any
    expectations_file: str | None
    expectations_digest: str | None = Field(
        default=None,
        description="sha256 of the expectations file's bytes when the run was written (null "
        "in reports written before it): a reader holds the stored bars against that file only "
        "while its content is still this one (bars.py)",
    )
    exit_status: int
    totals: dict[str, int] | None = Field(default=None, description="must match `checks`")
    checks: tuple[CheckResult, ...]
    perf: dict[str, PerfFigure] = Field(default_factory=dict)
    perf_targets: tuple[PerfTargetResult, ...] = ()
    accuracy: tuple[AccuracyResult, ...] = ()
    tier: Tier | None = None
    collection_errors: tuple[CollectionError, ...] = ()
    warnings: tuple[str, ...] = ()
    aborted: Aborted | None = Field(
        default=None, description="set when the run stopped early because the server went away"
    )
    coverage: Coverage | None = Field(
        default=None, description="what was selected; null in reports older than version 4"
    )
    situations: dict[str, NonNegativeInt] | None = Field(
        default=None,
        description="the plugin's tt_situations_total over the run, by situation (rows, or "
        "steps for the sampling ones; server-wide): which situations faults live in the run "
        "created (a zero: not created). Null when the server is not TT, its metrics could not "
        "be read at both ends, or the report predates it",
    )
    matrix_cells: dict[str, tuple[str, ...]] | None = Field(
        default=None,
        description="the situation-matrix cells that ran, per concern (tt_conformance."
        "situation_matrix; each cell's label is axis=value joined by commas): which of the "
        "generated cases each concern's checks served and compared in this run. Null when no "
        "check recorded a cell (none ran, or the report predates it)",
    )

    _utc = field_validator("started_at", "finished_at")(_utc_or_none)

    @field_validator("run_id")
    @classmethod
    def _run_id_time(cls, value: str) -> str:
        # Its time names the history store's file: the same bounds as the run's own times.
        try:
            moment = datetime.strptime(value[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
        except ValueError:
            raise ValueError(f"{value!r} does not start with a UTC time") from None
        _utc_or_none(iso_utc(moment))
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        # One spelling per device: "t3k" beside "T3K" would split a column and hide a drop.
        if value == NOT_TT_DEVICE:
            return value
        return normalize_device(value)

    @model_validator(mode="after")
    def _consistent(self) -> Report:
        # In the file a figure's name is its key; the object carries it too. Frozen models:
        # fields are set once, here, during validation.
        if any(fig.name != key for key, fig in self.perf.items()):
            named = {k: f.model_copy(update={"name": k}) for k, f in self.perf.items()}
            object.__setattr__(self, "perf", named)
        seen: set[str] = set()
        for i, c in enumerate(self.checks):
            if c.id in seen:
                raise ValueError(f"field 'checks[{i}].id': duplicate check id {c.id!r}")
            seen.add(c.id)
        expected = compute_totals(self.checks)
        if self.totals is None:
            object.__setattr__(self, "totals", expected)
        else:
            for key, count in expected.items():
                if self.totals.get(key) != count:
                    raise ValueError(
                        f"field 'totals.{key}': is {self.totals.get(key)} but the checks list "
                        f"has {count}"
                    )
            unknown = sorted(set(self.totals) - set(expected))
            if unknown:
                raise ValueError(f"field 'totals.{unknown[0]}': unknown field")
        return self

    @property
    def counts(self) -> dict[str, int]:
        """The totals, which validation always fills in."""
        if self.totals is None:
            raise ValueError("report totals were not computed (not a validated Report)")
        return self.totals

    def check(self, check_id: str) -> CheckResult | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def checks_with(self, *outcomes: str) -> list[CheckResult]:
        return [c for c in self.checks if c.outcome in outcomes]

    def replace(self, **changes: Any) -> Report:
        """A copy with fields changed, validated again (totals recomputed)."""
        data = {name: getattr(self, name) for name in type(self).model_fields}
        data.update(changes)
        if "checks" in changes:
            data["totals"] = None
        return type(self)(**data)


def compute_totals(checks: tuple[CheckResult, ...] | list[CheckResult]) -> dict[str, int]:
    totals = dict.fromkeys(OUTCOMES, 0)
    for c in checks:
        totals[c.outcome] += 1
    totals["total"] = len(checks)
    return totals


def new_run_id(now: datetime | None = None) -> str:
    moment = now or datetime.now(timezone.utc)
    return f"{moment.strftime('%Y%m%dT%H%M%SZ')}-{os.urandom(4).hex()}"


def utc_now_iso() -> str:
    return iso_utc(datetime.now(timezone.utc))


def iso_utc(moment: datetime | float) -> str:
    if isinstance(moment, (int, float)):
        moment = datetime.fromtimestamp(moment, timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


# ----------------------------------------------------------------------------- reading


def migrate_report(data: Any) -> Any:
    """Bring an older report to the current schema; unknown versions are left for validation
        to refuse. Version 1 had no ttnn version, run info, accuracy, perf targets or tier;
        version 2 had no aborted status (a version 2 run was never aborted); version 3 had no
        coverage, commits or configuration profile (they read as not recorded). Their stored tier is
    dropped: it was decided by older rules, and the tier is derived from the checks again."""
    if not isinstance(data, dict) or data.get("schema_version") not in (1, 2, 3):
        return data
    out = {**data, "schema_version": SCHEMA_VERSION}
    # A tier stored by an older harness was decided by older rules: never trusted, re-derived
    # from the checks on reading (rederive.py).
    out.pop("tier", None)
    if data["schema_version"] == 1 and isinstance(out.get("versions"), dict):
        out["versions"] = {"ttnn": "unknown", **out["versions"]}
    return out


def report_from_dict(data: Any, source: str = "<report>") -> Report:
    """Validate parsed JSON (migrating older versions) and build a Report; ReportError names
    the file and the field."""
    if isinstance(data, dict) and data.get("schema_version") not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        raise ReportError(
            f"{source}: field 'schema_version': unsupported version "
            f"{data.get('schema_version')!r} (this harness reads {readable})"
        )
    # Schema 4 stores the tier its writer derived; null or absent is a report whose tier was
    # removed (an older schema's is dropped on migration and derived again).
    if (
        isinstance(data, dict)
        and data.get("schema_version") == SCHEMA_VERSION
        and data.get("tier") is None
    ):
        raise ReportError(
            f"{source}: field 'tier': {'null' if 'tier' in data else 'missing'} in a "
            f"schema-{SCHEMA_VERSION} report, which stores the tier its checks give: "
            "inconsistent, refused (regenerate it, never edit it)"
        )
    return validate_file_data(Report, migrate_report(data), source, ReportError)


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read and validate a report file. Raises ReportError naming the file and the bad field."""
    p = Path(path)
    try:
        data = read_json_file(p, "report")
    except DataFileError as exc:
        raise ReportError(str(exc)) from None
    return report_from_dict(data, str(p))
