"""Issue 32, item 8: what a pivot cell says besides its tier ("since", "last good", a
regression), computed from a column's history (history.cell_story)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tt_conformance import history
from tt_conformance.report import Coverage, Report, Tier

FULL = Coverage(full=True, selected=1, deselected=0, not_applicable=0, skipped_other=0)
PARTIAL = FULL.model_copy(update={"full": False, "partial_because": ("-k x",)})


def _run(make_report: Any, i: int, tier: str, tt_metal: str, **changes: Any) -> history.Run:
    report: Report = make_report(
        {"m::a": "pass"}, finished_at=f"2025-01-{i:02d}T00:00:00Z", tt_metal=tt_metal
    )
    report = report.replace(
        tier=Tier(tier=tier, reason="r", next_blocker=None),  # type: ignore[arg-type]
        coverage=changes.pop("coverage", FULL),
        **changes,
    )
    return history.Run(Path(f"{i}.json"), report)


def test_since_is_the_first_run_of_the_newest_streak_and_last_good_skips_failures(
    make_report: Any,
) -> None:
    runs = [
        _run(make_report, 1, "functional", "v1"),
        _run(make_report, 2, "functional", "v2"),
        _run(make_report, 3, "fail", "v3"),
        _run(make_report, 4, "functional", "v4"),
        _run(make_report, 5, "functional", "v5"),
    ]
    story = history.cell_story(runs)
    assert story is not None and story.status == "functional"
    assert story.since is runs[3]  # v4: the streak before was broken by v3's failure
    assert story.last_good is runs[4] and story.previous == "functional"
    assert not story.regressed


def test_a_drop_is_a_regression_and_last_good_names_the_run_before(make_report: Any) -> None:
    runs = [_run(make_report, 1, "complete", "v1"), _run(make_report, 2, "fail", "v2")]
    story = history.cell_story(runs)
    assert story is not None and story.regressed and story.previous == "complete"
    assert story.since is runs[1] and story.last_good is runs[0]
    better = history.cell_story([*runs, _run(make_report, 3, "functional", "v3")])
    assert better is not None and not better.regressed  # fail -> functional rises


def test_partial_and_unlike_runs_tell_no_story(make_report: Any) -> None:
    newest = _run(make_report, 3, "functional", "v3")
    partial = _run(make_report, 2, "fail", "v2", coverage=PARTIAL)
    other_mesh = _run(make_report, 1, "complete", "v1", mesh_shape="1x8")
    story = history.cell_story([other_mesh, partial, newest])
    # The partial run certifies nothing and the 1x8 run measured another configuration.
    assert story is not None and story.previous is None and not story.regressed
    assert story.since is newest
    assert history.cell_story([partial]) is None


def test_a_history_series_is_one_configuration(make_report: Any) -> None:
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
    pairs = history.compare_pairs(runs)
    assert [(a.report.finished_at[8:10], b.report.finished_at[8:10]) for a, b in pairs] == [
        ("01", "03"),
        ("02", "04"),
    ]
