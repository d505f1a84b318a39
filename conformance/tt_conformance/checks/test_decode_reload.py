"""The decode reload contract, seen from the server: a long request keeps exactly its solo output
through every event that makes the plugin reload (or move) the device's resident decode inputs.

Promises: a long request (greedy; greedy with penalties; seeded sampling) streams the same tokens
as when it runs alone while
- companions arrive and leave (prefill -> decode transitions, slots joining, leaving and being
  compacted: full reloads with ``slot_remap``);
- companions that need host-only sampling (min_p, logit_bias) join and finish, switching the batch
  to vLLM's host sampler and back to device sampling;
- streamed companions are aborted mid-generation (the client closes the stream);
- the KV cache runs out and requests are preempted and resumed (recomputed through prefill).
The companions themselves must also keep their solo outputs.
Why (docs/DECODE_RELOAD_CONTRACT.md): with async device sampling the device keeps tokens,
positions, page tables, sampling parameters and penalty state resident and advances them itself;
a missed or misapplied reload feeds a request stale or foreign inputs, which changes its tokens.
Each check also reads the plugin's counters (tt_conformance.ttmetrics): full reloads around steady
resident decode steps, overlapped (async) decode steps, and the host fallbacks it provokes must
have happened, or the check reports "not exercised" when the launch rules them out.
Companions are started when the long request has streamed a given number of tokens (not after
a delay), so the events happen while it decodes; equality never depends on timing.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    Body,
    Output,
    StreamResult,
    acomplete,
    assert_healthy,
    astream,
    capacity,
    complete_each,
    greedy,
    metric,
    mismatches,
    token_ids_of,
)
from tt_conformance.ttmetrics import (
    async_overlap,
    host_fallback,
    preemptions_resumed,
    resident_decode,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo
    from tt_conformance.ttpath import TTPath

pytestmark = pytest.mark.decode_reload

LONG_TOKENS = 96
LONG_PROMPT = "1 2 3 4 5 6 7 8"

Start = Callable[..., Awaitable[Any]]  # a companion: () -> result


async def long_with_events(
    client: Any, model: str, long_request: Body, schedule: Sequence[tuple[int, Start]]
) -> tuple[StreamResult, list[Any]]:
    """Stream ``long_request``; start each scheduled companion once the long request has
    streamed ``at`` tokens (``at == 0``: before it is sent). Returns the long stream and the
    companions' results in schedule order."""
    schedule = sorted(schedule, key=lambda item: item[0])
    tasks: list[asyncio.Future[Any]] = []
    pending = list(schedule)
    while pending and pending[0][0] == 0:
        tasks.append(asyncio.ensure_future(pending.pop(0)[1]()))

    def progress(n_tokens: int) -> None:
        while pending and n_tokens >= pending[0][0]:
            tasks.append(asyncio.ensure_future(pending.pop(0)[1]()))

    result = await astream(client, model, long_request, on_progress=progress)
    assert not pending, (
        f"the long request ended after {len(result.token_ids)} tokens, before companions "
        f"scheduled at {[at for at, _ in pending]} tokens could start"
    )
    return result, list(await asyncio.gather(*tasks))


def assert_long_unchanged(solo: Output, got: StreamResult, during: str) -> None:
    assert tuple(got.token_ids) == solo.token_ids, (
        f"the long request changed while {during}:\n  alone:    {list(solo.token_ids)}\n"
        f"  streamed: {got.token_ids}"
    )


# The long request: greedy; greedy with penalties (the device's penalty history must be rebuilt
# from prompt/output tokens on every reload); seeded sampling (the draw depends only on seed and
# position). The seeded kind runs alone: a host-only request from another check would move it to
# the host sampler, whose seeded draws differ (test_sampling_fallback covers that interaction).
LONG_KINDS: dict[str, dict[str, Any]] = {
    "greedy": {"temperature": 0.0},
    "penalised": {"temperature": 0.0, "repetition_penalty": 1.3, "frequency_penalty": 0.3},
    "seeded": {"temperature": 0.9, "top_k": 40, "seed": 4321},
}
EXCLUSIVE = pytest.mark.xdist_group("exclusive")


def long_request(kind: str = "greedy") -> Body:
    return {
        "prompt": LONG_PROMPT,
        "max_tokens": LONG_TOKENS,
        "ignore_eos": True,
        **LONG_KINDS[kind],
    }


