"""Red team rt44b: reports whose own record contradicts what they claim (a date after now, an
emulated server named as hardware, a concern the manifest does not give the check), yardsticks
the report chose (a loose commit) and "committed" reports committed elsewhere. Each attack is
refused (exit 2 naming the field) or labelled honestly, next to an honest control that passes.
"""

# ruff: noqa: F811
# (the tests take `honest`, test_red_team's honest-run fixture, imported as a fixture)

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harnessgit import commit_all, git, harness_checkout
from tests.conformance.test_red_team import honest  # noqa: F401
from tests.conformance.test_red_team_gate import EMU_BASELINE, _timed_run
from tt_conformance import committed, selection, suiteids
from tt_conformance.bars import bar_check
from tt_conformance.cli import conformance as cli
from tt_conformance.cli import gate as gate_cli
from tt_conformance.cli import matrix as matrix_cli
from tt_conformance.rederive import inconsistencies
from tt_conformance.report import CheckResult, Report, load_report
from tt_conformance.selection import coverage_of
from tt_conformance.tiers import derive_tier
from tt_conformance.writers import write_report


def _edited(path: Path, edit: Any, out: Path) -> Path:
    """The report as the harness wrote it, then edited by hand (what the red team did)."""
    data = json.loads(path.read_text())
    edit(data)
    out.write_text(json.dumps(data))
    return out


def _pair(tmp_path: Path, make_report: Any) -> tuple[Path, Path]:
    base = write_report(_timed_run(make_report, 1, device="T3K"), tmp_path / "base").json
    cand = _timed_run(make_report, 2, device="T3K", tt_metal="v2")
    return base, write_report(cand, tmp_path / "cand").json


def _gate(b: Path, c: Path) -> int:
    return gate_cli.main(["--baseline", str(b), "--candidate", str(c)])


# ------------------------------------------------- items 2 and 4 (#4, #7): implausible dates


def _set(field: str, value: str) -> Any:
    def edit(data: dict[str, Any]) -> None:
        if field.startswith("checks."):
            data["checks"][0][field.removeprefix("checks.")] = value
        else:
            data[field] = value

    return edit


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("finished_at", "2099-01-01T00:00:00Z"),  # a pass "newest" forever
        ("started_at", "0001-01-01T00:00:00Z"),  # overflowed the gate's clock check (exit 1)
        ("finished_at", "9999-12-31T23:59:59+00:00"),
        ("started_at", "0001-01-01T00:00:00+05:00"),  # year 0 in UTC: out of datetime's range
        ("started_at", "2019-12-31T23:59:59Z"),  # before this harness existed
        ("checks.finished_at", "9999-12-31T23:59:59-05:00"),
        ("run_id", "99991231T235959Z-852b4eeb"),  # names the history store's file
    ],
)
def test_a_date_after_now_or_before_the_harness_is_refused_everywhere(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str], field: str, value: str
) -> None:
    b, c = _pair(tmp_path, make_report)
    forged = _edited(c, _set(field, value), tmp_path / "forged.json")
    name = field.replace("checks.", "")
    assert _gate(b, forged) == 2
    assert name in capsys.readouterr().err
    assert _gate(forged, c) == 2
    store = tmp_path / "history"
    assert cli.main(["history", "add", str(forged), "--history", str(store)]) == 2
    assert name in capsys.readouterr().err and not store.exists()
    runs = tmp_path / "runs"
    runs.mkdir()
    _edited(forged, lambda d: None, runs / "forged.json")
    out = ["--out-md", str(tmp_path / "M.md"), "--out-html", str(tmp_path / "m.html")]
    assert matrix_cli.main([str(runs), *out, "--include-uncommitted"]) == 2
    assert "plausible run time" in capsys.readouterr().err


