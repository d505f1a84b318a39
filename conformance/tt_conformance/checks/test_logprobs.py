"""Logprobs: the right number of alternatives, well ordered, consistent with the sampled token.

Promises, for ``logprobs=k`` with k in {0, 1, 3, 5, 10, 20}, alone and in batches that fill a
part of or the whole server (requests with different k side by side):
- every generated token has one ``top_logprobs`` entry holding the k most likely tokens plus the
  sampled token (k + 1 entries when the sampled token is not among the top k, else k; one entry
  for k = 0), as vLLM lays it out;
- all values are log-probabilities (<= 0), the top-k alternatives are in descending order, the
  sampled token is present with the logprob reported for it, and a sampled token outside the
  top k is no more likely than the k-th;
- for greedy requests the sampled token is the most likely one (top-1);
- ``logprobs`` above the server's maximum (20) and ``prompt_logprobs`` (not supported on TT) are
  rejected with a 400 naming the field; chat ``top_logprobs`` works the same way.
Why: the device returns logprobs for the batch's largest k in one tensor, and the plugin slices
each request's share; a slicing or ordering slip shows up as wrong counts or values here.
Tokens are requested as ``token_id:N`` strings so that distinct tokens never collapse.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    Body,
    Output,
    body,
    capacity,
    complete_all,
    complete_each,
    describe_body,
)
from tt_conformance.ttmetrics import device_decode, host_fallback
from tt_conformance.ttpath import tt_rule

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo
    from tt_conformance.ttpath import TTPath

pytestmark = pytest.mark.logprobs

KS = (0, 1, 3, 5, 10, 20)
MAX_TOKENS = 8
EPS = 1e-4


def logprob_request(i: int, k: int, sampled: bool) -> Body:
    params = {"temperature": 1.0, "seed": 100 + i} if sampled else {"temperature": 0.0}
    return body(
        PLAIN_PROMPTS[i % len(PLAIN_PROMPTS)],
        MAX_TOKENS,
        logprobs=k,
        return_tokens_as_token_ids=True,
        ignore_eos=True,
        **params,
    )


def token_of(key: str) -> int:
    assert key.startswith("token_id:"), f"expected 'token_id:N' keys, got {key!r}"
    return int(key.split(":", 1)[1])


def check_logprobs(request: Body, out: Output) -> None:
    k = request["logprobs"]
    greedy = request["temperature"] == 0.0
    what = describe_body(request)
    lp = out.logprobs
    assert lp is not None, f"{what}: no logprobs in the response"
    assert len(lp.tokens) == len(out.token_ids) == len(lp.token_logprobs) == len(lp.top_logprobs), (
        f"{what}: {len(out.token_ids)} tokens but {len(lp.tokens)} logprob tokens, "
        f"{len(lp.token_logprobs)} token_logprobs, {len(lp.top_logprobs)} top_logprobs entries"
    )
    for pos, (tok, tok_lp, top) in enumerate(
        zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True)
    ):
        where = f"{what}, token {pos}"
        sampled = token_of(tok)
        assert sampled == out.token_ids[pos], (
            f"{where}: logprob token {tok} != {out.token_ids[pos]}"
        )
        assert top is not None, f"{where}: top_logprobs entry is null"
        entries = [(token_of(key), value) for key, value in top.items()]
        ids = [t for t, _ in entries]
        assert sampled in ids, f"{where}: sampled token {sampled} missing from {top}"
        sampled_value = dict(entries)[sampled]
        assert math.isfinite(tok_lp) and abs(sampled_value - tok_lp) <= EPS, (
            f"{where}: token_logprob {tok_lp} but top_logprobs says {sampled_value}"
        )
        assert all(v <= EPS for _, v in entries), f"{where}: positive logprob in {top}"
        # vLLM's layout: the sampled token first, then the top k in descending order.
        alternatives = [v for t, v in entries[1:]] if ids[0] == sampled else [v for _, v in entries]
        in_top = len(entries) == max(k, 1)
        if k == 0:
            assert len(entries) == 1, f"{where}: logprobs=0 must give only the sampled token: {top}"
        else:
            assert len(entries) in (k, k + 1), f"{where}: {len(entries)} entries for k={k}: {top}"
        assert all(a >= b - EPS for a, b in itertools.pairwise(alternatives)), (
            f"{where}: alternatives not in descending order: {top}"
        )
        if not in_top and alternatives:
            assert sampled_value <= min(alternatives) + EPS, (
                f"{where}: sampled token outside the top {k} but more likely than them: {top}"
            )
        if greedy:
            best = max(v for _, v in entries)
            assert sampled_value >= best - EPS, (
                f"{where}: greedy picked {sampled} ({sampled_value}) but {top} has a better token"
            )


@pytest.mark.tt_path
# "one" runs alone: its only device-path request (k=0, the sampled token's logprob) would be
# batched with a neighbour's host-only request under xdist and never reach the device.
@pytest.mark.parametrize(
    "fraction",
    [pytest.param("one", marks=pytest.mark.xdist_group("exclusive")), "half", "full", "full_host"],
)
def test_logprobs_shape_and_values(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, tt_path: TTPath, fraction: str
) -> None:
    """Every k, greedy and sampled: each alone, then mixed in batches of half and all slots;
    ``full_host`` adds min_p to one request per batch, so the whole batch is sampled (and its
    logprobs computed) by vLLM's host sampler instead of the device. The plugin's counters must
    show the device path (or, for ``full_host``, the min_p fallback) was taken."""
    tt_path.start()
    if fraction == "one":
        requests = [logprob_request(i, k, sampled=i % 2 == 1) for i, k in enumerate(KS)]
        outputs = complete_each(tt_async_openai_client, tt_server.model, requests)
        for request, out in zip(requests, outputs, strict=True):
            check_logprobs(request, out)
        tt_path.conclude(device_decode())
        return
    size = capacity(tt_server) if fraction.startswith("full") else max(2, capacity(tt_server) // 2)
    # k cycles through KS across consecutive batches of ``size``, so every fraction covers every
    # k even when a batch is smaller than len(KS) (half of 8 slots: two batches of 4).
    # Alternate greedy/sampled, shifted every len(KS) requests so each k gets both when the
    # batch is large enough.
    requests = [
        logprob_request(i, KS[i % len(KS)], sampled=(i + i // len(KS)) % 2 == 1)
        for i in range(size * math.ceil(len(KS) / size))
    ]
    for start in range(0, len(requests), size):
        batch = requests[start : start + size]
        if fraction == "full_host":
            j = min(1, len(batch) - 1)
            batch[j] = {**batch[j], "min_p": 0.05}
        outputs = complete_all(tt_async_openai_client, tt_server.model, batch)
        for request, out in zip(batch, outputs, strict=True):
            check_logprobs(request, out)
    if fraction == "full_host":
        # The route names the first host-only feature of the batch: where the device cannot
        # return these logprobs at all (a flat sampled-token logprob needs 8 or 32 devices per
        # rank; k >= 1 only GPT-OSS), that is "logprobs", before min_p is looked at. Either way
        # the claim is that vLLM's host sampler took the whole batch.
        tt_path.conclude(host_fallback(["min_p", "logprobs"]))
    else:
        tt_path.conclude(device_decode())


def test_logprobs_same_alone_and_batched(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI
) -> None:
    """A greedy request's logprobs do not depend on the k of its neighbours."""
    request = logprob_request(0, 3, sampled=False)
    alone = complete_each(tt_async_openai_client, tt_server.model, [request])[0]
    others = [logprob_request(i, 20, sampled=True) for i in range(1, max(2, capacity(tt_server)))]
    batched = complete_all(tt_async_openai_client, tt_server.model, [request, *others])[0]
    assert batched.token_ids == alone.token_ids, f"{alone.describe()} vs {batched.describe()}"
    for pos, (a, b) in enumerate(
        zip(alone.logprobs.top_logprobs, batched.logprobs.top_logprobs, strict=True)
    ):
        assert list(a) == list(b), f"token {pos}: top tokens {list(a)} alone, {list(b)} batched"
        for key in a:
            assert abs(a[key] - b[key]) <= 1e-3, f"token {pos} {key}: {a[key]} vs {b[key]}"


