"""Red team: import-bench may not file figures under a shape the result cannot confirm, nor
judge a run by other bars than the ones it recorded (rt44 IB1-IB3). Each attack asserts the
refusal (exit 2 naming the field); each rule keeps an honest control."""

# ruff: noqa: F811
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.test_benchimport import BENCH
from tests.conformance.test_red_team import FIGURE, honest  # noqa: F401
from tt_conformance.bars import file_digest
from tt_conformance.cli import conformance as cli
from tt_conformance.matrix import tier_of
from tt_conformance.report import load_report
from tt_conformance.writers import write_report


def _bench(tmp_path: Path, **fields: Any) -> Path:
    data = {**BENCH, "model_id": "org/model-a", "device": "T3K", **fields}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    return path


def _import(report: Path, bench: Path, *flags: str) -> int:
    return cli.main(["import-bench", str(bench), "--report", str(report), *flags])


def test_token_lengths_the_result_does_not_record_are_not_taken_from_flags(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 100/100 result, its token totals deleted: --input-len/--output-len 128 would file it
    as i128o128. The shape is the result's own, a flag may only restate it."""
    report = write_report(honest(), tmp_path / "run").json
    stripped = _bench(tmp_path, total_input_tokens=None, total_output_tokens=None)
    assert _import(report, stripped, "--input-len", "128", "--output-len", "128") == 2
    err = capsys.readouterr().err
    assert "field 'total_input_tokens'" in err and "--input-len 128 cannot be confirmed" in err
    assert "ttft_median@i128o128c32" not in load_report(report).perf
    # Control: the full result, its lengths restated, is filed under its own shape.
    assert _import(report, _bench(tmp_path), "--input-len", "100", "--output-len", "100") == 0
    assert "ttft_median@i100o100c32" in load_report(report).perf


def test_an_uncapped_run_is_not_filed_at_a_concurrency_given_on_the_command_line(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """64 prompts at once (no max_concurrency): --concurrency 1 would file it as c1."""
    report = write_report(honest(), tmp_path / "run").json
    assert _import(report, _bench(tmp_path, max_concurrency=None), "--concurrency", "1") == 2
    assert "field 'max_concurrency'" in capsys.readouterr().err
    assert "ttft_median@i100o100c1" not in load_report(report).perf
    assert _import(report, _bench(tmp_path), "--concurrency", "32") == 0  # restated: filed


def _expectations(path: Path, reference: float) -> Path:
    path.write_text(json.dumps({
        "schema_version": 2, "kind": "tt-conformance-expectations", "model": "org/model-a",
        "device": "T3K", "perf_targets": {FIGURE: {"reference": reference,
                                                    "source": "published"}}}))  # fmt: skip
    return path


def test_import_bench_cannot_swap_the_bars_a_run_was_judged_by(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reference 100, 20 measured: functional. --expectations naming a file whose reference
    is 25 would re-judge the run complete."""
    own = _expectations(tmp_path / "e1.json", 100.0)
    other = _expectations(tmp_path / "e2.json", 25.0)
    run = honest(tps=20.0).replace(expectations_file=str(own), expectations_digest=file_digest(own))
    assert tier_of(run).tier == "functional"
    report = write_report(run, tmp_path / "run").json
    assert _import(report, _bench(tmp_path), "--expectations", str(other)) == 2
    err = capsys.readouterr().err
    assert "field 'perf_targets'" in err and f"{FIGURE}: recorded reference 100" in err
    after = load_report(report)
    assert after.tier is not None and after.tier.tier == "functional"
    # Control: the run's own file (or none) keeps its bars; the import goes through.
    assert _import(report, _bench(tmp_path), "--expectations", str(own)) == 0
    assert _import(report, _bench(tmp_path)) == 0
    kept = load_report(report)
    assert kept.tier is not None and kept.tier.tier == "functional"
    assert kept.perf_targets[0].reference == 100.0


def test_import_bench_refuses_an_inconsistent_report(
    honest: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A report whose stored tier was edited is not amended (and so laundered) by an import."""
    report = write_report(honest(tps=20.0), tmp_path / "run").json
    data = json.loads(report.read_text())
    data["tier"]["tier"] = "complete"
    report.write_text(json.dumps(data))
    assert _import(report, _bench(tmp_path)) == 2
    assert "field 'tier.tier'" in capsys.readouterr().err