def test_a_run_of_today_is_accepted(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Control: the honest pair gates OK, and a run finished a few hours ahead of this clock
    (another machine's) is still within the slack."""
    b, c = _pair(tmp_path, make_report)
    assert _gate(b, c) == 0
    ahead = (datetime.now(timezone.utc) + timedelta(hours=3)).isoformat()
    store = tmp_path / "history"
    later = _edited(c, _set("finished_at", ahead), tmp_path / "later.json")
    assert cli.main(["history", "add", str(later), "--history", str(store)]) == 0


# --------------------------------------------- item 6 (#13): an emulated run named hardware

EMULATED = EMU_BASELINE / "baseline.json"


def _as_hardware(tmp_path: Path, **server: Any) -> Path:
    """The committed emulated baseline with only its device (and what follows from it) made
    T3K, written by the harness's writer: the red team's "hardware" baseline."""
    run = load_report(EMULATED)
    run = run.replace(device="T3K", server=run.server.model_copy(update=server))
    return write_report(run.replace(tier=derive_tier(run)), tmp_path / "t3k").json


@pytest.mark.parametrize(
    ("server", "versions", "named"),
    [
        ({}, {}, "'server.tt_options.emulated_mesh' is true"),
        ({"tt_options": {"emulated_mesh": False}}, {}, "'versions.ttnn' is the host stub's"),
        (
            {"tt_options": {}, "mesh_device": "emulated-T3K"},
            {"ttnn": "1.2.0"},
            "'server.mesh_device' is 'emulated-T3K'",
        ),
    ],
)
def test_an_emulated_run_cannot_carry_a_hardware_device(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    server: dict[str, Any],
    versions: dict[str, Any],
    named: str,
) -> None:
    run = load_report(EMULATED)
    server = {**server, "tt_options": server.get("tt_options", run.server.tt_options)}
    forged = _as_hardware(tmp_path, **server)
    if versions:
        forged = _edited(forged, lambda d: d["versions"].update(versions), forged)
    store = tmp_path / "history"
    assert cli.main(["history", "add", str(forged), "--history", str(store)]) == 2
    err = capsys.readouterr().err
    assert "field 'device': 'T3K' is TT hardware" in err and named in err
    runs = tmp_path / "runs"
    runs.mkdir()
    _edited(forged, lambda d: None, runs / "forged.json")
    out = ["--out-md", str(tmp_path / "M.md"), "--out-html", str(tmp_path / "m.html")]
    assert matrix_cli.main([str(runs), *out, "--include-uncommitted"]) == 2
    assert named in capsys.readouterr().err
    assert gate_cli.main(["--baseline", str(forged), "--candidate", str(forged)]) == 2
    assert "field 'device'" in capsys.readouterr().err


def test_the_emulated_baseline_as_recorded_is_consistent() -> None:
    """Control: the same record under its own device name is consistent."""
    assert inconsistencies(load_report(EMULATED)) == []


# ------------------------------------------- item 1 (#2): a yardstick of the report's choosing

THREE = tuple(f"tt_conformance.checks.test_{m}" for m in ("isolation", "seeding", "errors"))


def _harness_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, str]:
    """A harness checkout (the harness reads git here) whose branch holds today's check
    modules and manifest, and a loose commit on top of it, on no branch, holding a manifest of
    three modules and the emulated baseline's expectations: (repo, the branch's commit, the
    loose commit)."""
    repo = tmp_path / "harness"
    manifest = repo / selection.MANIFEST_PATH
    manifest.parent.mkdir(parents=True)
    for name, data in selection.installed_files().items():
        short = name.removeprefix(selection.CHECKS_PACKAGE + ".")
        (manifest.parent / f"{short}.py").write_bytes(data)
    manifest.write_text(selection.manifest_text())
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "harness")
    head = git(repo, "rev-parse", "HEAD")
    listed = selection.read_manifest_checks()
    small = {
        "kind": selection.MANIFEST_KIND,
        "modules": {m: digest for m, digest in selection.read_manifest().items() if m in THREE},
        "checks": {m: list(listed[m]) for m in THREE},
    }
    manifest.write_text(json.dumps(small))
    bars = repo / "bars" / "expectations.json"
    bars.parent.mkdir()
    bars.write_bytes((EMU_BASELINE / "expectations.json").read_bytes())
    git(repo, "add", ".")
    tree = git(repo, "write-tree")
    loose = git(repo, "commit-tree", tree, "-p", head, "-m", "loose")
    git(repo, "reset", "-q", "--hard", head)
    monkeypatch.setattr(committed, "checkout_root", lambda: repo)
    return repo, head, loose


