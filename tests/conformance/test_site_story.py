"""Issue 32, item 8: what a pivot cell says besides its tier ("since", "last good", a
regression), computed from a column's history (history.cell_story)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tt_conformance import history
from tt_conformance.report import AccuracyResult, Coverage, PerfTargetResult, Report
from tt_conformance.tiers import derive_tier

# A suite of one module, "m", which every run here ran whole (coverage is re-derived from the
# checks and the recorded suite: a stored tier or "full" is never read).
FULL = Coverage(
    full=True, selected=1, deselected=0, not_applicable=0, skipped_other=0, suite=("m",)
)
PARTIAL = FULL.model_copy(update={"deselected": 3, "keyword": "x"})
ACCURACY = AccuracyResult(
    task="t", check="m::acc", score=0.9, ci_low=0.8, ci_high=0.95, num_samples=10, correct=9,
    threshold=0.5, verdict="pass",
)  # fmt: skip
FIGURE = "tps_user_median@i128o128c1"
# The T/S/U each tier needs on N150 against a reference of 100 (functional 0.1, complete 0.5).
TPS = {"experimental": 5.0, "functional": 30.0, "complete": 90.0, "fail": 30.0}


def _run(
    make_report: Any, vouch: Any, i: int, tier: str, tt_metal: str, **changes: Any
) -> history.Run:
    """A run whose checks and figures give ``tier`` (derived, as every reader derives it)."""
    value = TPS[tier]
    report: Report = make_report(
        {"m::a": "fail" if tier == "fail" else "pass"},
        finished_at=f"2025-01-{i:02d}T00:00:00Z",
        tt_metal=tt_metal,
        perf={FIGURE: (value, "tok/s/u", "higher")},
        accuracy=(ACCURACY,),
    )
    met = {
        "experimental": "below",
        "functional": "functional",
        "complete": "target",
        "fail": "functional",
    }
    target = PerfTargetResult(
        figure=FIGURE, reference=100.0, source="published", functional=0.1, complete=0.5,
        target=0.8, fraction=value / 100, met=met.get(tier, "target"),  # type: ignore[arg-type]
    )  # fmt: skip
    report = report.replace(
        coverage=changes.pop("coverage", FULL), perf_targets=(target,), **changes
    )
    report = vouch(report)  # the bars as a run's expectations file states them (bars.py)
    if report.coverage is not None and report.coverage.full:
        assert derive_tier(report).tier == tier
    return history.Run(Path(f"{i}.json"), report)


def test_since_is_the_first_run_of_the_newest_streak_and_last_good_skips_failures(
    make_report: Any,
    vouch: Any,
) -> None:
    runs = [
        _run(make_report, vouch, 1, "functional", "v1"),
        _run(make_report, vouch, 2, "functional", "v2"),
        _run(make_report, vouch, 3, "fail", "v3"),
        _run(make_report, vouch, 4, "functional", "v4"),
        _run(make_report, vouch, 5, "functional", "v5"),
    ]
    story = history.cell_story(runs)
    assert story is not None and story.status == "functional"
    assert story.since is runs[3]  # v4: the streak before was broken by v3's failure
    assert story.last_good is runs[4] and story.previous == "functional"
    assert not story.regressed


def test_a_drop_is_a_regression_and_last_good_names_the_run_before(
    make_report: Any, vouch: Any
) -> None:
    runs = [
        _run(make_report, vouch, 1, "complete", "v1"),
        _run(make_report, vouch, 2, "fail", "v2"),
    ]
    story = history.cell_story(runs)
    assert story is not None and story.regressed and story.previous == "complete"
    assert story.dropped_from == "complete"
    assert story.since is runs[1] and story.last_good is runs[0]
    # A drop stays marked until the cell recovers: a second failing run, then functional, are
    # still below complete; complete again clears it.
    again = history.cell_story([*runs, _run(make_report, vouch, 3, "fail", "v3")])
    assert again is not None and again.dropped_from == "complete"
    better = history.cell_story([*runs, _run(make_report, vouch, 3, "functional", "v3")])
    assert better is not None and better.regressed and better.dropped_from == "complete"
    back = history.cell_story(
        [
            *runs,
            _run(make_report, vouch, 3, "functional", "v3"),
            _run(make_report, vouch, 4, "complete", "v4"),
        ]
    )
    assert back is not None and not back.regressed and back.dropped_from is None


def test_partial_and_unlike_runs_tell_no_story(make_report: Any, vouch: Any) -> None:
    newest = _run(make_report, vouch, 3, "functional", "v3")
    failing = _run(make_report, vouch, 2, "fail", "v2", coverage=PARTIAL)
    passed = tuple(c.model_copy(update={"outcome": "pass"}) for c in failing.report.checks)
    partial = history.Run(failing.path, failing.report.replace(checks=passed))
    other_mesh = _run(make_report, vouch, 1, "complete", "v1", mesh_shape="1x8")
    story = history.cell_story([other_mesh, partial, newest])
    # A partial run that failed nothing certifies nothing and the 1x8 run measured another
    # configuration.
    assert story is not None and story.previous is None and not story.regressed
    assert story.since is newest
    assert history.cell_story([partial]) is None
    # A partial run that fails is news however little it ran: it enters the story.
    told = history.cell_story([failing, newest])
    assert told is not None and told.previous == "fail"
    assert history.cell_story([failing]) is not None


def test_a_history_series_is_one_configuration(make_report: Any, vouch: Any) -> None:
    """Runs of one column with another max_num_seqs are another series: their own trend line,
    compared only with each other, with their own story."""

    def run(i: int, seqs: int, value: float) -> history.Run:
        report = make_report(
            {"m::a": "pass"},
            finished_at=f"2025-01-{i:02d}T00:00:00Z",
            perf={"tt_tps@i128o128c32": (value, "tok/s", "higher")},
        )
        server = report.server.model_copy(update={"max_num_seqs": seqs})
        return history.Run(Path(f"{i}.json"), report.replace(server=server, coverage=FULL))

    runs = [run(1, 32, 100.0), run(2, 64, 180.0), run(3, 32, 105.0), run(4, 64, 175.0)]
    assert len(history.by_series(runs)) == 2 and len(history.by_model_device(runs)) == 1
    lines = history.trends(runs)
    assert sorted(t.values() for t in lines) == [[100.0, 105.0], [180.0, 175.0]]
    assert all("seqs" in t.label for t in lines)  # which configuration each line is
    # Compare pages pair consecutive runs of the column; between the unlike ones (another
    # max_num_seqs) they name the difference and print no percentage (views.comparisons).
    pairs = history.compare_pairs(runs)
    assert [(a.report.finished_at[8:10], b.report.finished_at[8:10]) for a, b in pairs] == [
        ("01", "02"),
        ("02", "03"),
        ("03", "04"),
    ]