@pytest.mark.tt_path
@pytest.mark.parametrize("kind", ["greedy", "penalised", pytest.param("seeded", marks=EXCLUSIVE)])
def test_companions_arrive_and_leave(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, tt_path: TTPath, kind: str
) -> None:
    # Lengths differ so companions leave at different steps; the first one is sent before the
    # long request, so when it leaves the long request is compacted into its slot.
    plan = [(0, 32), (4, 8), (12, 40), (20, 16), (30, 8), (44, 24), (60, 12)]
    mates = [
        greedy(PLAIN_PROMPTS[(i + 1) % len(PLAIN_PROMPTS)], n, ignore_eos=True)
        for i, (_, n) in enumerate(plan)
    ]
    solo = complete_each(tt_async_openai_client, tt_server.model, [long_request(kind), *mates])
    client, model = tt_async_openai_client, tt_server.model
    schedule = [
        (at, lambda r=r: acomplete(client, model, r))
        for (at, _), r in zip(plan, mates, strict=True)
    ]
    tt_path.start()
    got, outs = asyncio.run(long_with_events(client, model, long_request(kind), schedule))
    assert_long_unchanged(solo[0], got, "companions arrived and left")
    problems = mismatches([f"companion {r['prompt']!r}" for r in mates], solo[1:], outs)
    assert not problems, "companions changed output:\n" + "\n".join(problems)
    tt_path.conclude(resident_decode(), async_overlap())


@pytest.mark.tt_path
@pytest.mark.parametrize("kind", ["greedy", "penalised"])
def test_host_sampling_switches(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_raw_http: RawHttp,
    tt_path: TTPath,
    kind: str,
) -> None:
    """min_p / logit_bias companions come and go: device -> host -> device sampling, twice."""
    banned = token_ids_of(tt_raw_http, " the")[:1]
    host_mates = [
        {"prompt": PLAIN_PROMPTS[1], "max_tokens": 12, "temperature": 1.0, "seed": 9,
         "min_p": 1.0, "ignore_eos": True},
        {"prompt": PLAIN_PROMPTS[2], "max_tokens": 16, "temperature": 0.0,
         "logit_bias": {str(banned[0]): -100}, "ignore_eos": True},
        {"prompt": PLAIN_PROMPTS[3], "max_tokens": 8, "temperature": 0.0,
         "logit_bias": {str(banned[0]): 5}, "ignore_eos": True},
    ]  # fmt: skip
    device_mate = greedy(PLAIN_PROMPTS[4], 12, ignore_eos=True)
    plan = [(6, host_mates[0]), (40, host_mates[1]), (41, host_mates[2]), (70, device_mate)]
    solo = complete_each(
        tt_async_openai_client, tt_server.model, [long_request(kind), *[r for _, r in plan]]
    )
    client, model = tt_async_openai_client, tt_server.model
    schedule = [(at, lambda r=r: acomplete(client, model, r)) for at, r in plan]
    tt_path.start()
    got, outs = asyncio.run(long_with_events(client, model, long_request(kind), schedule))
    assert_long_unchanged(solo[0], got, "host-sampled companions came and went")
    problems = mismatches([f"companion {r}" for _, r in plan], solo[1:], outs)
    assert not problems, "companions changed output:\n" + "\n".join(problems)
    tt_path.conclude(resident_decode(), host_fallback(["min_p", "logit_bias"]), async_overlap())


@pytest.mark.tt_path
def test_aborted_companions(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_raw_http: RawHttp,
    tt_path: TTPath,
) -> None:
    """Streamed companions (device- and host-sampled) are closed after a few tokens."""
    client, model = tt_async_openai_client, tt_server.model
    aborted = [
        greedy(PLAIN_PROMPTS[5], 400, ignore_eos=True),
        {"prompt": PLAIN_PROMPTS[6], "max_tokens": 400, "temperature": 0.8, "ignore_eos": True},
        {"prompt": PLAIN_PROMPTS[7], "max_tokens": 400, "temperature": 1.0, "min_p": 0.2,
         "ignore_eos": True},
        greedy(PLAIN_PROMPTS[8], 400, ignore_eos=True, repetition_penalty=1.3),
    ]  # fmt: skip
    survivor = greedy(PLAIN_PROMPTS[9], 40, ignore_eos=True)
    solo = complete_each(client, model, [long_request(), survivor])
    schedule: list[tuple[int, Start]] = [
        (0, lambda: astream(client, model, aborted[0], abort_after=6)),
        (4, lambda: astream(client, model, aborted[1], abort_after=3)),
        (10, lambda: acomplete(client, model, survivor)),
        (16, lambda: astream(client, model, aborted[2], abort_after=5)),
        (30, lambda: astream(client, model, aborted[3], abort_after=10)),
    ]
    tt_path.start()
    got, outs = asyncio.run(long_with_events(client, model, long_request(), schedule))
    assert_long_unchanged(solo[0], got, "streamed companions were aborted")
    assert outs[2].token_ids == solo[1].token_ids, (
        f"a companion changed while others were aborted: alone {solo[1].describe()}, "
        f"batched {outs[2].describe()}"
    )
    for stream in (outs[0], outs[1], outs[3], outs[4]):
        assert stream.aborted, "a companion finished before it could be aborted"
    assert_healthy(tt_raw_http)
    tt_path.conclude(resident_decode(), host_fallback(["min_p"]), async_overlap())


