"""Issue 44, red team 44 (/tmp/redteam-44): reports that chose where the harness writes, or
carried values no measurement produces. Each is built with the harness's own writers and fed to
the harness's own commands; each must end in a refusal (exit 2 naming the field) or the honest
verdict, never a write outside the store or a gate "OK".
"""

# ruff: noqa: F811
# (the tests take `honest`, test_red_team's honest-run fixture, imported as a fixture)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.test_red_team import (
    ACCURACY,
    CONCERNS,
    _check,
    honest,  # noqa: F401
)
from tests.conformance.test_red_team_gate import EMU_BASELINE, _acc, _import
from tt_conformance import history
from tt_conformance.cli import conformance as cli
from tt_conformance.cli import gate as gate_cli
from tt_conformance.cli import matrix as matrix_cli
from tt_conformance.report import Aborted, CheckResult, Report, report_from_dict
from tt_conformance.selection import BLOCK_OUTPUT_ABSENT, coverage_of
from tt_conformance.tiers import derive_tier
from tt_conformance.writers import write_report


def _forged(tmp_path: Path, report: Report, **fields: Any) -> Path:
    """The report as the harness writes it, then edited by hand (what the red team did)."""
    path = write_report(report, tmp_path / "run").json
    data = json.loads(path.read_text())
    data.update(fields)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    return forged


# ------------------------------------------------------ item 1: a run id is not a path


def test_history_add_never_writes_where_the_run_id_points(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "baselines" / "m" / "baseline.json"
    victim.parent.mkdir(parents=True)
    victim.write_text("precious")
    store = tmp_path / "reports" / "history"
    run_id = "../../../../baselines/m/baseline"
    path = _forged(tmp_path, make_report({"m::a": "pass"}), run_id=run_id)
    assert cli.main(["history", "add", str(path), "--history", str(store)]) == 2
    assert "run_id" in capsys.readouterr().err
    assert victim.read_text() == "precious"


def test_import_bench_never_rewrites_a_file_the_run_id_names(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="run_id"):
        report_from_dict({**json.loads(make_report({"m::a": "pass"}).model_dump_json()),
                          "run_id": "../x"})  # fmt: skip
    path = _forged(tmp_path, make_report({"m::a": "pass"}, device="T3K"), run_id="../../evil")
    assert _import(tmp_path, path) == 2 and "run_id" in capsys.readouterr().err
    assert not (tmp_path / "evil.json").exists()


# ------------------------------------------- item 5: no samples measured nothing


def test_a_result_of_no_samples_is_refused_not_unchanged(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base = make_report({"m::acc": "pass"}, accuracy=(_acc("t", [True] * 5),))
    cand = make_report({"m::acc": "pass"}, accuracy=(_acc("t", [False] * 5),), tt_metal="v2")
    b = write_report(base, tmp_path / "base").json
    data = json.loads(b.read_text())
    data["accuracy"][0].update(num_samples=0, correct=None, items=None, score=1.0)
    b.write_text(json.dumps(data))
    c = write_report(cand, tmp_path / "cand").json
    assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == 2
    assert "num_samples" in capsys.readouterr().err


# --------------------------------------- item 8: timestamps and device names are checked


@pytest.mark.parametrize(
    ("field", "value"),
    [("started_at", "yesterday"), ("finished_at", "2025-13-01T00:00:00Z"),
     ("finished_at", "2025-01-01T00:00:00"), ("device", "t3k-ish")],
)  # fmt: skip
def test_an_unreadable_time_or_device_is_refused_naming_it(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str], field: str, value: str
) -> None:
    _forged(tmp_path, make_report({"m::a": "pass"}), **{field: value})
    out = ["--out-md", str(tmp_path / "M.md"), "--out-html", str(tmp_path / "m.html")]
    assert matrix_cli.main([str(tmp_path), *out, "--include-uncommitted"]) == 2
    assert field in capsys.readouterr().err


def test_t3k_and_T3K_are_one_column(tmp_path: Path, make_report: Any) -> None:
    path = _forged(tmp_path, make_report({"m::a": "pass"}, device="T3K"), device="t3k")
    data = json.loads(path.read_text())
    assert report_from_dict(data).device == "T3K"


# --------------------------------------------- item 10: a figure is a positive measurement


@pytest.mark.parametrize("value", [0.0, -5.0, float("inf"), float("nan")])
def test_a_zero_negative_or_infinite_figure_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str], value: float
) -> None:
    fig = {"tps@x": (90.0, "tok/s", "higher")}
    base, cand = make_report({"m::a": "pass"}, perf=fig), make_report({"m::a": "pass"}, perf=fig)
    c = write_report(cand, tmp_path / "cand").json
    data = json.loads(c.read_text())
    data["perf"]["tps@x"]["value"] = value
    c.write_text(json.dumps(data))
    b = write_report(base, tmp_path / "base").json
    assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == 2
    assert "value" in capsys.readouterr().err


