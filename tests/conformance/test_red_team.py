"""Issue 44 (items 1, 2, 4, 5, 6, 7 and their part of 12): a corpus of careless and hostile
reports, each built with the harness's own writers, each asserting the refusal or the honest
label the harness's own commands give it. No false "complete", no false gate "OK".

Every report here starts from one honest hardware run that derives "complete" (T3K, accuracy
passing, the perf target met at its complete fraction, a one-module suite ``m`` run whole), then
changes one thing the way a careless tool or a hostile hand would.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harnessgit import harness_checkout
from tt_conformance import history, selection, suiteids
from tt_conformance.cli import conformance as cli
from tt_conformance.cli import gate as gate_cli
from tt_conformance.cli import matrix as matrix_cli
from tt_conformance.committed import committed_file
from tt_conformance.formats.markdown import render_history_markdown
from tt_conformance.formats.views import comparisons, history_context
from tt_conformance.gate import compare
from tt_conformance.identity import (
    RESULT_NEUTRAL_OPTIONS,
    TT_OPTION_DEFAULTS,
    differences,
    profile_key,
)
from tt_conformance.matrix import (
    CONCERN_WAIVED,
    MatrixError,
    concern_status,
    find_reports,
    fold,
    tier_of,
)
from tt_conformance.rederive import inconsistencies
from tt_conformance.report import (
    Aborted,
    AccuracyResult,
    CheckResult,
    Coverage,
    PerfTargetResult,
    Report,
    Tier,
    load_report,
    report_from_dict,
)
from tt_conformance.selection import coverage_of, installed_suite
from tt_conformance.tiers import derive_tier
from tt_conformance.ttmetrics import NOT_APPLICABLE
from tt_conformance.writers import write_matrix, write_report

FIGURE = "tps_user_median@i128o128c1"
CONCERNS = ("isolation", "seeding", "logprobs")
LANES_MODULE = f"{selection.CHECKS_PACKAGE}.test_lanes"
ACCURACY = AccuracyResult(
    task="t", check="m::test_acc", score=0.9, ci_low=0.6, ci_high=0.98, num_samples=10,
    correct=9, threshold=0.5, verdict="pass", reason="score 0.900 >= threshold 0.500",
)  # fmt: skip


def _check(i: int, concern: str, outcome: str = "pass", reason: str = "") -> CheckResult:
    return CheckResult(
        id=f"m::test_{concern}_{i}", nodeid=f"m.py::test_{concern}_{i}", concern=concern,
        outcome=outcome, reason=reason,  # type: ignore[arg-type]
    )  # fmt: skip


def _sealed(report: Report) -> Report:
    """The report as the harness writes it: coverage and tier derived from its checks."""
    stored = report.coverage or Coverage(
        full=True, selected=0, deselected=0, not_applicable=0, skipped_other=0
    )
    coverage = coverage_of(
        report.checks, deselected=stored.deselected, keyword=stored.keyword,
        markers=stored.markers, args=stored.args, suite=("m",), device=report.device,
        lanes=report.server.lanes,
    )  # fmt: skip
    report = report.replace(coverage=coverage)
    return report.replace(tier=derive_tier(report))


@pytest.fixture
def honest(make_report: Any, vouch: Any) -> Any:
    """Build an honest hardware run (derives complete unless changed): 3 concerns x 39
    checks, the 117 of the issue's Llama-3.3-70B run."""

    def build(
        *,
        checks: tuple[CheckResult, ...] | None = None,
        tps: float = 90.0,
        tt_metal: str = "v1",
        finished_at: str = "2025-01-01T00:00:00Z",
        device: str = "T3K",
        **changes: Any,
    ) -> Report:
        report = make_report(
            {"m::x": "pass"}, device=device, tt_metal=tt_metal, finished_at=finished_at,
            perf={FIGURE: (tps, "tok/s/u", "higher")}, accuracy=(ACCURACY,),
        )  # fmt: skip
        fraction = tps / 100
        met = "target" if fraction >= 0.8 else "complete" if fraction >= 0.5 else "functional"
        target = PerfTargetResult(
            figure=FIGURE, reference=100.0, source="published", functional=0.1, complete=0.5,
            target=0.8, fraction=round(fraction, 4), met=met,  # type: ignore[arg-type]
        )  # fmt: skip
        all_checks = checks or tuple(_check(i, c) for c in CONCERNS for i in range(39))
        report = report.replace(
            checks=all_checks, perf_targets=(target,), mesh_shape="1x8", **changes
        )
        return _sealed(vouch(report))

    return build


