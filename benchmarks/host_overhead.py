"""Host overhead per decode step on the timing-only emulated device, against the device limit.

The timing-only device (``TT_EMULATED_TIMING_ONLY=1``, docs/EMULATED_MESH.md) makes a model call
cost the configured device step time S and almost no host CPU, so what a decode step costs
beyond S is host time: the plugin's and vLLM's. One run sweeps batch 1, 8, 32, 128, 256 and
lane-DP 4x32, S = 5, 17 and 40 ms, async decode off and on, serving the bundled reference model
with device sampling. One server per (batch, async); S changes through ``TT_EMULATED_STEP_FILE``
without a restart.

Per point, the headline figures come from a **steady window**: ``batch`` concurrent greedy
requests long enough to decode for ~2 s, measured from 25 % to 85 % of their decode, when every
request is decoding (no intake, prefill, first-token burst or finish in the window), best of
``--repeats``. In it: the decode step time is the engine's mean period between consecutive
decode steps (``tt_decode_interval_seconds_total`` / ``tt_decode_intervals_total``); the ratio
to the device-bound limit is S / step; ``host_ms`` = step - S (without async all of it is host time
nothing overlaps; with async it is the host time the overlap did not hide). The plugin's phase times
(``tt_host_seconds_total`` on /metrics, observability/host_phases.py) per decode step give
``plugin_ms`` (scheduling policy, state update, input building, sampling route, output building)
and ``vllm_ms`` (vLLM's scheduling pass and update_from_output in the engine); those are wall
time, which grows whenever the engine thread is descheduled (the API server, the client and the
device thread share the cores). ``plugin_cpu_ms`` / ``vllm_cpu_ms`` are the engine thread's CPU
time of the same parts (``tt_host_cpu_seconds_total``; the plugin's also holds the device-call
hand-off): what the host code itself costs. ``cpu_budget`` is where the machine's CPU went over
the same window: per decode step, the engine-core process (all its threads: engine, device call,
vLLM's I/O threads), the API server process and this client, and the fraction of the cores busy.

The **whole run** is measured too: a batch of N+1 tokens (``--tokens``), its engine period from
the third decode on (``run_step_ms``: the arrival of the batch and its first tokens included)
and the client's (T(N+1 tokens) - T(1 token)) / N (``client_step_ms``: it also carries the
client's and the API server's noise on this shared machine).

The same decode path is also measured with the engine alone (``engine_only.py``: vLLM's engine in
one process and thread, no API server, no client competing for the cores), batch 1, 32, 128
and 256 at 5 ms steps: what the plugin's own host code costs per decode step.

At the run's start and end it records the machine's state (``machine_slowdown``,
``idle_slowdown.after_sleep``): how much slower a fixed Python workload runs right after a 5, 17
and 40 ms sleep than back to back. This shared VM slows any code after a wait, by how busy its
other tenants are, and the 17 and 40 ms rows move with it.

Then ``vllm bench serve`` (random dataset, 128 in / 128 out, 32 prompts) runs against a batch-32
async server at 17 ms steps and its TTFT/TPOT/ITL/E2EL percentiles are recorded.

    python benchmarks/host_overhead.py [--quick] [--json FILE]

``--json`` is rewritten (atomically) after every part, so a run that stops keeps what it had
measured. Servers and ``vllm bench serve`` run on this interpreter's vLLM, never a ``vllm`` found
on PATH: the env's python runs it without the env activated.

Compare ratios measured in one run: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families
from tabulate import tabulate

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "plugin"))

from benchmarks.cpu_budget import CpuSnapshot, per_step  # noqa: E402
from benchmarks.idle_slowdown import after_sleep  # noqa: E402
from benchmarks.results import write_json  # noqa: E402
from vllm_tt_plugin.emulation.mesh import STEP_FILE_POLL_S  # noqa: E402
from vllm_tt_plugin.emulation.server import (  # noqa: E402
    BUNDLED_MODEL,
    EmulatedServer,
    vllm_command,
)
from vllm_tt_plugin.observability.host_phases import PLUGIN_PHASES, VLLM_PHASES, Phase  # noqa: E402

PROMPT = "1 2 3 4"
LANES_VARIANT = (
    "TTReferenceLlamaForCausalLM="
    "vllm_tt_plugin.test_models.reference_llama:ReferenceLlamaLanesForCausalLM"
)


@dataclass(frozen=True)
class Config:
    """One server: ``lanes`` in-process lanes of ``seqs`` sequences and ``api_servers`` API
    server processes (vLLM's default for ``--data-parallel-size N`` is N, decided by its CLI
    before the plugin folds N into lanes)."""

    seqs: int
    lanes: int = 1
    api_servers: int | None = None  # None: vLLM's default

    @property
    def api_server_count(self) -> int:
        return self.lanes if self.api_servers is None else self.api_servers

    @classmethod
    def parse(cls, text: str) -> Config:
        """``B``, ``LxS`` (L lanes of S) or ``LxS/A`` (with A API servers)."""
        shape, _, api = text.partition("/")
        lanes, _, seqs = shape.rpartition("x")
        return cls(int(seqs), int(lanes or 1), int(api) if api else None)


def label(batch: int, lanes: int, api_servers: int | None = None) -> str:
    """A row's batch as the tables show it: ``128``, ``4x32`` or ``4x32/1`` (one API server
    where vLLM's default is one per lane)."""
    if lanes == 1:
        return str(batch)
    text = f"{lanes}x{batch // lanes}"
    return text if api_servers in (None, lanes) else f"{text}/{api_servers}"


