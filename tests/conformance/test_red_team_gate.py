"""Issue 44, items 3, 8-12: hostile and careless inputs, each built with the harness's own
writers (write_report, the reports a run writes) and fed to the harness's own commands
(tt-conformance-gate, tt-conformance import-bench / summary / baseline promote). Every case
asserts the refusal (exit 2 naming the field) or the honest label; none may end in a gate "OK"
or a raised tier it does not deserve.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harnessgit import commit_all, harness_checkout
from tests.conformance.test_benchimport import BENCH
from tt_conformance import accuracy, gate
from tt_conformance.baseline import gate_run
from tt_conformance.cli import conformance as cli
from tt_conformance.cli import gate as gate_cli
from tt_conformance.expectations import AccuracyExpectation, load_expectations
from tt_conformance.fisher import fisher_lower
from tt_conformance.formats.text import gate_headline
from tt_conformance.identity import DEFAULT_AXES, identity_rows
from tt_conformance.independence import clock_problems, copy_evidence
from tt_conformance.provenance import Flags, discover
from tt_conformance.report import (
    AccuracyResult,
    ItemOutcome,
    PerfFigure,
    Report,
    RunInfo,
    iso_utc,
    load_report,
)
from tt_conformance.restated import with_derived
from tt_conformance.server import ServedModel, ServerProbe
from tt_conformance.writers import write_report

REPO = Path(__file__).resolve().parents[2]
EMU_BASELINE = REPO / "reports" / "baselines" / "tt-reference-llama" / "emulated-T3K"


def _acc(task: str, outcomes: list[bool], ids: list[str] | None = None) -> AccuracyResult:
    """A result as the accuracy check records it: items, their count, score = correct / n."""
    names = ids or [f"item-{i}" for i in range(len(outcomes))]
    items = tuple(ItemOutcome(id=n, correct=c) for n, c in zip(names, outcomes, strict=True))
    correct, n = sum(outcomes), len(outcomes)
    return AccuracyResult(
        task=task, check="m::acc", score=correct / n if n else 0.0, ci_low=0.0, ci_high=1.0,
        num_samples=n, correct=correct, threshold=0.0, verdict="pass", items=items,
    )  # fmt: skip


def _pair(make_report: Any, base: AccuracyResult, cand: AccuracyResult) -> tuple[Report, Report]:
    return (
        make_report({"m::acc": "pass"}, accuracy=(base,)),
        make_report({"m::acc": "pass"}, accuracy=(cand,), tt_metal="v2"),
    )


def _gate(tmp_path: Path, base: Report, cand: Report, *args: str) -> int:
    b = write_report(base, tmp_path / "base").json
    c = write_report(cand, tmp_path / "cand").json
    return gate_cli.main(["--baseline", str(b), "--candidate", str(c), *args])


# ----------------------------------------------------------- item 3: accuracy for every kind


def test_lm_eval_0_80_to_0_60_on_1319_samples_is_a_regression(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # lm-eval's log_samples, as run_lm_eval asks for it: one entry per document and filter.
    def results(right: int) -> dict[str, Any]:
        samples = [
            {"doc_id": i, "doc_hash": f"h{i}", "filter": "strict-match",
             "exact_match": 1.0 if i < right else 0.0}
            for i in range(1319)
        ]  # fmt: skip
        samples += [{**s, "filter": "flexible-extract", "exact_match": 1.0} for s in samples]
        return {
            "results": {"gsm8k": {"exact_match,strict-match": right / 1319}},
            "n-samples": {"gsm8k": {"original": 1319, "effective": 1319}},
            "samples": {"gsm8k": samples},
        }

    def recorded(right: int) -> AccuracyResult:
        got = accuracy.pick_lm_eval_metric(results(right), "gsm8k")
        entry = AccuracyExpectation(task="lm-eval:gsm8k", threshold=0.5)
        return accuracy.verdict(entry, got.score, got.n, (0.0, 1.0), got.correct, got.items)

    before, after = recorded(1055), recorded(791)  # 0.80 -> 0.60
    assert (before.correct, before.num_samples, len(before.items or ())) == (1055, 1319, 1319)
    assert _gate(tmp_path, *_pair(make_report, before, after)) == gate.EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "accuracy on lm-eval:gsm8k: 0.800 (1055/1319) -> 0.600 (791/1319): lower" in out
    assert "264 lost, 0 gained of 1319 paired items" in out


def test_lm_eval_without_counts_cannot_pass_a_lower_score(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # A report written before per-item outcomes: lm-eval's score and n, no correct count.
    old = AccuracyResult(
        task="lm-eval:gsm8k", check="m::acc", score=0.8, ci_low=0.78, ci_high=0.82,
        num_samples=1319, threshold=0.5, verdict="pass",
    )  # fmt: skip
    lower = old.model_copy(update={"score": 0.6, "ci_low": 0.58, "ci_high": 0.62})
    assert _gate(tmp_path, *_pair(make_report, old, lower)) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "lower, and the baseline records no correct count" in err and "regenerate" in err


def test_twelve_items_lost_on_the_same_greedy_prompts_is_a_regression(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # 99/107 -> 87/107: Fisher on the totals says p = 0.012, "within chance"; paired, the
    # candidate lost 12 items and gained none: p = 0.5 ** 12.
    base = _acc("tt-patterns", [True] * 99 + [False] * 8)
    cand = _acc("tt-patterns", [True] * 87 + [False] * 20)
    assert fisher_lower(99, 107, 87, 107) > gate.ACCURACY_ALPHA
    assert _gate(tmp_path, *_pair(make_report, base, cand)) == gate.EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "lower, p = 0.00024 (12 lost, 0 gained of 107 paired items)" in out
    # The same totals reached by swapping items (6 lost, 6 gained) are within chance.
    swapped = _acc("tt-patterns", [False] * 6 + [True] * 93 + [True] * 6 + [False] * 2)
    assert swapped.correct == 99
    assert _gate(tmp_path / "s", *_pair(make_report, base, swapped)) == gate.EXIT_OK
    assert "0.925 (99/107) -> 0.925 (99/107): within chance" in capsys.readouterr().out


def test_a_candidate_stripped_of_its_items_cannot_trade_mcnemar_for_fisher(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _acc("tt-patterns", [True] * 99 + [False] * 8)
    cand = _acc("tt-patterns", [True] * 87 + [False] * 20).model_copy(update={"items": None})
    assert _gate(tmp_path, *_pair(make_report, base, cand)) == gate.EXIT_BAD_INPUT
    assert "the baseline stored every item's outcome, the candidate none" in (
        capsys.readouterr().err
    )


def test_3_of_3_to_0_of_3_is_never_within_chance(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = _acc("tiny", [True] * 3), _acc("tiny", [False] * 3)
    assert _gate(tmp_path, *_pair(make_report, base, cand)) == gate.EXIT_REGRESSION
    assert "too few items to call any drop chance (the least p the test reaches is 0.12" in (
        capsys.readouterr().out
    )


def test_n_falling_from_107_to_1_is_an_identity_difference(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _acc("tt-patterns", [True] * 99 + [False] * 8)
    cand = _acc("tt-patterns", [True])
    assert _gate(tmp_path, *_pair(make_report, base, cand)) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "accuracy.tt-patterns: the runs scored other items (n 107 -> 1, 106 baseline" in err
    # Accepted by name, it is compared on the totals and listed as an allowed difference.
    allowed = ("--allow-difference", "accuracy.tt-patterns")
    assert _gate(tmp_path / "a", *_pair(make_report, base, cand), *allowed) == gate.EXIT_OK
    out = capsys.readouterr().out
    assert "allowed difference: accuracy.tt-patterns: n 107 -> 1" in out
    # Other items of the same count are another task too.
    other = _acc("tt-patterns", [True] * 99 + [False] * 8, [f"x{i}" for i in range(107)])
    assert _gate(tmp_path / "o", *_pair(make_report, base, other)) == gate.EXIT_BAD_INPUT


@pytest.mark.parametrize(
    ("field", "forged", "named"),
    [
        ("correct", 200, "field 'correct': 200 correct of 107 samples"),
        ("score", 0.99, "field 'score': 0.99 is not correct / num_samples"),
        ("num_samples", 108, "is not correct / num_samples = 99/108"),
    ],
)
def test_forged_counts_are_bad_input_never_the_regression_code(
    tmp_path: Path,
    make_report: Any,
    capsys: pytest.CaptureFixture[str],
    field: str,
    forged: Any,
    named: str,
) -> None:
    base, cand = _pair(
        make_report, _acc("tt-patterns", [True] * 99 + [False] * 8), _acc("t", [True])
    )
    b = write_report(base, tmp_path / "base").json
    data = json.loads(b.read_text())
    data["accuracy"][0][field] = forged
    b.write_text(json.dumps(data))
    c = write_report(cand, tmp_path / "cand").json
    assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == gate.EXIT_BAD_INPUT
    assert named in capsys.readouterr().err


def test_the_committed_emulated_baseline_still_gates_ok_and_says_what_to_regenerate(
    tmp_path: Path,
) -> None:
    """`tox -e emu` gates a new emulated run (items and parallelism recorded) against a
    baseline written before both (the committed one, those taken out): OK, accuracy compared by
    totals, naming what to regenerate."""
    committed = load_report(EMU_BASELINE / "baseline.json")
    baseline = committed.replace(
        accuracy=tuple(a.model_copy(update={"items": None}) for a in committed.accuracy),
        server=committed.server.model_copy(update={"tensor_parallel": None, "data_parallel": None}),
    )
    # A new run: its checks timed afresh inside its own window, its figures measured again.
    rng = random.Random(7)
    # An hour ago: a run is never dated in the future (report.py refuses it).
    start = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)

    def at(seconds: int) -> str:
        return (start + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")

    candidate = baseline.replace(
        run_id=f"{start:%Y%m%dT%H%M%SZ}-0badc0de",
        started_at=at(0),
        finished_at=at(600),
        checks=tuple(
            c.model_copy(
                update={
                    "duration_s": round(c.duration_s * rng.uniform(0.8, 1.2), 6),
                    "started_at": at(1),
                    "finished_at": at(599),
                }
            )
            for c in baseline.checks
        ),
        # Derived figures (tokens/s/user, T/S) follow their measured TPOT, as the harness
        # computes them (restated.py); a count of the run's own matrix cells is no measurement.
        perf=with_derived(
            {
                k: f
                if k.endswith("_matrix_cells")
                else f.model_copy(update={"value": f.value * rng.uniform(0.95, 1.05)})
                for k, f in baseline.perf.items()
            }
        ),
        versions=baseline.versions.model_copy(
            update={"plugin_commit": "f" * 40, "vllm_commit": "ffd46bfab"}
        ),
        server=baseline.server.model_copy(update={"tensor_parallel": 8, "data_parallel": 1}),
        accuracy=tuple(
            a.model_copy(
                update={
                    "items": tuple(
                        ItemOutcome(id=f"i{k}", correct=k < (a.correct or 0))
                        for k in range(a.num_samples)
                    )
                }
            )
            for a in baseline.accuracy
        ),
    )
    exp = load_expectations(EMU_BASELINE / "expectations.json")
    result = gate.compare(baseline, candidate, exp, axes=DEFAULT_AXES | {"plugin"})
    assert result.exit_code == gate.EXIT_OK, result.regressions
    notes = [n for n in result.notes if n.startswith("accuracy on tt-patterns")]
    assert notes and "the baseline records no per-item outcomes" in notes[0]
    assert "tox -e emu -- --update-baseline" in notes[0]
    assert any(
        line.startswith("recorded by the candidate only: parallelism") for line in result.identity
    )


# ------------------------------------------------------------------------- item 8: floors


def test_a_baseline_gated_against_itself_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_report({"m::a": "pass"}).replace(
        run=RunInfo(command=("pytest", "tests/tt"), host="tt-host", cwd="/w")
    )
    path = write_report(run, tmp_path / "r").json
    args = ["--baseline", str(path), "--candidate", str(path)]
    assert gate_cli.main(args) == gate.EXIT_BAD_INPUT
    assert f"the candidate is the baseline's own run (run id {run.run_id})" in (
        capsys.readouterr().err
    )
    # A copy under a new run id (and a new tt-metal, to look like a bump) is the same run.
    renamed = run.replace(
        run_id="20250101T000000Z-0000beef",
        versions=run.versions.model_copy(update={"tt_metal": "v2"}),
    )
    copy = write_report(renamed, tmp_path / "copy").json
    assert gate_cli.main(["--baseline", str(path), "--candidate", str(copy)]) == 2
    assert "renamed 20250101T000000Z-0000beef" in capsys.readouterr().err


def test_a_bump_to_not_recorded_versions_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base = make_report({"m::a": "pass"}, tt_metal="v0.62.0-rc35")
    base = base.replace(versions=base.versions.model_copy(update={"ttnn": "0.62.0"}))
    cand = make_report({"m::a": "pass"}, tt_metal="unknown")
    assert _gate(tmp_path, base, cand) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "an axis under test is not recorded by both runs" in err
    assert "ttnn: '0.62.0' -> not recorded" in err
    assert "tt_metal: 'v0.62.0-rc35' -> not recorded" in err
    # Recorded by neither run: no bump to refuse, and the verdict does not call them alike.
    neither = make_report({"m::a": "pass"}, tt_metal="unknown")
    assert _gate(tmp_path / "n", cand, neither) == gate.EXIT_OK
    out = capsys.readouterr().out
    assert "not recorded by either run: tt_metal (the gate cannot tell whether it changed)" in out
    assert "alike on every axis" not in out


def test_an_8b_n150_baseline_never_gates_a_70b_galaxy_run(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base = make_report({"m::a": "pass"}, model="meta-llama/Llama-3.1-8B-Instruct")
    cand = make_report(
        {"m::a": "pass"}, model="meta-llama/Llama-3.3-70B-Instruct", device="GALAXY",
        tt_metal="v2",
    ).replace(mesh_shape="4x8")  # fmt: skip
    for args in (
        ("--allow-difference", "model", "--allow-difference", "weights",
         "--allow-difference", "device", "--allow-difference", "mesh_shape"),
        ("--axis", "model", "--axis", "device", "--axis", "mesh_shape"),
    ):  # fmt: skip
        assert _gate(tmp_path / args[1], base, cand, *args) == gate.EXIT_BAD_INPUT
        assert "cannot be under test or an allowed difference" in capsys.readouterr().err


def test_an_explicit_null_option_is_a_value_not_a_gap(make_report: Any) -> None:
    def with_options(**options: Any) -> Report:
        run = make_report({"m::a": "pass"})
        return run.replace(server=run.server.model_copy(update={"tt_options": options}))

    base = with_options(sample_on_device_mode="all")
    with pytest.raises(gate.GateInputError) as null:
        gate.compare(base, with_options(sample_on_device_mode=None))
    assert "tt_options.sample_on_device_mode: 'all' -> null" in str(null.value)
    with pytest.raises(gate.GateInputError) as absent:
        gate.compare(base, with_options())
    # Absent is at its default (identity.setup_options: one definition of the setup), null here.
    assert "tt_options.sample_on_device_mode: 'all' -> null" in str(absent.value)
    # Under test, null against a value is a bump the gate can judge.
    result = gate.compare(
        base,
        with_options(sample_on_device_mode=None),
        axes=DEFAULT_AXES | {"tt_options.sample_on_device_mode"},
    )
    assert "under test: tt_options.sample_on_device_mode: 'all' -> null" in result.identity


def test_the_step_summary_title_is_the_gate_verdict(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # A hardware run that ranks complete-or-not aside: its title must say REGRESSION.
    base = make_report({"m::a": "pass"}, device="T3K")
    cand = make_report({"m::a": "fail"}, device="T3K", tt_metal="v2")
    baselines = tmp_path / "baselines"
    b = write_report(base, tmp_path / "b").json
    assert cli.main(["baseline", "promote", str(b), "--baselines-dir", str(baselines)]) == 0
    c = write_report(cand, tmp_path / "c").json
    capsys.readouterr()
    assert cli.main(["summary", str(c), "--gate", "--baselines-dir", str(baselines)]) == 0
    title = capsys.readouterr().out.splitlines()[0]
    # The failed check, and the tier it drops (derived from both runs' checks).
    assert title == "## gate REGRESSION (2 found) — tt-conformance: org/model-a on T3K"
    # A saved gate output that states no verdict is never read as a pass.
    saved = tmp_path / "gate.txt"
    saved.write_text("all good\n")
    assert cli.main(["summary", str(c), "--gate-output", str(saved)]) == 0
    assert capsys.readouterr().out.startswith("## gate output not recognised — ")


# ------------------------------------------------------------------- item 9: import-bench


def _hardware_run(make_report: Any, tmp_path: Path, device: str = "T3K") -> Path:
    report = make_report({"m::a": "pass"}, device=device)
    return write_report(report, tmp_path / "run").json


def _import(tmp_path: Path, report: Path, *args: str, **fields: Any) -> int:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({**BENCH, "model_id": "org/model-a", **fields}))
    return cli.main(["import-bench", str(bench), "--report", str(report), *args])


def test_a_100_100_result_is_not_relabelled_128_128(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _hardware_run(make_report, tmp_path)
    before = report.read_bytes()
    code = _import(tmp_path, report, "--input-len", "128", "--output-len", "128", device="T3K")
    assert code == cli.EXIT_BAD_INPUT and report.read_bytes() == before
    err = capsys.readouterr().err
    assert "--input-len 128 contradicts the result's field 'total_input_tokens': 6400" in err
    assert "--output-len 128 contradicts" in err and "100 per request" in err
    # The lengths it measured are accepted as given.
    assert _import(tmp_path, report, "--input-len", "100", device="T3K") == cli.EXIT_OK


def test_a_result_dated_a_year_before_the_run_cannot_raise_its_tier(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _hardware_run(make_report, tmp_path)
    before = report.read_bytes()
    assert _import(tmp_path, report, device="T3K", date="20240101-000000") == 2
    assert report.read_bytes() == before
    assert "field 'date': the result is dated 20240101-000000, more than 24 h" in (
        capsys.readouterr().err
    )
    assert _import(tmp_path, report, device="T3K", date="not a date") == 2
    assert "field 'date': 'not a date' is not" in capsys.readouterr().err
    assert _import(tmp_path, report, device="T3K", date=None) == 2
    assert "field 'date': missing" in capsys.readouterr().err


def test_numbers_of_no_established_device_stay_out_of_a_hardware_report(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _hardware_run(make_report, tmp_path)
    assert _import(tmp_path, report) == cli.EXIT_BAD_INPUT  # vllm bench serve writes no device
    err = capsys.readouterr().err
    assert "field 'device': missing" in err and "--metadata device=T3K" in err
    # mesh_device alone cannot tell a T3K from an emulated T3K.
    assert _import(tmp_path, report, mesh_device="T3K") == cli.EXIT_BAD_INPUT
    assert _import(tmp_path, report, device="emulated-T3K") == cli.EXIT_BAD_INPUT
    assert "the result ran on 'emulated-T3K', the report on 'T3K'" in capsys.readouterr().err


def test_hardware_numbers_stay_out_of_an_emulated_report(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _hardware_run(make_report, tmp_path, device="emulated-T3K")
    assert _import(tmp_path, report, device="T3K") == cli.EXIT_BAD_INPUT
    assert "the result ran on 'T3K', the report on 'emulated-T3K'" in capsys.readouterr().err
    assert _import(tmp_path, report) == cli.EXIT_BAD_INPUT
    assert _import(tmp_path, report, device="emulated-T3K") == cli.EXIT_OK


# ------------------------------------------------------- item 11: TT's identity words


def test_tp_x_dp_and_the_vllm_commit_reach_the_report_and_the_gate(make_report: Any) -> None:
    info = {
        "plugin_version": "0.3.1", "ttnn_version": "0.62.0", "mesh_device": "T3K",
        "mesh_shape": "1x8", "lanes": "4", "max_num_seqs": "8",
        "tt_metal_commit": "v0.62.0-rc35-14-g0123456789ab-dirty", "vllm_commit": "ffd46bfab",
        "tensor_parallel": "2", "data_parallel": "4",
    }  # fmt: skip
    probe = ServerProbe(models=(ServedModel("m", 4096, None),), plugin_info=info)
    found = discover(probe, probe.models[0], Flags(), "T3K")
    assert (found.tensor_parallel, found.data_parallel) == (2, 4)
    assert (found.vllm_commit, found.tt_metal_version) == (
        "ffd46bfab", "v0.62.0-rc35-14-g0123456789ab-dirty",
    )  # fmt: skip
    run = make_report({"m::a": "pass"})
    one = run.replace(
        server=run.server.model_copy(update={"tensor_parallel": 8, "data_parallel": 1})
    )
    rows = dict(identity_rows(one))
    assert rows["parallelism"] == "TP 8 x DP 1" and "vllm.commit" in rows
    four = make_report({"m::a": "pass"}, tt_metal="v2")
    four = four.replace(
        server=four.server.model_copy(update={"tensor_parallel": 2, "data_parallel": 4})
    )
    with pytest.raises(gate.GateInputError, match="parallelism: 'TP 8 x DP 1' -> 'TP 2 x DP 4'"):
        gate.compare(one, four)


# ------------------------------------------------------------------ item 12: smaller points


def test_the_default_tolerance_help_says_what_hardware_gets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        gate_cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"default: {gate.HARDWARE_PERF_TOLERANCE * 100:g} % for a run on TT hardware" in text
    assert "default: none, such figures" not in text


def test_a_cpu_run_is_never_labelled_with_a_tt_metal_version(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    probe = ServerProbe(models=(ServedModel("m", 2048, None),))  # no tt_plugin_info
    found = discover(probe, probe.models[0], Flags(tt_metal_version="v0.62.0"), "N150")
    assert (found.device, found.tt_metal_version) == ("not-tt", "unknown")
    assert any("--tt-tt-metal-version 'v0.62.0' ignored" in w for w in found.warnings)
    path = write_report(
        make_report({"m::a": "pass"}, device="cpu", tt_metal="unknown"), tmp_path
    ).json
    assert cli.main(["summary", str(path)]) == 0
    text = capsys.readouterr().out
    assert "--tt-tt-metal-version" not in text and "tt-metal not applicable" in text
    assert "No TT hardware (cpu)" in text


def test_a_stale_todo_does_not_survive_promote_allow_older(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    baselines = tmp_path / "baselines"
    newer = make_report({"m::a": "fail", "m::b": "pass"}).replace(
        started_at="2025-03-01T00:00:00Z", exit_status=1
    )
    older = make_report({"m::a": "pass", "m::b": "pass"})
    new_path = write_report(newer, tmp_path / "new").json
    args = ["baseline", "promote", "--baselines-dir", str(baselines)]
    assert cli.main([*args, str(new_path), "--write-todo-entries"]) == 0
    exp = baselines / "org--model-a" / "N150" / "expectations.json"
    assert [e["check"] for e in json.loads(exp.read_text())["expected_failures"]] == ["m::a"]
    old_path = write_report(older, tmp_path / "old").json
    capsys.readouterr()
    assert cli.main([*args, str(old_path), "--allow-older"]) == 0
    assert "removed the TODO entry for m::a" in capsys.readouterr().out
    assert json.loads(exp.read_text())["expected_failures"] == []
    # The gate accepts the file again, and m::a failing later is a regression, not excused.
    cand = make_report({"m::a": "fail", "m::b": "pass"}, tt_metal="v2")
    c = write_report(cand, tmp_path / "cand").json
    baseline = baselines / "org--model-a" / "N150" / "baseline.json"
    assert gate_cli.main(["--baseline", str(baseline), "--candidate", str(c)]) == 1


@pytest.mark.parametrize(
    ("items", "named"),
    [
        ([{"id": "a", "correct": True}, {"id": "a", "correct": True}], "duplicate item ids"),
        ([{"id": "a", "correct": True}, {"id": "b", "correct": True}], "but 2 items are correct"),
    ],
)
def test_forged_items_are_bad_input(
    tmp_path: Path, make_report: Any, items: list[dict[str, Any]], named: str
) -> None:
    run = make_report({"m::acc": "pass"}, accuracy=(_acc("t", [True, False]),))
    path = write_report(run, tmp_path).json
    data = json.loads(path.read_text())
    data["accuracy"][0]["items"] = items
    path.write_text(json.dumps(data))
    with pytest.raises(Exception, match=named):
        load_report(path)


# ------------------------------------------------ item 8: a copied baseline is not a new run


def _timed_run(make_report: Any, seed: int, **kwargs: Any) -> Report:
    """A run as the harness writes it: 12 checks timed inside the run's window, serving
    figures from 16 requests each, all measured afresh (drawn from ``seed``)."""
    rng = random.Random(seed)
    outcomes = {f"m::check_{i}": "pass" for i in range(12)}
    base = make_report(outcomes, **kwargs)
    start = datetime(2025, 1, 1, 0, 0, 0, tzinfo=timezone.utc) + timedelta(hours=seed)
    at, checks = start + timedelta(seconds=1), []
    for c in base.checks:
        took = round(rng.uniform(0.05, 3.0), 6)
        checks.append(
            c.model_copy(
                update={
                    "duration_s": took,
                    "started_at": iso_utc(at),
                    "finished_at": iso_utc(at + timedelta(seconds=took)),
                }
            )
        )
        at += timedelta(seconds=took + 0.01)
    perf = {}
    for k, metric in enumerate(("ttft", "tpot", "itl", "e2el")):
        for conc in (1, 8):
            name = f"{metric}_median@i128o128c{conc}"
            # The same server measured again: each median within a few % of its true value.
            value = 20.0 * (k + conc) * rng.uniform(0.97, 1.03)
            perf[name] = PerfFigure(
                name=name, value=value, unit="ms", better="lower",
                check="m::check_0", metric=metric, stat="median", samples=16,
            )  # fmt: skip
    return base.replace(
        checks=tuple(checks),
        perf=perf,
        started_at=iso_utc(start),
        finished_at=iso_utc(at + timedelta(seconds=1)),
    )


def _edited_copy(tmp_path: Path, path: Path, edit: Any) -> Path:
    """The careless engineer's copy: the baseline's file, a new run id and a day later."""
    data = json.loads(path.read_text())
    data["run_id"] = "20250102T000000Z-0000c0de"
    for key in ("started_at", "finished_at"):
        data[key] = data[key].replace("2025-01-01", "2025-01-02")
    data["versions"]["tt_metal"] = "v2"
    edit(data)
    out = tmp_path / "copy" / "report.json"
    out.parent.mkdir()
    out.write_text(json.dumps(data))
    return out


def _shift_check_times(data: dict[str, Any]) -> None:
    for check in data["checks"]:
        for key in ("started_at", "finished_at"):
            check[key] = check[key].replace("2025-01-01", "2025-01-02")


def _copy_gate(tmp_path: Path, make_report: Any, edit: Any) -> int:
    base = write_report(_timed_run(make_report, 1), tmp_path / "base").json
    copy = _edited_copy(tmp_path, base, edit)
    return gate_cli.main(["--baseline", str(base), "--candidate", str(copy)])


def test_a_copy_with_its_run_dates_edited_contradicts_its_own_window(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _copy_gate(tmp_path, make_report, lambda data: None) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "the candidate 20250102T000000Z-0000c0de contradicts its own run window" in err
    assert "12 check(s) timed outside the run's window" in err


def test_a_copy_with_every_date_edited_repeats_the_baselines_timings(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _copy_gate(tmp_path, make_report, _shift_check_times) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "copied as 20250102T000000Z-0000c0de" in err
    assert "12 of 12 timed checks have the baseline's exact duration" in err
    assert "8 of 8 serving figures equal the baseline's to the last digit" in err


def test_a_copy_with_one_figure_and_one_duration_nudged_is_still_a_copy(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def nudge(data: dict[str, Any]) -> None:
        _shift_check_times(data)
        data["checks"][0]["duration_s"] *= 1.01
        figure = next(iter(data["perf"].values()))
        figure["value"] *= 0.99

    assert _copy_gate(tmp_path, make_report, nudge) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "11 of 12 timed checks have the baseline's exact duration" in err
    assert "7 of 8 serving figures equal the baseline's" in err


def test_a_copy_with_every_timing_scaled_is_still_a_copy(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def scale(data: dict[str, Any]) -> None:
        _shift_check_times(data)
        for check in data["checks"]:
            check["duration_s"] = round(check["duration_s"] * 0.93, 6)
        for figure in data["perf"].values():
            figure["value"] *= 0.93

    assert _copy_gate(tmp_path, make_report, scale) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "12 of 12 timed checks have the baseline's duration times 0.93" in err
    assert "8 of 8 measured latencies are the baseline's times 0.93" in err


def test_a_check_longer_than_its_whole_run_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def stretch(data: dict[str, Any]) -> None:
        _shift_check_times(data)
        data["checks"][3]["duration_s"] = 3600.0

    assert _copy_gate(tmp_path, make_report, stretch) == gate.EXIT_BAD_INPUT
    assert "1 check(s) took longer than the run's" in capsys.readouterr().err


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_two_independent_honest_runs_pass_the_floor(
    tmp_path: Path, make_report: Any, seed: int
) -> None:
    base = _timed_run(make_report, 1)
    cand = _timed_run(make_report, seed, tt_metal="v2")
    assert copy_evidence(base, cand) is None and clock_problems(cand) == []
    assert _gate(tmp_path, base, cand) == gate.EXIT_OK


# ------------------------------------------- item 12: no report text can forge the headline

FORGED = "\n# Gate: OK\ntt-conformance gate: OK (no regression)\n<h1>gate OK</h1>\n```\n## gate OK"
# A line that reads as a verdict: a heading, the gate's own prefix, an HTML heading.
_VERDICT_LIKE = re.compile(r"^\s{0,3}(#|tt-conformance gate:|<h\d)", re.IGNORECASE)
SECTIONS = {"### Failing checks", "### Key perf", "### Gate"}  # the summary's own headings


def _forged_pair(make_report: Any) -> tuple[Report, Report]:
    """A regression whose reports carry markup and verdict lines in every free-text field."""
    base = make_report({"m::a": "pass", "m::b": "pass"}, model=f"org/m{FORGED}", device="T3K")
    cand = make_report(
        {"m::a": "fail", f"m::b{FORGED}": "pass"},
        model=f"org/m{FORGED}",
        device="T3K",
        tt_metal=f"v2{FORGED}",
    )
    checks = tuple(
        c.model_copy(update={"reason": f"broke{FORGED}"}) if c.id == "m::a" else c
        for c in cand.checks
    )
    return base, cand.replace(checks=checks, coverage=None)


def test_report_text_cannot_write_a_verdict_line_in_the_gate_output_or_summary(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = _forged_pair(make_report)
    baselines = tmp_path / "baselines"
    b = write_report(base, tmp_path / "b").json
    assert cli.main(["baseline", "promote", str(b), "--baselines-dir", str(baselines)]) == 0
    c = write_report(cand, tmp_path / "c").json
    capsys.readouterr()
    # The gate's own output: the verdict is its first line, and no other line reads as one.
    assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == gate.EXIT_REGRESSION
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "tt-conformance gate: REGRESSION (3 found)"
    assert [ln for ln in out[1:] if _VERDICT_LIKE.match(ln)] == []
    assert any("broke\\n# Gate: OK\\ntt-conformance gate: OK" in ln for ln in out)
    # The step summary: the title is the verdict, written first; report text stays text.
    summary = tmp_path / "summary.md"
    args = ["summary", str(c), "--gate", "--baselines-dir", str(baselines), "--out", str(summary)]
    assert cli.main(args) == 0
    lines = summary.read_text().splitlines()
    assert lines[0].startswith("## gate REGRESSION (3 found) — tt-conformance: org/m")
    fence = next(i for i, ln in enumerate(lines) if ln.startswith("```"))
    assert lines[fence] == "````" and lines[fence + 1] == out[0]  # no ``` inside can close it
    inside = lines[fence + 1 : lines.index("````", fence + 1)]
    outside = lines[1:fence] + lines[fence + 1 + len(inside) + 1 :]
    assert [ln for ln in outside if _VERDICT_LIKE.match(ln) and ln not in SECTIONS] == []
    assert [ln for ln in inside[1:] if _VERDICT_LIKE.match(ln)] == []
    # HTML outside code spans is escaped (inside one, markdown shows it as it is).
    text = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", "\n".join([lines[0], *outside]))
    assert "<h1>" not in text and "&lt;h1&gt;" in text


def test_a_saved_gate_output_is_a_verdict_only_on_its_first_line_and_for_this_run(
    tmp_path: Path,
    make_report: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = make_report({"m::a": "pass"}, device="T3K")
    cand = make_report({"m::a": "pass"}, device="T3K", tt_metal="v2")
    harness_checkout(tmp_path / "repo", monkeypatch)  # an OK counts against committed files
    baselines = tmp_path / "repo" / "baselines"
    b = write_report(base, tmp_path / "b").json
    assert cli.main(["baseline", "promote", str(b), "--baselines-dir", str(baselines)]) == 0
    commit_all(tmp_path / "repo", "baseline")
    c = write_report(cand, tmp_path / "c").json
    saved = tmp_path / "gate.txt"
    with saved.open("w") as fh, contextlib.redirect_stdout(fh):
        assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == gate.EXIT_OK

    def title(report: Path) -> str:
        capsys.readouterr()
        args = ["summary", str(report), "--gate-output", str(saved), "--baselines-dir"]
        assert cli.main([*args, str(baselines)]) == 0
        return capsys.readouterr().out.splitlines()[0]

    assert title(c).startswith("## gate OK (no regression; same weights not proven) — ")
    # The same OK, pointed at by another run (a regression, never gated): not its verdict.
    later = write_report(make_report({"m::a": "fail"}, device="T3K"), tmp_path / "later").json
    assert title(later).startswith("## gate output not recognised (not a gate of this run) — ")
    # A verdict anywhere but the first line, or in words the gate never writes, is none.
    for forged in (
        "summary of the run\ntt-conformance gate: OK (no regression)\n",
        "tt-conformance gate: OK (no regression) — trust me\n",
        "# Gate: OK\n",
    ):
        saved.write_text(forged)
        assert title(c).startswith("## gate output not recognised — "), forged


def test_the_gates_other_answers_hold_report_text_on_their_one_line(
    tmp_path: Path, make_report: Any
) -> None:
    _, cand = _forged_pair(make_report)
    answer = gate_run(cand, tmp_path / "no-baselines")
    assert "\n" not in answer.text and "\\n# Gate: OK" in answer.text
    assert gate_headline(answer.text, cand.run_id) == "not gated (no baseline)"


def test_a_copy_with_its_durations_redrawn_is_still_betrayed_by_its_figures(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(11)

    def redraw(data: dict[str, Any]) -> None:
        _shift_check_times(data)
        for check in data["checks"]:
            check["duration_s"] = round(check["duration_s"] * rng.uniform(0.9, 1.1), 6)
        for figure in data["perf"].values():
            figure["value"] *= 1.02

    assert _copy_gate(tmp_path, make_report, redraw) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "timed checks" not in err
    assert "8 of 8 measured latencies are the baseline's times 1.02" in err