def kv_capacity_tokens(tt_raw_http: RawHttp) -> int | None:
    """KV cache size in tokens from vLLM's cache_config_info metric, when the server has it."""
    for sample in tt_raw_http.metrics():
        if sample.name == "vllm:cache_config_info":
            blocks, size = sample.labels.get("num_gpu_blocks"), sample.labels.get("block_size")
            if blocks and size and blocks.isdigit() and size.isdigit():
                return int(blocks) * int(size)
    return None


def counting_prompt(tt_raw_http: RawHttp, start: int, length: int) -> list[int]:
    """``length`` token ids of "start start+1 ..." (distinct per start, so no prefix sharing)."""
    text = " ".join(str(i) for i in range(start, start + length))
    ids = token_ids_of(tt_raw_http, text)
    assert len(ids) >= length, f"counting text too short for {length} tokens"
    return ids[:length]


# vLLM's FCFS scheduler preempts the most recently admitted running requests, so the resumed
# ones are at the end of the batch, not the start. Arrival order follows request order only
# roughly (the requests are sent at once), so a small batch is compared whole; a large one by its
# first request (admitted first, never preempted) and its last PREEMPTION_TAIL requests.
PREEMPTION_COMPARE_ALL = 8
PREEMPTION_TAIL = 6
PREEMPTIONS_METRIC = "vllm:num_preemptions_total"


def preemption_compared(n: int) -> list[int]:
    """Indices of the requests compared with their solo runs."""
    if n <= PREEMPTION_COMPARE_ALL:
        return list(range(n))
    return [0, *range(n - PREEMPTION_TAIL, n)]


@pytest.mark.slow
@pytest.mark.xdist_group("exclusive")
def test_preemption_and_resume(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_raw_http: RawHttp,
    tt_path: TTPath,
) -> None:
    """A full batch whose KV demand is 1.25x the cache: requests get preempted and resumed,
    and the compared ones (see preemption_compared: the late arrivals that FCFS preempts) still
    give their solo tokens; vllm:num_preemptions_total must prove that preemption happened (and,
    on a TT server, tt_preemptions_resumed_total that the plugin resumed them)."""
    kv_tokens = kv_capacity_tokens(tt_raw_http)
    if kv_tokens is None:
        pytest.skip("the server exports no vllm:cache_config_info, so KV capacity is unknown")
    n = capacity(tt_server)
    per_request = math.ceil(1.25 * kv_tokens * tt_server.lanes / n) + 1
    limit = tt_server.max_model_len or 0
    if per_request > limit:
        pytest.skip(
            f"preemption cannot be forced: {n} requests of max_model_len {limit} tokens fit in "
            f"the {kv_tokens}-token KV cache"
        )
    new_tokens = max(16, per_request // 4)
    prompt_len = per_request - new_tokens
    requests = [
        {"prompt": counting_prompt(tt_raw_http, 1 + 1000 * i, prompt_len), "max_tokens": new_tokens,
         "temperature": 0.0, "ignore_eos": True}
        for i in range(n)
    ]  # fmt: skip
    # Without the counter the check could not tell a run that preempted from one that did not.
    assert metric(tt_raw_http, PREEMPTIONS_METRIC, tt_server.model) is not None, (
        f"the server exports no {PREEMPTIONS_METRIC} for {tt_server.model} (vLLM always does): "
        "cannot prove that requests were preempted"
    )
    compared = preemption_compared(n)
    solo = complete_each(tt_async_openai_client, tt_server.model, [requests[i] for i in compared])
    before = metric(tt_raw_http, PREEMPTIONS_METRIC, tt_server.model)
    assert before is not None, f"{PREEMPTIONS_METRIC} disappeared from /metrics"
    tt_path.start(required=False)  # generic check; on a TT server the plugin must resume them

    async def run() -> list[Output]:
        return list(
            await asyncio.gather(
                *(acomplete(tt_async_openai_client, tt_server.model, r) for r in requests)
            )
        )

    outputs = asyncio.run(run())
    after = metric(tt_raw_http, PREEMPTIONS_METRIC, tt_server.model)
    short = [i for i, out in enumerate(outputs) if len(out.token_ids) != new_tokens]
    assert not short, f"requests {short} did not finish their {new_tokens} tokens"
    problems = mismatches(
        [f"request {i} of {n} ({prompt_len}-token prompt)" for i in compared],
        solo,
        [outputs[i] for i in compared],
    )
    assert not problems, "preempted/resumed requests changed output:\n" + "\n".join(problems)
    assert after is not None and after > before, (
        f"{n} requests x {per_request} tokens exceed the {kv_tokens}-token KV cache, yet "
        f"{PREEMPTIONS_METRIC} went from {before} to {after}: the check did not exercise "
        "preemption"
    )
    tt_path.conclude(preemptions_resumed())