FULL_CONFIGS = tuple(Config.parse(c) for c in ("1", "8", "32", "128", "256", "4x32", "4x32/1"))
QUICK_CONFIGS = (Config(32), Config(128))
FULL_STEPS_MS = (5.0, 17.0, 40.0)
QUICK_STEPS_MS = (5.0, 17.0)
SERVE_STEP_MS = 17.0
SERVE_PROMPTS = 32
PERCENTILES = "50,90,99"
BUDGET_DECODE_S = 2.0  # a steady window's batch decodes about this long
MAX_BUDGET_TOKENS = 480  # within --max-model-len 512 with the prompt
MIN_TOKENS = 3  # --tokens: the whole-run batch's decode steps give at least one period


@dataclass
class Row:
    batch: int  # rows per step: lanes x seqs per lane
    lanes: int
    api_servers: int  # vLLM API server processes
    step_ms: float
    async_: bool
    decode_step_ms: float  # the engine's mean decode step period, steady window (steady_window)
    run_step_ms: float  # the same over a whole N+1-token batch: its start and end included
    client_step_ms: float  # (T(N+1 tokens) - T(1 token)) / N seen by the client
    plugin_ms: float
    vllm_ms: float
    plugin_cpu_ms: float  # engine-thread CPU time per decode step (tt_host_cpu_seconds_total)
    vllm_cpu_ms: float
    model_call_ms: float  # the model call's host side (submit) and read-back wait
    phases_ms: dict[str, float]
    # CPU ms per decode step by process (engine core, API server, this client) and the cores'
    # busy fraction, over the steady window
    cpu_budget: dict[str, float]

    @property
    def ratio_to_limit(self) -> float:
        return self.step_ms / self.decode_step_ms

    @property
    def host_ms(self) -> float:
        return self.decode_step_ms - self.step_ms

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["async"] = out.pop("async_")
        out.update(
            ratio_to_limit=round(self.ratio_to_limit, 4),
            host_ms=round(self.host_ms, 3),
            per_row_host_us=round(1000 * self.host_ms / self.batch, 2),
        )
        return out


# --------------------------------------------------------------------------- measurement


def timed_batch(url: str, batch: int, max_tokens: int) -> float:
    body = {
        "model": "ref",
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }

    def one(_: int) -> None:
        r = requests.post(f"{url}/v1/completions", json=body, timeout=900)
        r.raise_for_status()

    start = time.perf_counter()
    with cf.ThreadPoolExecutor(batch) as pool:
        list(pool.map(one, range(batch)))
    return time.perf_counter() - start


