"""Serving performance at TT's shapes: (input length, output length, concurrency), by default
128/128 at concurrency 1 and at the server's capacity (max_num_seqs x lanes); other shapes with
``--tt-perf-shapes``. Figures follow ``vllm bench serve``'s definitions (tt_conformance.perfstats):
TTFT, TPOT, ITL and E2EL (mean, median, p99, ms), tokens/s/user (1000 / TPOT, same stats),
prefill tokens/s, output and request throughput over the wave; plus TT's T/S (``tt_tps``:
T/S/U x batch, tt-metal's LLM table definition, measured through the server). Each carries its
identity keys (metric, stat, input and output length, concurrency, samples), named
``<metric>_<stat>@i<in>o<out>c<conc>``.

At least MIN_REQUESTS requests run per shape, in waves of the concurrency (as vllm bench serve
runs num_prompts at max_concurrency). What is asserted is correctness, never speed: every stream
delivers exactly the requested number of tokens, and a streamed greedy output equals the
non-streamed one for the same prompt. Prompts are exactly ``input length`` token ids from the
server's own tokenizer, each starting at a different place so the prefix cache cannot serve one
request from another. A warm-up request runs first so kernel compilation on a cold server is not
measured.

Figures a client cannot stand behind (burst delivery, a CPU-starved client; see perfstats) are
flagged: on emulated runs (informational) they are recorded with the flag, on hardware runs they
are refused (not recorded) and the check fails saying why. Runs alone (xdist group "exclusive").
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    StreamResult,
    astream,
    capacity,
    complete_each,
    greedy,
    token_ids_of,
)
from tt_conformance.perfshapes import PerfShape, figure_key
from tt_conformance.perfstats import (
    LoopLagMonitor,
    StreamTiming,
    delivery_problems,
    wave_figures,
)
from tt_conformance.state import harness_state
from tt_conformance.tiers import perf_is_informational

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.fixtures import RecordPerf
    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo

pytestmark = [pytest.mark.serving_perf, pytest.mark.xdist_group("exclusive")]

# At least this many requests per shape, in waves of `concurrency` (as vllm bench serve runs
# num_prompts at max_concurrency): at concurrency 1 the median then rests on 16 requests, enough
# for the gate (gate.GATED_MIN_SAMPLES); a p99 of so few stays informational.
MIN_REQUESTS = 16


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "shape" in metafunc.fixturenames:
        shapes = harness_state(metafunc.config).options.perf_shapes
        ids = [
            f"i{s.input_len}-o{s.output_len}-c{'max' if s.concurrency is None else s.concurrency}"
            for s in shapes
        ]
        metafunc.parametrize("shape", shapes, ids=ids)


def prompts(tt_raw_http: RawHttp, length: int, count: int) -> list[list[int]]:
    """``count`` prompts of exactly ``length`` token ids, each a rotation of one text at its own
    random offset (distinct first blocks: no prefix-cache hits between them)."""
    base: list[int] = []
    text = " ".join(PLAIN_PROMPTS)
    while len(base) < max(length, count) + 1:
        base += token_ids_of(tt_raw_http, text + "\n")
    offsets = random.SystemRandom().sample(range(len(base)), count)
    out = []
    for off in offsets:
        ring = base[off:] + base[:off]
        out.append((ring * (length // len(ring) + 1))[:length])
    return out


def timing(result: StreamResult) -> StreamTiming:
    chunks, before = [], 0
    for t, so_far in result.chunk_times:
        chunks.append((t, so_far - before))
        before = so_far
    return StreamTiming(sent=result.started, chunks=tuple(chunks))


def test_serving_perf(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_raw_http: RawHttp,
    tt_record_perf: RecordPerf,
    shape: PerfShape,
) -> None:
    concurrency = shape.resolve(capacity(tt_server))
    needed = shape.input_len + shape.output_len
    if tt_server.max_model_len is not None and needed > tt_server.max_model_len:
        pytest.skip(
            f"shape {shape.id} needs {needed} tokens of context; "
            f"the server's max_model_len is {tt_server.max_model_len}"
        )
    waves = -(-MIN_REQUESTS // concurrency)
    warm, *ids = prompts(tt_raw_http, shape.input_len, waves * concurrency + 1)
    requests = [greedy(p, shape.output_len, ignore_eos=True) for p in ids]
    complete_each(tt_async_openai_client, tt_server.model, [greedy(warm, 4, ignore_eos=True)])

    async def run_waves() -> tuple[list[StreamResult], float, list[float]]:
        monitor = LoopLagMonitor()
        monitor.start()
        results: list[StreamResult] = []
        start = time.perf_counter()
        try:
            for w in range(waves):
                batch = requests[w * concurrency : (w + 1) * concurrency]
                results += await asyncio.gather(
                    *(astream(tt_async_openai_client, tt_server.model, r) for r in batch)
                )
        finally:
            wall = time.perf_counter() - start
            await monitor.stop()
        return results, wall, monitor.lags

    results, wall, lags = asyncio.run(run_waves())
    for i, result in enumerate(results):
        assert len(result.token_ids) == shape.output_len and result.finish_reason == "length", (
            f"stream {i} delivered {len(result.token_ids)} tokens (finish "
            f"{result.finish_reason}), expected {shape.output_len}"
        )
    (plain,) = complete_each(tt_async_openai_client, tt_server.model, requests[:1])
    assert tuple(results[0].token_ids) == plain.token_ids, (
        "a streamed greedy output differs from the non-streamed one for the same prompt:\n"
        f"  plain:    {list(plain.token_ids)}\n  streamed: {results[0].token_ids}"
    )
    streams = [timing(r) for r in results]
    problems = delivery_problems(streams, lags)
    flag = "; ".join(problems) or None
    if flag and not perf_is_informational(tt_server.device):
        pytest.fail(
            f"refusing to publish the {shape.id} figures: {flag}. Rerun from a client with "
            "spare CPU, directly against the server (no buffering proxy), stream interval 1",
            pytrace=False,
        )
    key = figure_key(shape.input_len, shape.output_len, concurrency)
    for fig in wave_figures(streams, wall, concurrency, shape.input_len):
        tt_record_perf(
            f"{fig.metric}_{fig.stat}@{key}" if fig.stat != "value" else f"{fig.metric}@{key}",
            fig.value,
            fig.unit,
            fig.better,
            metric=fig.metric,
            stat=fig.stat,
            input_len=shape.input_len,
            output_len=shape.output_len,
            concurrency=concurrency,
            samples=fig.samples,
            flag=flag,
        )
