"""Red team: the matrix publishes only provably committed runs, and a failing run enters its
cell's story however little of the suite it ran (rt44 M1-M3). Each attack asserts the refusal
or the honest label; each rule keeps an honest control."""

# ruff: noqa: F811
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harnessgit import commit_all, harness_checkout
from tests.conformance.test_red_team import _check, honest  # noqa: F401
from tt_conformance.cli import matrix as matrix_cli
from tt_conformance.report import Report
from tt_conformance.selection import coverage_of
from tt_conformance.tiers import derive_tier
from tt_conformance.writers import write_report


def _publish(runs: Path, pub: Path, *flags: str) -> int:
    return matrix_cli.main(
        [str(runs), "--out-md", str(pub / "M.md"), "--out-html", str(pub / "m.html"), *flags]
    )


def _recorded(report: Report, commit: str = "0123abc") -> Report:
    versions = report.versions.model_copy(
        update={"harness_commit": commit, "plugin_commit": commit}
    )
    return report.replace(versions=versions)


def test_outside_a_git_work_tree_nothing_is_published_without_being_told(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CI artifact or a copy in /tmp: nothing proves the file committed, so it is left out,
    named on stderr; --include-uncommitted publishes it on purpose."""
    runs = tmp_path / "runs"
    path = write_report(_recorded(honest()), runs).json
    assert _publish(runs, tmp_path / "pub") == 0
    err = capsys.readouterr().err
    assert f"left out {path}: not committed as far as can be told: not in a git work tree" in err
    assert "org/model-a" not in (tmp_path / "pub" / "M.md").read_text()
    assert _publish(runs, tmp_path / "pub", "--include-uncommitted") == 0
    assert "org/model-a" in (tmp_path / "pub" / "M.md").read_text()


def test_a_run_that_recorded_no_commit_is_not_published_as_committed(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Committed file, but harness_commit / plugin_commit 'unknown': the run may have come
    from any modified tree, like a '+dirty' one. The same run with its commits recorded is
    published (control)."""
    repo = tmp_path / "repo"
    head = harness_checkout(repo, monkeypatch)
    unknown = honest(model="org/unknown")
    assert unknown.versions.harness_commit == "unknown"
    write_report(unknown, repo / "runs" / "unknown")
    write_report(_recorded(honest(model="org/known"), head), repo / "runs" / "known")
    commit_all(repo)
    assert _publish(repo / "runs", repo / "pub") == 0
    err = capsys.readouterr().err
    assert "recorded no plugin and no harness commit" in err
    md = (repo / "pub" / "M.md").read_text()
    assert "org/known" in md and "org/unknown" not in md


def _failing_bump(honest: Any) -> Report:
    """The tt-metal v2 bump run under -k isolation (78 checks deselected), failing one."""
    checks = tuple(
        _check(i, "isolation", "fail" if i == 0 else "pass", "broken") for i in range(39)
    )
    bump = honest(checks=checks, tt_metal="v2", finished_at="2025-01-02T00:00:00Z")
    cov = coverage_of(bump.checks, deselected=78, keyword="isolation", markers=None, args=(),
                      suite=("m",), device="T3K", lanes=1)  # fmt: skip
    bump = bump.replace(coverage=cov)
    return bump.replace(tier=derive_tier(bump))


def _row(md: str) -> str:
    """The model's cell in the "Tier by device" table (status with its story)."""
    table = md.split("## Tier by device", 1)[1]
    return next(ln for ln in table.splitlines() if "org/model-a" in ln and "|" in ln)


def test_a_failing_partial_bump_run_enters_the_story(honest: Any, tmp_path: Path) -> None:
    """Complete at tt-metal v1; the -k bump run at v2 fails a check. Left out as partial, the
    matrix kept 'complete since tt-metal v1'. It is news: failing since v2 (partial run), the
    v1 run kept as last good."""
    runs = tmp_path / "runs"
    write_report(honest(), runs)
    bump = _failing_bump(honest)
    assert bump.coverage is not None and not bump.coverage.full
    write_report(bump, runs)
    assert _publish(runs, tmp_path / "pub", "--include-uncommitted") == 0
    row = _row((tmp_path / "pub" / "M.md").read_text())
    assert "fail" in row and "since tt-metal v2" in row and "(partial run)" in row
    assert "last good: 2025-01-01, tt-metal v1" in row


def test_a_passing_partial_run_still_leaves_the_full_run_standing(
    honest: Any, tmp_path: Path
) -> None:
    """Control: a -k run that fails nothing never displaces the full run."""
    runs = tmp_path / "runs"
    write_report(honest(), runs)
    bump = _failing_bump(honest)
    passing = tuple(c.model_copy(update={"outcome": "pass", "reason": ""}) for c in bump.checks)
    bump = bump.replace(checks=passing)
    write_report(bump.replace(tier=derive_tier(bump)), runs)
    assert _publish(runs, tmp_path / "pub", "--include-uncommitted") == 0
    row = _row((tmp_path / "pub" / "M.md").read_text())
    assert "complete since tt-metal v1" in row and "partial" not in row