def _waive(check: CheckResult) -> CheckResult:
    return check.model_copy(
        update={"outcome": "skip", "reason": f"{selection.WAIVED} hangs the model"}
    )


# ----------------------------------------------------------------------------- item 1


def test_the_honest_run_is_complete(honest: Any) -> None:
    report = honest()
    assert tier_of(report).tier == "complete" and inconsistencies(report) == []


def test_a_3_check_run_of_waivers_is_partial_not_complete(honest: Any, tmp_path: Path) -> None:
    """114 of 117 checks skipped by the expectations: no concern but one ran."""
    checks = honest().checks
    waived = tuple(c if i < 3 else _waive(c) for i, c in enumerate(checks))
    report = honest(checks=waived)
    tier = tier_of(report)
    assert tier.tier == "partial"
    assert "seeding" in tier.reason and "logprobs" in tier.reason
    assert report.coverage is not None and not report.coverage.full
    assert len(report.coverage.waived) == 114
    assert set(report.coverage.concerns_not_run) == {"seeding", "logprobs"}
    # Labelled complete and full by hand: refused by every reader that publishes or gates.
    forged = report.replace(
        tier=Tier(tier="complete", reason="r", next_blocker=None),
        coverage=report.coverage.model_copy(
            update={"full": True, "partial_because": (), "concerns_not_run": ()}
        ),
    )
    found = inconsistencies(forged)
    assert any(f.startswith("field 'tier.tier'") for f in found)
    assert any(f.startswith("field 'coverage.full'") for f in found)
    path = write_report(forged, tmp_path / "run").json
    with pytest.raises(MatrixError, match="inconsistent report"):
        find_reports(tmp_path)
    assert cli.main(["baseline", "promote", str(path), "--baselines-dir",
                     str(tmp_path / "b")]) == cli.EXIT_BAD_INPUT  # fmt: skip
    honest_path = write_report(honest(), tmp_path / "base").json
    assert gate_cli.main(["--baseline", str(honest_path), "--candidate", str(path)]) == 2


def test_an_xfail_moved_into_skips_is_a_waiver_and_caps_the_tier(honest: Any) -> None:
    """Moving an expected failure into `skips` does not buy "complete"."""
    xfail = honest(checks=tuple(
        c.model_copy(update={"outcome": "xfail", "reason": "known"}) if i == 0 else c
        for i, c in enumerate(honest().checks)
    ))  # fmt: skip
    assert tier_of(xfail).tier == "functional"
    skipped = honest(checks=tuple(
        _waive(c) if i == 0 else c for i, c in enumerate(honest().checks)
    ))  # fmt: skip
    tier = tier_of(skipped)
    assert tier.tier == "functional" and "no waived checks" in (tier.next_blocker or "")
    assert concern_status(skipped, "isolation") == CONCERN_WAIVED
    assert skipped.coverage is not None and skipped.coverage.waived == (skipped.checks[0].id,)


