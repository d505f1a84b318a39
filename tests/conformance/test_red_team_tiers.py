"""Red team: what a report says about its checks' skips, its bars and its suite may not lift
its tier (rt44 A1-A6). Each attack asserts the refusal (exit 2 naming the field) or the honest
label; each rule keeps an honest control."""

# ruff: noqa: F811
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.test_red_team import (  # noqa: F401
    ACCURACY,
    FIGURE,
    _check,
    _lanes_checks,
    _sealed,
    honest,
)
from tt_conformance import selection
from tt_conformance.bars import file_digest
from tt_conformance.cli import conformance as cli
from tt_conformance.matrix import tier_of
from tt_conformance.rederive import inconsistencies
from tt_conformance.report import PerfTargetResult, Report
from tt_conformance.tiers import derive_tier
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
    run = honest(checks=(*honest().checks, *_lanes_checks(lanes)))
    assert tier_of(run).tier == "complete"
    assert _promote(tmp_path, run, "lanes") == 0


# ----------------------------------------------------------------------------- bars (A2-A4)

TTFT = "ttft_median@i128o128c1"


@pytest.fixture
def judged(honest: Any, tmp_path: Path) -> Any:
    """An honest run as the harness writes it: judged by an expectations file it names, with
    the digest of that file's bytes; two perf targets (T/S/U and TTFT) and an accuracy bar."""
    path = tmp_path / "expectations.json"
    path.write_text(json.dumps({
        "schema_version": 2, "kind": "tt-conformance-expectations", "model": "org/model-a",
        "device": "T3K", "accuracy": [{"task": "t", "threshold": 0.5}],
        "perf_targets": {FIGURE: {"reference": 100.0, "source": "published"},
                         TTFT: {"reference": 50.0, "source": "published"}}}))  # fmt: skip

    def build(tps: float = 90.0) -> Report:
        run = honest(tps=tps)
        ttft = PerfTargetResult(figure=TTFT, reference=50.0, source="published", functional=0.1,
                                complete=0.5, target=0.8, fraction=None, met="missing")  # fmt: skip
        return _sealed(run.replace(
            expectations_file=str(path), expectations_digest=file_digest(path),
            perf_targets=(*run.perf_targets, ttft)))  # fmt: skip

    return build


def _bar(report: Report, i: int, **changes: Any) -> Report:
    targets = list(report.perf_targets)
    targets[i] = targets[i].model_copy(update=changes)
    return _sealed(report.replace(perf_targets=tuple(targets)))


def test_a_lowered_perf_reference_is_inconsistent(judged: Any, tmp_path: Path) -> None:
    """5 tok/s/u measured against a published 100: the stored reference edited to 5.5 would
    read 'target'. The file the run names, unchanged since, says 100."""
    run = _bar(judged(tps=5.0), 0, fraction=0.05, met="below")
    assert inconsistencies(run) == [] and tier_of(run).tier == "experimental"
    forged = _bar(run, 0, reference=5.5, fraction=round(5 / 5.5, 4), met="target")
    found = inconsistencies(forged)
    assert any(f"'perf_targets[0]' ({FIGURE}).reference: stored 5.5" in f for f in found)
    assert _promote(tmp_path, forged, "a2") == 2


def test_a_dropped_perf_target_is_inconsistent(judged: Any, tmp_path: Path) -> None:
    """The TTFT target (its figure missing: experimental) deleted from the list."""
    run = judged()
    assert tier_of(run).tier == "experimental"
    forged = _sealed(run.replace(perf_targets=run.perf_targets[:1]))
    assert any(f"lacks the target {TTFT}" in f for f in inconsistencies(forged))
    assert _promote(tmp_path, forged, "a3") == 2


def test_a_lowered_accuracy_bar_is_inconsistent(judged: Any, tmp_path: Path) -> None:
    """2/10 correct, the stored threshold edited 0.5 -> 0.1 with verdict pass."""
    acc = ACCURACY.model_copy(update={"score": 0.2, "correct": 2, "ci_low": 0.05, "ci_high": 0.5,
                                      "threshold": 0.1, "verdict": "pass"})  # fmt: skip
    forged = _sealed(judged().replace(accuracy=(acc,)))
    found = inconsistencies(forged)
    assert any("'accuracy[0]' (t).threshold: stored 0.1" in f for f in found)
    assert _promote(tmp_path, forged, "a4") == 2


