"""The per-run report: typed model, JSON schema (version 1), atomic writing and validated reading.

JSON layout (schema_version 1); every field is required unless marked nullable:

    schema_version   int, 1
    kind             "tt-conformance-report"
    run_id           str, "<UTC yyyymmddTHHMMSSZ>-<8 hex>", also the file stem
    started_at       str, ISO 8601 UTC
    finished_at      str, ISO 8601 UTC
    model            str, served model name
    device           str, e.g. N150, T3K, TG, emulated, unknown
    mesh_shape       str "RxC" or null
    versions         {vllm, plugin, tt_metal, harness}: str ("unknown" when not known)
    server           {url: str, max_num_seqs: int, lanes: int, max_model_len: int|null}
    server_options   JSON value as given to --tt-server-options (object if it parsed), or null
    expectations_file  str path of the expectations applied, or null
    exit_status      int, pytest's exit status
    totals           {<outcome>: int for every outcome, "total": int}; must match `checks`
    checks           [{id, nodeid, concern, outcome, reason, duration_s, attempts,
                       expected_by: "expectations"|"marker"|null, details}]
    perf             {<figure name>: {value: float, unit: str, better: "lower"|"higher",
                       check: str (id of the check that recorded it)}}
    collection_errors  [{nodeid, message}]
    warnings         [str]

Outcomes: pass, fail, error (setup/teardown failed), skip, xfail (expected failure), xpass (an
expected failure that passed: an improvement), flaky (failed, then passed on a retry).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tt_conformance._schema import DataFileError, FieldReader, read_json_file

SCHEMA_VERSION = 1
REPORT_KIND = "tt-conformance-report"
OUTCOMES: tuple[str, ...] = ("pass", "fail", "error", "skip", "xfail", "xpass", "flaky")
PASSING: frozenset[str] = frozenset({"pass", "xpass", "flaky"})
FAILING: frozenset[str] = frozenset({"fail", "error"})
BETTER: tuple[str, ...] = ("lower", "higher")
EXPECTED_BY: tuple[str, ...] = ("expectations", "marker")


class ReportError(DataFileError):
    """A report file is missing, unreadable or does not match the schema."""


@dataclass(frozen=True)
class CheckResult:
    id: str
    nodeid: str
    concern: str
    outcome: str
    reason: str = ""
    duration_s: float = 0.0
    attempts: int = 1
    expected_by: str | None = None
    details: str = ""


@dataclass(frozen=True)
class PerfFigure:
    name: str
    value: float
    unit: str
    better: str
    check: str


@dataclass(frozen=True)
class CollectionError:
    nodeid: str
    message: str


@dataclass(frozen=True)
class Versions:
    vllm: str = "unknown"
    plugin: str = "unknown"
    tt_metal: str = "unknown"
    harness: str = "unknown"


@dataclass(frozen=True)
class ServerSnapshot:
    url: str
    max_num_seqs: int
    lanes: int
    max_model_len: int | None


@dataclass(frozen=True)
class Report:
    run_id: str
    started_at: str
    finished_at: str
    model: str
    device: str
    mesh_shape: str | None
    versions: Versions
    server: ServerSnapshot
    server_options: Any
    expectations_file: str | None
    exit_status: int
    checks: tuple[CheckResult, ...]
    perf: dict[str, PerfFigure] = field(default_factory=dict)
    collection_errors: tuple[CollectionError, ...] = ()
    warnings: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION

    @property
    def totals(self) -> dict[str, int]:
        return compute_totals(self.checks)

    def check(self, check_id: str) -> CheckResult | None:
        for result in self.checks:
            if result.id == check_id:
                return result
        return None

    def checks_with(self, *outcomes: str) -> list[CheckResult]:
        return [c for c in self.checks if c.outcome in outcomes]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": REPORT_KIND,
            "run_id": self.run_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "model": self.model,
            "device": self.device,
            "mesh_shape": self.mesh_shape,
            "versions": {
                "vllm": self.versions.vllm,
                "plugin": self.versions.plugin,
                "tt_metal": self.versions.tt_metal,
                "harness": self.versions.harness,
            },
            "server": {
                "url": self.server.url,
                "max_num_seqs": self.server.max_num_seqs,
                "lanes": self.server.lanes,
                "max_model_len": self.server.max_model_len,
            },
            "server_options": self.server_options,
            "expectations_file": self.expectations_file,
            "exit_status": self.exit_status,
            "totals": self.totals,
            "checks": [
                {
                    "id": c.id,
                    "nodeid": c.nodeid,
                    "concern": c.concern,
                    "outcome": c.outcome,
                    "reason": c.reason,
                    "duration_s": round(c.duration_s, 6),
                    "attempts": c.attempts,
                    "expected_by": c.expected_by,
                    "details": c.details,
                }
                for c in self.checks
            ],
            "perf": {
                name: {"value": p.value, "unit": p.unit, "better": p.better, "check": p.check}
                for name, p in sorted(self.perf.items())
            },
            "collection_errors": [
                {"nodeid": e.nodeid, "message": e.message} for e in self.collection_errors
            ],
            "warnings": list(self.warnings),
        }


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
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


# ----------------------------------------------------------------------------- reading


_TOP_FIELDS = (
    "schema_version", "kind", "run_id", "started_at", "finished_at", "model", "device",
    "mesh_shape", "versions", "server", "server_options", "expectations_file", "exit_status",
    "totals", "checks", "perf", "collection_errors", "warnings",
)  # fmt: skip
_CHECK_FIELDS = (
    "id", "nodeid", "concern", "outcome", "reason", "duration_s", "attempts", "expected_by",
    "details",
)  # fmt: skip


def report_from_dict(data: Any, source: str = "<report>") -> Report:
    """Validate parsed JSON against schema 1 and build a Report; ReportError names the field."""
    r = FieldReader(source)
    try:
        top = r.obj(data, "", allowed=_TOP_FIELDS)
        version = r.integer(top, "schema_version")
        if version != SCHEMA_VERSION:
            r.fail(
                "schema_version",
                f"unsupported version {version} (this harness reads {SCHEMA_VERSION})",
            )
        kind = r.string(top, "kind")
        if kind != REPORT_KIND:
            r.fail("kind", f"expected {REPORT_KIND!r}, got {kind!r}")
        v = r.obj(
            r.require(top, "versions", ""),
            "versions",
            allowed=("vllm", "plugin", "tt_metal", "harness"),
        )
        s = r.obj(
            r.require(top, "server", ""),
            "server",
            allowed=("url", "max_num_seqs", "lanes", "max_model_len"),
        )
        checks = tuple(
            _check_from(r, item, f"checks[{i}]")
            for i, item in enumerate(r.lst(r.require(top, "checks", ""), "checks"))
        )
        seen: set[str] = set()
        for i, c in enumerate(checks):
            if c.id in seen:
                r.fail(f"checks[{i}].id", f"duplicate check id {c.id!r}")
            seen.add(c.id)
        perf_obj = r.obj(r.require(top, "perf", ""), "perf")
        perf = {name: _perf_from(r, name, value) for name, value in perf_obj.items()}
        errors = tuple(
            CollectionError(
                nodeid=r.string(
                    r.obj(e, f"collection_errors[{i}]", allowed=("nodeid", "message")),
                    "nodeid",
                    f"collection_errors[{i}]",
                ),
                message=r.string(e, "message", f"collection_errors[{i}]"),
            )
            for i, e in enumerate(
                r.lst(r.require(top, "collection_errors", ""), "collection_errors")
            )
        )
        warnings = []
        for i, w in enumerate(r.lst(r.require(top, "warnings", ""), "warnings")):
            if not isinstance(w, str):
                r.fail(f"warnings[{i}]", "expected a string")
            warnings.append(w)
        report = Report(
            schema_version=version,
            run_id=r.string(top, "run_id", nonempty=True),
            started_at=r.string(top, "started_at"),
            finished_at=r.string(top, "finished_at"),
            model=r.string(top, "model", nonempty=True),
            device=r.string(top, "device", nonempty=True),
            mesh_shape=r.opt_string(top, "mesh_shape"),
            versions=Versions(
                vllm=r.string(v, "vllm", "versions"),
                plugin=r.string(v, "plugin", "versions"),
                tt_metal=r.string(v, "tt_metal", "versions"),
                harness=r.string(v, "harness", "versions"),
            ),
            server=ServerSnapshot(
                url=r.string(s, "url", "server"),
                max_num_seqs=r.integer(s, "max_num_seqs", "server", minimum=1),
                lanes=r.integer(s, "lanes", "server", minimum=1),
                max_model_len=r.opt_integer(s, "max_model_len", "server", minimum=1),
            ),
            server_options=r.require(top, "server_options", ""),
            expectations_file=r.opt_string(top, "expectations_file"),
            exit_status=r.integer(top, "exit_status"),
            checks=checks,
            perf=perf,
            collection_errors=errors,
            warnings=tuple(warnings),
        )
        _check_totals(r, r.obj(r.require(top, "totals", ""), "totals"), report)
    except DataFileError as exc:
        raise ReportError(str(exc)) from None
    return report


def _check_from(r: FieldReader, item: Any, path: str) -> CheckResult:
    d = r.obj(item, path, allowed=_CHECK_FIELDS)
    expected_by = r.opt_string(d, "expected_by", path)
    if expected_by is not None and expected_by not in EXPECTED_BY:
        r.fail(
            f"{path}.expected_by",
            f"expected one of {', '.join(EXPECTED_BY)} or null, got {expected_by!r}",
        )
    return CheckResult(
        id=r.string(d, "id", path, nonempty=True),
        nodeid=r.string(d, "nodeid", path, nonempty=True),
        concern=r.string(d, "concern", path),
        outcome=r.choice(d, "outcome", OUTCOMES, path),
        reason=r.string(d, "reason", path),
        duration_s=r.number(d, "duration_s", path, minimum=0),
        attempts=r.integer(d, "attempts", path, minimum=1),
        expected_by=expected_by,
        details=r.string(d, "details", path),
    )


def _perf_from(r: FieldReader, name: str, value: Any) -> PerfFigure:
    path = f"perf.{name}"
    d = r.obj(value, path, allowed=("value", "unit", "better", "check"))
    return PerfFigure(
        name=name,
        value=r.number(d, "value", path),
        unit=r.string(d, "unit", path),
        better=r.choice(d, "better", BETTER, path),
        check=r.string(d, "check", path),
    )


def _check_totals(r: FieldReader, totals: dict[str, Any], report: Report) -> None:
    expected = report.totals
    r.obj(totals, "totals", allowed=expected.keys())
    for key, count in expected.items():
        stored = r.integer(totals, key, "totals", minimum=0)
        if stored != count:
            r.fail(f"totals.{key}", f"is {stored} but the checks list has {count}")


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read and validate a report file. Raises ReportError naming the file and the bad field."""
    p = Path(path)
    try:
        data = read_json_file(p, "report")
    except DataFileError as exc:
        raise ReportError(str(exc)) from None
    return report_from_dict(data, str(p))