def test_a_deleted_or_edited_check_module_makes_the_run_partial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The suite is the shipped manifest, not the installed directory."""
    assert installed_suite().modified == ()  # the checkout matches its manifest
    files = selection.installed_files()
    gone = "tt_conformance.checks.test_lanes"
    edited = "tt_conformance.checks.test_seeding"
    changed = {k: (v + b"\n# edited\n" if k == edited else v) for k, v in files.items()
               if k != gone}  # fmt: skip
    monkeypatch.setattr(selection, "installed_files", lambda: changed)
    state = installed_suite()
    assert f"{gone} (deleted)" in state.modified and f"{edited} (edited)" in state.modified
    assert gone in state.modules  # still part of the suite: missing from any run
    check = _check(0, "isolation")
    coverage = coverage_of([check], deselected=0, keyword=None, markers=None, args=(),
                           suite=("m",), modified=state.modified)  # fmt: skip
    assert not coverage.full
    assert any("differ from its manifest" in w for w in coverage.partial_because)


def test_not_applicable_is_decided_by_the_server_identity(honest: Any) -> None:
    """A "no TT plugin" skip on a T3K, or a "needs lanes" skip on a 4-lane server, is no
    reason the server gives: the concern did not run."""
    no_tt = f"{NOT_APPLICABLE} the server exposes no TT plugin metrics"
    checks = tuple(
        c.model_copy(update={"outcome": "skip", "reason": no_tt}) if c.concern == "seeding" else c
        for c in honest().checks
    )
    assert tier_of(honest(checks=checks)).tier == "partial"
    lanes = f"{selection.NEEDS_LANES} >= 2 lane-DP lanes (this server: 1)"
    one_lane = honest(checks=(*honest().checks, *_lanes_checks(lanes)))
    assert "lanes" not in (one_lane.coverage.concerns_not_run if one_lane.coverage else ())
    server = one_lane.server.model_copy(update={"lanes": 4})
    four = _sealed(one_lane.replace(server=server))
    assert four.coverage is not None and four.coverage.concerns_not_run == ("lanes",)
    assert tier_of(four).tier == "partial"


def _lanes_checks(reason: str) -> tuple[CheckResult, ...]:
    """Two checks of the shipped lanes module (its requires_lanes marker declares the
    excuse), skipped with ``reason``."""
    return tuple(
        CheckResult(
            id=f"{LANES_MODULE}::test_lanes_{i}",
            nodeid=f"lanes.py::test_lanes_{i}",
            concern="lanes",
            outcome="skip",
            reason=reason,
        )
        for i in range(2)
    )


# ----------------------------------------------------------------------------- item 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            lambda r: r.replace(
                tier=Tier(tier="complete", reason="r", next_blocker=None),
                checks=(_check(0, "isolation", "fail", "broken"), *r.checks[1:]),
            ),
            "tier.tier",
        ),  # a hand-set "complete" over a failing check
        (
            lambda r: r.replace(coverage=r.coverage.model_copy(update={"not_applicable": 3})),
            "coverage.not_applicable",
        ),
        (
            lambda r: r.replace(coverage=r.coverage.model_copy(update={"selected": 3})),
            "coverage.selected",
        ),
        (
            lambda r: r.replace(
                perf_targets=(
                    r.perf_targets[0].model_copy(update={"met": "target", "fraction": 0.95}),
                ),
                perf={FIGURE: r.perf[FIGURE].model_copy(update={"value": 20.0})},
            ),
            "perf_targets[0]",
        ),
        (
            lambda r: r.replace(
                accuracy=(
                    ACCURACY.model_copy(
                        update={"score": 0.2, "correct": 2, "ci_low": 0.05, "ci_high": 0.5}
                    ),
                )
            ),
            "accuracy[0]",
        ),
    ],
    ids=["tier", "coverage-counts", "coverage-selected", "perf-target", "accuracy-verdict"],
)
def test_a_stored_verdict_that_disagrees_is_refused_naming_the_field(
    honest: Any, tmp_path: Path, change: Any, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    forged = change(honest())
    assert any(f"field '{field}" in f for f in inconsistencies(forged))
    path = write_report(forged, tmp_path / "runs").json
    base = write_report(honest(), tmp_path / "base").json
    capsys.readouterr()
    assert gate_cli.main(["--baseline", str(base), "--candidate", str(path)]) == 2
    assert f"field '{field}" in capsys.readouterr().err
    assert gate_cli.main(["--baseline", str(path), "--candidate", str(base)]) == 2
    code = cli.main(["baseline", "promote", str(path), "--baselines-dir", str(tmp_path / "b")])
    assert code == cli.EXIT_BAD_INPUT and f"field '{field}" in capsys.readouterr().err
    assert cli.main(["history", "add", str(path), "--history", str(tmp_path / "h")]) == 2
    out = tmp_path / "pub"
    assert matrix_cli.main([str(tmp_path / "runs"), "--out-md", str(out / "M.md"),
                            "--out-html", str(out / "m.html")]) == 2  # fmt: skip
    assert not out.exists()


def test_an_old_schema_report_is_re_derived_not_trusted(honest: Any) -> None:
    """A schema-3 report's stored tier ("functional") is dropped; its checks decide."""
    data = json.loads(write_report_text(honest()))
    data["schema_version"] = 3
    data.pop("coverage")
    data["tier"] = {"tier": "functional", "reason": "old", "next_blocker": None}
    data["checks"][0].update(outcome="fail", reason="broken")
    data["totals"] = None
    report = report_from_dict(data, "old.json")
    assert report.tier is None and tier_of(report).tier == "fail"
    assert inconsistencies(report) == []
    # All passing, its stored "functional" is not kept either: what it selected is unknown.
    data["checks"][0].update(outcome="pass", reason="")
    passing = report_from_dict(data, "old.json")
    tier = tier_of(passing)
    assert tier.tier == "partial" and "coverage not recorded" in tier.reason


