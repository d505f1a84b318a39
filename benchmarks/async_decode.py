"""Decode throughput with async decode on/off, against the device-bound limit.

The emulated device can be given a fixed time per model call (TT_EMULATED_STEP_MS). At batch B
and step time S the device-bound limit is B / S tokens/s; a perfect host keeps the device busy
and reaches it. For each S this script serves the bundled model on the emulated mesh with
device sampling, batch 32, once without and once with --async-scheduling, and measures the
decode step time as (T(N+1 tokens) - T(1 token)) / N for 32 concurrent requests, which cancels
prefill and request overheads. Host overhead per decode step = step time - S without async
(nothing overlaps the device there).

    python benchmarks/async_decode.py [--steps-ms 17 40] [--tokens 64] [--batch 32]

All figures of one invocation are measured in one run on this machine; compare ratios, not
absolute times (these machines are shared and noisy).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests
from tabulate import tabulate

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugin"))

from vllm_tt_plugin.emulation.server import BUNDLED_MODEL, EmulatedServer  # noqa: E402

PROMPT = "1 2 3 4"


@dataclass
class Measurement:
    step_ms: float
    async_decode: bool
    decode_step_ms: float
    batch: int

    @property
    def throughput(self) -> float:
        return self.batch / (self.decode_step_ms / 1000.0)

    @property
    def device_limit(self) -> float:
        return self.batch / (self.step_ms / 1000.0) if self.step_ms else float("nan")


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


def measure(
    model: Path, step_ms: float, async_decode: bool, batch: int, tokens: int, repeats: int
) -> Measurement:
    args = ["--max-num-seqs", str(batch), "--max-model-len", "512"]
    if async_decode:
        args.append("--async-scheduling")
    server = EmulatedServer(
        model=model,
        mesh_device="N150",
        tt_options={"sample_on_device_mode": "all"},
        vllm_args=args,
        env={"TT_EMULATED_STEP_MS": str(step_ms)},
        served_model_name="ref",
    )
    with server:
        timed_batch(server.url, batch, 4)  # warm
        samples = []
        for _ in range(repeats):
            short = timed_batch(server.url, batch, 1)
            long = timed_batch(server.url, batch, tokens + 1)
            samples.append((long - short) / tokens * 1000.0)
    return Measurement(step_ms, async_decode, min(samples), batch)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--steps-ms", type=float, nargs="+", default=[17.0, 40.0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", type=Path, default=BUNDLED_MODEL)
    args = parser.parse_args()
    rows = []
    results: dict[tuple[float, bool], Measurement] = {}
    for step_ms in [0.0, *args.steps_ms]:
        for async_decode in (False, True):
            m = measure(args.model, step_ms, async_decode, args.batch, args.tokens, args.repeats)
            results[(step_ms, async_decode)] = m
            rows.append(
                [
                    f"{step_ms:g}",
                    "on" if async_decode else "off",
                    f"{m.decode_step_ms:.1f}",
                    f"{m.throughput:.0f}",
                    "-" if not step_ms else f"{m.device_limit:.0f}",
                    "-" if not step_ms else f"{m.throughput / m.device_limit:.2f}",
                    "-" if async_decode or not step_ms else f"{m.decode_step_ms - step_ms:.1f}",
                ]
            )
            print(rows[-1], flush=True)
    print()
    print(
        tabulate(
            rows,
            headers=[
                "device step ms",
                "async",
                "decode step ms",
                "tok/s",
                "device limit tok/s",
                "ratio to limit",
                "host overhead ms/step",
            ],
        )
    )
    base = results[(0.0, False)]
    print(
        f"\nhost + emulated compute per decode step at batch {args.batch} (step time 0, sync): "
        f"{base.decode_step_ms:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
