"""Helpers shared by the checks: request bodies, concurrent and streamed completions, token views.

Everything goes through the OpenAI-compatible HTTP API (the harness is black-box). Token ids come
from vLLM's ``return_token_ids`` extension so that outputs are compared token for token, never by
decoded text, and every id a check needs is derived from the server's own ``/tokenize``.

Concurrency: ``complete_all`` sends its requests at once from one event loop, so the server
batches them; ``complete_each`` sends them one after another, each alone on the server (as far as
this check is concerned). Comparisons between the two never depend on timing: a batch that happens
to be split by the scheduler still has to produce the same tokens.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tt_conformance.longtasks import PLAIN_PROMPTS as PLAIN_PROMPTS  # the checks take it from here

if TYPE_CHECKING:
    import openai

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo

Body = dict[str, Any]

# A prompt with many plausible continuations: sampled outputs vary from seed to seed.
VARIED_PROMPT = "Once upon a time"
GREEDY: Body = {"temperature": 0.0}


def capacity(tt_server: ServerInfo) -> int:
    """Concurrent sequences the server runs at once (--max-num-seqs is per lane)."""
    return tt_server.max_num_seqs * tt_server.lanes


def body(prompt: str | list[int], max_tokens: int, **params: Any) -> Body:
    return {"prompt": prompt, "max_tokens": max_tokens, **params}


def greedy(prompt: str | list[int], max_tokens: int, **params: Any) -> Body:
    return body(prompt, max_tokens, **GREEDY, **params)


def fill(templates: Sequence[Body], count: int) -> list[Body]:
    """``count`` bodies cycling through ``templates``, each with its own plain prompt so that
    no two requests in a batch share a prompt unless a template sets one."""
    out: list[Body] = []
    for i in range(count):
        item = dict(templates[i % len(templates)])
        item.setdefault("prompt", PLAIN_PROMPTS[i % len(PLAIN_PROMPTS)])
        out.append(item)
    return out


@dataclass(frozen=True)
class Output:
    """One completion choice, as compared by the checks."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None
    logprobs: Any = None  # openai CompletionChoice.logprobs (tokens, token_logprobs, top_logprobs)
    completion_tokens: int | None = None

    def describe(self) -> str:
        return f"{self.text!r} (tokens {list(self.token_ids)}, finish {self.finish_reason})"


def _output(response: Any) -> Output:
    choice = response.choices[0]
    ids = getattr(choice, "token_ids", None)
    if ids is None:
        raise AssertionError(
            "the server returned no token_ids although the request set return_token_ids=true "
            "(vLLM's extension, needed to compare outputs token for token)"
        )
    usage = getattr(response, "usage", None)
    return Output(
        text=choice.text,
        token_ids=tuple(int(t) for t in ids),
        finish_reason=choice.finish_reason,
        logprobs=choice.logprobs,
        completion_tokens=None if usage is None else usage.completion_tokens,
    )


async def acomplete(client: openai.AsyncOpenAI, model: str, request: Body) -> Output:
    """POST /v1/completions with ``request`` (a JSON body without "model")."""
    extra = dict(request)
    prompt = extra.pop("prompt")
    extra.setdefault("return_token_ids", True)
    response = await client.completions.create(model=model, prompt=prompt, extra_body=extra)
    return _output(response)


def complete_sync(client: openai.OpenAI, model: str, request: Body) -> Output:
    """One request on the synchronous client (module-scoped fixtures use it for references)."""
    extra = dict(request)
    prompt = extra.pop("prompt")
    extra.setdefault("return_token_ids", True)
    return _output(client.completions.create(model=model, prompt=prompt, extra_body=extra))


async def achat(
    client: openai.AsyncOpenAI, model: str, messages: list[Any], request: Body
) -> Output:
    """POST /v1/chat/completions; ``request`` holds the other body fields."""
    extra = dict(request)
    extra.setdefault("return_token_ids", True)
    response = await client.chat.completions.create(
        model=model, messages=messages, extra_body=extra
    )
    choice = response.choices[0]
    ids = getattr(choice, "token_ids", None)
    if ids is None:
        raise AssertionError("the server returned no token_ids for a chat completion")
    return Output(
        text=choice.message.content or "",
        token_ids=tuple(int(t) for t in ids),
        finish_reason=choice.finish_reason,
        logprobs=choice.logprobs,
        completion_tokens=response.usage.completion_tokens if response.usage else None,
    )


def complete_all(client: openai.AsyncOpenAI, model: str, requests: Sequence[Body]) -> list[Output]:
    """Send all requests at once (one batch on the server); outputs in request order."""

    async def run() -> list[Output]:
        return list(await asyncio.gather(*(acomplete(client, model, r) for r in requests)))

    return asyncio.run(run())


def complete_each(client: openai.AsyncOpenAI, model: str, requests: Sequence[Body]) -> list[Output]:
    """Send the requests one after another, each alone."""

    async def run() -> list[Output]:
        return [await acomplete(client, model, r) for r in requests]

    return asyncio.run(run())


