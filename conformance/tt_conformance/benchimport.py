"""Fold a ``vllm bench serve --save-result`` JSON into a report's perf section.

The result's keys (vLLM 0.26.0, vllm/benchmarks/serve.py): ``{mean,median,std,p99}_{ttft,tpot,
itl,e2el}_ms`` (the percentiles asked for with --metric-percentiles), ``output_throughput``,
``total_token_throughput``, ``completed``, ``total_input_tokens``, ``total_output_tokens``,
``max_concurrency``, ``num_prompts`` and, with --save-detailed, ``input_lens``, ``output_lens``,
``ttfts`` and ``itls``. Figures get the same names and identity keys as the harness's own
(``ttft_mean@i128o128c32``) with source "vllm-bench"; input/output lengths are the per-request
means and the concurrency is ``max_concurrency``: a result without these fields is refused
(``--input-len`` / ``--output-len`` / ``--concurrency`` may only restate them). With detailed
results the inter-token gaps are checked for burst delivery like the harness's own streams.

Before anything is folded in, ``result_mismatches`` checks the result measured the report's
server: ``model_id`` (the ``--model`` given to the benchmark, or the server's first model) must
be the report's model, the concurrency must fit the server's capacity the report recorded
(``server.max_num_seqs`` x ``server.lanes``), a ``--input-len`` / ``--output-len`` must be the
result's own per-request token totals (within `SHAPE_TOLERANCE`), its ``date`` must be within
`MAX_HOURS_APART` of the run, and its ``device`` key must name the report's device: vLLM writes
none, so ``vllm bench serve --metadata device=N300`` (``device=emulated-T3K`` for an emulated
run) establishes it; without it the numbers could come from any machine, hardware or emulated.
A ``mesh_device`` key, when present, must agree with the report's too.
``own_figures_replaced`` names the harness's own figures an import would overwrite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from tt_conformance.names import EMULATED_DEVICE, is_emulated, normalize_device
from tt_conformance.perfshapes import figure_key
from tt_conformance.perfstats import StreamTiming, delivery_problems
from tt_conformance.report import Better, PerfFigure, Report

__all__ = [
    "BENCH_CHECK",
    "MAX_HOURS_APART",
    "METRICS",
    "SHAPE_TOLERANCE",
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
# A given --input-len / --output-len may differ from the result's per-request mean by this much
# (re-tokenised prompts move by a token or two), never relabel a 100-token run as 128.
SHAPE_TOLERANCE = 0.05
# vLLM writes the result's date in the benchmark host's local time, zone unknown (+-14 h): a
# result more than a day from the run is another session, maybe another build.
MAX_HOURS_APART = 24


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
    if not isinstance(completed, int) or isinstance(completed, bool) or completed < 1:
        raise BenchImportError("'completed' is missing or 0: the benchmark served no request")

    # A shape is filed from what the result itself records: a flag may restate a recorded
    # field (result_mismatches holds it to it) but never stand in for a missing one, or a
    # 100-token run could be filed as i128 and an uncapped one as c1.
    def mean_len(key: str, given: int | None, flag: str) -> int:
        total = data.get(key)
        if isinstance(total, bool) or not isinstance(total, (int, float)):
            said = f" ({flag} {given} cannot be confirmed)" if given is not None else ""
            raise BenchImportError(
                f"field '{key}': missing, so the result's token lengths are unknown{said}"
            )
        return given if given is not None else round(total / completed)

    measured = data.get("max_concurrency")
    if isinstance(measured, bool) or not isinstance(measured, int) or measured < 1:
        said = f" (--concurrency {concurrency} cannot be confirmed)" if concurrency else ""
        raise BenchImportError(
            "field 'max_concurrency': missing, so the run was not capped and its concurrency is "
            f"unknown{said}; rerun vllm bench serve with --max-concurrency"
        )
    conc = concurrency if concurrency is not None else measured
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
    data: dict[str, Any],
    report: Report,
    shape: BenchShape,
    concurrency_given: int | None = None,
    input_given: int | None = None,
    output_given: int | None = None,
) -> list[str]:
    """Why the result cannot be figures of the report's run (empty: it can); each problem names
    the field and both values. ``*_given`` are --concurrency, --input-len, --output-len."""
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
    problems += _shape_relabelled(data, input_given, output_given)
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
    problems += _date_apart(data, report)
    problems += _device_unestablished(data, report)
    return problems


def _shape_relabelled(
    data: dict[str, Any], input_given: int | None, output_given: int | None
) -> list[str]:
    completed = data.get("completed")
    if not isinstance(completed, int) or isinstance(completed, bool) or completed < 1:
        return []  # bench_shape refuses it
    out = []
    for flag, given, key in (
        ("--input-len", input_given, "total_input_tokens"),
        ("--output-len", output_given, "total_output_tokens"),
    ):
        total = data.get(key)
        if given is None or isinstance(total, bool) or not isinstance(total, (int, float)):
            continue
        mean = total / completed
        if abs(given - mean) > max(1.0, SHAPE_TOLERANCE * given):
            out.append(
                f"{flag} {given} contradicts the result's field '{key}': {total} over "
                f"{completed} requests is {mean:.4g} per request"
            )
    return out


def _date_apart(data: dict[str, Any], report: Report) -> list[str]:
    raw = data.get("date")
    if raw is None or raw == "":
        return ["field 'date': missing, so the result cannot be placed next to the run"]
    try:
        when = datetime.strptime(str(raw), "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)
        start, end = (_utc(report.started_at), _utc(report.finished_at))
    except ValueError:
        return [
            f"field 'date': {raw!r} is not vllm bench serve's YYYYMMDD-HHMMSS (or the report's "
            "started_at / finished_at is not ISO 8601), so the result cannot be placed next to "
            "the run"
        ]
    slack = timedelta(hours=MAX_HOURS_APART)
    if start - slack <= when <= end + slack:
        return []
    return [
        f"field 'date': the result is dated {raw}, more than {MAX_HOURS_APART} h from the run "
        f"({report.started_at} .. {report.finished_at}): another session, not this run's server"
    ]


def _utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _device_unestablished(data: dict[str, Any], report: Report) -> list[str]:
    """The result must say where it ran (its ``device`` key), and agree with the report."""
    problems = []
    theirs = data.get("device")
    if theirs is None or theirs == "":
        problems.append(
            f"field 'device': missing, so nothing says the numbers were measured on "
            f"{report.device!r} (hardware or emulated); run vllm bench serve with --metadata "
            f"device={report.device}"
        )
    elif not _same_device(str(theirs), report.device):
        problems.append(
            f"field 'device': the result ran on {theirs!r}, the report on {report.device!r}"
        )
    # An emulated report's server names the mesh it emulates (mesh_device) while its device is
    # "emulated-<mesh>": the mesh key is compared with that.
    mesh = data.get("mesh_device")
    ours = report.server.mesh_device or report.device
    if mesh not in (None, "") and _device(str(mesh)) != _device(ours):
        problems.append(f"field 'mesh_device': the result ran on {mesh!r}, the report on {ours!r}")
    return problems


def _same_device(theirs: str, ours: str) -> bool:
    a, b = _device(theirs), _device(ours)
    # A bare "emulated" names no mesh: it matches any emulated report (mesh_device checks it).
    return a == b or (a == EMULATED_DEVICE and is_emulated(b))


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
