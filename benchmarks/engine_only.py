"""The engine alone: vLLM's engine in this one process, one thread, on the timing-only device.

``host_overhead.py`` measures a real server, where the API server, the client and the engine
share the machine's two cores: every host phase there also carries the time (and the cache and
core contention) of the other processes. This measures the same code path with nothing else
running: vLLM's ``LLM`` with the engine core in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``),
``batch`` greedy requests decoding ``--tokens`` tokens each, the device step ``--step-ms``; then
it prints one JSON line of host time per decode step, from the same in-process phase table the
server publishes as ``tt_host_seconds_total`` / ``tt_host_cpu_seconds_total``.

    python benchmarks/engine_only.py --batch 32 --step-ms 5     # one point (host_overhead runs it)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugin"))

ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in this process and thread
    "TT_EMULATED_TIMING_ONLY": "1",
    "MESH_DEVICE": "N150",
    "VLLM_PLUGINS": "tt,tt_model_registry",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}
MAX_MODEL_LEN = 512
PROMPT_LEN = 16
CHURN_WAVES = 3  # --churn: this many requests per decode slot


def child_env(batch: int, step_file: Path) -> dict[str, str]:
    """The environment a point runs in (set before vLLM is imported)."""
    host_stubs = REPO / "host_stubs"
    path = os.pathsep.join(p for p in (str(host_stubs), os.environ.get("PYTHONPATH", "")) if p)
    return {
        **ENV,
        "TT_EMULATED_STEP_FILE": str(step_file),
        # The plugin's counters (tt_steps_total: the decode steps) go to files here.
        "PROMETHEUS_MULTIPROC_DIR": str(step_file.parent),
        "TT_REFERENCE_MAX_TOKENS_ALL_USERS": str(max(8192, batch * MAX_MODEL_LEN)),
        "PYTHONPATH": path,
    }


@dataclass(frozen=True)
class Snapshot:
    """The engine's in-process phase table and decode step count at one moment."""

    ns: dict[str, int]  # decode wall ns by phase (host_phases.CLOCK)
    cpu_ns: dict[str, int]  # decode engine-thread CPU ns by part
    intervals: int
    interval_ns: int
    decode_steps: float  # tt_steps_total{kind="decode", route="device"}
    output_ns: int  # vLLM's output processor (detokenizing; the API server's work in a server)

    @classmethod
    def now(cls, clock: Any, decode_steps: float, output_ns: int) -> Snapshot:
        from vllm_tt_plugin.observability import host_phases as hp
        from vllm_tt_plugin.policy.step_kind import StepKind

        decode = StepKind.DECODE
        return cls(
            {p.value: clock.get_ns(decode, p) for p in hp.Phase},
            {p.value: clock.get_cpu_ns(decode, p) for p in hp.Part},
            clock.intervals,
            clock.interval_ns,
            decode_steps,
            output_ns,
        )


def per_decode_step(before: Snapshot, after: Snapshot) -> dict[str, float]:
    from vllm_tt_plugin.observability import host_phases as hp

    steps = max(after.decode_steps - before.decode_steps, 1.0)
    periods = max(after.intervals - before.intervals, 1)

    def wall(phases: tuple[hp.Phase, ...]) -> float:
        return sum(after.ns[p.value] - before.ns[p.value] for p in phases) / 1e6 / steps

    def cpu(part: hp.Part) -> float:
        return (after.cpu_ns[part.value] - before.cpu_ns[part.value]) / 1e6 / steps

    return {
        "decode_step_ms": round((after.interval_ns - before.interval_ns) / 1e6 / periods, 3),
        "plugin_ms": round(wall(hp.PLUGIN_PHASES), 4),
        "plugin_cpu_ms": round(cpu(hp.Part.PLUGIN), 4),
        "vllm_ms": round(wall(hp.VLLM_PHASES), 4),
        "vllm_cpu_ms": round(cpu(hp.Part.VLLM), 4),
        "model_call_ms": round(wall(hp.MODEL_PHASES), 4),
        "vllm_output_processor_ms": round((after.output_ns - before.output_ns) / 1e6 / steps, 4),
        "plugin_phases_ms": {p.value: round(wall((p,)), 4) for p in hp.PLUGIN_PHASES},
    }