def _thinned(commit: str) -> Any:
    """The emulated baseline cut to the three modules' checks, harness commit ``commit``,
    bars from the loose commit's expectations, its coverage as a run of that small suite
    records it (full)."""
    run = load_report(EMULATED)
    checks = tuple(c for c in run.checks if c.id.partition("::")[0] in THREE)
    listed = selection.read_manifest_checks()
    coverage = coverage_of(
        checks, deselected=0, keyword=None, markers=None, args=(), suite=THREE,
        device=run.device, lanes=1, model_class=run.server.model_class,
        suite_checks={m: listed[m] for m in THREE},
    )  # fmt: skip
    assert coverage.full
    versions = run.versions.model_copy(update={"harness_commit": commit})
    thin = run.replace(
        checks=checks, coverage=coverage, versions=versions,
        expectations_file="bars/expectations.json",
    )  # fmt: skip
    return thin.replace(tier=derive_tier(thin))


def test_a_loose_commit_is_no_yardstick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """30-odd checks of three modules, judged by the three-module manifest the report's own
    loose commit holds, read full; the loose commit is not the harness's: today's manifest
    judges the run (partial, saying why) and its bars are self-asserted."""
    _, _, loose = _harness_repo(tmp_path, monkeypatch)
    forged = _thinned(loose)
    assert committed.commit_state(loose) == "foreign"
    yardstick = selection.yardstick_for(forged)
    assert yardstick.modules == selection.suite_modules()
    assert yardstick.label is not None and "is not in this harness's history" in yardstick.label
    derived = selection.derive_coverage(forged)
    assert derived is not None and not derived.full
    assert any("not in this harness's history" in why for why in derived.partial_because)
    assert not bar_check(forged).checked
    path = write_report(forged, tmp_path / "run").json
    assert cli.main(["history", "add", str(path), "--history", str(tmp_path / "h")]) == 2
    assert "field 'coverage.full': stored True" in capsys.readouterr().err


def test_a_commit_of_the_harness_history_is_the_yardstick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Controls: the branch's commit judges by its (today's) manifest, unlabelled; the same
    loose commit once HEAD's own line holds it (not merely a branch: rt44c E) is the
    harness's, and its manifest (true to the modules beside it) and bars are the yardstick."""
    repo, head, loose = _harness_repo(tmp_path, monkeypatch)
    assert selection.yardstick_for(_thinned(head)).label is None
    git(repo, "branch", "small-suite", loose)
    assert committed.commit_state(loose) == "foreign"
    git(repo, "merge", "-q", "--ff-only", loose)
    committed.forget_answers()  # git's answers are cached per process; HEAD moved here
    assert committed.commit_state(loose) == "history"
    kept = _thinned(loose)
    assert selection.yardstick_for(kept).modules == tuple(sorted(THREE))
    derived = selection.derive_coverage(kept)
    assert derived is not None and derived.full
    assert bar_check(kept).checked


# ----------------------------- item 7 (#14, #15): a concern is the manifest's, not the report's

LOGPROBS = "tt_conformance.checks.test_logprobs::test_logprobs_shape_and_values"
UNEXERCISED = "not exercised: device-sampled decode steps: the batches fell back to the host"


def _suite_run(honest: Any, edit: Any = lambda c: c) -> Report:
    """An honest T3K run of every check the manifest lists, ``edit`` applied to each check
    (its concern and reason as the run wrote them, or as the attacker relabelled them), its
    coverage and tier derived as the harness writes them."""
    listed, concerns = selection.read_manifest_checks(), selection.read_manifest_concerns()
    checks = tuple(
        edit(CheckResult(id=f"{m}::{e.replace('[*]', '[x]')}", nodeid=f"{m}::{e}",
                         concern=concerns[m], outcome="pass"))
        for m in selection.suite_modules()
        for e in listed[m]
    )  # fmt: skip
    run = honest()
    run = run.replace(
        checks=checks, server=run.server.model_copy(update={"model_class": "LlamaForCausalLM"})
    )
    run = run.replace(coverage=coverage_of(run.checks, deselected=0, keyword=None, markers=None,
                                           args=(), device=run.device, lanes=1,
                                           model_class="LlamaForCausalLM"))  # fmt: skip
    return run.replace(tier=derive_tier(run))


