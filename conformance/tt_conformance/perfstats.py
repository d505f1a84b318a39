"""Serving statistics as TT's tables and ``vllm bench serve`` define them, and the sanity checks
that keep unreliable figures out of a published report.

Per request (streamed): TTFT = first token - send; E2EL = last token - send;
TPOT = (E2EL - TTFT) / (tokens - 1); ITL = the gaps between consecutive chunks; tokens/s/user =
1000 / TPOT (ms) of the same statistic. Per wave: tokens/s = output tokens / wall time. Mean,
median and p99 use linear interpolation between ranks (numpy's default, which vllm bench serve
uses), so the figures line up with an imported bench result.

Two ways a client measures the wrong thing, both detected here:
- burst delivery: the server (stream interval > 1) or something in between (a buffering proxy)
  hands over several tokens at once: chunks carry more than one token, or inter-chunk gaps
  collapse to almost nothing and then jump, so ITL and TPOT describe the transport, not the
  decode;
- a CPU-starved client: the harness's event loop runs late (measured by a ticker that asks to
  sleep a fixed interval), so arrival times are when the client got round to reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "BURST_TOKENS_PER_CHUNK",
    "LAG_ALLOWED",
    "TICK_S",
    "TINY_GAPS_ALLOWED",
    "TINY_GAP_FRACTION",
    "Figure",
    "LoopLagMonitor",
    "StreamTiming",
    "delivery_problems",
    "quantile",
    "summary",
    "wave_figures",
]

BURST_TOKENS_PER_CHUNK = 1.5  # mean tokens per chunk above this: the server batches tokens
TINY_GAP_FRACTION = 0.1  # a gap under a tenth of the stream's TPOT counts as "arrived together"
TINY_GAPS_ALLOWED = 0.3  # share of such gaps above this: burst arrival
LAG_ALLOWED = 0.5  # event-loop lag p90 above this share of the mean ITL: starved client
TICK_S = 0.002


@dataclass(frozen=True)
class StreamTiming:
    """One streamed request: when it was sent and when each chunk (with its token count) came."""

    sent: float
    chunks: tuple[tuple[float, int], ...]  # (arrival time, tokens in this chunk)

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.chunks)

    @property
    def ttft(self) -> float:
        return self.chunks[0][0] - self.sent if self.chunks else math.nan

    @property
    def e2el(self) -> float:
        return self.chunks[-1][0] - self.sent if self.chunks else math.nan

    @property
    def tpot(self) -> float:
        if self.tokens < 2:
            return math.nan
        return (self.e2el - self.ttft) / (self.tokens - 1)

    @property
    def itls(self) -> list[float]:
        return [b[0] - a[0] for a, b in zip(self.chunks, self.chunks[1:], strict=False)]


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (q in [0, 1]) of the finite values; nan when none."""
    data = sorted(v for v in values if math.isfinite(v))
    if not data:
        return math.nan
    if len(data) == 1:
        return data[0]
    pos = q * (len(data) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    finite = [v for v in values if math.isfinite(v)]
    return {
        "mean": statistics.fmean(finite) if finite else math.nan,
        "median": quantile(finite, 0.5),
        "p99": quantile(finite, 0.99),
    }


@dataclass(frozen=True)
class Figure:
    metric: str
    stat: str
    value: float
    unit: str
    better: Literal["lower", "higher"]
    samples: int  # the finite values behind the statistic (requests; gaps for ITL)


def wave_figures(
    streams: Sequence[StreamTiming],
    wall_s: float,
    concurrency: int | None = None,
    input_len: int | None = None,
) -> list[Figure]:
    """TTFT/TPOT/ITL/E2EL (mean, median, p99, ms), tokens/s/user (same stats); TT's t/s at the
    wave's concurrency; vLLM bench's output and request throughput over the wave's wall time;
    prefill tokens/s per request (``input_len`` / TTFT, same stats)."""
    out: list[Figure] = []
    per_metric = {
        "ttft": [s.ttft * 1000 for s in streams],
        "tpot": [s.tpot * 1000 for s in streams],
        "itl": [gap * 1000 for s in streams for gap in s.itls],
        "e2el": [s.e2el * 1000 for s in streams],
    }

    def count(values: Sequence[float]) -> int:
        return sum(1 for v in values if math.isfinite(v))

    for metric, values in per_metric.items():
        for stat, value in summary(values).items():
            out.append(Figure(metric, stat, value, "ms", "lower", count(values)))
    # tokens/s/user is 1000 / TPOT of the same statistic (TT's definition; p99 is then the
    # rate of the slowest 1 %), so an imported bench result, which has TPOT only, lines up.
    for stat, tpot_ms in summary(per_metric["tpot"]).items():
        rate = 1000.0 / tpot_ms if math.isfinite(tpot_ms) and tpot_ms > 0 else math.nan
        out.append(
            Figure("tps_user", stat, rate, "tok/s/user", "higher", count(per_metric["tpot"]))
        )
    # TT's t/s (tt-metal's LLM table): t/s/u x batch, the decode rate of a full batch. The batch
    # is the wave's concurrency; t/s/u is 1000 / the median TPOT (TT: 1 / inter-token latency).
    tpot_median = summary(per_metric["tpot"])["median"]
    if concurrency is not None and math.isfinite(tpot_median) and tpot_median > 0:
        rate = 1000.0 / tpot_median * concurrency
        out.append(Figure("tt_tps", "value", rate, "tok/s", "higher", count(per_metric["tpot"])))
    if input_len is not None:
        prefill = [input_len / s.ttft for s in streams if math.isfinite(s.ttft) and s.ttft > 0]
        for stat, value in summary(prefill).items():
            out.append(Figure("prefill_tps", stat, value, "tok/s", "higher", len(prefill)))
    # vllm bench serve's names: output tokens, and requests, over the wave's wall time (TTFT
    # included, so below TT's t/s); kept under their own names.
    total = sum(s.tokens for s in streams)
    throughput = total / wall_s if wall_s > 0 else math.nan
    out.append(Figure("output_throughput", "value", throughput, "tok/s", "higher", len(streams)))
    requests = len(streams) / wall_s if wall_s > 0 else math.nan
    out.append(Figure("request_throughput", "value", requests, "req/s", "higher", len(streams)))
    return out


def delivery_problems(streams: Sequence[StreamTiming], loop_lag_s: Sequence[float]) -> list[str]:
    """Why the wave's figures cannot be published as measured (empty: they can)."""
    problems: list[str] = []
    tokens = sum(s.tokens for s in streams)
    chunks = sum(len(s.chunks) for s in streams)
    if chunks and tokens / chunks > BURST_TOKENS_PER_CHUNK:
        problems.append(
            f"burst delivery: {tokens} tokens arrived in {chunks} chunks "
            f"({tokens / chunks:.1f} a chunk): ITL/TPOT would measure the stream interval"
        )
    gaps = tiny = 0
    for s in streams:
        if not math.isfinite(s.tpot) or s.tpot <= 0:
            continue
        for gap in s.itls:
            gaps += 1
            tiny += gap < TINY_GAP_FRACTION * s.tpot
    if gaps and tiny / gaps > TINY_GAPS_ALLOWED:
        problems.append(
            f"burst arrival: {tiny} of {gaps} inter-token gaps are under "
            f"{TINY_GAP_FRACTION:.0%} of the stream's TPOT (tokens reached the client in "
            "clumps: a busy server front end, a buffering proxy, or a client that reads late)"
        )
    itls = [g for s in streams for g in s.itls]
    mean_itl = statistics.fmean(itls) if itls else math.nan
    lag = quantile(loop_lag_s, 0.9)
    if math.isfinite(lag) and math.isfinite(mean_itl) and lag > LAG_ALLOWED * mean_itl > 0:
        problems.append(
            f"CPU-starved client: event-loop lag p90 {lag * 1000:.1f} ms against a mean "
            f"ITL of {mean_itl * 1000:.1f} ms (the harness read tokens late)"
        )
    return problems


@dataclass
class LoopLagMonitor:
    """Measures how late the event loop wakes a task that sleeps TICK_S (run while measuring)."""

    lags: list[float] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(TICK_S)
            self.lags.append(max(0.0, time.perf_counter() - start - TICK_S))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
