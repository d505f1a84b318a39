"""Issue 32, items 1-3: run identity, coverage and TT's tiers, as a TT engineer meets them.

Scenarios from the issue's "Why": a `-k accuracy` run certified and displacing the full run
(1), and a gate that let a candidate with other TT options, max_model_len, vLLM, mesh or lanes
through without a word (3).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tt_conformance import baseline as baselines
from tt_conformance import gate, history, matrix
from tt_conformance.cli import gate as gate_cli
from tt_conformance.identity import differences, profile_key, profile_label
from tt_conformance.report import CheckResult, Report
from tt_conformance.selection import (
    CHECKS_PACKAGE,
    coverage_of,
    read_manifest_checks,
    read_manifest_concerns,
    suite_modules,
)
from tt_conformance.tiers import derive_tier
from tt_conformance.writers import write_report

SUITE = tuple(f"{CHECKS_PACKAGE}.test_{name}" for name in ("accuracy", "logprobs", "seeding"))
TT_OPTIONS = {"trace_mode": "all", "sample_on_device_mode": "all"}


def _checks(*ids: str, outcome: str = "pass", reason: str = "") -> list[CheckResult]:
    concerns = read_manifest_concerns()  # a check's concern is its module's
    return [
        CheckResult(
            id=i,
            nodeid=i,
            concern=concerns.get(i.partition("::")[0], "c"),
            outcome=outcome,  # type: ignore[arg-type]
            reason=reason,
        )
        for i in ids
    ]


def _full_checks(modules: tuple[str, ...] = SUITE) -> list[CheckResult]:
    """Every check the manifest lists for the modules (one instance of a ``name[*]``)."""
    listed = read_manifest_checks()
    return _checks(*(f"{m}::{i.replace('[*]', '[x]')}" for m in modules for i in listed[m]))


def _run(make_report: Any, passing_accuracy: Any, **changes: Any) -> Report:
    """A full hardware run: every module the harness ships (a recorded suite of its modules
    is held to the whole manifest), accuracy passing, a configuration."""
    checks = _full_checks(suite_modules())
    report = make_report({}, accuracy=(passing_accuracy,)).replace(checks=tuple(checks))
    server = report.server.model_copy(
        update={
            "tt_options": TT_OPTIONS,
            "weights": "meta-llama/Llama-3.1-8B-Instruct@0e9e39f",
            "async_scheduling": True,
            "chunked_prefill": False,
            "prefix_caching": False,
            **changes.pop("server", {}),
        }
    )
    versions = report.versions.model_copy(update=changes.pop("versions", {}))
    coverage = coverage_of(
        checks, deselected=0, keyword=None, markers=None, args=(), suite=suite_modules()
    )
    report = report.replace(server=server, versions=versions, coverage=coverage, **changes)
    return report.replace(tier=derive_tier(report))


# ------------------------------------------------------------------------------ coverage


def test_coverage_is_full_only_for_the_whole_suite_without_a_selection() -> None:
    full = coverage_of(
        _full_checks(), deselected=0, keyword=None, markers=None, args=(), suite=SUITE
    )
    assert full.full and full.selected == len(_full_checks()) and full.partial_because == ()
    keyword = coverage_of(
        _checks(f"{SUITE[0]}::test_0"), deselected=8, keyword="accuracy", markers=None, args=(),
        suite=SUITE,
    )  # fmt: skip
    assert not keyword.full
    assert keyword.partial_because[0] == "8 check(s) deselected (-k 'accuracy')"
    assert keyword.missing_modules == SUITE[1:]
    picked = coverage_of(
        _full_checks(), deselected=0, keyword=None, markers=None,
        args=("tt_conformance/checks/test_seeding.py::test_0",), suite=SUITE,
    )  # fmt: skip
    assert not picked.full and "picked by node id" in picked.partial_because[0]


def test_skips_are_counted_not_held_against_coverage() -> None:
    # The excuses are counted on the checks whose modules declare them (a tt_path logprobs
    # check, a requires_lanes lanes check); the same words on a seeding check are other skips.
    suite = (*SUITE, f"{CHECKS_PACKAGE}.test_lanes")
    checks = _full_checks(suite)
    x = next(c for c in checks if c.id.startswith(SUITE[1]))
    y = next(c for c in checks if c.id.startswith(suite[-1]))
    z, w = [c for c in checks if c.id.startswith(SUITE[2])][:2]
    skips = {
        x.id: "not applicable: no TT plugin",
        y.id: "needs a server serving >= 2",
        z.id: "not exercised: host path",
        w.id: "needs a server serving >= 2",
    }
    checks = [
        _checks(c.id, outcome="skip", reason=skips[c.id])[0] if c.id in skips else c for c in checks
    ]
    got = coverage_of(checks, deselected=0, keyword=None, markers=None, args=(), suite=suite)
    assert got.full and (got.not_applicable, got.skipped_other) == (2, 2)


def test_the_suite_is_the_shipped_check_modules() -> None:
    modules = suite_modules()
    assert f"{CHECKS_PACKAGE}.test_accuracy" in modules and len(modules) >= 10
    assert all(m.startswith(f"{CHECKS_PACKAGE}.test_") for m in modules)


def test_why_1_a_k_run_is_partial_never_displaces_the_full_run_and_cannot_be_promoted(
    tmp_path: Path, make_report: Any, passing_accuracy: Any
) -> None:
    full = _run(make_report, passing_accuracy, finished_at="2025-01-01T00:00:00Z")
    assert full.tier is not None and full.tier.tier == "experimental"  # no perf targets: N150
    only = _checks(f"{SUITE[0]}::test_0")
    partial = full.replace(
        run_id="20250102T000000Z-0000beef",
        finished_at="2025-01-02T00:00:00Z",  # newer than the full run
        checks=tuple(only),
        coverage=coverage_of(
            only, deselected=8, keyword="accuracy", markers=None, args=(), suite=suite_modules()
        ),
    )
    partial = partial.replace(tier=derive_tier(partial))
    assert partial.tier is not None and partial.tier.tier == "partial"
    assert "-k 'accuracy'" in partial.tier.reason
    root = tmp_path / "reports"
    write_report(full, root / "a")
    write_report(partial, root / "b")
    (cell,) = matrix.fold(matrix.find_reports(root))
    assert cell.report.run_id == full.run_id and cell.status == "experimental"
    # Alone, the partial run shows, labelled partial.
    (alone,) = matrix.fold([(Path("p.json"), partial)])
    assert alone.status == "partial"
    partial_json = write_report(partial, tmp_path / "p").json
    with pytest.raises(baselines.PromoteError, match="field 'coverage': a partial run"):
        baselines.promote(partial_json, tmp_path / "baselines")
    # Only a baseline whose gate runs the same selection (the emulated lanes run) may be partial.
    promoted = baselines.promote(partial_json, tmp_path / "baselines", allow_partial=True)
    assert json.loads(promoted.baseline.read_text())["run_id"] == partial.run_id


# ------------------------------------------------------------------------------ identity


def test_why_3_the_gate_names_every_difference_outside_the_axis_under_test(
    tmp_path: Path, make_report: Any, passing_accuracy: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _run(make_report, passing_accuracy)
    candidate = _run(
        make_report,
        passing_accuracy,
        server={
            "tt_options": {"trace_mode": "none"},  # and device sampling off
            "max_model_len": base.server.max_model_len // 2,  # type: ignore[operator]
        },
        versions={"vllm": "0.27.0", "tt_metal": "v2"},
    )
    b, c = tmp_path / "b.json", tmp_path / "c.json"
    b.write_text(base.model_dump_json())
    c.write_text(candidate.model_dump_json())
    assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    for named in (
        "max_model_len: 2048 -> 1024",
        "tt_options.sample_on_device_mode: 'all' -> null",  # absent: at its default
        "tt_options.trace_mode: 'all' -> 'none'",
        "vllm: '0.26.0' -> '0.27.0'",
    ):
        assert named in err
    assert "tt_metal" not in err.split("):", 1)[1]  # the axis under test is not a difference
    allowed = ["--allow-difference", "tt_options", "--allow-difference", "max_model_len"]
    assert (
        gate_cli.main(["--baseline", str(b), "--candidate", str(c), *allowed, "--axis", "vllm"])
        == 0
    )
    out = capsys.readouterr().out
    assert "under test: tt_metal: 'v1' -> 'v2'" in out and "under test: vllm" in out
    assert "allowed difference: max_model_len: 2048 -> 1024" in out


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"mesh_shape": "1x2"}, "mesh_shape: '1x1' -> '1x2'"),
        ({"server": {"lanes": 4}}, "lanes: 1 -> 4"),
        ({"server": {"weights": "sha256:00ff"}}, "weights: "),
        ({"server": {"prefix_caching": True}}, "prefix_caching: False -> True"),
        ({"versions": {"plugin_commit": "abc"}}, "plugin: '0.1.0' -> '0.1.0 (abc)'"),
    ],
)
def test_why_3_unlike_meshes_lanes_weights_and_builds_are_not_compared(
    make_report: Any, passing_accuracy: Any, changes: dict[str, Any], named: str
) -> None:
    base = _run(make_report, passing_accuracy)
    with pytest.raises(gate.GateInputError, match="differ outside the axes under test") as err:
        gate.compare(base, _run(make_report, passing_accuracy, **changes))
    assert named in str(err.value)


def test_a_tt_metal_or_ttnn_bump_alone_is_what_the_gate_compares(
    make_report: Any, passing_accuracy: Any
) -> None:
    base = _run(make_report, passing_accuracy, versions={"ttnn": "0.59"})
    bump = _run(make_report, passing_accuracy, versions={"tt_metal": "v2", "ttnn": "0.60"})
    result = gate.compare(base, bump)
    assert result.exit_code == 0
    assert [str(d) for d in differences(base, bump)] == [
        "ttnn: '0.59' -> '0.60'",
        "tt_metal: 'v1' -> 'v2'",
    ]


def test_a_ttnn_wheel_bump_is_its_own_history_group(
    make_report: Any, passing_accuracy: Any
) -> None:
    runs = [
        _run(make_report, passing_accuracy, versions={"tt_metal": "unknown", "ttnn": v}, run_id=r)
        for v, r in (("0.59", "20250101T000000Z-00000001"), ("0.60", "20250102T000000Z-00000002"))
    ]
    groups = history.group_by_commit(
        [history.Run(Path(f"{i}.json"), r) for i, r in enumerate(runs)]
    )
    assert [(g.tt_metal, g.ttnn) for g in groups] == [("unknown", "0.59"), ("unknown", "0.60")]


def test_the_profile_key_follows_the_configuration_only(
    make_report: Any, passing_accuracy: Any
) -> None:
    base = _run(make_report, passing_accuracy)
    assert profile_key(base) == profile_key(
        _run(make_report, passing_accuracy, versions={"tt_metal": "v9"})
    )
    other = _run(make_report, passing_accuracy, server={"max_num_seqs": 8})
    assert profile_key(other) != profile_key(base)
    assert profile_label(other).startswith("8 seqs, len 2048, async scheduling on")


# ------------------------------------------------------------------------------ end to end


def test_a_k_selection_is_recorded_by_the_pytest_plugin(
    pytester: pytest.Pytester, fake_server: Any, harness_args: list[str]
) -> None:
    from tt_conformance.report import load_report

    from .conftest import tt_info_text

    fake_server.state.tt_metrics = [tt_info_text("N150", "1x1", emulated_mesh=True)]
    result = pytester.runpytest(
        *harness_args, "--pyargs", f"{CHECKS_PACKAGE}.test_errors",
        f"--tt-server-url={fake_server.url}", "--tt-report-dir=out", "--tt-device=emulated",
        "-k", "not burst",
    )  # fmt: skip
    report = load_report(pytester.path / "out" / "latest.json")
    cov = report.coverage
    assert cov is not None and not cov.full
    assert cov.keyword == "not burst" and cov.deselected >= 1
    assert cov.args == (f"{CHECKS_PACKAGE}.test_errors",)
    assert report.tier is not None and report.tier.tier in ("partial", "fail")
    assert result.ret in (0, 1)
    data = json.loads((pytester.path / "out" / "latest.json").read_text())
    assert data["schema_version"] == 4 and data["coverage"]["selected"] == cov.selected