def test_a_report_stripped_of_its_coverage_certifies_nothing(honest: Any, tmp_path: Path) -> None:
    """Removing the coverage record (a -k run made to look like an old report) gives no tier."""
    stripped = honest().replace(coverage=None)
    assert tier_of(stripped).tier == "partial"
    assert any(f.startswith("field 'tier.tier'") for f in inconsistencies(stripped))
    resealed = stripped.replace(tier=derive_tier(stripped))
    path = write_report(resealed, tmp_path / "run").json
    code = cli.main(["baseline", "promote", str(path), "--baselines-dir", str(tmp_path / "b")])
    assert code == cli.EXIT_BAD_INPUT


def write_report_text(report: Report) -> str:
    from tt_conformance.formats.json import report_json

    return report_json(report)


# ----------------------------------------------------------------------------- item 4


def _run(report: Report, name: str) -> history.Run:
    return history.Run(Path(f"{name}.json"), report)


def test_an_aborted_bump_enters_the_history_and_the_pivot(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = honest(tt_metal="rc35", finished_at="2025-01-01T00:00:00Z")
    gone = Aborted(reason="GET /health did not answer within 2 s", at="2025-01-02T00:10:00Z",
                   during="m::test_seeding_3", not_run=80)  # fmt: skip
    crash = honest(tt_metal="rc1", finished_at="2025-01-02T00:00:00Z")
    crash = crash.replace(aborted=gone, exit_status=2, checks=crash.checks[:40])
    crash = _sealed(crash)
    store = tmp_path / "history"
    for report in (good, crash):
        path = write_report(report, tmp_path / "ci" / report.run_id).json
        assert cli.main(["history", "add", str(path), "--history", str(store)]) == cli.EXIT_OK
    found = find_reports(store)
    runs = history.distinct_runs(found)
    story = history.cell_story(runs)
    assert story is not None and story.status == "aborted"
    assert story.since.report.versions.tt_metal == "rc1" and story.dropped_from == "complete"
    assert story.last_good is not None and story.last_good.report.versions.tt_metal == "rc35"
    out = tmp_path / "pub"
    write_matrix(found, "now", out / "MATRIX.md", out / "matrix.html")
    md = (out / "MATRIX.md").read_text()
    assert "aborted ↓ from complete since tt-metal rc1" in md
    assert "last good: 2025-01-01, tt-metal rc35" in md


# ----------------------------------------------------------------------------- item 5


def test_the_published_files_keep_the_story_and_a_drop_stays_marked(
    honest: Any, tmp_path: Path
) -> None:
    runs = [
        honest(tt_metal="rc35", finished_at="2025-01-01T00:00:00Z"),
        honest(tt_metal="rc36", finished_at="2025-01-02T00:00:00Z", tps=20.0),  # functional
        honest(tt_metal="rc37", finished_at="2025-01-03T00:00:00Z", tps=20.0),
    ]
    found = [(write_report(r, tmp_path / "r" / r.run_id).json, r) for r in runs]
    write_matrix(found, "now", tmp_path / "MATRIX.md", tmp_path / "matrix.html")
    md = (tmp_path / "MATRIX.md").read_text()
    html = (tmp_path / "matrix.html").read_text()
    # The second run below complete is still a drop; the perf drop is marked too.
    assert "functional ↓ from complete since tt-metal rc36" in md
    assert "perf ↓ T/S/U @i128o128c1: 90 -> 20" in md
    assert "last good: 2025-01-03, tt-metal rc37" in md  # functional is good, not failing
    assert "&darr; from complete" in html and "perf-drop" in html and "since" in html


def test_the_newest_setup_leads_and_the_older_one_is_marked_superseded(
    honest: Any, tmp_path: Path
) -> None:
    old = honest(finished_at="2025-01-01T00:00:00Z", tps=20.0)  # functional, 32 seqs
    newer = honest(finished_at="2025-01-02T00:00:00Z")  # complete, 64 seqs
    newer = _sealed(newer.replace(server=newer.server.model_copy(update={"max_num_seqs": 64})))
    found = [(tmp_path / "a.json", old), (tmp_path / "b.json", newer)]
    cells = fold(found)
    by_run = {c.report.run_id: c for c in cells}
    assert by_run[newer.run_id].superseded_by is None
    assert by_run[old.run_id].superseded_by is not None
    assert "max_num_seqs: 32 -> 64" in by_run[old.run_id].superseded_because
    write_matrix(found, "now", tmp_path / "MATRIX.md", tmp_path / "matrix.html")
    md = (tmp_path / "MATRIX.md").read_text()
    pivot = md.split("## Tier by device")[1].split("## Details")[0]
    assert "| complete since" in pivot and "functional" not in pivot
    assert "functional (superseded)" in md
    assert " configuration " in md.split("## Details")[1].splitlines()[2]


def test_matrix_md_shows_comparisons_as_written(honest: Any, tmp_path: Path) -> None:
    lanes = f"{selection.NEEDS_LANES} >= 2 lane-DP lanes (this server: 1); <b>x</b>"
    checks = (*honest().checks, _check(0, "lanes", "skip", lanes))
    report = honest(checks=checks)
    write_matrix([(tmp_path / "r.json", report)], "now", tmp_path / "M.md", tmp_path / "m.html")
    md = (tmp_path / "M.md").read_text()
    assert ">= 2 lane-DP lanes" in md and "&gt;" not in md
    assert "<b>" not in md and "&lt;b>x&lt;/b>" in md  # a tag stays escaped


def test_every_output_is_guarded_the_same_way(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    for model in ("org/a", "org/b"):
        write_report(honest(model=model), reports / model.replace("/", "--"))
    # reports/MATRIX.md and matrix.html, 2 rows (fixture runs: published on request)
    assert matrix_cli.main([str(reports), "--include-uncommitted"]) == 0
    html_before = (reports / "matrix.html").read_bytes()
    one = tmp_path / "one"
    write_report(honest(model="org/a"), one / "a")
    # --out-md elsewhere: the default matrix.html (2 rows) would lose a row: refused.
    code = matrix_cli.main([str(one), "--out-md", str(tmp_path / "x.md"),
                            "--out-html", str(reports / "matrix.html")])  # fmt: skip
    assert code == 2 and "org/b" in capsys.readouterr().err
    assert (reports / "matrix.html").read_bytes() == html_before
    # An output that is no matrix this command wrote.
    readme = tmp_path / "README.md"
    readme.write_text("# hello\n")
    assert matrix_cli.main([str(one), "--out-md", str(readme),
                            "--out-html", str(tmp_path / "y.html")]) == 2  # fmt: skip
    page = tmp_path / "page.html"
    page.write_text("<html><title>mine</title></html>")
    assert matrix_cli.main([str(one), "--out-md", str(tmp_path / "z.md"),
                            "--out-html", str(page)]) == 2  # fmt: skip
    # --site into a directory with someone else's index.html.
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html>unrelated</html>")
    assert matrix_cli.main([str(one), "--out-md", str(tmp_path / "s.md"), "--out-html",
                            str(tmp_path / "s.html"), "--site", str(site)]) == 2  # fmt: skip
    assert (site / "index.html").read_text() == "<html>unrelated</html>"
    assert readme.read_text() == "# hello\n" and "mine" in page.read_text()


def test_only_committed_runs_are_published_unless_told(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    head = harness_checkout(repo, monkeypatch)
    recorded = honest().versions.model_copy(update={"harness_commit": head,
                                                    "plugin_commit": head})  # fmt: skip
    kept = write_report(honest(model="org/kept", versions=recorded), repo / "reports" / "kept").json
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "r"],
                   check=True)  # fmt: skip
    local = honest(model="org/local")
    write_report(local, repo / "reports" / "local")  # untracked
    dirty_versions = local.versions.model_copy(update={"harness_commit": f"{head}+dirty"})
    dirty = honest(model="org/dirty").replace(versions=dirty_versions)
    subprocess.run([*git, "add", "."], check=True)
    out = tmp_path / "pub"
    args = [str(repo / "reports"), "--out-md", str(out / "M.md"), "--out-html", str(out / "m.html")]
    assert matrix_cli.main(args) == 0
    err = capsys.readouterr().err
    assert "not committed" in err or "modified since" in err
    assert [c for c, *_ in matrix_cli_rows(out / "M.md")] == ["org/kept"]
    write_report(dirty, repo / "reports" / "dirty")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "d"],
                   check=True)  # fmt: skip
    kept_only, left = matrix_cli.committed_only(find_reports(repo / "reports" / "dirty"))
    assert kept_only == [] and "+dirty" in left[0][1]
    assert matrix_cli.main([*args, "--include-uncommitted"]) == 0
    assert sorted(c for c, *_ in matrix_cli_rows(out / "M.md")) == [
        "org/dirty", "org/kept", "org/local"]  # fmt: skip
    assert kept.is_file()


