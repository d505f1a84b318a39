"""Report schema: round trip, atomic writes, validation errors, renderings."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tt_conformance.formats.json import report_to_dict
from tt_conformance.report import ReportError, load_report, report_from_dict
from tt_conformance.writers import atomic_write_text, write_report

MIXED = {
    "tt_conformance.checks.test_iso::test_a": "pass",
    "tt_conformance.checks.test_iso::test_b[8]": "fail",
    "tt_conformance.checks.test_lp::test_c": "xfail",
    "tt_conformance.checks.test_lp::test_d": "flaky",
    "tt_conformance.checks.test_lp::test_e": "skip",
}


def test_round_trip_preserves_every_field(tmp_path: Path, make_report) -> None:
    original = make_report(MIXED, perf={"ttft_p50@c1": (41.5, "ms", "lower")})
    written = write_report(original, tmp_path)
    loaded = load_report(written.json)
    assert loaded == original
    assert load_report(written.latest_json) == original
    data = json.loads(written.json.read_text())
    assert data["schema_version"] == 4 and data["kind"] == "tt-conformance-report"
    assert data["totals"]["total"] == 5 and data["totals"]["flaky"] == 1


def test_runs_never_overwrite_each_other(tmp_path: Path, make_report) -> None:
    first = make_report({"m::a": "pass"})
    clash = make_report({"m::a": "fail"}).replace(run_id=first.run_id)
    a = write_report(first, tmp_path)
    b = write_report(clash, tmp_path)
    assert a.json != b.json
    assert load_report(a.json).check("m::a").outcome == "pass"
    assert load_report(b.json).check("m::a").outcome == "fail"
    assert load_report(tmp_path / "latest.json").check("m::a").outcome == "fail"


def test_failed_write_leaves_previous_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "latest.json"
    atomic_write_text(target, '{"old": true}\n')

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, '{"new": true}\n')
    assert target.read_text() == '{"old": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.json"]


def test_atomic_write_goes_through_a_temp_file_in_the_same_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str, dst: str | Path) -> None:
        seen.append((src, dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    atomic_write_text(tmp_path / "r.json", "x")
    assert len(seen) == 1
    src, dst = seen[0]
    assert Path(src).parent == tmp_path and Path(src).name.startswith(".r.json.")
    assert Path(dst) == tmp_path / "r.json"


def _valid_dict(make_report) -> dict:
    return report_to_dict(make_report(MIXED, perf={"tpot@c1": (9.0, "ms", "lower")}))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("model"), "field 'model': missing required field"),
        (lambda d: d.update(schema_version=5), "field 'schema_version': unsupported version 5"),
        (lambda d: d.update(kind="other"), "field 'kind': Input should be 'tt-conformance-report'"),
        (lambda d: d.update(extra=1), "field 'extra': unknown field"),
        (
            lambda d: d["checks"][1].update(outcome="passed"),
            "field 'checks[1].outcome': Input should be 'pass', 'fail'",
        ),
        (
            lambda d: d["checks"][0].update(attempts=0),
            "field 'checks[0].attempts': Input should be greater than or equal to 1",
        ),
        (lambda d: d["checks"][2].pop("outcome"), "field 'checks[2].outcome': missing required"),
        (
            lambda d: d["perf"]["tpot@c1"].update(better="smaller"),
            "field 'perf.tpot@c1.better': Input should be 'lower' or 'higher'",
        ),
        (
            lambda d: d["perf"]["tpot@c1"].update(value="fast"),
            "field 'perf.tpot@c1.value': Input should be a valid number",
        ),
        (
            lambda d: d["totals"].update(fail=7),
            "field 'totals.fail': is 7 but the checks list has 1",
        ),
        (
            lambda d: d["server"].update(lanes=True),
            "field 'server.lanes': Input should be a valid integer",
        ),
        (
            lambda d: d["checks"].append(dict(d["checks"][0])),
            "field 'checks[5].id': duplicate check id",
        ),
    ],
)
def test_schema_errors_name_file_and_field(make_report, mutate, message: str) -> None:
    data = _valid_dict(make_report)
    mutate(data)
    with pytest.raises(ReportError) as info:
        report_from_dict(data, "some/report.json")
    assert str(info.value).startswith("some/report.json: ")
    assert message in str(info.value)


def test_load_report_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="report file not found"):
        load_report(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1,\n  oops}')
    with pytest.raises(ReportError, match=r"bad.json: report file is not valid JSON \(line 2"):
        load_report(bad)


def test_markdown_rendering(make_report) -> None:
    from tt_conformance.formats.markdown import render_report_markdown as render_markdown

    report = make_report(
        {"m::test_pipe[a|b]": "fail", "m::ok": "pass"}, perf={"ttft@c1": (12.0, "ms", "lower")}
    )
    md = render_markdown(report)
    assert md.startswith("# Conformance report: org/model-a on N150")
    # The failure comes first and the pipe cannot break the table.
    checks = md.split("## Checks")[1]
    assert checks.index("m::test_pipe[a\\|b]") < checks.index("m::ok")
    assert "| ttft@c1 " in md and "| 12 " in md


def test_junit_rendering(make_report) -> None:
    from tt_conformance.formats.junit import render_junit

    report = make_report(MIXED)
    root = ET.fromstring(render_junit(report).split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "1", "2")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["test_b[8]"].find("failure") is not None
    assert cases["test_c"].find("skipped").get("type") == "pytest.xfail"
    flaky_props = {p.get("name"): p.get("value") for p in cases["test_d"].iter("property")}
    assert flaky_props["outcome"] == "flaky" and flaky_props["attempts"] == "2"


def test_junit_is_what_tt_ci_collector_reads(make_report) -> None:
    """tt-github-actions' collect_data: one suite named pytest, pytest's timestamp form,
    start/end per case; flaky runs as Surefire flakyFailure entries (one per failed attempt)."""
    from datetime import datetime

    from tt_conformance.formats.junit import render_junit

    report = make_report(MIXED)
    root = ET.fromstring(render_junit(report).split("\n", 1)[1])
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["pytest"]
    fmt = "%Y-%m-%dT%H:%M:%S.%f"
    started = datetime.strptime(suites[0].get("timestamp"), fmt)
    assert started.isoformat(timespec="seconds") + "Z" == report.started_at
    for case in suites[0].iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        start = datetime.strptime(props["start_timestamp"], fmt)
        end = datetime.strptime(props["end_timestamp"], fmt)
        assert start <= end
    cases = {c.get("name"): c for c in suites[0].iter("testcase")}
    flaky = cases["test_d"].findall("flakyFailure")
    assert len(flaky) == 1 and flaky[0].find("stackTrace") is not None
    assert cases["test_d"].find("failure") is None  # the case itself passed


def test_junit_drops_control_characters(make_report) -> None:
    from tt_conformance.formats.junit import render_junit

    report = make_report({"m::t": "fail"})
    bad = report.checks[0].model_copy(update={"reason": "\x1b[31mred\x1b[0m", "details": "x\x00y"})
    text = render_junit(report.replace(checks=(bad,)))
    ET.fromstring(text.split("\n", 1)[1])  # parses: no control characters left
    assert "[31mred" in text


def test_markdown_shows_tier_accuracy_and_perf_identity(make_report, passing_accuracy) -> None:
    from tt_conformance.formats.markdown import render_report_markdown as render_markdown
    from tt_conformance.report import PerfFigure
    from tt_conformance.tiers import derive_tier

    report = make_report({"m::a": "pass"}, accuracy=(passing_accuracy,))
    fig = PerfFigure(
        name="ttft_mean@i128o128c8", value=12.5, unit="ms", better="lower", check="c",
        metric="ttft", stat="mean", input_len=128, output_len=128, concurrency=8,
        flag="burst delivery: 64 tokens arrived in 16 chunks",
    )  # fmt: skip
    report = report.replace(perf={fig.name: fig})
    report = report.replace(tier=derive_tier(report))
    md = render_markdown(report)
    assert "| tier " in md and "functional" in md and "no perf targets" in md
    assert "| tt-patterns" in md and "0.830 to 0.940" in md
    assert "128/128 @ 8" in md and "burst delivery" in md
