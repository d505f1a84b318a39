"""Publishing and gating: baseline promotion, the suite's own gate, skips, history, the site and
the step summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from markupsafe import escape as html_escape

from tests.conformance.conftest import published_reports, tt_info_text
from tt_conformance import history, selection, writers
from tt_conformance.cli import conformance as cli
from tt_conformance.gate import compare
from tt_conformance.identity import AXES, differences, unlike
from tt_conformance.matrix import (
    CONCERN_EXPECTED,
    CONCERN_FAIL,
    CONCERN_NOT_RUN,
    CONCERN_PARTIAL,
    CONCERN_PASS,
    all_concerns,
    column_of,
    concern_not_run,
    concern_status,
    find_reports,
)
from tt_conformance.report import load_report
from tt_conformance.writers import write_report

REPO = Path(__file__).resolve().parents[2]

CHECKS = """
import pytest

@pytest.mark.isolation
def test_ok(tt_server):
    pass

@pytest.mark.isolation
def test_broken(tt_server):
    assert False, "broken on this device"

@pytest.mark.isolation
def test_must_not_run(tt_server):
    assert False, "would hang this model"
"""


def _run(pytester: pytest.Pytester, harness_args: list[str], url: str) -> pytest.RunResult:
    return pytester.runpytest(
        *harness_args, f"--tt-server-url={url}", "--tt-device=emulated", "--tt-gate"
    )


def test_promote_an_emulated_run_and_gate_against_it(
    pytester: pytest.Pytester, fake_server, harness_args, capsys, monkeypatch
) -> None:
    # A TT server (it publishes tt_plugin_info) on the emulated mesh: a non-TT one is "not-tt".
    fake_server.state.tt_metrics = [tt_info_text("N300", "1x2", emulated_mesh=True)]
    pytester.makepyfile(test_pub=CHECKS)
    # The suite here is this one file (pytester runs in this process): its runs are full, so
    # they can be promoted (a partial run cannot: test_identity_and_coverage.py).
    monkeypatch.setattr(selection, "suite_modules", lambda: ("test_pub",))
    baselines = pytester.path / "reports" / "baselines"
    exp_dir = baselines / "fake--tiny-model" / "emulated-N300"  # the emulated mesh's name
    exp_dir.mkdir(parents=True)
    # A check that must not run on this model, with its reason: the suite skips it.
    (exp_dir / "expectations.json").write_text(
        json.dumps(
            {
                "schema_version": 2,
                "skips": [{"check": "test_pub::test_must_not_run", "reason": "hangs the model"}],
            }
        )
    )
    first = _run(pytester, harness_args, fake_server.url)
    first.assert_outcomes(passed=1, failed=1, skipped=1)
    first.stdout.fnmatch_lines(["*no baseline for fake/tiny-model on emulated-N300*not gated*"])
    run_dir = pytester.path / "reports" / "fake--tiny-model" / "emulated-N300"
    skipped = load_report(run_dir / "latest.json").check("test_pub::test_must_not_run")
    assert skipped is not None and skipped.outcome == "skip"
    assert "skipped by expectations: hangs the model" in skipped.reason
    # A waiver, listed as one: its concern ran (another check of it did), so the run is full.
    first_report = load_report(run_dir / "latest.json")
    assert first_report.coverage is not None
    assert first_report.coverage.waived == ("test_pub::test_must_not_run",)
    assert first_report.coverage.full

    assert cli.main(["baseline", "promote", str(run_dir / "latest.json"),
                     "--baselines-dir", str(baselines), "--write-todo-entries"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "1 placeholder entries" in out and "TODO test_pub::test_broken" in out
    promoted = load_report(exp_dir / "baseline.json")
    assert promoted.run_id == load_report(run_dir / "latest.json").run_id
    data = json.loads((exp_dir / "expectations.json").read_text())
    assert [e["check"] for e in data["expected_failures"]] == ["test_pub::test_broken"]
    assert data["expected_failures"][0]["reason"].startswith("TODO")
    assert "broken on this device" in data["expected_failures"][0]["observed"]
    assert data["skips"][0]["reason"] == "hangs the model"  # kept, not rewritten

    # The skeleton is in force for the suite (xfail) but the gate refuses its placeholder.
    second = _run(pytester, harness_args, fake_server.url)
    assert second.ret == 2
    second.assert_outcomes(passed=1, xfailed=1, skipped=1)
    second.stdout.fnmatch_lines(["*placeholder reasons*expected_failures: test_pub::test_broken*"])

    data["expected_failures"][0]["reason"] = "device sampling lacks this (issue 99)"
    (exp_dir / "expectations.json").write_text(json.dumps(data))
    third = _run(pytester, harness_args, fake_server.url)
    assert third.ret == 0, third.stdout.str()
    # The fake server records no weights: the OK says it cannot prove the same checkpoint.
    third.stdout.fnmatch_lines(
        ["*tt-conformance gate: OK (no regression; same weights not proven)"]
    )

    pytester.makepyfile(test_pub=CHECKS.replace("pass\n", "assert False, 'regressed'\n", 1))
    fourth = _run(pytester, harness_args, fake_server.url)
    assert fourth.ret == 1
    fourth.stdout.fnmatch_lines(["*REGRESSION*", "*test_pub::test_ok: pass -> fail*"])

    # Every run is in the model/device index, with its versions.
    index = json.loads((run_dir / history.INDEX_NAME).read_text())
    assert index["kind"] == history.INDEX_KIND and len(index["runs"]) == 4
    assert {(e["tt_metal"], e["plugin"]) for e in index["runs"]} == {("abc", "0.1.0")}


def test_promote_refuses_a_run_with_collection_errors(tmp_path: Path, make_report, capsys):
    from tt_conformance.report import CollectionError

    report = make_report(
        {"m::t": "pass"}, collection_errors=(CollectionError(nodeid="m.py", message="boom"),)
    )
    path = write_report(report, tmp_path / "run").json
    assert cli.main(["baseline", "promote", str(path), "--baselines-dir", str(tmp_path)]) == 2
    assert "collection error" in capsys.readouterr().err
    assert not (tmp_path / "org--model-a").exists()


def test_concern_states(make_report) -> None:
    report = make_report({"m::a": "pass", "m::b": "xfail"})
    assert concern_status(report, "isolation") == CONCERN_EXPECTED
    assert concern_status(report, "lanes") == CONCERN_NOT_RUN
    assert concern_status(make_report({"m::a": "skip"}), "isolation") == CONCERN_NOT_RUN
    assert concern_status(make_report({"m::a": "flaky", "m::b": "error"}), "isolation") == (
        CONCERN_FAIL
    )
    assert concern_status(make_report({"m::a": "flaky", "m::b": "pass"}), "isolation") == (
        CONCERN_PASS
    )
    # Some checks skipped (not exercised, not applicable): never a plain pass.
    partial = make_report({"m::a": "flaky", "m::b": "skip"})
    assert concern_status(partial, "isolation") == CONCERN_PARTIAL
    assert concern_not_run(partial, "isolation") == ("m::b: why skip",)


def test_history_groups_by_commit_and_keeps_time_order(make_report) -> None:
    runs = [
        history.Run(
            Path(f"{i}.json"),
            make_report(
                {"m::t": "pass"},
                perf={"tt_tps@i128o128c1": (v, "tok/s", "higher")},
                finished_at=f"2025-01-0{i}T00:00:00Z",
                tt_metal=commit,
            ),
        )
        for i, (commit, v) in enumerate(
            [("aaa", 10.0), ("aaa", 11.0), ("unknown", 9.0), ("aaa", 12.0)], start=1
        )
    ]
    groups = history.group_by_commit(runs)
    assert [(g.tt_metal, len(g.runs)) for g in groups] == [("aaa", 2), ("unknown", 1), ("aaa", 1)]
    assert groups[1].unknown
    (trend,) = history.trends(runs)
    assert trend.values() == [10.0, 11.0, 9.0, 12.0]
    assert [(a.report.run_id, b.report.run_id) for a, b in history.compare_pairs(runs)] == [
        (runs[i].report.run_id, runs[i + 1].report.run_id) for i in range(3)
    ]
    # latest.json and its run file are the same run: counted once, the run file kept.
    dup = history.distinct_runs([(Path("latest.json"), runs[0].report), (runs[0].path,
                                 runs[0].report)])  # fmt: skip
    assert [r.path for r in dup] == [runs[0].path]


def test_site_from_the_committed_reports(tmp_path: Path) -> None:
    found = find_reports(published_reports(tmp_path / "clone"), include_baselines=True)
    site = tmp_path / "site"
    pages = writers.build_site(found, site, "2026-01-01T00:00:00Z")
    index = (site / "index.html").read_text()
    reports = [r for _, r in found]
    for report in reports:
        assert f'data-model="{report.model}" data-device="{column_of(report)}"' in index
    for concern in all_concerns(reports):
        assert f'<th class="concern">{concern}</th>' in index
    for state in ("pass", "pass with expected failures", "fail", "not run"):
        assert f">{state}</span>" in index  # the legend
    assert 'class="unknown"' in index  # tt-metal is unknown in the emulated runs: flagged
    assert "**unknown**" in (site / "MATRIX.md").read_text()
    # The committed llama series (its history and its baseline): a comparison per consecutive
    # pair, built on the gate's compare; the newest pair is checked here.
    series = sorted(
        (
            r
            for r in history.distinct_runs(found)
            if r.key == ("tt-reference-llama", "emulated-T3K")
        ),
        key=lambda r: r.report.finished_at,
    )
    assert len(series) >= 2, "the committed llama series has at least two runs"
    compare_pages = [p for p in pages["compare"] if p.suffix == ".html" and p.stem != "index"]
    assert len(compare_pages) == len(series) - 1
    older, newer = series[-2], series[-1]
    (newest,) = [p for p in compare_pages if newer.report.run_id in p.name]
    html = newest.read_text()
    result = compare(older.report, newer.report, axes=frozenset(AXES), floors=False)
    for p in result.perf:
        assert f"<td>{p.name}</td>" in html
    for line in result.identity:  # every identity difference is on the page
        assert html_escape(line) in html
    if unlike(differences(older.report, newer.report)):  # no percentage between unlike runs
        assert "% worse" not in html and "% better" not in html and "unlike runs" in html
    assert older.report.run_id in html and newer.report.run_id in html
    hist = (site / "history" / "tt-reference-llama--emulated-T3K.html").read_text()
    assert "<polyline points=" in hist and all(p.name in hist for p in compare_pages)
    idx = json.loads((site / "history" / "tt-reference-llama--emulated-T3K.json").read_text())
    assert [e["run_id"] for e in idx["runs"]] == [r.report.run_id for r in series]


def test_html_escapes_report_text(tmp_path: Path, make_report) -> None:
    report = make_report({"m::t": "fail"}, model="<script>alert(1)</script>")
    write_report(report, tmp_path / "r")
    writers.build_site(find_reports(tmp_path), tmp_path / "site", "now")
    text = (tmp_path / "site" / "index.html").read_text()
    assert "<script>alert" not in text and "&lt;script&gt;" in text


def test_step_summary(tmp_path: Path, make_report, capsys) -> None:
    report = make_report({"m::ok": "pass", "m::bad": "fail"}, tt_metal="unknown")
    path = write_report(report, tmp_path).json
    gate_out = tmp_path / "gate.txt"
    gate_out.write_text("tt-conformance gate: REGRESSION (1 found)\n")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    assert cli.main(["summary", str(path), "--gate-output", str(gate_out),
                     "--out", str(summary)]) == 0  # fmt: skip
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, as GitHub's summary file wants
    assert "| isolation | fail |" in text
    assert "`m::bad`" in text and "REGRESSION (1 found)" in text
    assert "**Unknown versions:** ttnn, tt-metal" in text


def test_step_summary_gates_against_the_baseline(tmp_path: Path, make_report, capsys) -> None:
    base = make_report({"m::ok": "pass"}, device="emulated")
    cand = make_report({"m::ok": "fail"}, device="emulated")
    b = write_report(base, tmp_path / "b").json
    c = write_report(cand, tmp_path / "c").json
    baselines = tmp_path / "baselines"
    assert cli.main(["baseline", "promote", str(b), "--baselines-dir", str(baselines)]) == 0
    capsys.readouterr()
    assert cli.main(["summary", str(c), "--gate", "--baselines-dir", str(baselines)]) == 0
    out = capsys.readouterr().out
    # The failed check, and the tier it drops (derived from both runs, never stored).
    assert "REGRESSION (2 found)" in out and "m::ok: pass -> fail" in out
    assert "tier dropped from emulated to fail" in out


def test_hardware_workflow_is_a_manual_example_on_a_self_hosted_tt_runner() -> None:
    yaml = pytest.importorskip("yaml")
    path = REPO / ".github" / "workflows" / "tt-hardware-conformance.example.yml"
    text = path.read_text()
    assert text.startswith("# EXAMPLE — needs Tenstorrent hardware")
    data = yaml.safe_load(text)
    triggers = data[True]  # YAML 1.1 reads the key `on` as True
    assert list(triggers) == ["workflow_dispatch"]  # never on push / pull_request
    job = data["jobs"]["conformance"]
    assert "self-hosted" in job["runs-on"]
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    for needed in ("vllm serve", "/health", "tox -e hw", "tt-conformance summary",
                   "GITHUB_STEP_SUMMARY"):  # fmt: skip
        assert needed in runs
    uses = [step.get("uses", "") for step in job["steps"]]
    assert any(u.startswith("actions/upload-artifact") for u in uses)
    assert any("junit" in u for u in uses)


def test_a_lane_dp_run_has_its_own_baseline(tmp_path: Path, make_report, capsys) -> None:
    one = make_report({"m::ok": "pass"}, device="emulated")
    four = one.replace(
        server=one.server.model_copy(update={"lanes": 4}), run_id="20250101T000000Z-4444aaaa"
    )
    baselines = tmp_path / "baselines"
    for report, sub in ((one, "one"), (four, "four")):
        path = write_report(report, tmp_path / sub).json
        assert cli.main(["baseline", "promote", str(path), "--baselines-dir", str(baselines)]) == 0
    model_dir = baselines / "org--model-a"
    assert sorted(p.name for p in model_dir.iterdir()) == ["emulated", "emulated-lanes4"]
    assert load_report(model_dir / "emulated-lanes4" / "baseline.json").server.lanes == 4
    assert load_report(model_dir / "emulated" / "baseline.json").server.lanes == 1
