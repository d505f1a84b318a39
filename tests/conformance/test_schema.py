"""The published schemas: generated from the models, shipped up to date, and every committed
report, baseline and expectations file validates against them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tt_conformance import schema
from tt_conformance.expectations import load_expectations
from tt_conformance.formats.json import report_to_dict
from tt_conformance.report import (
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    ReportError,
    load_report,
    report_from_dict,
)

REPO = Path(__file__).resolve().parents[2]
# Committed runs: the baselines and the kept history the site is built from.
REPORTS = sorted(
    p
    for tree in ("baselines", "history")
    for p in (REPO / "reports" / tree).rglob("*.json")
    if json.loads(p.read_text()).get("kind") == "tt-conformance-report"
)
EXPECTATIONS = sorted((REPO / "reports").rglob("expectations.json"))


def test_shipped_schemas_match_the_models() -> None:
    assert schema.main(["--check", str(REPO / "docs")]) == 0, (
        "run: python -m tt_conformance.schema docs"
    )


def test_load_schema_reads_the_shipped_files() -> None:
    for name, text in schema.rendered().items():
        assert schema.load_schema(name) == json.loads(text)
    with pytest.raises(ValueError, match="unknown schema 'report.json': expected one of "):
        schema.load_schema("report.json")


def test_extra_schema_directories_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, text in schema.rendered().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert schema.main(["--check", str(tmp_path)]) == 0
    (tmp_path / "report.schema.json").unlink()
    assert schema.main(["--check", str(tmp_path)]) == 1
    assert str(tmp_path / "report.schema.json") in capsys.readouterr().out


def _validator(name: str) -> jsonschema.protocols.Validator:
    body = schema.load_schema(name)
    cls = jsonschema.validators.validator_for(body)
    cls.check_schema(body)
    return cls(body)


def test_there_are_committed_files_to_check() -> None:
    assert any("baselines" in p.parts for p in REPORTS) and EXPECTATIONS


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_reports_validate(path: Path) -> None:
    data = json.loads(path.read_text())
    if "history" in path.relative_to(REPO).parts:
        # The history store keeps runs as they were written: read through migrate_report.
        assert data["schema_version"] in READABLE_VERSIONS
        load_report(path)
        return
    assert data["schema_version"] == SCHEMA_VERSION, f"{path}: refresh it (older schema)"
    _validator("report.schema.json").validate(data)
    load_report(path)


@pytest.mark.parametrize("path", EXPECTATIONS, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_expectations_validate(path: Path) -> None:
    _validator("expectations.schema.json").validate(json.loads(path.read_text()))
    load_expectations(path)


def test_schema_refuses_what_the_models_refuse() -> None:
    good = json.loads(REPORTS[0].read_text())
    validator = _validator("report.schema.json")
    for bad in ({**good, "extra": 1}, {**good, "tier": {"tier": "gold", "reason": "",
                                                        "next_blocker": None}}):  # fmt: skip
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(bad)


def test_version_1_reports_are_migrated() -> None:
    data = json.loads((Path(__file__).parent / "data" / "report_v1.json").read_text())
    assert data["schema_version"] == 1
    report = report_from_dict(data, "report_v1.json")
    assert report.schema_version == SCHEMA_VERSION and report.versions.ttnn == "unknown"
    assert report.tier is None and report.accuracy == () and report.run is None
    assert report.perf["ttft_p50@c1"].name == "ttft_p50@c1"
    _validator("report.schema.json").validate(report_to_dict(report))


def test_version_2_reports_are_migrated_and_were_never_aborted() -> None:
    data = json.loads(REPORTS[0].read_text())
    report = report_from_dict({**data, "schema_version": 2}, "report_v2.json")
    assert report.schema_version == SCHEMA_VERSION and report.aborted is None
    with pytest.raises(ReportError, match="field 'aborted.reason'"):
        report_from_dict({**data, "schema_version": 2, "aborted": {"reason": ""}}, "r.json")