TT_LOGPROBS_RULES = {
    "logprobs": "TT returns at most 20 logprobs per token: logprobs > 20 is rejected at request "
    "validation",
    "prompt_logprobs": "TT rejects prompt_logprobs at request validation",
}


@pytest.mark.tt_path  # TT rules: not applicable to a server without the plugin
@pytest.mark.parametrize(
    ("field", "extra"),
    [
        pytest.param("logprobs", {"logprobs": 21}, id="logprobs_21"),
        pytest.param("prompt_logprobs", {"prompt_logprobs": 1}, id="prompt_logprobs"),
    ],
)
def test_logprobs_rejected(
    tt_server: ServerInfo, tt_raw_http: RawHttp, field: str, extra: Body
) -> None:
    rule = TT_LOGPROBS_RULES[field]
    resp = tt_raw_http.completions(body(PLAIN_PROMPTS[0], 4, **extra))
    error = tt_raw_http.error_of(resp)
    tt_rule(rule, resp.status_code == 400,
            f"{extra}: expected 400, got {resp.status_code}: {error.body}")  # fmt: skip
    tt_rule(rule, field in error.message,
            f"{extra}: the error does not name {field!r}: {error.message!r}")  # fmt: skip


@pytest.mark.parametrize("k", [1, 5, 20])
def test_chat_top_logprobs(tt_server: ServerInfo, tt_raw_http: RawHttp, k: int) -> None:
    resp = tt_raw_http.chat(
        {
            "messages": [{"role": "user", "content": "Count from one to five."}],
            "max_tokens": MAX_TOKENS,
            "temperature": 0.0,
            "logprobs": True,
            "top_logprobs": k,
            "return_tokens_as_token_ids": True,
        }
    )
    assert resp.status_code == 200, resp.text[:300]
    content = resp.json()["choices"][0]["logprobs"]["content"]
    assert content, "chat logprobs: no per-token entries"
    for pos, item in enumerate(content):
        top = item["top_logprobs"]
        assert len(top) == k, f"token {pos}: {len(top)} top_logprobs for top_logprobs={k}"
        values = [t["logprob"] for t in top]
        assert all(v <= EPS for v in values), f"token {pos}: positive logprob {values}"
        assert all(a >= b - EPS for a, b in itertools.pairwise(values)), (
            f"token {pos}: not descending {values}"
        )
        assert (
            top[0]["token"] == item["token"] and abs(top[0]["logprob"] - item["logprob"]) <= EPS
        ), (
            f"token {pos}: greedy token {item['token']} ({item['logprob']}) is not the top-1 "
            f"{top[0]}"
        )


def test_chat_top_logprobs_over_max_rejected(tt_server: ServerInfo, tt_raw_http: RawHttp) -> None:
    resp = tt_raw_http.chat(
        {
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 2,
            "logprobs": True,
            "top_logprobs": 21,
        }
    )
    error = tt_raw_http.error_of(resp)
    assert resp.status_code == 400, f"top_logprobs=21: expected 400, got {resp.status_code}"
    assert "logprobs" in error.message, f"error does not name the field: {error.message!r}"