def shuffled(items: Sequence[Any]) -> tuple[list[Any], list[int]]:
    """A fixed reordering (reverse, then rotate by one third) and its index map: output i of the
    reordered list is input ``order[i]``. Deterministic, so a failure reproduces."""
    n = len(items)
    order = list(reversed(range(n)))
    shift = max(1, n // 3) if n > 1 else 0
    order = order[shift:] + order[:shift]
    return [items[i] for i in order], order


def unshuffle(outputs: Sequence[Any], order: Sequence[int]) -> list[Any]:
    back: list[Any] = [None] * len(order)
    for position, index in enumerate(order):
        back[index] = outputs[position]
    return back


def mismatches(
    labels: Sequence[str], expected: Sequence[Output], actual: Sequence[Output]
) -> list[str]:
    """Readable lines for every request whose tokens differ."""
    lines = []
    for label, want, got in zip(labels, expected, actual, strict=True):
        if want.token_ids != got.token_ids:
            lines.append(
                f"  {label}:\n    alone:   {want.describe()}\n    batched: {got.describe()}"
            )
    return lines


def describe_body(request: Body) -> str:
    shown = {k: v for k, v in request.items() if k not in ("return_token_ids",)}
    return ", ".join(f"{k}={v!r}" for k, v in shown.items())


# --------------------------------------------------------------------------- streaming


@dataclass
class StreamResult:
    """A streamed completion: token ids in order, when each chunk arrived, how it ended."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    chunk_times: list[tuple[float, int]] = field(default_factory=list)  # (t, tokens so far)
    started: float = 0.0
    finish_reason: str | None = None
    aborted: bool = False

    @property
    def ttft_s(self) -> float:
        return self.chunk_times[0][0] - self.started if self.chunk_times else math.nan

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first (chunks may carry several tokens)."""
        if len(self.token_ids) < 2 or len(self.chunk_times) < 2:
            return math.nan
        first_t, first_n = self.chunk_times[0]
        last_t, last_n = self.chunk_times[-1]
        if last_n <= first_n:
            return math.nan
        return (last_t - first_t) / (last_n - first_n)


ProgressHook = Callable[[int], Awaitable[None] | None]


async def astream(
    client: openai.AsyncOpenAI,
    model: str,
    request: Body,
    on_progress: ProgressHook | None = None,
    abort_after: int | None = None,
) -> StreamResult:
    """Stream a completion. ``on_progress(n_tokens)`` runs after every chunk; with
    ``abort_after`` the stream is closed (the request aborted) once that many tokens arrived."""
    extra = dict(request)
    prompt = extra.pop("prompt")
    extra.setdefault("return_token_ids", True)
    result = StreamResult(started=time.perf_counter())
    stream = await client.completions.create(
        model=model, prompt=prompt, stream=True, extra_body=extra
    )
    try:
        async for chunk in stream:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            ids = getattr(choice, "token_ids", None) or []
            if ids:
                result.token_ids.extend(int(t) for t in ids)
                result.chunk_times.append((time.perf_counter(), len(result.token_ids)))
            result.text += choice.text or ""
            if choice.finish_reason is not None:
                result.finish_reason = choice.finish_reason
            if on_progress is not None:
                maybe = on_progress(len(result.token_ids))
                if maybe is not None:
                    await maybe
            if abort_after is not None and len(result.token_ids) >= abort_after:
                result.aborted = result.finish_reason is None
                break
    finally:
        await stream.close()
    return result


# --------------------------------------------------------------------------- tokens and server


def token_ids_of(tt_raw_http: RawHttp, text: str) -> list[int]:
    """The server's tokenization of ``text`` without special tokens (no BOS)."""
    return tt_raw_http.tokenize(text, add_special_tokens=False)


def contains_run(haystack: Sequence[int], needle: Sequence[int]) -> bool:
    n = len(needle)
    return n > 0 and any(
        tuple(haystack[i : i + n]) == tuple(needle) for i in range(len(haystack) - n + 1)
    )


def max_count(token_ids: Sequence[int]) -> int:
    """How often the most frequent token occurs: a simple repetition measure."""
    counts: dict[int, int] = {}
    for t in token_ids:
        counts[t] = counts.get(t, 0) + 1
    return max(counts.values(), default=0)


def assert_healthy(tt_raw_http: RawHttp) -> None:
    """/health answers 200 and a small greedy completion succeeds."""
    health = tt_raw_http.health()
    assert health.status_code == 200, (
        f"GET /health returned {health.status_code}: {health.text[:200]}"
    )
    resp = tt_raw_http.completions(greedy(PLAIN_PROMPTS[0], 4))
    assert resp.status_code == 200, (
        f"a plain completion failed after the previous requests: HTTP {resp.status_code} "
        f"{resp.text[:300]}"
    )
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] in ("length", "stop"), choice


def metric(tt_raw_http: RawHttp, name: str, model: str) -> float | None:
    return tt_raw_http.metric_value(name, model_name=model)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of finite values (q in [0, 100])."""
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(finite)))
    return finite[rank - 1]
