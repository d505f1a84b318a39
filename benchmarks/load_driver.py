"""The core of the load-with-aborts proof (#12 item 4): plan, drive, read the server, judge.

Used by `benchmarks/load_aborts.py` (1,000 requests, both serving configurations) and by the
bounded engine test `tests/engine/test_load_aborts.py`; both import it, neither re-implements it.

The invariants a run proves against one live server:

- nothing lost or stuck: every request either finished (the stream ended with a finish reason
  and ``[DONE]``) or was aborted by the client; none errored, none outlived its timeout, and the
  whole run ended within its bound;
- the server drains: after the run ``vllm:num_requests_running`` / ``_waiting`` and
  ``vllm:kv_cache_usage_perc`` return to 0 (no KV block is leaked by an aborted request);
- every finished greedy output equals its solo run token for token, and every aborted stream
  received a prefix of it (the solo runs are made first, one at a time, on the same server).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from vllm_tt_plugin.emulation.server import EmulatedServer

MODEL_NAME = "ref"


class AbortKind(str, Enum):
    """How the client ends a request early."""

    NONE = "none"
    # Cancel the request a few milliseconds after sending it, usually before the response
    # headers arrive (the request may still be queued or in prefill on the server).
    CANCEL = "cancel"
    # Close the stream after reading ``abort_after`` tokens (0: right after the headers,
    # before the first token).
    AFTER_TOKENS = "after_tokens"


@dataclass(frozen=True)
class LoadConfig:
    requests: int = 1000
    abort_frac: float = 0.3
    concurrency: int = 48
    distinct_prompts: int = 48
    min_prompt_len: int = 1
    max_prompt_len: int = 200
    min_max_tokens: int = 1
    max_max_tokens: int = 64
    # Of the aborted requests, the share cancelled before any response (the rest close the
    # stream after a random number of tokens, 0 included).
    cancel_frac: float = 0.25
    # The share of requests that stop at EOS (finish reason "stop"); the others ignore EOS, so
    # their streams run to max_tokens and a planned close lands mid-stream.
    eos_frac: float = 0.2
    seed: int = 0
    request_timeout_s: float = 120.0
    run_timeout_s: float = 1800.0
    drain_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise ValueError(f"requests={self.requests}: must be at least 1")
        if not 0.0 <= self.abort_frac <= 1.0:
            raise ValueError(f"abort_frac={self.abort_frac}: must be within [0, 1]")
        for name in ("cancel_frac", "eos_frac"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}={getattr(self, name)}: must be within [0, 1]")
        if self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency}: must be at least 1")
        for low, high in (
            ("min_prompt_len", "max_prompt_len"),
            ("min_max_tokens", "max_max_tokens"),
        ):
            lo, hi = getattr(self, low), getattr(self, high)
            if not 1 <= lo <= hi:
                raise ValueError(f"{low}={lo}, {high}={hi}: need 1 <= {low} <= {high}")


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    prompt: int  # index into the distinct prompts
    max_tokens: int
    ignore_eos: bool = True
    abort: AbortKind = AbortKind.NONE
    abort_after: int = 0  # tokens read before closing (AFTER_TOKENS)
    cancel_after_s: float = 0.0  # delay before cancelling (CANCEL)


UseKey = tuple[int, bool]  # (prompt index, ignore_eos): one solo reference each


class Status(str, Enum):
    FINISHED = "finished"
    ABORTED = "aborted"  # by the client, as planned
    ERROR = "error"  # HTTP error, SSE error event, broken stream
    TIMEOUT = "timeout"  # stuck: no end within the per-request bound


@dataclass
class Outcome:
    index: int
    status: Status
    tokens: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    detail: str = ""
    elapsed_s: float = 0.0


def ordinary_token_ids(model_dir: Path) -> list[int]:
    """Token ids that are not special tokens, so prompts look like text to the model."""
    config = json.loads((model_dir / "config.json").read_text())
    special: set[int] = set()
    tokenizer = model_dir / "tokenizer.json"
    if tokenizer.is_file():
        added = json.loads(tokenizer.read_text()).get("added_tokens", [])
        special = {int(t["id"]) for t in added if t.get("special")}
    return [i for i in range(int(config["vocab_size"])) if i not in special]


def make_prompts(config: LoadConfig, vocab: Sequence[int]) -> list[list[int]]:
    """Distinct token-id prompts; lengths spread over the range, both ends included."""
    rng = random.Random(config.seed)
    lengths = [config.min_prompt_len, config.max_prompt_len]
    while len(lengths) < config.distinct_prompts:
        lengths.append(rng.randint(config.min_prompt_len, config.max_prompt_len))
    return [[rng.choice(vocab) for _ in range(n)] for n in lengths[: config.distinct_prompts]]


def plan_requests(config: LoadConfig) -> list[PlannedRequest]:
    """A deterministic mix: a random prompt and max_tokens per request, and exactly
    round(requests * abort_frac) client aborts at random positions."""
    rng = random.Random(config.seed + 1)
    aborted = set(rng.sample(range(config.requests), round(config.requests * config.abort_frac)))
    plan = []
    for i in range(config.requests):
        max_tokens = rng.randint(config.min_max_tokens, config.max_max_tokens)
        prompt = rng.randrange(config.distinct_prompts)
        ignore_eos = rng.random() >= config.eos_frac
        request = PlannedRequest(i, prompt, max_tokens, ignore_eos)
        if i in aborted:
            if rng.random() < config.cancel_frac:
                delay = rng.uniform(0.0, 0.05)
                request = replace(request, abort=AbortKind.CANCEL, cancel_after_s=delay)
            else:
                # Fewer tokens than max_tokens, so the close happens mid-stream.
                after = rng.randrange(max_tokens)
                request = replace(request, abort=AbortKind.AFTER_TOKENS, abort_after=after)
        plan.append(request)
    return plan


# --- the server --------------------------------------------------------------------------

LANES_VARIANT = (
    "TTReferenceLlamaForCausalLM="
    "vllm_tt_plugin.test_models.reference_llama:ReferenceLlamaLanesForCausalLM"
)


@dataclass(frozen=True)
class LoadServer:
    """How the load is served: the serving defaults of the emulated conformance runs (device
    sampling, async decode, 512 tokens of context) on one lane of 32 sequences (N300) or on 4
    lanes of 8 (lane-DP on a TG mesh, as tools/run_emu_lanes_conformance.py serves them). The
    KV pool (tokens per lane) is smaller than the slots can use (32 x 264 tokens > 1024), so
    the load also preempts and resumes."""

    lanes: int = 1
    kv_tokens_per_lane: int | None = None
    step_ms: float = 0.0  # TT_EMULATED_STEP_MS: a fixed device time per model call
    max_model_len: int = 512

    def __post_init__(self) -> None:
        if self.lanes not in (1, 4):
            raise ValueError(f"lanes={self.lanes}: the load runs on 1 or 4 lanes")

    @property
    def max_num_seqs(self) -> int:
        return 32 if self.lanes == 1 else 8

    @property
    def kv_tokens(self) -> int:
        if self.kv_tokens_per_lane is not None:
            return self.kv_tokens_per_lane
        return 1024 if self.lanes == 1 else 512

    def server(self, model: Path, env: dict[str, str] | None = None) -> EmulatedServer:
        vllm_args = [
            f"--max-num-seqs={self.max_num_seqs}",
            f"--max-model-len={self.max_model_len}",
            "--async-scheduling",
        ]
        server_env = {"TT_REFERENCE_MAX_TOKENS_ALL_USERS": str(self.kv_tokens)}
        if self.step_ms:
            server_env["TT_EMULATED_STEP_MS"] = str(self.step_ms)
        if self.lanes > 1:
            vllm_args.append(f"--data-parallel-size={self.lanes}")
            server_env["TT_MODEL_CLASS_OVERRIDES"] = LANES_VARIANT
        return EmulatedServer(
            model=model,
            mesh_device="N300" if self.lanes == 1 else "TG",
            tt_options={"sample_on_device_mode": "all"},
            vllm_args=vllm_args,
            env={**server_env, **(env or {})},
            served_model_name=MODEL_NAME,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "lanes": self.lanes,
            "max_num_seqs_per_lane": self.max_num_seqs,
            "mesh": "N300" if self.lanes == 1 else "TG",
            "kv_tokens_per_lane": self.kv_tokens,
            "max_model_len": self.max_model_len,
            "step_ms": self.step_ms,
            "sample_on_device_mode": "all",
            "async_scheduling": True,
        }


# --- the client --------------------------------------------------------------------------


def request_body(prompt: list[int], request: PlannedRequest) -> dict[str, Any]:
    return {
        "model": MODEL_NAME,
        "prompt": prompt,
        "max_tokens": request.max_tokens,
        "ignore_eos": request.ignore_eos,
        "temperature": 0.0,
        "stream": True,
        "return_token_ids": True,
    }


async def stream_completion(
    session: aiohttp.ClientSession,
    url: str,
    prompt: list[int],
    request: PlannedRequest,
) -> Outcome:
    """One streaming completion; closes the stream early when the plan says so."""
    outcome = Outcome(request.index, Status.ERROR)
    body = request_body(prompt, request)
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        if resp.status != 200:
            outcome.detail = f"HTTP {resp.status}: {(await resp.text())[:300]}"
            return outcome
        closing = request.abort is AbortKind.AFTER_TOKENS
        if closing and request.abort_after == 0:
            resp.close()
            outcome.status = Status.ABORTED
            return outcome
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[len(b"data: ") :]
            if data == b"[DONE]":
                if outcome.finish_reason is None:
                    outcome.detail = "[DONE] without a finish reason"
                    return outcome
                outcome.status = Status.FINISHED
                return outcome
            event = json.loads(data)
            if "error" in event:
                outcome.detail = f"SSE error event: {json.dumps(event)[:300]}"
                return outcome
            choice = event["choices"][0]
            outcome.tokens.extend(choice.get("token_ids") or [])
            outcome.finish_reason = choice.get("finish_reason") or outcome.finish_reason
            if closing and len(outcome.tokens) >= request.abort_after:
                resp.close()
                outcome.status = Status.ABORTED
                return outcome
        outcome.detail = "stream ended without [DONE]"
        return outcome


async def run_one(
    session: aiohttp.ClientSession,
    url: str,
    prompt: list[int],
    request: PlannedRequest,
    timeout_s: float,
) -> Outcome:
    """A request under its bound: cancelled as planned, a timeout as TIMEOUT, a broken
    connection as ERROR."""
    started = time.monotonic()
    task = asyncio.ensure_future(stream_completion(session, url, prompt, request))
    try:
        if request.abort is AbortKind.CANCEL:
            done, _ = await asyncio.wait({task}, timeout=request.cancel_after_s)
            if not done:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                outcome = Outcome(request.index, Status.ABORTED, detail="cancelled")
            else:
                outcome = task.result()  # finished before the cancel (a very short request)
        else:
            outcome = await asyncio.wait_for(task, timeout=timeout_s)
    except asyncio.TimeoutError:
        outcome = Outcome(request.index, Status.TIMEOUT, detail=f"no end within {timeout_s:.0f} s")
    except (aiohttp.ClientError, json.JSONDecodeError, KeyError, IndexError) as exc:
        outcome = Outcome(request.index, Status.ERROR, detail=f"{type(exc).__name__}: {exc}")
    outcome.elapsed_s = time.monotonic() - started
    return outcome


def client_session(concurrency: int) -> aiohttp.ClientSession:
    # No client-side total timeout: run_one bounds each request itself (after its slot).
    connector = aiohttp.TCPConnector(limit=concurrency + 8)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


# --- the server's view (/metrics) --------------------------------------------------------


@dataclass(frozen=True)
class ServerState:
    running: float
    waiting: float
    kv_usage: float
    finished: dict[str, float]  # vllm:request_success_total by finished_reason
    preempted: float  # tt_preempted_requests_total
    lane_steps: dict[str, float] = field(default_factory=dict)  # tt_lane_steps_total by lane

    @property
    def drained(self) -> bool:
        return self.running == 0 and self.waiting == 0 and self.kv_usage == 0


def parse_metrics(text: str) -> ServerState:
    running = waiting = kv = preempted = 0.0
    finished: dict[str, float] = {}
    lane_steps: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:num_requests_running":
                running += sample.value
            elif sample.name == "vllm:num_requests_waiting":
                waiting += sample.value
            elif sample.name == "vllm:kv_cache_usage_perc":
                kv = max(kv, sample.value)
            elif sample.name == "vllm:request_success_total":
                reason = sample.labels.get("finished_reason", "")
                finished[reason] = finished.get(reason, 0.0) + sample.value
            elif sample.name == "tt_preempted_requests_total":
                preempted += sample.value
            elif sample.name == "tt_lane_steps_total":
                lane = sample.labels.get("lane", "")
                lane_steps[lane] = lane_steps.get(lane, 0.0) + sample.value
    return ServerState(running, waiting, kv, finished, preempted, lane_steps)


async def server_state(session: aiohttp.ClientSession, url: str) -> ServerState:
    async with session.get(f"{url}/metrics") as resp:
        resp.raise_for_status()
        return parse_metrics(await resp.text())


@dataclass
class Peaks:
    """The largest values /metrics showed while the load ran (sampled)."""

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    samples: int = 0


async def watch(session: aiohttp.ClientSession, url: str, peaks: Peaks, every_s: float) -> None:
    while True:
        with contextlib.suppress(aiohttp.ClientError):
            state = await server_state(session, url)
            peaks.running = max(peaks.running, state.running)
            peaks.waiting = max(peaks.waiting, state.waiting)
            peaks.kv_usage = max(peaks.kv_usage, state.kv_usage)
            peaks.samples += 1
        await asyncio.sleep(every_s)


async def wait_drained(
    session: aiohttp.ClientSession, url: str, timeout_s: float
) -> tuple[ServerState, float]:
    """Poll /metrics until nothing runs, waits or holds KV; (last state, seconds taken)."""
    started = time.monotonic()
    while True:
        state = await server_state(session, url)
        elapsed = time.monotonic() - started
        if state.drained or elapsed >= timeout_s:
            return state, elapsed
        await asyncio.sleep(0.25)


# --- the run -----------------------------------------------------------------------------


@dataclass
class LoadResult:
    config: LoadConfig
    outcomes: list[Outcome]
    references: dict[UseKey, list[int]]
    wall_s: float
    reference_s: float
    max_in_flight: int
    peaks: Peaks
    before: ServerState
    after: ServerState
    drain_s: float
    after_check: Outcome | None
    timed_out: bool = False

    def count(self, status: Status) -> int:
        return sum(1 for o in self.outcomes if o.status is status)


def longest_uses(plan: Sequence[PlannedRequest]) -> dict[UseKey, int]:
    """The largest max_tokens each (prompt, ignore_eos) is asked for, in a fixed order."""
    longest: dict[UseKey, int] = {}
    for r in plan:
        key = (r.prompt, r.ignore_eos)
        longest[key] = max(longest.get(key, 0), r.max_tokens)
    return dict(sorted(longest.items()))


async def solo_references(
    session: aiohttp.ClientSession,
    url: str,
    prompts: Sequence[list[int]],
    uses: dict[UseKey, int],
    timeout_s: float,
) -> dict[UseKey, list[int]]:
    """Each use alone on the server, one after another, greedy, as long as its longest request
    (greedy: a shorter request's output is a prefix of it)."""
    refs = {}
    for n, ((prompt, ignore_eos), max_tokens) in enumerate(uses.items()):
        solo = PlannedRequest(-1 - n, prompt, max_tokens, ignore_eos)
        outcome = await run_one(session, url, prompts[prompt], solo, timeout_s)
        if outcome.status is not Status.FINISHED:
            raise RuntimeError(f"solo run {solo} did not finish: {outcome}")
        refs[(prompt, ignore_eos)] = outcome.tokens
    return refs


async def drive(
    url: str,
    config: LoadConfig,
    prompts: Sequence[list[int]],
    on_progress: Callable[[int, int], Awaitable[None] | None] | None = None,
) -> LoadResult:
    """Solo references first, then the load, then the drain and one more request."""
    plan = plan_requests(config)
    uses = longest_uses(plan)
    async with client_session(config.concurrency) as session:
        started = time.monotonic()
        refs = await solo_references(session, url, prompts, uses, config.request_timeout_s)
        reference_s = time.monotonic() - started
        before = await server_state(session, url)

        slots = asyncio.Semaphore(config.concurrency)
        in_flight = 0
        max_in_flight = 0
        done = 0

        async def bounded(request: PlannedRequest) -> Outcome:
            nonlocal in_flight, max_in_flight, done
            async with slots:
                in_flight += 1
                max_in_flight = max(max_in_flight, in_flight)
                try:
                    return await run_one(
                        session, url, prompts[request.prompt], request, config.request_timeout_s
                    )
                finally:
                    in_flight -= 1
                    done += 1
                    if on_progress is not None:
                        maybe = on_progress(done, len(plan))
                        if maybe is not None:
                            await maybe

        peaks = Peaks()
        watcher = asyncio.ensure_future(watch(session, url, peaks, every_s=0.5))
        tasks = [asyncio.ensure_future(bounded(r)) for r in plan]
        started = time.monotonic()
        finished_in_time, _ = await asyncio.wait(tasks, timeout=config.run_timeout_s)
        wall_s = time.monotonic() - started
        timed_out = len(finished_in_time) < len(tasks)
        outcomes = []
        for request, task in zip(plan, tasks, strict=True):
            if task.done():
                outcomes.append(task.result())
            else:
                task.cancel()
                outcomes.append(Outcome(request.index, Status.TIMEOUT, detail="run bound passed"))
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        after, drain_s = await wait_drained(session, url, config.drain_timeout_s)
        # The server still serves correctly after the load: the first use, alone again.
        (prompt, ignore_eos), max_tokens = next(iter(uses.items()))
        check = PlannedRequest(-1, prompt, max_tokens, ignore_eos)
        after_check = await run_one(session, url, prompts[0], check, config.request_timeout_s)
    return LoadResult(
        config=config,
        outcomes=outcomes,
        references=refs,
        wall_s=wall_s,
        reference_s=reference_s,
        max_in_flight=max_in_flight,
        peaks=peaks,
        before=before,
        after=after,
        drain_s=drain_s,
        after_check=after_check,
        timed_out=timed_out,
    )


# --- the verdict -------------------------------------------------------------------------


def violations(result: LoadResult) -> list[str]:
    """Every broken invariant, one line each (empty: the run proved them all)."""
    out: list[str] = []
    plan = {r.index: r for r in plan_requests(result.config)}
    if result.timed_out:
        out.append(f"the run did not end within {result.config.run_timeout_s:.0f} s")
    for o in result.outcomes:
        request = plan[o.index]
        ref = result.references[(request.prompt, request.ignore_eos)]
        if o.status is Status.ERROR:
            out.append(f"request {o.index} failed: {o.detail}")
        elif o.status is Status.TIMEOUT:
            out.append(f"request {o.index} stuck: {o.detail}")
        elif o.status is Status.ABORTED and request.abort is AbortKind.NONE:
            out.append(f"request {o.index} ended as aborted without a planned abort")
        elif o.status is Status.FINISHED:
            # Greedy: a request asking for fewer tokens gets the prefix of the longer solo
            # run, or all of it when the solo run stopped (EOS) sooner.
            want = ref[: request.max_tokens]
            if o.tokens != want:
                out.append(
                    f"request {o.index} (prompt {request.prompt}, max_tokens "
                    f"{request.max_tokens}) differs from its solo run at token "
                    f"{first_difference(o.tokens, want)}: got {o.tokens} want {want}"
                )
        if o.status is Status.ABORTED and o.tokens != ref[: len(o.tokens)]:
            out.append(
                f"aborted request {o.index} (prompt {request.prompt}) streamed tokens that are "
                f"not a prefix of its solo run: got {o.tokens} want {ref[: len(o.tokens)]}"
            )
    after = result.after
    # The server's own count of finished requests: each client-finished one, plus at most the
    # client-aborted ones whose last token was out before the client closed.
    served = sum(
        after.finished.get(k, 0.0) - result.before.finished.get(k, 0.0) for k in ("stop", "length")
    )
    finished, aborted = result.count(Status.FINISHED), result.count(Status.ABORTED)
    if not finished <= served <= finished + aborted:
        out.append(
            f"the server counts {served:g} finished requests (vllm:request_success_total), the "
            f"client {finished} finished and {aborted} aborted"
        )
    if not after.drained:
        out.append(
            f"server not drained {result.config.drain_timeout_s:.0f} s after the run: "
            f"running={after.running:g} waiting={after.waiting:g} kv_usage={after.kv_usage:g}"
        )
    check = result.after_check
    want0 = next(iter(result.references.values()))
    if check is None or check.status is not Status.FINISHED or check.tokens != want0:
        out.append(f"the request after the load did not reproduce the solo run: {check}")
    return out


def first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def summary(result: LoadResult) -> dict[str, Any]:
    """The figures of a run (printed and written as JSON by the benchmark)."""
    finished = result.count(Status.FINISHED)
    served = {
        k: result.after.finished.get(k, 0.0) - result.before.finished.get(k, 0.0)
        for k in result.after.finished
    }
    plan = plan_requests(result.config)
    return {
        "requests": len(result.outcomes),
        "planned_aborts": sum(1 for r in plan if r.abort is not AbortKind.NONE),
        "aborted": result.count(Status.ABORTED),
        "aborted_before_first_token": sum(
            1 for o in result.outcomes if o.status is Status.ABORTED and not o.tokens
        ),
        "finished": finished,
        "errors": result.count(Status.ERROR),
        "stuck": result.count(Status.TIMEOUT),
        "finished_tokens": sum(
            len(o.tokens) for o in result.outcomes if o.status is Status.FINISHED
        ),
        "streamed_tokens": sum(len(o.tokens) for o in result.outcomes),
        "wall_s": round(result.wall_s, 2),
        "req_per_s": round(len(result.outcomes) / result.wall_s, 2) if result.wall_s else None,
        "tokens_per_s": round(sum(len(o.tokens) for o in result.outcomes) / result.wall_s, 1)
        if result.wall_s
        else None,
        "max_request_s": round(max(o.elapsed_s for o in result.outcomes), 2),
        "solo_references_s": round(result.reference_s, 2),
        "distinct_prompts": len({prompt for prompt, _ in result.references}),
        "solo_references": len(result.references),
        "planned_aborts_finished_first": sum(
            1
            for o in result.outcomes
            if o.status is Status.FINISHED and plan[o.index].abort is not AbortKind.NONE
        ),
        "finished_by_reason": {
            reason: sum(
                1
                for o in result.outcomes
                if o.status is Status.FINISHED and o.finish_reason == reason
            )
            for reason in ("stop", "length")
        },
        "max_in_flight": result.max_in_flight,
        "server_peak_running": result.peaks.running,
        "server_peak_waiting": result.peaks.waiting,
        "server_peak_kv_usage": round(result.peaks.kv_usage, 4),
        "server_finished_by_reason": served,
        "preempted": result.after.preempted - result.before.preempted,
        "lane_steps": {
            lane: n - result.before.lane_steps.get(lane, 0.0)
            for lane, n in sorted(result.after.lane_steps.items())
        },
        "drain_s": round(result.drain_s, 2),
        "kv_usage_after": result.after.kv_usage,
        "running_after": result.after.running,
        "waiting_after": result.after.waiting,
    }