def timed_output_processor(llm: Any) -> list[int]:
    """Wrap this ``LLM``'s ``OutputProcessor.process_outputs`` (its per-step detokenizing and
    request bookkeeping, which in a server runs in the API server process) with a wall-time
    total; returns the one-element total in ns."""
    total = [0]
    processor = llm.llm_engine.output_processor
    inner = processor.process_outputs

    def process_outputs(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return inner(*args, **kwargs)
        finally:
            total[0] += time.perf_counter_ns() - start

    processor.process_outputs = process_outputs
    return total


def measure(
    batch: int,
    step_ms: float,
    tokens: int,
    repeats: int,
    async_on: bool = False,
    churn: bool = False,
) -> dict[str, Any]:
    from vllm import LLM, SamplingParams

    from vllm_tt_plugin.emulation.server import BUNDLED_MODEL, DEFAULT_TT_OPTIONS
    from vllm_tt_plugin.observability import host_phases as hp
    from vllm_tt_plugin.observability import tt_metrics

    llm = LLM(
        model=str(BUNDLED_MODEL),
        max_num_seqs=batch,
        max_model_len=MAX_MODEL_LEN,
        additional_config={"tt": {**DEFAULT_TT_OPTIONS, "sample_on_device_mode": "all"}},
        async_scheduling=async_on,
    )
    count = CHURN_WAVES * batch if churn else batch
    prompts = [
        {"prompt_token_ids": [1 + (i * 7 + j) % 200 for j in range(PROMPT_LEN)]}
        for i in range(count)
    ]
    greedy: SamplingParams | list[SamplingParams] = SamplingParams(
        max_tokens=tokens, ignore_eos=True, temperature=0
    )
    if churn:
        # Lengths spread over [tokens / 2, 3 tokens / 2), interleaved: rows finish a few at a
        # time and waiting requests take their places, as in a busy server.
        greedy = [
            SamplingParams(
                max_tokens=tokens // 2 + (i * 37 % count) * tokens // count,
                ignore_eos=True,
                temperature=0,
            )
            for i in range(count)
        ]
    llm.generate(prompts, SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
    output_ns = timed_output_processor(llm)
    clock = hp.CLOCK
    store = tt_metrics._store()
    assert store is not None, "the plugin's metrics are off"
    key = ("counter", tt_metrics.STEPS.key("decode", "device"))
    best: dict[str, Any] | None = None
    for _ in range(repeats):
        before = Snapshot.now(clock, store._values.get(key, 0.0), output_ns[0])
        llm.generate(prompts, greedy, use_tqdm=False)
        after = Snapshot.now(clock, store._values.get(key, 0.0), output_ns[0])
        row: dict[str, Any] = {"batch": batch, "step_ms": step_ms, "async": async_on}
        if churn:
            row["churn"] = True
        row.update(per_decode_step(before, after))
        if best is None or row["plugin_ms"] < best["plugin_ms"]:
            best = row
    assert best is not None
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--tokens", type=int, default=200, help="decode tokens per request")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--async-scheduling", action="store_true", help="async decode on")
    parser.add_argument(
        "--churn",
        action="store_true",
        help=f"{CHURN_WAVES} x batch requests of spread lengths: rows finish and arrive "
        "every few steps (the decode steps then include layout changes)",
    )
    args = parser.parse_args()
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0":  # not set up yet: re-exec
        step_file = Path(tempfile.mkdtemp(prefix="tt-engine-only-")) / "step.ms"
        step_file.write_text(f"{args.step_ms:g}\n")
        env = {**os.environ, **child_env(args.batch, step_file)}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    started = time.monotonic()
    row = measure(
        args.batch, args.step_ms, args.tokens, args.repeats, args.async_scheduling, args.churn
    )
    row["elapsed_s"] = round(time.monotonic() - started, 1)
    print("ENGINE_ONLY " + json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
