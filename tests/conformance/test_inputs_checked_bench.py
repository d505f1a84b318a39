"""import-bench checks its inputs (issue 32, item 6): a `vllm bench serve` result is folded into a
report only when it measured that report's server, and never over the harness's own figures
without --replace-own. Scenario: the tt-reference-llama emulated run (max_num_seqs 8, one lane,
the harness's own 128/128@8 figures) and a Llama-3.1-70B result at concurrency 32."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.test_benchimport import BENCH
from tt_conformance.cli import conformance as cli
from tt_conformance.report import load_report
from tt_conformance.writers import write_report

MODEL = "tt-reference-llama"
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
OWN = ("ttft_mean@i128o128c8", "output_throughput@i128o128c8")


def _run(make_report: Any, tmp_path: Path, lanes: int = 1) -> Path:
    report = make_report(
        {"m::a": "pass"},
        model=MODEL,
        device="emulated",
        perf={OWN[0]: (50.0, "ms", "lower"), OWN[1]: (100.0, "tok/s", "higher")},
    )
    server = report.server.model_copy(
        update={"max_num_seqs": 8, "lanes": lanes, "mesh_device": "T3K"}
    )
    return write_report(report.replace(server=server), tmp_path / "run").json


def _bench(tmp_path: Path, **changes: Any) -> Path:
    # 100/100 @ 8 unless changed: fits the server, names no harness figure, says where it ran.
    path = tmp_path / "bench.json"
    fields = {**BENCH, "model_id": MODEL, "max_concurrency": 8, "device": "emulated", **changes}
    path.write_text(json.dumps(fields))
    return path


def _refused(capsys: pytest.CaptureFixture[str], report: Path, *args: str) -> str:
    before = report.read_bytes()
    assert cli.main(["import-bench", *args, "--report", str(report)]) == cli.EXIT_BAD_INPUT
    assert report.read_bytes() == before  # nothing folded in
    return capsys.readouterr().err


def test_a_result_for_another_model_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _run(make_report, tmp_path)
    err = _refused(capsys, report, str(_bench(tmp_path, model_id=LLAMA_70B)))
    assert (
        f"field 'model_id': the result measured '{LLAMA_70B}', the report is for '{MODEL}'" in err
    )
    no_model = {k: v for k, v in BENCH.items() if k != "model_id"}
    (tmp_path / "bench.json").write_text(json.dumps({**no_model, "max_concurrency": 8}))
    assert "field 'model_id': missing" in _refused(capsys, report, str(tmp_path / "bench.json"))


def test_a_concurrency_above_the_servers_capacity_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _run(make_report, tmp_path)
    err = _refused(capsys, report, str(_bench(tmp_path, max_concurrency=32)))
    assert (
        "field 'max_concurrency': 32 exceeds the server's capacity in the report, 8 "
        "(server.max_num_seqs 8 x server.lanes 1)" in err
    )
    # Relabelling the measured concurrency is refused too.
    err = _refused(capsys, report, str(_bench(tmp_path, max_concurrency=32)), "--concurrency", "8")
    assert "--concurrency 8 contradicts the result's field 'max_concurrency': 32" in err
    # Four lanes of 8 serve 32 at once.
    lanes4 = _run(make_report, tmp_path / "lanes", lanes=4)
    bench = str(_bench(tmp_path, max_concurrency=32))
    assert cli.main(["import-bench", bench, "--report", str(lanes4)]) == cli.EXIT_OK
    assert load_report(lanes4).perf["ttft_mean@i100o100c32"].source == "vllm-bench"


def test_a_result_from_another_device_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _run(make_report, tmp_path)
    err = _refused(capsys, report, str(_bench(tmp_path, device="N300")))
    assert "field 'device': the result ran on 'N300', the report on 'emulated'" in err
    err = _refused(capsys, report, str(_bench(tmp_path, mesh_device="n300")))
    assert "field 'mesh_device': the result ran on 'n300', the report on 'T3K'" in err
    # Spelled differently, the same device and mesh (`--metadata device=... mesh_device=...`).
    bench = str(_bench(tmp_path, device="Emulated", mesh_device="t3k"))
    assert cli.main(["import-bench", bench, "--report", str(report)]) == cli.EXIT_OK


def test_the_harness_own_figures_are_replaced_only_when_asked(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _run(make_report, tmp_path)
    bench = str(_bench(tmp_path, total_input_tokens=64 * 128, total_output_tokens=64 * 128))
    err = _refused(capsys, report, bench)
    assert "would overwrite 2 of the harness's own figures" in err
    assert f"{OWN[1]}, {OWN[0]}; pass --replace-own" in err  # sorted

    assert cli.main(["import-bench", bench, "--report", str(report), "--replace-own"]) == 0
    amended = load_report(report)
    assert {amended.perf[name].source for name in OWN} == {"vllm-bench"}
    assert amended.perf[OWN[0]].value == BENCH["mean_ttft_ms"]
    assert any(
        "replaced by vllm bench serve figures" in w and OWN[0] in w for w in amended.warnings
    )
    # Imported figures are not the harness's own: a later import may replace them.
    assert cli.main(["import-bench", bench, "--report", str(report)]) == cli.EXIT_OK


def test_the_issue_scenario_names_every_problem(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Llama-3.1-70B at concurrency 32 into the tt-reference-llama emulated report.
    report = _run(make_report, tmp_path)
    bench = str(_bench(tmp_path, model_id=LLAMA_70B, max_concurrency=32))
    err = _refused(capsys, report, bench, "--input-len", "128", "--output-len", "128")
    assert "field 'model_id'" in err and "field 'max_concurrency': 32 exceeds" in err
