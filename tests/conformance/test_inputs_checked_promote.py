"""baseline promote checks its input (issue 32, item 6): a baseline decides what every later gate
accepts, so an aborted or unfinished run, failures nobody explained and a run older than the
baseline it replaces are refused, each naming why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tt_conformance.cli import conformance as cli
from tt_conformance.report import Aborted, Report, load_report
from tt_conformance.tiers import derive_tier
from tt_conformance.writers import write_report


def _write(report: Report, where: Path) -> Path:
    return write_report(report, where).json


def _refused(capsys: pytest.CaptureFixture[str], report: Path, baselines: Path) -> str:
    args = ["baseline", "promote", str(report), "--baselines-dir", str(baselines)]
    assert cli.main(args) == cli.EXIT_BAD_INPUT
    assert not (baselines / "org--model-a").exists()  # nothing written
    return capsys.readouterr().err


def _promote(report: Path, baselines: Path, *flags: str) -> int:
    return cli.main(["baseline", "promote", str(report), "--baselines-dir", str(baselines), *flags])


def test_an_aborted_run_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # 20 of 109 checks ran, then the server died: every later gate would pass the other 89.
    ran = make_report({f"m::c{i:03d}": "pass" for i in range(20)})
    gone = Aborted(
        reason="GET /health: connection refused", at="2025-01-01T00:10:00Z", during="m::c019",
        not_run=89,
    )  # fmt: skip
    aborted = ran.replace(aborted=gone, exit_status=2)
    path = _write(aborted.replace(tier=derive_tier(aborted)), tmp_path / "run")
    err = _refused(capsys, path, tmp_path / "baselines")
    assert "field 'aborted': the run was aborted during m::c019" in err
    assert "89 selected check(s) never ran" in err


@pytest.mark.parametrize(("status", "what"), [(2, "interrupted"), (3, "internal error")])
def test_a_run_that_did_not_complete_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str], status: int, what: str
) -> None:
    path = _write(make_report({"m::a": "pass"}).replace(exit_status=status), tmp_path / "run")
    err = _refused(capsys, path, tmp_path / "baselines")
    assert f"field 'exit_status': pytest exited {status} ({what}): the run did not complete" in err


def test_a_run_whose_checks_all_skipped_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(make_report({"m::a": "skip", "m::b": "skip"}), tmp_path / "run")
    err = _refused(capsys, path, tmp_path / "baselines")
    assert "field 'totals': all 2 checks were skipped, none ran" in err


def test_uncovered_failures_need_the_todo_flag(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = {"m::ok": "pass", "m::bad": "fail", "m::xf": "xfail", "m::fl": "flaky"}
    path = _write(make_report(outcomes).replace(exit_status=1), tmp_path / "run")
    baselines = tmp_path / "baselines"
    err = _refused(capsys, path, baselines)
    assert "3 failing, expected-failing or flaky check(s) not covered" in err
    assert "m::bad (fail), m::fl (flaky), m::xf (xfail)" in err and "--write-todo-entries" in err

    # Today's skeleton, asked for: a TODO entry per uncovered check.
    assert _promote(path, baselines, "--write-todo-entries") == cli.EXIT_OK
    assert "3 placeholder entries" in capsys.readouterr().out
    exp = json.loads((baselines / "org--model-a" / "N150" / "expectations.json").read_text())
    assert [e["check"] for e in exp["expected_failures"]] == ["m::bad", "m::xf"]
    assert [e["check"] for e in exp["flaky"]] == ["m::fl"]
    assert all(e["reason"].startswith("TODO") for e in exp["expected_failures"] + exp["flaky"])


def test_failures_the_expectations_explain_are_promoted(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(make_report({"m::ok": "pass", "m::bad": "fail"}).replace(exit_status=1), tmp_path)
    baselines = tmp_path / "baselines"
    exp_path = baselines / "org--model-a" / "N150" / "expectations.json"
    exp_path.parent.mkdir(parents=True)
    explained = {"schema_version": 2, "expected_failures": [
        {"check": "m::bad", "reason": "no device sampler for this model (issue 7)"}]}  # fmt: skip
    exp_path.write_text(json.dumps(explained))
    assert _promote(path, baselines) == cli.EXIT_OK
    assert "placeholder" not in capsys.readouterr().out
    assert json.loads(exp_path.read_text()) == explained


def test_an_older_run_does_not_replace_a_newer_baseline(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = make_report({"m::a": "pass"}).replace(started_at="2025-03-01T00:00:00Z")
    # Two hours east of UTC: 2025-02-28T23:00:00Z, before the baseline.
    older = make_report({"m::a": "pass"}).replace(started_at="2025-03-01T01:00:00+02:00")
    baselines = tmp_path / "baselines"
    assert _promote(_write(newer, tmp_path / "new"), baselines) == cli.EXIT_OK
    old_path = _write(older, tmp_path / "old")
    assert _promote(old_path, baselines) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"field 'started_at': the run started 2025-03-01T01:00:00+02:00 ({older.run_id})" in err
    assert f"2025-03-01T00:00:00Z ({newer.run_id} in " in err and "--allow-older" in err
    baseline = baselines / "org--model-a" / "N150" / "baseline.json"
    assert load_report(baseline).run_id == newer.run_id

    assert _promote(old_path, baselines, "--allow-older") == cli.EXIT_OK
    assert f"(replacing run {newer.run_id})" in capsys.readouterr().out
    assert load_report(baseline).run_id == older.run_id