def test_runs_are_ordered_by_time_not_by_string(make_report: Any) -> None:
    # 10:00+05:00 is 05:00Z: earlier than 06:00Z though its string sorts later.
    early = make_report({"m::a": "pass"}, finished_at="2025-01-01T10:00:00+05:00")
    late = make_report({"m::a": "fail"}, finished_at="2025-01-01T06:00:00Z")
    runs = history.distinct_runs([(Path("b.json"), late), (Path("a.json"), early)])
    assert [r.report.run_id for r in runs] == [early.run_id, late.run_id]


# --------------------------------------------------- item 9: one run id names one run


def test_two_runs_under_one_run_id_are_refused_naming_both_files(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    good = make_report({"m::a": "pass"}, device="T3K")
    bad = make_report({"m::a": "fail"}, device="T3K").replace(run_id=good.run_id)
    first = write_report(good, tmp_path / "reports" / "a").json
    second = write_report(bad, tmp_path / "reports" / "b").json
    out = ["--out-md", str(tmp_path / "M.md"), "--out-html", str(tmp_path / "m.html")]
    code = matrix_cli.main([str(tmp_path / "reports"), *out, "--include-uncommitted"])
    err = capsys.readouterr().err
    assert code == 2 and str(first) in err and str(second) in err


# ------------------------------------------------ item 3: a retried pass is not a pass


def test_pass_to_unlisted_flaky_is_a_regression_and_never_complete(
    tmp_path: Path, make_report: Any, honest: Any
) -> None:
    base = make_report({"m::a": "pass"})
    cand = make_report({"m::a": "flaky"}, tt_metal="v2")
    b, c = write_report(base, tmp_path / "b").json, write_report(cand, tmp_path / "c").json
    assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == 1
    checks = tuple(_check(i, k) for k in CONCERNS for i in range(39))
    flaky = (checks[0].model_copy(update={"outcome": "flaky", "attempts": 2}), *checks[1:])
    assert honest().tier.tier == "complete"
    assert honest(checks=flaky).tier.tier == "functional"


# ------------------------------ item 4: "not a block-output server" is the probe's word only


def test_block_output_words_on_other_concerns_are_a_waiver(honest: Any) -> None:
    server = honest().server.model_copy(update={"model_class": "LlamaForCausalLM"})
    absent = f"{BLOCK_OUTPUT_ABSENT}: waived by hand"
    hidden = tuple(
        _check(i, k, "skip", absent) if k == "logprobs" else _check(i, k)
        for k in CONCERNS
        for i in range(39)
    )
    run = honest(checks=hidden, server=server)
    assert (
        run.tier.tier == "partial" and run.coverage and "logprobs" in run.coverage.concerns_not_run
    )
    # The probe itself, on a server recorded as serving a causal LM, is not applicable.
    probe = (*hidden[:78], _check(0, "block_output", "skip", absent))
    assert honest(checks=probe, server=server).tier.tier == "complete"
    # The same skip on a block-output class is not borne out.
    block = server.model_copy(update={"model_class": "DiffusionGemmaForBlockDiffusion"})
    assert honest(checks=probe, server=block).tier.tier == "partial"


# ------------------------------- item 5: an expected failure's score is not accuracy evidence


def test_an_xfailed_accuracy_check_is_not_measured_accuracy(honest: Any) -> None:
    failed = ACCURACY.model_copy(update={"verdict": "fail", "correct": 2, "score": 0.2})
    checks = (
        *(_check(i, k) for k in CONCERNS for i in range(39)),
        CheckResult(id="m::test_acc", nodeid="m.py::test_acc", concern="accuracy",
                    outcome="xfail", reason="expected: accuracy low"),
    )  # fmt: skip
    run = honest(checks=checks, accuracy=(failed,))
    assert run.tier.tier == "experimental", run.tier


# --------------------------------------- item 6: the gate holds its baseline to promote's bar


def _baseline_gate(tmp_path: Path, base: Report, cand: Report) -> int:
    b, c = write_report(base, tmp_path / "b").json, write_report(cand, tmp_path / "c").json
    return gate_cli.main(["--baseline", str(b), "--candidate", str(c)])


def test_an_all_failing_baseline_does_not_gate_ok(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base = make_report({"m::a": "fail", "m::b": "fail"})
    cand = make_report({"m::a": "fail", "m::b": "fail"}, tt_metal="v2")
    assert _baseline_gate(tmp_path, base, cand) == 2
    assert "field 'checks'" in capsys.readouterr().err


def test_an_aborted_baseline_does_not_gate_ok(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = Aborted(reason="connection refused", at="2025-01-01T00:00:00Z", not_run=40)
    base = make_report({"m::a": "pass"}).replace(aborted=gone)
    base = base.replace(tier=derive_tier(base))
    assert _baseline_gate(tmp_path, base, make_report({"m::a": "pass"}, tt_metal="v2")) == 2
    assert "aborted" in capsys.readouterr().err


def test_a_partial_baseline_gates_only_its_own_selection(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def lanes_only(report: Report) -> Report:
        chosen = coverage_of(report.checks, deselected=9, keyword=None, markers="lanes",
                             args=(), suite=["m", "n"])  # fmt: skip
        report = report.replace(coverage=chosen)
        return report.replace(tier=derive_tier(report))

    base = lanes_only(make_report({"m::a": "pass"}))
    full = make_report({"m::a": "pass"}, tt_metal="v2")
    assert _baseline_gate(tmp_path / "1", base, full) == 2
    assert "field 'coverage'" in capsys.readouterr().err
    same = lanes_only(make_report({"m::a": "pass"}, tt_metal="v2"))
    assert _baseline_gate(tmp_path / "2", base, same) == 0


# ------------------------------ item 2: the suite is the harness's, never the report's own


def test_a_report_without_its_suite_cannot_drop_whole_modules(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # a1.py: the emulated baseline cut to two concerns, its coverage recounted, no suite (a
    # report of a harness that did not record one).
    base = json.loads((EMU_BASELINE / "baseline.json").read_text())
    base["coverage"] = {**base["coverage"], "suite": []}
    kept = [c for c in base["checks"] if c["concern"] in ("errors", "accuracy")]
    report = report_from_dict({**base, "checks": kept, "totals": None, "perf": {}})
    assert report.coverage is not None and not report.coverage.suite
    cut = report.replace(coverage=report.coverage.model_copy(
        update={"selected": len(kept), "skipped_other": 0, "not_applicable": 0}))  # fmt: skip
    cut = cut.replace(tier=derive_tier(cut))
    assert cut.tier is not None and cut.tier.tier == "partial", cut.tier
    path = write_report(cut, tmp_path / "run").json
    assert cli.main(["baseline", "promote", str(path), "--baselines-dir", str(tmp_path)]) == 2
