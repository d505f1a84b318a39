"""Red team: what a report says about its checks' skips, its bars and its suite may not lift
its tier (rt44 A1-A6). Each attack asserts the refusal (exit 2 naming the field) or the honest
label; each rule keeps an honest control."""

# ruff: noqa: F811
from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conformance.test_red_team import honest  # noqa: F401
from tt_conformance import selection
from tt_conformance.cli import conformance as cli
from tt_conformance.matrix import tier_of
from tt_conformance.rederive import inconsistencies
from tt_conformance.report import Report
from tt_conformance.writers import write_report


def _promote(tmp_path: Path, report: Report, name: str) -> int:
    path = write_report(report, tmp_path / name / "runs").json
    return cli.main(["baseline", "promote", str(path), "--baselines-dir", str(tmp_path / name)])


# ----------------------------------------------------------------------------- skips (A1)


def test_a_waiver_reworded_as_an_ordinary_skip_is_not_complete(honest: Any, tmp_path: Path) -> None:
    """38 of 39 checks of each concern skipped, the waiver's prefix reworded to "not
    exercised:": 3 checks ran of 117. Only a skip the harness rules not applicable from the
    server's identity may stand in a complete run: this one is functional at best."""
    checks = tuple(
        c
        if c.id.endswith("_0")
        else c.model_copy(update={"outcome": "skip", "reason": "not exercised: hangs the model"})
        for c in honest().checks
    )
    forged = honest(checks=checks)
    assert inconsistencies(forged) == []  # the stored tier is the derived one...
    tier = tier_of(forged)
    assert tier.tier == "functional"  # ...and it is not complete
    assert tier.next_blocker is not None and "no skipped checks" in tier.next_blocker
    assert "114: m::test_isolation_1" in tier.next_blocker


def test_one_unexplained_skip_in_a_concern_that_ran_keeps_a_run_below_complete(
    honest: Any,
) -> None:
    checks = tuple(
        c.model_copy(update={"outcome": "skip", "reason": "lm-eval not installed"})
        if c.id == "m::test_seeding_3"
        else c
        for c in honest().checks
    )
    assert tier_of(honest(checks=checks)).tier == "functional"


def test_skips_the_server_bears_out_still_allow_complete(honest: Any, tmp_path: Path) -> None:
    """Control: a "needs lanes" skip on a one-lane server is not applicable (the identity
    bears it out): the run stays complete and promotes."""
    lanes = f"{selection.NEEDS_LANES} >= 2 lane-DP lanes (this server: 1)"
    checks = tuple(
        c.model_copy(update={"outcome": "skip", "reason": lanes}) if c.id.endswith("_5") else c
        for c in honest().checks
    )
    run = honest(checks=checks)
    assert tier_of(run).tier == "complete"
    assert _promote(tmp_path, run, "lanes") == 0