def scrape(url: str) -> dict[tuple[str, ...], float]:
    """tt_host_seconds_total by (kind, phase) and tt_steps_total by (kind,)."""
    text = requests.get(f"{url}/metrics", timeout=30).text
    out: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "tt_host_seconds_total":
                key = ("host", s.labels["kind"], s.labels["phase"])
            elif s.name == "tt_host_cpu_seconds_total":
                key = ("cpu", s.labels["kind"], s.labels["part"])
            elif s.name == "tt_steps_total":
                key = ("steps", s.labels["kind"])
            elif s.name in ("tt_decode_interval_seconds_total", "tt_decode_intervals_total"):
                key = (s.name,)
            else:
                continue
            out[key] = out.get(key, 0.0) + s.value
    return out


def settled_scrape(url: str) -> dict[tuple[str, ...], float]:
    time.sleep(0.6)  # the engine publishes its phase table every 0.25 s
    return scrape(url)


def interval_ms(before: dict, after: dict) -> float | None:
    """Mean wall time between consecutive decode steps (engine side)."""
    seconds = after.get(("tt_decode_interval_seconds_total",), 0.0) - before.get(
        ("tt_decode_interval_seconds_total",), 0.0
    )
    count = after.get(("tt_decode_intervals_total",), 0.0) - before.get(
        ("tt_decode_intervals_total",), 0.0
    )
    return 1000.0 * seconds / count if count else None


def server_for(config: Config, async_on: bool, step_file: Path, log: Path) -> EmulatedServer:
    seqs, lanes = config.seqs, config.lanes
    args = [
        "--max-num-seqs",
        str(seqs),
        "--max-model-len",
        "512",
        "--async-scheduling" if async_on else "--no-async-scheduling",
    ]
    env = {
        "TT_EMULATED_TIMING_ONLY": "1",
        "TT_EMULATED_STEP_FILE": str(step_file),
        "TT_REFERENCE_MAX_TOKENS_ALL_USERS": str(max(8192, seqs * 512)),
    }
    mesh = "N150"
    if lanes > 1:
        args += ["--data-parallel-size", str(lanes)]
        if config.api_servers is not None:
            args += ["--api-server-count", str(config.api_servers)]
        env["TT_MODEL_CLASS_OVERRIDES"] = LANES_VARIANT
        mesh = "TG"
    return EmulatedServer(
        model=BUNDLED_MODEL,
        mesh_device=mesh,
        tt_options={"sample_on_device_mode": "all"},
        vllm_args=args,
        env=env,
        served_model_name="ref",
        log_path=log,
    )


def set_step(step_file: Path, step_ms: float) -> None:
    tmp = step_file.with_suffix(".tmp")
    tmp.write_text(f"{step_ms:g}\n")
    tmp.replace(step_file)
    time.sleep(2 * STEP_FILE_POLL_S + 0.05)


@dataclass(frozen=True)
class Window:
    """One steady window of a point: every request decoding, no intake, prefill or response."""

    period: float  # the engine's mean decode step period over the window (ms)
    phases: dict[str, float]  # ms per decode step by phase
    cpu: tuple[float, float]  # plugin, vLLM engine-thread CPU ms per decode step
    budget: dict[str, float]  # CPU ms per decode step by process; the cores' busy fraction


def measure_server(
    config: Config, async_on: bool, steps_ms: Sequence[float], args: argparse.Namespace,
    workdir: Path,
) -> Iterator[Row]:  # fmt: skip
    name = f"{config.lanes}x{config.seqs}-api{config.api_server_count}-async{int(async_on)}"
    step_file = workdir / f"step-{name}.ms"
    step_file.write_text(f"{steps_ms[0]:g}\n")
    batch = config.seqs * config.lanes
    log = workdir / f"server-{name}.log"
    server = server_for(config, async_on, step_file, log)
    with server:
        timed_batch(server.url, batch, 4)  # warm
        for step_ms in steps_ms:
            set_step(step_file, step_ms)
            timed_batch(server.url, batch, 2)
            run: tuple[float, float] | None = None  # whole run: (period, client step) ms
            steady: Window | None = None
            for _ in range(args.repeats):
                short = timed_batch(server.url, batch, 1)
                before = settled_scrape(server.url)
                long = timed_batch(server.url, batch, args.tokens + 1)
                after = settled_scrape(server.url)
                client = (long - short) / args.tokens * 1000.0
                period = interval_ms(before, after) or client
                if run is None or period < run[0]:
                    run = (period, client)
                window = steady_window(server, batch, period, short)
                if steady is None or window.period < steady.period:
                    steady = window
            assert run is not None and steady is not None
            phases, (plugin_cpu, vllm_cpu) = steady.phases, steady.cpu
            yield Row(
                batch=batch,
                lanes=config.lanes,
                api_servers=config.api_server_count,
                step_ms=step_ms,
                async_=async_on,
                decode_step_ms=round(steady.period, 3),
                run_step_ms=round(run[0], 3),
                client_step_ms=round(run[1], 3),
                plugin_ms=round(sum(phases[p.value] for p in PLUGIN_PHASES), 4),
                vllm_ms=round(sum(phases[p.value] for p in VLLM_PHASES), 4),
                plugin_cpu_ms=round(plugin_cpu, 4),
                vllm_cpu_ms=round(vllm_cpu, 4),
                model_call_ms=round(
                    phases[Phase.MODEL_SUBMIT.value] + phases[Phase.READ_BACK.value], 4
                ),
                phases_ms={k: round(v, 4) for k, v in phases.items()},
                cpu_budget=steady.budget,
            )


