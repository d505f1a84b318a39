"""Red team (issue 44 holes 1-3): bars nobody vouches for, a made-up suite, a removed tier.

Each attack is a report built with the harness's own writers and the test asserts the refusal
(exit 2 naming the field) or the honest label; each rule keeps an honest control."""

# ruff: noqa: F811
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.test_red_team import FIGURE, honest  # noqa: F401
from tests.conformance.test_red_team_tiers import _promote, _real_suite_run
from tt_conformance import selection
from tt_conformance.bars import bar_check, bytes_digest, file_digest
from tt_conformance.cli import gate as gate_cli
from tt_conformance.committed import checkout_root, repo_relative
from tt_conformance.matrix import tier_of
from tt_conformance.rederive import inconsistencies
from tt_conformance.report import Report, ReportError, load_report
from tt_conformance.tiers import derive_tier, stated_tier
from tt_conformance.writers import write_report


def _gate(tmp_path: Path, baseline: Report, candidate: Report) -> int:
    b = write_report(baseline, tmp_path / "base").json
    c = write_report(candidate, tmp_path / "cand").json
    return gate_cli.main(["--baseline", str(b), "--candidate", str(c)])


def _stored(report: Report) -> Report:
    return report.replace(tier=derive_tier(report))


# ------------------------------------------------------------- hole 1: self-asserted bars


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"expectations_file": None}, "names no expectations file"),
        ({"expectations_digest": None}, "records no digest"),
        ({"expectations_file": "/nowhere/expectations.json"}, "cannot be read"),
        ({"expectations_digest": bytes_digest(b"forged")}, "cannot be read"),
    ],
)  # fmt: skip
def test_bars_nobody_vouches_for_cannot_certify_complete(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: Any, why: str
) -> None:
    """The honest run's bars (reference 100, 90 measured: complete) with its expectations
    file unnamed, undigested, unreachable or its digest rewritten: its targets are its own
    word. It reads experimental, says why, and a gate against a vouched-for complete baseline
    is a regression."""
    forged = honest(tt_metal="v2").replace(**changes)
    assert inconsistencies(forged) == []  # what its own bars give: not a forgery on its face
    tier = tier_of(forged)
    assert tier.tier == "experimental"
    assert "self-asserted" in tier.reason and why in tier.reason
    assert not bar_check(forged).checked
    assert _gate(tmp_path, honest(), _stored(forged)) == 1
    out = capsys.readouterr().out
    assert "tier dropped from complete to experimental" in out
    assert "candidate's perf targets and accuracy bars are self-asserted" in out


def test_bars_a_lowered_reference_and_a_rewritten_digest_stay_self_asserted(
    honest: Any, tmp_path: Path
) -> None:
    """Reference 100 -> 50 (T/S/U 45 of it: complete instead of functional) with the digest
    rewritten to a file of those bars that is then removed: nothing can check them."""
    run = honest(tps=45.0)
    assert tier_of(run).tier == "functional"
    forged_file = tmp_path / "forged.json"
    forged_file.write_text(
        json.dumps({"schema_version": 2, "perf_targets": {FIGURE: {"reference": 50.0,
                                                                   "source": "published"}}})
    )  # fmt: skip
    target = run.perf_targets[0].model_copy(
        update={"reference": 50.0, "fraction": 0.9, "met": "target"}
    )
    forged = run.replace(perf_targets=(target,), expectations_digest=file_digest(forged_file))
    forged = forged.replace(tier=stated_tier(forged))  # what its own bars give
    forged_file.unlink()
    assert forged.tier is not None and forged.tier.tier == "complete"
    assert inconsistencies(forged) == []
    assert tier_of(forged).tier == "experimental"
    # Control: the same forgery against the named file, digest left alone, is refused.
    kept = _stored(run.replace(perf_targets=(target,)))
    assert any("reference: stored 50.0" in f for f in inconsistencies(kept))