# ----------------------------------------------------------------------------- writing


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


def write_report(report: Report, report_dir: Path) -> WrittenReport:
    """Write <run_id>.json/.md/.xml (never overwriting an earlier run) and refresh latest.*."""
    # Imported here: render needs tabulate, reading a report does not.
    import json

    from tt_conformance.render import render_junit, render_markdown

    report_dir.mkdir(parents=True, exist_ok=True)
    stem = report.run_id
    suffix = 0
    while any((report_dir / f"{stem}{ext}").exists() for ext in (".json", ".md", ".xml")):
        suffix += 1
        stem = f"{report.run_id}-{suffix}"
    payload = json.dumps(report.to_dict(), indent=2, sort_keys=False) + "\n"
    markdown = render_markdown(report)
    junit = render_junit(report)
    paths = WrittenReport(
        json=report_dir / f"{stem}.json",
        markdown=report_dir / f"{stem}.md",
        junit=report_dir / f"{stem}.xml",
        latest_json=report_dir / "latest.json",
        latest_markdown=report_dir / "latest.md",
        latest_junit=report_dir / "latest.xml",
    )
    # The run files first, latest.* last: a crash in between leaves latest.* at the previous run.
    atomic_write_text(paths.json, payload)
    atomic_write_text(paths.markdown, markdown)
    atomic_write_text(paths.junit, junit)
    atomic_write_text(paths.latest_json, payload)
    atomic_write_text(paths.latest_markdown, markdown)
    atomic_write_text(paths.latest_junit, junit)
    return paths
