"""Serving performance snapshot: streaming TTFT, TPOT and throughput at concurrency 1 and at the
server's full batch (max_num_seqs x lanes), recorded in the report (informational; the gate
compares them with the baseline only where the expectations give a tolerance).

What is asserted is correctness, never speed: every stream delivers exactly the requested number
of tokens, and a streamed greedy output equals the non-streamed one for the same prompt.
Figures: ``ttft_p50@cN`` and ``tpot_p50@cN`` in ms (lower is better), ``throughput@cN`` in
output tok/s over the whole wave (higher is better). One warm-up request runs first so kernel
compilation on a cold server is not measured. Runs alone (xdist group "exclusive").
"""

from __future__ import annotations

import asyncio
import math
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
    percentile,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.fixtures import RecordPerf
    from tt_conformance.server import ServerInfo

pytestmark = [pytest.mark.serving_perf, pytest.mark.xdist_group("exclusive")]

PERF_TOKENS = 64
COMPARED_PROMPTS = 4


@pytest.mark.parametrize("level", ["c1", "full"])
def test_streaming_perf(
    server: ServerInfo, async_openai_client: AsyncOpenAI, record_perf: RecordPerf, level: str
) -> None:
    concurrency = 1 if level == "c1" else capacity(server)
    requests = [
        greedy(PLAIN_PROMPTS[i % len(PLAIN_PROMPTS)], PERF_TOKENS, ignore_eos=True)
        for i in range(concurrency)
    ]
    distinct = list({r["prompt"]: r for r in requests}.values())[:COMPARED_PROMPTS]
    reference = {
        r["prompt"]: out
        for r, out in zip(
            distinct, complete_each(async_openai_client, server.model, distinct), strict=True
        )
    }  # doubles as the warm-up

    async def wave() -> tuple[list[StreamResult], float]:
        start = time.perf_counter()
        results = await asyncio.gather(
            *(astream(async_openai_client, server.model, r) for r in requests)
        )
        return list(results), time.perf_counter() - start

    results, wall = asyncio.run(wave())
    for request, result in zip(requests, results, strict=True):
        assert len(result.token_ids) == PERF_TOKENS and result.finish_reason == "length", (
            f"stream for {request['prompt']!r} delivered {len(result.token_ids)} tokens "
            f"(finish {result.finish_reason}), expected {PERF_TOKENS}"
        )
        want = reference.get(request["prompt"])
        if want is not None:
            assert tuple(result.token_ids) == want.token_ids, (
                f"streamed greedy output for {request['prompt']!r} differs from the "
                f"non-streamed one:\n  plain:    {list(want.token_ids)}\n  streamed: "
                f"{result.token_ids}"
            )
    total = sum(len(r.token_ids) for r in results)
    record_perf(
        f"ttft_p50@c{concurrency}",
        percentile([r.ttft_s * 1000 for r in results], 50),
        "ms",
        "lower",
    )
    tpot = percentile([r.tpot_s * 1000 for r in results], 50)
    assert math.isfinite(tpot), "no stream delivered tokens in two or more chunks: TPOT unknown"
    record_perf(f"tpot_p50@c{concurrency}", tpot, "ms", "lower")
    record_perf(f"throughput@c{concurrency}", total / wall, "tok/s", "higher")