def test_vouched_bars_certify_and_gate_ok(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Control: bars the named file vouches for keep complete, and the bump gates OK."""
    run = honest(tt_metal="v2")
    assert bar_check(run).checked and tier_of(run).tier == "complete"
    assert _gate(tmp_path, honest(), run) == 0
    assert "self-asserted" not in capsys.readouterr().out


def _head() -> str:
    root = checkout_root()
    if root is None:
        pytest.skip("the committed yardstick needs the harness's git checkout")
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip("git cannot name this checkout's HEAD")
    return done.stdout.strip()


COMMITTED = "reports/baselines/tt-reference-llama/emulated-T3K/expectations.json"


def test_the_expectations_committed_at_the_harness_commit_vouch_for_the_bars(
    honest: Any,
) -> None:
    """The file named by another machine's absolute path: the committed copy at the report's
    harness commit, with the recorded digest, is the yardstick (and contradicts bars that
    differ from it). A digest no committed copy has vouches for nothing."""
    head = _head()
    root = checkout_root()
    assert root is not None
    committed = subprocess.run(
        ["git", "-C", str(root), "show", f"{head}:{COMMITTED}"], capture_output=True, check=True
    ).stdout
    run = honest()
    versions = run.versions.model_copy(update={"harness_commit": head})
    elsewhere = run.replace(
        versions=versions,
        expectations_file=f"/other/machine/checkout/{COMMITTED}",
        expectations_digest=bytes_digest(committed),
    )
    check = bar_check(elsewhere)
    assert check.checked and check.yardstick == f"{COMMITTED} at harness commit {head[:12]}"
    # That file defines other targets than the run's: named, as for a local file.
    assert any("the expectations" in f for f in inconsistencies(elsewhere))
    forged = elsewhere.replace(expectations_digest=bytes_digest(committed + b" "))
    assert not bar_check(forged).checked


# ------------------------------------------------------------ hole 2: a made-up suite


def test_a_suite_of_one_made_up_module_is_held_to_the_shipped_manifest(
    honest: Any, tmp_path: Path
) -> None:
    """The honest run's checks come from module "m", its suite recorded as ["m"]: written by a
    harness that accepted it (as the tests' own suites are), it reads full and complete. A
    report claiming this harness is held to the shipped manifest: partial and inconsistent."""
    forged = honest()
    assert tier_of(forged).tier == "complete"  # under the tests' own declaration
    with selection.fixture_suites(lambda suite: False):  # the harness as shipped
        assert tier_of(forged).tier == "partial"
        found = inconsistencies(forged)
        assert any("field 'coverage.suite': modules the harness does not ship" in f for f in found)
        assert any("field 'coverage.suite': lacks modules the harness ships" in f for f in found)
        assert _promote(tmp_path, forged, "m") == 2


def test_the_whole_shipped_suite_is_full_without_any_declaration(
    honest: Any, shipped_manifest_only: None
) -> None:
    """Control: every check of every shipped module, the suite recorded as shipped, is full
    and consistent with no test suite declared."""
    shipped = selection.suite_modules()
    run = _real_suite_run(honest, shipped, shipped)
    assert inconsistencies(run) == []
    assert run.coverage is not None and run.coverage.full


# ---------------------------------------------------------- hole 3: a removed tier


@pytest.mark.parametrize("removed", ["null", "missing"])
def test_a_schema_4_report_without_its_tier_is_refused(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], removed: str
) -> None:
    path = write_report(honest(), tmp_path / "run").json
    data = json.loads(path.read_text())
    if removed == "null":
        data["tier"] = None
    else:
        del data["tier"]
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=f"field 'tier': {removed} in a schema-4 report"):
        load_report(path)
    assert _promote(tmp_path, honest(), "ok") == 0  # control: the report as written
    args = ["--baseline", str(write_report(honest(), tmp_path / "b").json), "--candidate"]
    assert gate_cli.main([*args, str(path)]) == 2
    assert "field 'tier'" in capsys.readouterr().err


def test_an_older_schema_without_a_tier_is_read(honest: Any, tmp_path: Path) -> None:
    """Control: a schema-3 report's tier is dropped on reading and derived again."""
    path = write_report(honest(), tmp_path / "run").json
    data = json.loads(path.read_text())
    data.update(schema_version=3, tier=None)
    path.write_text(json.dumps(data))
    report = load_report(path)
    assert report.tier is None and tier_of(report).tier == "complete"


# ------------------------------------------- hole 5: the expectations file's recorded name


def test_an_expectations_file_in_the_checkout_is_recorded_repository_relative(
    honest: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the harness's checkout the name is repository-relative (the committed copy is
    found by it on any machine) and is read under the checkout from any directory; outside,
    and in older reports, it stays absolute."""
    root = checkout_root()
    if root is None:
        pytest.skip("needs the harness's git checkout")
    assert repo_relative(root / COMMITTED) == COMMITTED
    assert repo_relative(tmp_path / "e.json") == str((tmp_path / "e.json").resolve())
    monkeypatch.chdir(tmp_path)
    named = honest().replace(
        expectations_file=COMMITTED, expectations_digest=file_digest(root / COMMITTED)
    )
    check = bar_check(named)
    assert check.checked and check.yardstick == COMMITTED
    # Control: the absolute name an older report recorded is read as it is.
    old = named.replace(expectations_file=str(root / COMMITTED))
    assert bar_check(old).checked


# ------------------------------------ hole 4: the manifest the report's harness shipped


NEWEST = "conformance/tt_conformance/checks/test_forward_reference.py"


def _before_newest_module() -> str:
    """The commit before the newest check module was added (its manifest lacks it)."""
    root = checkout_root()
    if root is None:
        pytest.skip("needs the harness's git checkout")
    done = subprocess.run(
        ["git", "-C", str(root), "log", "--diff-filter=A", "--format=%H", "-1", "--", NEWEST],
        capture_output=True, text=True,
    )  # fmt: skip
    added = done.stdout.strip()
    parent = subprocess.run(
        ["git", "-C", str(root), "rev-parse", f"{added}^"], capture_output=True, text=True
    )
    if done.returncode != 0 or not added or parent.returncode != 0:
        pytest.skip("the checkout's history does not hold the module's addition")
    return parent.stdout.strip()


def _at(run: Report, commit: str) -> Report:
    run = run.replace(versions=run.versions.model_copy(update={"harness_commit": commit}))
    return run.replace(tier=derive_tier(run))


def test_a_run_is_judged_by_the_manifest_its_harness_commit_shipped(
    honest: Any, shipped_manifest_only: None
) -> None:
    """Every module the harness shipped before test_forward_reference, the suite recorded as
    that harness's: full and consistent at its commit (git's manifest, not the report's word).
    The same run claiming a commit git cannot read is judged by today's manifest: partial,
    inconsistent, and the reason says which manifest judged it."""
    commit = _before_newest_module()
    old = tuple(m for m in selection.suite_modules() if not m.endswith("test_forward_reference"))
    run = _at(_real_suite_run(honest, old, old), commit)
    assert selection.yardstick_for(run).modules == old
    assert inconsistencies(run) == []
    assert run.coverage is not None and run.coverage.full
    unknown = _at(_real_suite_run(honest, old, old), "0123456789abcdef0123")
    assert any("lacks modules the harness ships" in f for f in inconsistencies(unknown))
    tier = tier_of(unknown)
    assert tier.tier == "partial" and "harness commit 0123456789ab cannot be read" in tier.reason
    # Control: the newest harness's own suite is judged by today's manifest.
    shipped = selection.suite_modules()
    assert inconsistencies(_real_suite_run(honest, shipped, shipped)) == []