def matrix_cli_rows(path: Path) -> list[tuple[str, str, str]]:
    from tt_conformance.matrix import published_rows

    return published_rows(path)


# ----------------------------------------------------------------------------- item 6


def test_one_definition_of_same_setup(honest: Any) -> None:
    base = honest()
    options = {"trace_mode": "all", "device_timeout_s": 120.0}
    a = base.replace(server=base.server.model_copy(update={"tt_options": options}))

    def with_options(**extra: Any) -> Report:
        return a.replace(  # a later run of a bumped tt-metal (the gate refuses a self-compare)
            run_id="20250102T000000Z-0000000b",
            started_at="2025-01-02T00:00:00Z",
            finished_at="2025-01-02T00:00:00Z",
            server=a.server.model_copy(update={"tt_options": {**options, **extra}}),
            versions=a.versions.model_copy(update={"tt_metal": "v2"}),
        )

    # A new option at its null default, a default spelled out, a watchdog timeout: same setup.
    for same in (
        with_options(new_release_option=None),
        with_options(enable_model_warmup=True),
        with_options(device_timeout_s=300.0),
    ):
        assert profile_key(same) == profile_key(a)
        assert [d.axis for d in differences(a, same)] == ["tt_metal"]
        assert not compare(a, same).regressions  # the gate sees only the bump
        assert len(fold([(Path("a.json"), a), (Path("b.json"), same)])) == 1  # one row
        assert len(history.by_series([_run(a, "a"), _run(same, "b")])) == 1  # one series
    # Anything else splits, named.
    other = with_options(trace_mode="none")
    assert profile_key(other) != profile_key(a)
    assert "tt_options.trace_mode: 'all' -> 'none'" in [str(d) for d in differences(a, other)]
    assert {"device_timeout_s", "warmup_timeout_s"} <= RESULT_NEUTRAL_OPTIONS