def _unexercised(c: CheckResult) -> CheckResult:
    """The emulated baseline's two logprob checks the device path did not exercise."""
    if c.id in (f"{LOGPROBS}[half]", f"{LOGPROBS}[full]"):
        return c.model_copy(update={"outcome": "skip", "reason": UNEXERCISED})
    return c


def _as_block_output(c: CheckResult) -> CheckResult:
    """#14: the same two checks relabelled block_output, with the block probe's words."""
    c = _unexercised(c)
    if c.outcome != "skip":
        return c
    reason = f"{selection.BLOCK_OUTPUT_ABSENT} (n=2 was not refused)"
    return c.model_copy(update={"concern": "block_output", "reason": reason})


FORWARD_EXCUSED = ("device_sampling", "isolation", "long_context")


def _as_forward_reference(c: CheckResult) -> CheckResult:
    """#15: every device_sampling, isolation and long_context check skipped as an optional
    forward reference that was not run."""
    if c.concern not in FORWARD_EXCUSED:
        return c
    reason = f"{selection.OPTIONAL_NOT_RUN} no checkpoint given"
    return c.model_copy(update={"outcome": "skip", "concern": "forward_reference",
                                "reason": reason})  # fmt: skip


def test_honest_suite_runs_complete_and_unexercised_checks_cap_it(honest: Any) -> None:
    """Controls: every check passing is complete; two unexercised logprob checks keep the run
    below complete, honestly; the forward reference's own checks skipped for want of a
    checkpoint are optional (the tier notes it, does not cap it)."""
    assert _suite_run(honest).tier.tier == "complete"  # type: ignore[union-attr]
    capped = _suite_run(honest, _unexercised)
    assert capped.tier is not None and capped.tier.tier != "complete"
    assert inconsistencies(capped) == []

    def no_checkpoint(c: CheckResult) -> CheckResult:
        if c.concern != "forward_reference":
            return c
        reason = f"{selection.OPTIONAL_NOT_RUN} no checkpoint given"
        return c.model_copy(update={"outcome": "skip", "reason": reason})

    optional = _suite_run(honest, no_checkpoint)
    assert optional.tier is not None and optional.tier.tier == "complete"
    assert "optional concerns not run: forward_reference" in optional.tier.reason
    assert inconsistencies(optional) == []


@pytest.mark.parametrize(
    ("edit", "relabelled"),
    [(_as_block_output, "block_output"), (_as_forward_reference, "forward_reference")],
)
def test_a_relabelled_concern_is_inconsistent_and_borrows_no_excuse(
    honest: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: Any,
    relabelled: str,
) -> None:
    forged = _suite_run(honest, edit)
    # Judged by the manifest's concerns, the excuse does not hold: not complete, and the
    # concerns the attack emptied are named as not run.
    assert forged.tier is not None and forged.tier.tier != "complete"
    skipped = [c for c in forged.checks if c.outcome == "skip"]
    kinds = {selection.skip_kind(c, forged.device, 1, "LlamaForCausalLM") for c in skipped}
    assert kinds == {"other"}
    if relabelled == "forward_reference":
        assert forged.coverage is not None
        assert set(FORWARD_EXCUSED) <= set(forged.coverage.concerns_not_run)
    # Its stored concerns are the report's word: inconsistent, naming the field.
    found = inconsistencies(forged)
    assert any(f.startswith("field 'checks[") and f"stored {relabelled!r}" in f for f in found)
    path = write_report(forged, tmp_path / "run").json
    assert cli.main(["history", "add", str(path), "--history", str(tmp_path / "h")]) == 2
    assert ".concern' (tt_conformance.checks." in capsys.readouterr().err
    assert gate_cli.main(["--baseline", str(path), "--candidate", str(path)]) == 2


# ---------------------------------- item 10 (#21, #22): committed in the harness's repository


def _publish(runs: Path, out: Path, *flags: str) -> str:
    """The published matrix's Markdown (the command must succeed)."""
    args = [str(runs), "--out-md", str(out / "M.md"), "--out-html", str(out / "m.html")]
    assert matrix_cli.main([*args, *flags]) == 0
    return (out / "M.md").read_text()