def test_a_run_keeps_the_bars_of_the_file_as_it_was(judged: Any, tmp_path: Path) -> None:
    """Control: an honest run is consistent; when its file is edited after the run (a
    reference re-measured), the digest no longer matches and the run keeps its own bars."""
    run = judged()
    assert inconsistencies(run) == []
    path = Path(run.expectations_file)
    path.write_text(path.read_text().replace("100.0", "120.0"))
    assert inconsistencies(run) == []


# ----------------------------------------------------------------------------- suite (A6)


def _real_suite_run(honest: Any, recorded: tuple[str, ...], ran: tuple[str, ...]) -> Report:
    """Every manifest check of the modules ``ran``, the suite recorded as ``recorded``."""
    listed = selection.read_manifest_checks()
    checks = tuple(
        honest().checks[0].model_copy(update={
            "id": f"{m}::{e.replace('[*]', '[x]')}", "nodeid": f"{m}::{e}",
            "concern": selection.read_manifest_concerns()[m]})
        for m in ran
        for e in listed[m]
    )  # fmt: skip
    base = honest(checks=checks)
    cov = selection.coverage_of(base.checks, deselected=0, keyword=None, markers=None,
                                args=(), suite=recorded, device=base.device, lanes=1)  # fmt: skip
    run = base.replace(coverage=cov)
    return run.replace(tier=derive_tier(run))


def test_a_suite_shortened_to_two_modules_is_inconsistent(honest: Any, tmp_path: Path) -> None:
    """Real module names, every check of test_accuracy and test_errors: the recorded suite cut
    to those two of the shipped modules read full and complete. It is held to the manifest."""
    keep = ("tt_conformance.checks.test_accuracy", "tt_conformance.checks.test_errors")
    forged = _real_suite_run(honest, keep, keep)
    found = inconsistencies(forged)
    assert any("field 'coverage.suite': lacks modules the harness ships" in f for f in found)
    assert tier_of(forged).tier == "partial"
    assert _promote(tmp_path, forged, "a6") == 2
    # A foreign module added to the real suite is named too.
    mixed = _real_suite_run(honest, (*selection.suite_modules(), "evil.checks"), keep)
    assert any("modules the harness does not ship: ['evil.checks']" in f
               for f in inconsistencies(mixed))  # fmt: skip


def test_the_whole_shipped_suite_recorded_is_full(honest: Any) -> None:
    """Control: the run of every shipped module, its suite recorded as shipped, is full."""
    shipped = selection.suite_modules()
    run = _real_suite_run(honest, shipped, shipped)
    assert inconsistencies(run) == []
    assert run.coverage is not None and run.coverage.full


# ------------------------------------------------------- an optional concern not run


def _with_forward(honest: Any, reason: str, concern: str = "forward_reference") -> Report:
    """The honest run plus two checks of ``concern`` skipped with ``reason``."""
    extra = tuple(
        _check(100 + i, concern, "skip", reason).model_copy(update={"concern": concern})
        for i in range(2)
    )
    return honest(checks=honest().checks + extra)


def test_the_forward_reference_without_a_checkpoint_is_named_but_does_not_cap(
    honest: Any,
) -> None:
    """The forward reference is optional (no checkpoint on the harness host): the tier keeps
    its level, names the concern as not run, and the coverage does not count it as run."""
    control = tier_of(honest())
    report = _with_forward(honest, f"{selection.OPTIONAL_NOT_RUN} no checkpoint given")
    tier = tier_of(report)
    assert inconsistencies(report) == []
    assert tier.tier == control.tier == "complete"
    assert "optional concerns not run: forward_reference" in tier.reason
    assert "optional concerns" not in control.reason
    assert report.coverage is not None and report.coverage.skipped_other == 2


@pytest.mark.parametrize(
    ("reason", "concern", "level", "why"),
    [
        # the optional words on a check of another concern: an unexplained skip
        (f"{selection.OPTIONAL_NOT_RUN} no checkpoint given", "isolation", "functional",
         "no skipped checks"),
        # a forward-reference check skipped for any other reason: the concern did not run
        ("not exercised: no prefix-cache hits", "forward_reference", "partial", "whole suite"),
    ],
)  # fmt: skip
def test_only_the_optional_concerns_own_skip_is_excused(
    honest: Any, reason: str, concern: str, level: str, why: str
) -> None:
    tier = tier_of(_with_forward(honest, reason, concern))
    assert tier.tier == level
    assert tier.next_blocker is not None and why in tier.next_blocker
    assert "optional concerns" not in tier.reason