def test_the_option_defaults_follow_the_plugin() -> None:
    import dataclasses

    from vllm_tt_plugin.config import TTOptions

    assert {f.name: f.default for f in dataclasses.fields(TTOptions)} == TT_OPTION_DEFAULTS


# ----------------------------------------------------------------------------- item 7


def test_trends_and_compares_never_print_a_change_across_unlike_runs(make_report: Any) -> None:
    def run(i: int, weights: str, mesh: str, value: float, flag: str | None = None) -> Report:
        report = make_report({"m::a": "pass"}, device="emulated-T3K",
                             finished_at=f"2025-01-0{i}T00:00:00Z",
                             perf={"tt_tps@i128o128c8": (value, "tok/s", "higher")})  # fmt: skip
        server = report.server.model_copy(update={"weights": weights})
        perf = {k: f.model_copy(update={"flag": flag}) for k, f in report.perf.items()}
        return report.replace(server=server, mesh_shape=mesh, perf=perf)

    runs = [
        _run(run(1, "sha256:old", "1x8", 100.0), "1"),
        _run(run(2, "sha256:new", "1x8", 199.5), "2"),  # checkpoint change
        _run(run(3, "sha256:new", "2x4", 300.0, flag="burst delivery"), "3"),  # mesh change
    ]
    context = history_context("m", "emulated-T3K", runs, comparisons(runs), "now")
    assert all(change == "—" for _, _, change in context["trends"])  # one point per line
    assert len(context["trends"]) == 3
    for comp in comparisons(runs):
        assert comp.unlike and all(p.verdict == "unlike runs" for p in comp.result.perf)
    md = render_history_markdown(context)
    assert "300\\*" in md and "\\* flagged unreliable, not comparable: burst delivery" in md
    assert "informational" in md
    from tt_conformance.formats.html import render_history_html

    html = render_history_html(context)
    assert "300*" in html and "* flagged unreliable, not comparable: burst delivery" in html
    assert "informational" in html