def steady_window(
    server: EmulatedServer, batch: int, period_ms: float, first_token_s: float
) -> Window:
    """``batch`` requests long enough to decode for ~2 s, measured over the middle of their
    decode (from 25 % to 85 %): every request in decode, no intake, prefill or response in the
    window. The engine's phase table and decode periods come from one publication each side
    (published together every 0.25 s), so per-step figures divide by the window's own decode
    periods; the processes' CPU (``cpu_budget``) is read at the same moments."""
    assert server.pid is not None
    tokens = min(MAX_BUDGET_TOKENS, max(64, int(BUDGET_DECODE_S * 1000.0 / period_ms)))
    decode_s = tokens * period_ms / 1000.0
    worker = threading.Thread(target=timed_batch, args=(server.url, batch, tokens))
    start = time.perf_counter()
    worker.start()
    time.sleep(max(0.0, first_token_s + 0.25 * decode_s - (time.perf_counter() - start)))
    cpu_before, began = CpuSnapshot.take(server.pid), time.perf_counter()
    before = scrape(server.url)
    time.sleep(0.6 * decode_s)
    after = scrape(server.url)
    cpu_after, ended = CpuSnapshot.take(server.pid), time.perf_counter()
    worker.join()
    periods = after.get(("tt_decode_intervals_total",), 0.0) - before.get(
        ("tt_decode_intervals_total",), 0.0
    )
    period = interval_ms(before, after)
    if period is None or periods < 1:
        raise RuntimeError(f"no decode step published in the steady window of batch {batch}")
    phases = {
        p.value: 1000.0
        * (
            after.get(("host", "decode", p.value), 0.0)
            - before.get(("host", "decode", p.value), 0.0)
        )
        / periods
        for p in Phase
    }
    cpu = tuple(
        1000.0
        * (after.get(("cpu", "decode", part), 0.0) - before.get(("cpu", "decode", part), 0.0))
        / periods
        for part in ("plugin", "vllm")
    )
    budget = per_step(cpu_before, cpu_after, (ended - began) * 1000.0 / period, ended - began)
    return Window(period, phases, (cpu[0], cpu[1]), budget)


# --------------------------------------------------------------------------- engine alone
ENGINE_ONLY_BATCHES = (1, 32, 128, 256)
# (device step ms, async): 0 ms, the host code back to back on warm caches; 5 ms, the thread
# sleeps through each device step as on hardware and resumes on cold caches (the same code then
# costs 1.5-2x here); 5 ms async, whether the host keeps up with the device when nothing else
# (API server, client) shares the cores.
ENGINE_ONLY_POINTS = ((0.0, False), (5.0, False), (5.0, True))
# Continuous batching (engine_only.py --churn): rows finish and arrive every few steps, so the
# decode steps include layout changes (slots taken and freed, compaction), at 0 ms steps.
ENGINE_ONLY_CHURN_BATCHES = (32, 128, 256)


