"""Publishing from CI (issue 32, item 7): `tt-conformance history add` files a finished run in the
published history store (reports/history), so the site's history grows with every CI run; it
refuses what is not a finished run's report and never files a run twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tt_conformance import history
from tt_conformance.cli import conformance as cli
from tt_conformance.matrix import find_reports
from tt_conformance.report import Aborted, Report, load_report
from tt_conformance.tiers import derive_tier
from tt_conformance.writers import write_report


def _add(report: Path, store: Path, *flags: str) -> int:
    return cli.main(["history", "add", str(report), "--history", str(store), *flags])


def _stored(store: Path) -> list[Path]:
    return sorted(store.rglob("*.json")) if store.is_dir() else []


def _run(make_report: Any, where: Path, **kw: Any) -> tuple[Report, Path]:
    report = make_report({"m::a": "pass", "m::b": "fail"}, **kw)
    return report, write_report(report, where).latest_json


def test_a_finished_run_joins_its_series_in_the_site_history(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    store = reports / "history"
    older, older_path = _run(make_report, tmp_path / "ci-1", device="GALAXY",
                             finished_at="2025-01-01T00:00:00Z")  # fmt: skip
    newer, newer_path = _run(make_report, tmp_path / "ci-2", device="GALAXY",
                             finished_at="2025-02-01T00:00:00Z")  # fmt: skip
    for path in (older_path, newer_path):
        assert _add(path, store) == cli.EXIT_OK
    out = capsys.readouterr().out
    target = store / "org--model-a" / "GALAXY"
    assert f"history: added {target / (older.run_id + '.json')}" in out
    assert _stored(store) == [target / f"{older.run_id}.json", target / f"{newer.run_id}.json"]
    # The file as the run wrote it, and the site's history sees both runs as one series.
    assert (target / f"{newer.run_id}.json").read_bytes() == newer_path.read_bytes()
    runs = history.by_model_device(history.distinct_runs(find_reports(reports)))
    assert [r.report.run_id for r in runs[("org/model-a", "GALAXY")]] == [
        older.run_id,
        newer.run_id,
    ]


def test_adding_the_same_run_twice_is_a_no_op(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "history"
    report, latest = _run(make_report, tmp_path / "ci")
    run_file = latest.parent / f"{report.run_id}.json"
    assert _add(latest, store) == cli.EXIT_OK
    capsys.readouterr()
    # latest.json and the run's own file are the same run: a CI retry files nothing new.
    assert _add(run_file, store) == cli.EXIT_OK
    assert "already in the store" in capsys.readouterr().out
    assert len(_stored(store)) == 1


def test_a_stored_run_amended_since_needs_replace(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "history"
    report, latest = _run(make_report, tmp_path / "ci")
    assert _add(latest, store) == cli.EXIT_OK
    amended = report.replace(warnings=("perf figures imported later",))
    write_report(amended, latest.parent, stem=report.run_id)
    assert _add(latest, store) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"field 'run_id': run {report.run_id} is already in the history store" in err
    assert "--replace" in err
    assert _add(latest, store, "--replace") == cli.EXIT_OK
    (only,) = _stored(store)
    assert load_report(only).warnings == ("perf figures imported later",)


def test_an_aborted_run_enters_the_history(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 44 item 4: a bump that crashes or hangs the server is history, not nothing."""
    gone = Aborted(reason="GET /health: connection refused", at="2025-01-01T00:10:00Z",
                   during="m::b", not_run=40)  # fmt: skip
    report = make_report({"m::a": "pass"}).replace(aborted=gone, exit_status=2)
    report = report.replace(tier=derive_tier(report))
    path = write_report(report, tmp_path / "ci").json
    assert _add(path, tmp_path / "history") == cli.EXIT_OK
    (stored,) = _stored(tmp_path / "history")
    assert load_report(stored).aborted == gone


@pytest.mark.parametrize(
    ("content", "names"),
    [
        (json.dumps({"kind": "tt-conformance-expectations", "schema_version": 2}),
         "field 'kind': 'tt-conformance-expectations', not a conformance report"),
        (json.dumps([1, 2]), "field 'kind': None, not a conformance report"),
        ("# a run's Markdown\n", "not valid JSON"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_report_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, names: str
) -> None:
    path = tmp_path / "expectations.json"
    path.write_text(content)
    assert _add(path, tmp_path / "history") == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(path) in err and names in err
    assert _stored(tmp_path / "history") == []


def test_a_malformed_report_names_its_field(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _, latest = _run(make_report, tmp_path / "ci")
    data = json.loads(latest.read_text())
    data["checks"][0]["outcome"] = "sort-of"
    latest.write_text(json.dumps(data))
    assert _add(latest, tmp_path / "history") == cli.EXIT_BAD_INPUT
    assert "field 'checks[0].outcome'" in capsys.readouterr().err


def test_a_lane_dp_run_is_filed_beside_its_single_lane_series(
    tmp_path: Path, make_report: Any
) -> None:
    one = make_report({"m::a": "pass"}, device="emulated")
    four = one.replace(
        server=one.server.model_copy(update={"lanes": 4}), run_id="20250101T000000Z-4444aaaa"
    )
    store = tmp_path / "history"
    for report, sub in ((one, "one"), (four, "four")):
        assert _add(write_report(report, tmp_path / sub).json, store) == cli.EXIT_OK
    assert sorted(p.name for p in (store / "org--model-a").iterdir()) == [
        "emulated",
        "emulated-lanes4",
    ]