def test_the_gate_says_emulated_figures_are_informational(make_report: Any) -> None:
    from tt_conformance.formats.text import render_gate

    perf = {"tt_tps@i128o128c8": (100.0, "tok/s", "higher")}
    base = make_report({"m::a": "pass"}, device="emulated-T3K", perf=perf)
    cand = make_report({"m::a": "pass"}, device="emulated-T3K", tt_metal="v2",
                       perf={"tt_tps@i128o128c8": (50.0, "tok/s", "higher")})  # fmt: skip
    text = render_gate(compare(base, cand), base, cand)
    assert "informational: emulated-T3K is not TT hardware" in text
    hardware = [make_report({"m::a": "pass"}, device="T3K", perf=perf) for _ in range(2)]
    assert "informational" not in render_gate(compare(*hardware), *hardware)


def test_the_committed_reports_stay_consistent_when_the_suite_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reports that recorded no suite are judged on the manifest their harness commit shipped
    (git's, selection.yardstick_for): a module added to today's manifest later leaves them
    consistent. Where that manifest cannot be read (a shallow clone), today's judges them: a
    module added later is one they never ran, so they stop certifying anything (refused as
    inconsistent) until regenerated."""
    reports = Path(__file__).resolve().parents[2] / "reports"
    found = find_reports(reports, include_baselines=True)  # refuses an inconsistent one
    assert len(found) >= 6
    assert {tier_of(r).tier for _, r in found} <= {"emulated", "partial"}
    grown = (*selection.suite_modules(), "tt_conformance.checks.test_new_concern")
    monkeypatch.setattr(selection, "suite_modules", lambda: grown)
    if all(committed_file(r.versions.harness_commit, selection.MANIFEST_PATH)
           for _, r in found):  # fmt: skip
        assert len(find_reports(reports, include_baselines=True)) == len(found)
    monkeypatch.setattr(selection, "committed_file", lambda commit, named: None)
    with pytest.raises(MatrixError, match="test_new_concern"):
        find_reports(reports, include_baselines=True)


# ------------------------------------------------- coverage inside a module (issue 44, gap b)

EMU_RUN = Path(__file__).resolve().parents[2] / "reports/baselines/tt-reference-llama/emulated-T3K"


def test_the_manifest_lists_the_checks_a_full_run_ran() -> None:
    """The manifest's ids, worked out from the modules, against a real run's (the committed
    emulated baseline): each listed check ran, each check that ran is listed."""
    run = load_report(EMU_RUN / "baseline.json")
    listed = selection.read_manifest_checks()
    assert selection.missing_checks(run.checks, selection.suite_modules(), listed) == ()
    for c in run.checks:
        module, _, name = c.id.partition("::")
        assert any(suiteids.covers(entry, [name]) for entry in listed[module]), c.id
    # Parametrised from the expectations: one instance needed, whatever the tasks are.
    assert listed["tt_conformance.checks.test_accuracy"] == ("test_accuracy[*]",)
    assert "test_chat_top_logprobs[5]" in listed["tt_conformance.checks.test_logprobs"]


def _dropped(victim: str) -> tuple[Report, Report]:
    """The committed full run with one check gone: rebuilt honestly, and with its stored
    coverage and tier left as they were (a check deleted from the report by hand)."""
    run = load_report(EMU_RUN / "baseline.json")
    assert run.coverage is not None and run.coverage.full and run.check(victim) is not None
    checks = tuple(c for c in run.checks if c.id != victim)
    stored = run.coverage
    honest_coverage = coverage_of(
        checks, deselected=0, keyword=None, markers=None, args=stored.args,
        suite=stored.suite or selection.suite_modules(), device=run.device,
        lanes=run.server.lanes, model_class=run.server.model_class,
    )  # fmt: skip
    relabelled = run.replace(checks=checks, coverage=honest_coverage)
    return relabelled.replace(tier=derive_tier(relabelled)), run.replace(checks=checks)


@pytest.mark.parametrize(
    "victim",
    [
        "tt_conformance.checks.test_seeding::test_same_seed_reproduces",
        "tt_conformance.checks.test_logprobs::test_chat_top_logprobs[5]",
    ],
)
def test_a_check_dropped_from_a_module_that_ran_makes_the_run_partial(
    tmp_path: Path, victim: str
) -> None:
    honest_run, forged = _dropped(victim)
    coverage = honest_run.coverage
    assert coverage is not None and not coverage.full
    assert coverage.missing_checks == (victim,) and coverage.missing_modules == ()
    short = victim.removeprefix("tt_conformance.checks.")
    assert f"1 check(s) of modules that ran did not run: {short}" in coverage.partial_because
    assert honest_run.tier is not None and honest_run.tier.tier == "partial"
    # Left labelled full: inconsistent, refused by the gate (exit 2), never gated.
    found = inconsistencies(forged)
    assert any(f.startswith("field 'coverage.full'") for f in found)
    assert any(f.startswith("field 'coverage.missing_checks'") for f in found)
    base = EMU_RUN / "baseline.json"
    cand = write_report(forged, tmp_path / "cand").json
    assert gate_cli.main(["--baseline", str(base), "--candidate", str(cand)]) == 2