def engine_only(
    batch: int, step_ms: float, async_on: bool, log: Path, churn: bool = False
) -> dict[str, Any]:
    """One ``engine_only.py`` point in a fresh interpreter (it sets its own environment)."""
    cmd = [sys.executable, str(REPO / "benchmarks" / "engine_only.py"), "--batch", str(batch),
           "--step-ms", f"{step_ms:g}"]  # fmt: skip
    if async_on:
        cmd.append("--async-scheduling")
    if churn:
        cmd.append("--churn")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    log.write_text(proc.stdout + proc.stderr)
    for line in proc.stdout.splitlines():
        if line.startswith("ENGINE_ONLY "):
            row: dict[str, Any] = json.loads(line.removeprefix("ENGINE_ONLY "))
            return row
    raise RuntimeError(f"engine_only.py --batch {batch} failed (exit {proc.returncode}): {log}")


# --------------------------------------------------------------------------- vllm bench serve


def serve_command(result_dir: Path, url: str) -> list[str]:
    """The ``vllm bench serve`` run, by this interpreter's vLLM (never the ``vllm`` on PATH)."""
    return vllm_command(
        "bench", "serve", "--backend", "openai", "--base-url", url, "--model", "ref",
        "--tokenizer", str(BUNDLED_MODEL), "--dataset-name", "random",
        "--random-input-len", "128", "--random-output-len", "128",
        "--num-prompts", str(SERVE_PROMPTS), "--ignore-eos",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", PERCENTILES,
        "--save-result", "--result-dir", str(result_dir), "--result-filename", "serve.json",
    )  # fmt: skip