def _committed_run(honest: Any, repo: Path, model: str, harness: str, plugin: str) -> Path:
    run = honest(model=model)
    versions = run.versions.model_copy(update={"harness_commit": harness, "plugin_commit": plugin})
    path = write_report(run.replace(versions=versions), repo / "runs" / model.replace("/", "-"))
    return path.json


@pytest.mark.parametrize(
    ("harness", "plugin"),
    [
        ("{head}-dirty", "{head}"),  # git describe's spelling: a modified tree
        ("not-a-commit", "{head}"),
        ("{head}", "x"),
        ("{head}", "f" * 40),  # well-formed, but no commit of the harness's repository
    ],
)
def test_a_malformed_or_unknown_commit_is_not_published_as_committed(
    honest: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    harness: str,
    plugin: str,
) -> None:
    repo = tmp_path / "harness"
    head = harness_checkout(repo, monkeypatch)
    bad = _committed_run(
        honest, repo, "org/bad", harness.format(head=head), plugin.format(head=head)
    )
    _committed_run(honest, repo, "org/good", head, head)  # control: real commits of it
    commit_all(repo)
    md = _publish(repo / "runs", tmp_path / "pub")
    assert "org/good" in md and "org/bad" not in md
    err = capsys.readouterr().err
    assert f"left out {bad}: its " in err and "is not a commit of the harness's history" in err
    assert "org/bad" in _publish(repo / "runs", tmp_path / "pub", "--include-uncommitted")


def test_a_report_committed_in_another_repository_is_not_published(
    honest: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """#22: a forged report committed in a throwaway `git init` under /tmp, recording real
    commits of the harness: nothing but its author vouches for that commit."""
    harness = tmp_path / "harness"
    head = harness_checkout(harness, monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    git(elsewhere, "init", "-q")
    forged = _committed_run(honest, elsewhere, "org/forged", head, head)
    commit_all(elsewhere)
    md = _publish(elsewhere / "runs", tmp_path / "pub")
    assert "org/forged" not in md
    err = capsys.readouterr().err
    assert f"left out {forged}: committed in another git repository" in err
    # Control: the same run committed in the harness's repository is published.
    _committed_run(honest, harness, "org/forged", head, head)
    commit_all(harness)
    assert "org/forged" in _publish(harness / "runs", tmp_path / "pub2")


def test_an_installed_harness_trusts_the_repository_it_is_run_in_only_if_it_holds_the_harness(
    honest: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`tox -e matrix` runs a wheel of the harness from the repository's root: that repository
    (it holds the harness's source) is the harness's. Run elsewhere, nothing proves a report
    committed in the harness's repository."""
    repo = tmp_path / "harness"
    head = harness_checkout(repo, monkeypatch)
    source = repo / "conformance" / "tt_conformance" / "__init__.py"
    source.parent.mkdir(parents=True)
    source.write_text("")
    _committed_run(honest, repo, "org/good", head, head)
    commit_all(repo)
    monkeypatch.setattr(committed, "checkout_root", lambda: None)
    monkeypatch.chdir(repo)
    assert "org/good" in _publish(repo / "runs", tmp_path / "pub")
    monkeypatch.chdir(tmp_path)
    assert "org/good" not in _publish(repo / "runs", tmp_path / "pub2")
    assert "no git repository of the harness here" in capsys.readouterr().err


def test_the_manifest_records_one_concern_per_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check module's concern is its marker; a function marked with another concern would
    make the module's entry wrong, so the manifest refuses to be written over it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    head = "import pytest\n\npytestmark = pytest.mark.isolation\n\n\ndef test_a():\n    pass\n"
    (tmp_path / "h44_one_concern.py").write_text(head)
    (tmp_path / "h44_two_concerns.py").write_text(
        head + "\n\n@pytest.mark.logprobs\ndef test_b():\n    pass\n"
    )
    assert suiteids.module_concern("h44_one_concern") == "isolation"
    with pytest.raises(ValueError, match="'logprobs' differs from its module's 'isolation'"):
        suiteids.module_concern("h44_two_concerns")
    assert selection.read_manifest_concerns()["tt_conformance.checks.test_draw_frequencies"] == (
        "device_sampling"
    )
