"""Folding a `vllm bench serve --save-result` JSON into a report (tt-conformance import-bench)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tt_conformance.bars import file_digest
from tt_conformance.benchimport import BenchImportError, bench_figures, bench_shape
from tt_conformance.cli import conformance as cli
from tt_conformance.expectations import load_expectations
from tt_conformance.report import load_report
from tt_conformance.tiers import derive_tier, evaluate_targets
from tt_conformance.writers import write_report

# The keys vLLM 0.26.0's bench serve saves (vllm/benchmarks/serve.py), trimmed to what matters;
# dated the day of make_report's runs.
BENCH = {
    "date": "20250101-000000", "backend": "openai", "model_id": "org/model-a", "num_prompts": 64,
    "max_concurrency": 32, "duration": 10.0, "completed": 64, "failed": 0,
    "total_input_tokens": 64 * 100, "total_output_tokens": 64 * 100,
    "request_throughput": 6.4, "output_throughput": 640.0, "total_token_throughput": 1280.0,
    "mean_ttft_ms": 120.0, "median_ttft_ms": 110.0, "std_ttft_ms": 5.0, "p99_ttft_ms": 200.0,
    "mean_tpot_ms": 40.0, "median_tpot_ms": 39.0, "std_tpot_ms": 1.0, "p99_tpot_ms": 45.0,
    "mean_itl_ms": 40.0, "median_itl_ms": 39.5, "std_itl_ms": 2.0, "p99_itl_ms": 60.0,
    "mean_e2el_ms": 4100.0, "median_e2el_ms": 4000.0, "std_e2el_ms": 9.0, "p99_e2el_ms": 4500.0,
}  # fmt: skip


def test_figures_carry_names_and_identity_keys_like_the_harness() -> None:
    shape = bench_shape(BENCH)
    assert (shape.input_len, shape.output_len, shape.concurrency) == (100, 100, 32)
    figs = bench_figures(BENCH, shape)
    assert figs["ttft_p99@i100o100c32"].value == 200.0
    assert figs["tps_user_mean@i100o100c32"].value == pytest.approx(25.0)  # 1000 / 40 ms
    tps = figs["output_throughput@i100o100c32"]
    assert (tps.value, tps.unit, tps.better, tps.source) == (640.0, "tok/s", "higher", "vllm-bench")
    assert (tps.metric, tps.stat, tps.concurrency) == ("output_throughput", "value", 32)
    assert figs["tps_user_p99@i100o100c32"].value == pytest.approx(1000 / 45)
    # TT's t/s: t/s/u (1000 / median TPOT) x batch, as the harness computes it.
    assert figs["tt_tps@i100o100c32"].value == pytest.approx(1000 / 39 * 32)
    assert figs["request_throughput@i100o100c32"].value == 6.4
    assert figs["ttft_mean@i100o100c32"].samples == 64  # the completed requests
    assert figs["itl_mean@i100o100c32"].samples is None  # the file does not count the gaps
    assert len(figs) == 4 * 3 + 3 + 3


def test_bad_bench_files_are_refused() -> None:
    # A flag never stands in for a field the result lacks: the shape could not be confirmed.
    with pytest.raises(BenchImportError, match="field 'max_concurrency'"):
        bench_shape({**BENCH, "max_concurrency": None})
    with pytest.raises(BenchImportError, match="field 'max_concurrency'"):
        bench_shape({**BENCH, "max_concurrency": None}, concurrency=8)
    with pytest.raises(BenchImportError, match="field 'total_output_tokens'"):
        bench_shape({**BENCH, "total_output_tokens": None}, output_len=100)
    assert bench_shape(BENCH, concurrency=32, input_len=100).concurrency == 32
    with pytest.raises(BenchImportError, match="served no request"):
        bench_shape({**BENCH, "completed": 0})
    with pytest.raises(BenchImportError, match="served no request"):
        bench_shape({**BENCH, "completed": True})  # JSON true is no request count
    with pytest.raises(BenchImportError, match="no TTFT/TPOT figures"):
        bench_figures({"completed": 1}, bench_shape(BENCH))


def test_cli_folds_figures_into_the_report(tmp_path: Path, make_report, passing_accuracy) -> None:
    exp = tmp_path / "expectations.json"
    exp.write_text(json.dumps({"schema_version": 2, "perf_targets": {
        "tps_user_mean@i100o100c32": {"reference": 30.0, "source": "published"}}}))  # fmt: skip
    # The run recorded the target (its figure missing): the import fills the figure in.
    old = make_report({"m::a": "pass"}, accuracy=(passing_accuracy,))
    old = old.replace(
        expectations_file=str(exp),
        expectations_digest=file_digest(exp),
        perf_targets=evaluate_targets(old, load_expectations(exp)),
    )
    old = old.replace(tier=derive_tier(old))
    new = make_report({"m::a": "pass"}, accuracy=(passing_accuracy,))
    first = write_report(old, tmp_path / "r")
    write_report(new, tmp_path / "r")
    latest_before = (tmp_path / "r" / "latest.json").read_text()
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({**BENCH, "device": "N150"}))  # --metadata device=N150
    args = ["import-bench", str(bench), "--report", str(first.json), "--expectations", str(exp)]
    assert cli.main(args) == cli.EXIT_OK
    amended = load_report(first.json)
    assert amended.perf["ttft_mean@i100o100c32"].source == "vllm-bench"
    (target,) = amended.perf_targets
    assert target.met == "target" and target.fraction == pytest.approx(25 / 30, abs=1e-4)
    assert amended.tier is not None and amended.tier.tier == "complete"
    # An older run was amended: latest.* still describes the newest run.
    assert (tmp_path / "r" / "latest.json").read_text() == latest_before
    assert cli.main(["import-bench", str(tmp_path / "nope.json"), "--report", str(first.json)]) == 2


def test_cli_default_report_follows_model_and_device(
    tmp_path: Path, make_report, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MESH_DEVICE", "t3k")
    written = write_report(
        make_report({"m::a": "pass"}, model="org/m", device="T3K"),
        tmp_path / "reports" / "org--m" / "T3K",
    )
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({**BENCH, "model_id": "org/m", "device": "T3K"}))
    assert cli.main(["import-bench", str(bench)]) == cli.EXIT_OK
    assert "ttft_mean@i100o100c32" in load_report(written.latest_json).perf
    assert "ttft_mean@i100o100c32" in load_report(written.json).perf
    assert cli.main(["import-bench", str(bench), "--device", "n150"]) == cli.EXIT_BAD_INPUT
    assert "no report at" in capsys.readouterr().err
