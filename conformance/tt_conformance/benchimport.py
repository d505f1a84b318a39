"""Fold a ``vllm bench serve --save-result`` JSON into a report's perf section.

The result's keys (vLLM 0.26.0, vllm/benchmarks/serve.py): ``{mean,median,std,p99}_{ttft,tpot,
itl,e2el}_ms`` (the percentiles asked for with --metric-percentiles), ``output_throughput``,
``total_token_throughput``, ``completed``, ``total_input_tokens``, ``total_output_tokens``,
``max_concurrency``, ``num_prompts`` and, with --save-detailed, ``input_lens``, ``output_lens``,
``ttfts`` and ``itls``. Figures get the same names and identity keys as the harness's own
(``ttft_mean@i128o128c32``) with source "vllm-bench"; input/output lengths are the per-request
means unless given, concurrency is ``max_concurrency`` unless given. With detailed results the
inter-token gaps are checked for burst delivery like the harness's own streams.

Before anything is folded in, ``result_mismatches`` checks the result measured the report's
server: ``model_id`` (the ``--model`` given to the benchmark, or the server's first model) must
be the report's model, the concurrency must fit the server's capacity the report recorded
(``server.max_num_seqs`` x ``server.lanes``), and a ``device`` / ``mesh_device`` key (vLLM
writes none; ``--metadata device=N300`` adds one) must agree with the report.
``own_figures_replaced`` names the harness's own figures an import would overwrite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tt_conformance.names import normalize_device
from tt_conformance.perfshapes import figure_key
from tt_conformance.perfstats import StreamTiming, delivery_problems
from tt_conformance.report import Better, PerfFigure, Report

__all__ = [
    "BENCH_CHECK",
    "METRICS",
    "STATS",
    "BenchImportError",
    "BenchShape",
    "bench_delivery_problems",
    "bench_figures",
    "bench_shape",
    "own_figures_replaced",
    "result_mismatches",
]

BENCH_CHECK = "vllm bench serve"
METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p99")


class BenchImportError(ValueError):
    """The file is not a vllm bench serve result the harness can use."""


@dataclass(frozen=True)
class BenchShape:
    input_len: int
    output_len: int
    concurrency: int


def bench_shape(
    data: dict[str, Any],
    input_len: int | None = None,
    output_len: int | None = None,
    concurrency: int | None = None,
) -> BenchShape:
    completed = data.get("completed")
    if not isinstance(completed, int) or completed < 1:
        raise BenchImportError("'completed' is missing or 0: the benchmark served no request")

    def mean_len(key: str, given: int | None, flag: str) -> int:
        if given is not None:
            return given
        total = data.get(key)
        if not isinstance(total, (int, float)):
            raise BenchImportError(f"'{key}' is missing: pass {flag}")
        return round(total / completed)

    conc = concurrency if concurrency is not None else data.get("max_concurrency")
    if not isinstance(conc, int) or conc < 1:
        raise BenchImportError(
            "the result has no max_concurrency (the run was not capped): pass --concurrency"
        )
    return BenchShape(
        mean_len("total_input_tokens", input_len, "--input-len"),
        mean_len("total_output_tokens", output_len, "--output-len"),
        conc,
    )


def bench_delivery_problems(data: dict[str, Any]) -> list[str]:
    ttfts, itls, lens = data.get("ttfts"), data.get("itls"), data.get("output_lens")
    if not (isinstance(ttfts, list) and isinstance(itls, list) and isinstance(lens, list)):
        return []
    streams = []
    for ttft, gaps, n in zip(ttfts, itls, lens, strict=False):
        if not isinstance(gaps, list) or not n:
            continue
        times = [ttft]
        for gap in gaps:
            times.append(times[-1] + gap)
        per_chunk = n / len(times)
        streams.append(StreamTiming(sent=0.0, chunks=tuple((t, per_chunk) for t in times)))
    return delivery_problems(streams, [])


def bench_figures(
    data: dict[str, Any], shape: BenchShape, flag: str | None = None
) -> dict[str, PerfFigure]:
    key = figure_key(shape.input_len, shape.output_len, shape.concurrency)
    out: dict[str, PerfFigure] = {}

    completed = data.get("completed")
    requests = completed if isinstance(completed, int) and not isinstance(completed, bool) else None

    def add(metric: str, stat: str, value: Any, unit: str, better: Better) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        if not math.isfinite(value):
            return
        name = f"{metric}_{stat}@{key}" if stat != "value" else f"{metric}@{key}"
        out[name] = PerfFigure(
            name=name, value=float(value), unit=unit, better=better, metric=metric, stat=stat,
            input_len=shape.input_len, output_len=shape.output_len,
            concurrency=shape.concurrency, source="vllm-bench", check=BENCH_CHECK, flag=flag,
            samples=None if metric == "itl" else requests,  # the file does not count ITL gaps
        )  # fmt: skip

    for metric in METRICS:
        for stat in STATS:
            add(metric, stat, data.get(f"{stat}_{metric}_ms"), "ms", "lower")
    for stat in STATS:
        tpot = data.get(f"{stat}_tpot_ms")
        if isinstance(tpot, (int, float)) and tpot > 0:
            add("tps_user", stat, 1000.0 / tpot, "tok/s/user", "higher")
    median_tpot = data.get("median_tpot_ms")
    if isinstance(median_tpot, (int, float)) and median_tpot > 0:
        # TT's t/s: t/s/u x batch (the bench's max concurrency), as the harness computes it.
        add("tt_tps", "value", 1000.0 / median_tpot * shape.concurrency, "tok/s", "higher")
    add("output_throughput", "value", data.get("output_throughput"), "tok/s", "higher")
    add("request_throughput", "value", data.get("request_throughput"), "req/s", "higher")
    if not any(name.startswith(("ttft", "tpot")) for name in out):
        raise BenchImportError(
            "no TTFT/TPOT figures in the file: is it a `vllm bench serve --save-result` JSON?"
        )
    return out


def result_mismatches(
    data: dict[str, Any], report: Report, shape: BenchShape, concurrency_given: int | None = None
) -> list[str]:
    """Why the result cannot be figures of the report's run (empty: it can); each problem names
    the field and both values. ``concurrency_given`` is --concurrency, when passed."""
    problems: list[str] = []
    model = data.get("model_id")
    if not isinstance(model, str) or not model:
        problems.append(
            f"field 'model_id': missing, so the result cannot be checked against the report's "
            f"model {report.model!r}"
        )
    elif model != report.model:
        problems.append(
            f"field 'model_id': the result measured {model!r}, the report is for {report.model!r}"
        )
    measured = data.get("max_concurrency")
    if (
        concurrency_given is not None
        and isinstance(measured, int)
        and not isinstance(measured, bool)
        and measured != concurrency_given
    ):
        # Relabelling would file the figures under a shape that was not measured.
        problems.append(
            f"--concurrency {concurrency_given} contradicts the result's field "
            f"'max_concurrency': {measured}"
        )
    server = report.server
    capacity = server.max_num_seqs * server.lanes
    if shape.concurrency > capacity:
        # More concurrent requests than the server runs at once: queueing, not its serving.
        where = "--concurrency" if concurrency_given is not None else "field 'max_concurrency'"
        problems.append(
            f"{where}: {shape.concurrency} exceeds the server's capacity in the report, "
            f"{capacity} (server.max_num_seqs {server.max_num_seqs} x server.lanes "
            f"{server.lanes})"
        )
    # An emulated report's server names the mesh it emulates (mesh_device) while its device is
    # "emulated": each key is compared with its own counterpart.
    for key, ours in (("device", report.device), ("mesh_device", server.mesh_device)):
        theirs = data.get(key)
        if theirs is None or theirs == "":
            continue
        ours = ours if ours is not None else report.device
        if _device(str(theirs)) != _device(ours):
            problems.append(f"field '{key}': the result ran on {theirs!r}, the report on {ours!r}")
    return problems


def _device(name: str) -> str:
    try:
        return normalize_device(name)
    except ValueError:
        return name.strip().lower()  # not a known name: compared as written


def own_figures_replaced(report: Report, figures: dict[str, PerfFigure]) -> list[str]:
    """Keys of the harness's own figures (source "harness") that ``figures`` would overwrite; an
    earlier import's figures may be replaced by a new import."""
    return sorted(
        name for name in figures if name in report.perf and report.perf[name].source == "harness"
    )