def bench_serve(workdir: Path) -> dict[str, Any]:
    """``vllm bench serve`` against a batch-32 async timing-only server at 17 ms steps."""
    step_file = workdir / "step-serve.ms"
    step_file.write_text(f"{SERVE_STEP_MS:g}\n")
    server = server_for(Config(32), True, step_file, workdir / "server-serve.log")
    result_dir = workdir / "serve"
    result_dir.mkdir(exist_ok=True)
    with server:
        proc = subprocess.run(
            serve_command(result_dir, server.url), capture_output=True, text=True, timeout=900
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"vllm bench serve failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    raw = json.loads((result_dir / "serve.json").read_text())
    if raw.get("completed") != SERVE_PROMPTS:  # it exits 0 even when every request failed
        raise RuntimeError(
            f"vllm bench serve completed {raw.get('completed')} of {SERVE_PROMPTS} requests:\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    keep = {
        k: v
        for k, v in raw.items()
        if k.split("_")[0] in ("mean", "median", "p50", "p90", "p99", "std")
        or k in ("completed", "duration", "output_throughput", "request_throughput")
    }
    return {"step_ms": SERVE_STEP_MS, "batch": 32, "async": True, **keep}


# --------------------------------------------------------------------------- main


def print_table(rows: list[Row]) -> None:
    table = [
        [
            label(r.batch, r.lanes, r.api_servers),
            f"{r.step_ms:g}",
            "on" if r.async_ else "off",
            f"{r.decode_step_ms:.2f}",
            f"{r.ratio_to_limit:.3f}",
            f"{r.host_ms:.2f}",
            f"{r.plugin_ms:.3f}",
            f"{r.vllm_ms:.3f}",
            f"{r.plugin_cpu_ms:.3f}",
            f"{r.vllm_cpu_ms:.3f}",
            f"{r.model_call_ms:.2f}",
            f"{r.run_step_ms:.2f}",
        ]
        for r in rows
    ]
    headers = ["batch", "step ms", "async", "decode step ms", "ratio to limit", "host ms",
               "plugin ms", "vllm ms", "plugin CPU ms", "vllm CPU ms",
               "model call ms", "run step ms"]  # fmt: skip
    print(tabulate(table, headers=headers, tablefmt="github"), flush=True)


def cpu(row: dict[str, Any], key: str) -> str:
    return "-" if row.get(key) is None else f"{row[key]:.3f}"  # absent before the CPU counter


def run_step(row: dict[str, Any]) -> str:
    return "-" if row.get("run_step_ms") is None else f"{row['run_step_ms']:.2f}"  # added 12-02


def markdown(doc: dict[str, Any]) -> str:
    """The JSON of a run as docs/BENCHMARKS.md's tables."""
    lines = [
        "| batch | device step ms | async | decode step ms | ratio to limit | host ms | plugin ms "
        "| vLLM ms | plugin CPU ms | vLLM CPU ms | model call ms | run step ms | client step ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        batch = label(r["batch"], r["lanes"], r.get("api_servers"))
        lines.append(
            f"| {batch} | {r['step_ms']:g} | {'on' if r['async'] else 'off'} "
            f"| {r['decode_step_ms']:.2f} | {r['ratio_to_limit']:.3f} | {r['host_ms']:.2f} "
            f"| {r['plugin_ms']:.3f} | {r['vllm_ms']:.3f} | {cpu(r, 'plugin_cpu_ms')} "
            f"| {cpu(r, 'vllm_cpu_ms')} | {r['model_call_ms']:.2f} "
            f"| {run_step(r)} | {r['client_step_ms']:.2f} |"
        )
    budgets = [r for r in doc["rows"] if r.get("cpu_budget")]
    if budgets:
        lines += [
            "",
            "| CPU budget: batch | device step ms | async | decode step ms | engine core CPU ms "
            "| API server CPU ms | client CPU ms | cores busy |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in budgets:
            b = r["cpu_budget"]
            batch = label(r["batch"], r["lanes"], r.get("api_servers"))
            lines.append(
                f"| {batch} | {r['step_ms']:g} | {'on' if r['async'] else 'off'} "
                f"| {r['decode_step_ms']:.2f} | {b['engine_cpu_ms']:.2f} "
                f"| {b['api_server_cpu_ms']:.2f} | {b['client_cpu_ms']:.2f} "
                f"| {b['cores_busy']:.2f} |"
            )
    alone = doc.get("engine_only")
    if alone:
        lines += [
            "",
            "| engine alone: batch | device step ms | async | decode step ms | ratio to limit "
            "| plugin ms | plugin CPU ms | vLLM ms | vLLM CPU ms | vLLM output processor ms "
            "| model call ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in alone:
            ratio = f"{r['step_ms'] / r['decode_step_ms']:.3f}" if r["step_ms"] else "-"
            batch = f"{r['batch']} churn" if r.get("churn") else str(r["batch"])
            lines.append(
                f"| {batch} | {r['step_ms']:g} | {'on' if r.get('async') else 'off'} "
                f"| {r['decode_step_ms']:.2f} | {ratio} "
                f"| {r['plugin_ms']:.3f} | {r['plugin_cpu_ms']:.3f} | {r['vllm_ms']:.3f} "
                f"| {r['vllm_cpu_ms']:.3f} | {cpu(r, 'vllm_output_processor_ms')} "
                f"| {r['model_call_ms']:.2f} |"
            )
    machine = doc.get("machine_slowdown")
    if machine:
        steps = list(machine["before"])
        lines += [
            "",
            "| machine: a fixed Python workload right after a sleep of S ms, x back to back "
            + "".join(f"| S = {s} ms " for s in steps)
            + "|",
            "|---" * (len(steps) + 1) + "|",
        ]
        for when in ("before", "after"):
            if machine.get(when):
                lines.append(
                    f"| {when} the run | "
                    + " | ".join(f"{machine[when][s]:.2f}" for s in steps)
                    + " |"
                )
    serve = doc.get("serve")
    if serve:
        lines += ["", "| vllm bench serve | mean | p50 | p90 | p99 |", "|---|---|---|---|---|"]
        for metric in ("ttft", "tpot", "itl", "e2el"):
            cells = [serve.get(f"{k}_{metric}_ms") for k in ("mean", "p50", "p90", "p99")]
            lines.append(
                f"| {metric.upper()} ms | "
                + " | ".join("-" if c is None else f"{c:.1f}" for c in cells)
                + " |"
            )
    return "\n".join(lines)


@dataclass
class Results:
    """What the run has measured so far, written to ``path`` (when given) after every part: a
    part that fails later (a server that does not start, ``vllm bench serve``) keeps the rest."""

    path: Path | None
    tokens: int
    repeats: int
    started: float = field(default_factory=time.monotonic)
    rows: list[Row] = field(default_factory=list)
    engine_only: list[dict[str, Any]] = field(default_factory=list)
    serve: dict[str, Any] | None = None
    machine: dict[str, dict[str, float]] = field(default_factory=dict)

    def doc(self) -> dict[str, Any]:
        """The run's JSON (the keys and order every earlier run's file has)."""
        return {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "tokens": self.tokens,
            "repeats": self.repeats,
            "rows": [r.as_json() for r in self.rows],
            "engine_only": self.engine_only,
            "serve": self.serve,
            "machine_slowdown": self.machine,
            "elapsed_s": round(time.monotonic() - self.started, 1),
        }

    def save(self) -> None:
        if self.path is not None:
            write_json(self.path, self.doc())


def run(
    results: Results, configs: Sequence[Config], steps_ms: Sequence[float],
    args: argparse.Namespace, workdir: Path,
) -> None:  # fmt: skip
    """Every part of the run in order, each saved into ``results`` as it finishes."""
    # How much this machine slows any code after a wait, at the run's start and end: the long
    # device steps' host figures move with it (docs/BENCHMARKS.md).
    results.machine["before"] = after_sleep()
    machine = json.dumps(results.machine["before"])
    print(f"machine, after a sleep (x back to back): {machine}", flush=True)
    results.save()
    for config in () if args.engine_only else configs:
        for async_on in (False, True):
            for row in measure_server(config, async_on, steps_ms, args, workdir):
                results.rows.append(row)
                print(json.dumps(row.as_json()), flush=True)
                results.save()
    if not args.no_engine_only:
        for batch in ENGINE_ONLY_BATCHES:
            for step_ms, async_on in ENGINE_ONLY_POINTS:
                log = workdir / f"engine-only-{batch}-{step_ms:g}-async{int(async_on)}.log"
                results.engine_only.append(engine_only(batch, step_ms, async_on, log))
                print("engine alone: " + json.dumps(results.engine_only[-1]), flush=True)
                results.save()
        for batch in ENGINE_ONLY_CHURN_BATCHES:
            log = workdir / f"engine-only-{batch}-churn.log"
            results.engine_only.append(engine_only(batch, 0.0, False, log, churn=True))
            print("engine alone: " + json.dumps(results.engine_only[-1]), flush=True)
            results.save()
    results.machine["after"] = after_sleep()
    machine = json.dumps(results.machine["after"])
    print(f"machine, after a sleep (x back to back): {machine}", flush=True)
    results.save()
    print()
    print_table(results.rows)
    if not args.no_serve and not args.engine_only:
        results.serve = bench_serve(workdir)
        results.save()
        print("\nvllm bench serve (batch 32, async, 17 ms steps):")
        print(json.dumps(results.serve, indent=1))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="batch 32 and 128, 5 and 17 ms")
    parser.add_argument(
        "--json", type=Path, default=None, help="write the run here (after every part)"
    )
    parser.add_argument("--tokens", type=int, default=32, help="decode steps timed per sample")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-serve", action="store_true", help="skip `vllm bench serve`")
    parser.add_argument(
        "--no-engine-only", action="store_true", help="skip the engine-alone points"
    )
    parser.add_argument(
        "--engine-only", action="store_true", help="only the engine-alone points (no servers)"
    )
    parser.add_argument(
        "--configs",
        default=None,
        help="only these, e.g. 32,256,4x32,4x32/1 (lanes x seqs per lane / API servers)",
    )
    parser.add_argument("--steps-ms", type=float, nargs="+", default=None)
    parser.add_argument(
        "--markdown", type=Path, default=None, help="print the tables of this JSON file and exit"
    )
    args = parser.parse_args(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    if args.tokens < MIN_TOKENS:
        # Fewer leave the engine no decode period (model_runner counts them from a run's third
        # decode step) and the client's difference of two timings may go negative.
        parser.error(f"--tokens must be >= {MIN_TOKENS}")
    configs = QUICK_CONFIGS if args.quick else FULL_CONFIGS
    if args.configs:
        configs = tuple(Config.parse(c) for c in args.configs.split(","))
    steps_ms = args.steps_ms or (QUICK_STEPS_MS if args.quick else FULL_STEPS_MS)
    results = Results(args.json, args.tokens, args.repeats)
    workdir = Path(tempfile.mkdtemp(prefix="tt-host-overhead-"))
    try:
        run(results, configs, steps_ms, args, workdir)
    except BaseException:
        if args.json is not None:
            print(f"\nstopped: the parts measured before are in {args.json}", flush=True)
        raise
    finally:
        minutes = (time.monotonic() - results.started) / 60
        print(f"\ntotal {minutes:.1f} min; server logs in {workdir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
