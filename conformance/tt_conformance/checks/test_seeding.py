"""Seeding: a seed makes sampling reproducible; different seeds give variety.

Promises:
- the same request with the same seed gives the same tokens, sent twice in a row or twice in
  the same batch (randomness is per request, not drawn from a generator the batch shares);
- different seeds do not all give the same output on a prompt with many continuations (a
  sampler that ignores the seed, or a device that reseeds every row alike, fails this);
- ``top_k=1`` at any temperature, and ``temperature=0`` with a seed and top-k/top-p set, are
  plain greedy decoding;
- negative seeds are accepted (vLLM takes any integer) and reproduce, except -1, which vLLM
  reads as "no seed" and only has to give a full-length completion; the server stays healthy.
Why: the device emulates vLLM's sampler with seeds of its own (a draw is a function of the seed
and the position), so a TT server can break seeding in ways a GPU server cannot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    VARIED_PROMPT,
    Body,
    assert_healthy,
    body,
    complete_all,
    complete_each,
    greedy,
)

# Seeded outputs are compared across runs, so these checks run alone: a host-only request from
# another check sharing the batch would switch it to the host sampler, whose seeded draws differ
# from the device's (that interaction has its own check in test_sampling_fallback).
if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo

pytestmark = [pytest.mark.seeding, pytest.mark.xdist_group("exclusive")]

MAX_TOKENS = 16
SEEDS = (1, 2, 3, 4, 5, 6)


def sampled(seed: int | None, prompt: str = VARIED_PROMPT, **params: object) -> Body:
    extra = {} if seed is None else {"seed": seed}
    return body(prompt, MAX_TOKENS, temperature=1.0, ignore_eos=True, **extra, **params)


def test_same_seed_reproduces(tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI) -> None:
    request = sampled(4242)
    first, second = complete_each(tt_async_openai_client, tt_server.model, [request, request])
    assert first.token_ids == second.token_ids, (
        f"seed 4242 gave two different outputs:\n  {first.describe()}\n  {second.describe()}"
    )


def test_same_seed_twice_in_one_batch(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI
) -> None:
    """Two identical seeded requests in one batch (other seeded requests around) agree, and
    agree with the same request alone."""
    request = sampled(777)
    others = [sampled(seed, prompt=PLAIN_PROMPTS[seed % len(PLAIN_PROMPTS)]) for seed in (11, 12)]
    alone = complete_each(tt_async_openai_client, tt_server.model, [request])[0]
    outputs = complete_all(tt_async_openai_client, tt_server.model, [request, *others, request])
    assert outputs[0].token_ids == outputs[-1].token_ids == alone.token_ids, (
        "seed 777 gave different outputs alone and twice in one batch:\n"
        f"  alone:   {alone.describe()}\n  first:   {outputs[0].describe()}\n"
        f"  second:  {outputs[-1].describe()}"
    )


def test_different_seeds_give_variety(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI
) -> None:
    outputs = complete_all(tt_async_openai_client, tt_server.model, [sampled(s) for s in SEEDS])
    distinct = {out.token_ids for out in outputs}
    assert len(distinct) >= 2, (
        f"{len(SEEDS)} different seeds at temperature 1.0 on {VARIED_PROMPT!r} all gave "
        f"{outputs[0].describe()}: the seed does not reach the sampler"
    )


def test_unseeded_requests_give_variety(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI
) -> None:
    """Without a seed every request draws fresh randomness (the plugin picks seeds itself)."""
    outputs = complete_all(tt_async_openai_client, tt_server.model, [sampled(None)] * len(SEEDS))
    distinct = {out.token_ids for out in outputs}
    assert len(distinct) >= 2, (
        f"{len(SEEDS)} unseeded requests at temperature 1.0 all gave {outputs[0].describe()}"
    )


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"temperature": 1.0, "top_k": 1, "seed": 5}, id="top_k1_t1"),
        pytest.param({"temperature": 2.0, "top_k": 1}, id="top_k1_t2_unseeded"),
        pytest.param({"temperature": 0.0, "seed": 99, "top_k": 40, "top_p": 0.5}, id="t0_seeded"),
    ],
)
def test_degenerate_sampling_equals_greedy(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, params: Body
) -> None:
    prompts = PLAIN_PROMPTS[:3]
    reference = complete_all(
        tt_async_openai_client,
        tt_server.model,
        [greedy(p, MAX_TOKENS, ignore_eos=True) for p in prompts],
    )
    outputs = complete_all(
        tt_async_openai_client,
        tt_server.model,
        [body(p, MAX_TOKENS, ignore_eos=True, **params) for p in prompts],
    )
    for prompt, want, got in zip(prompts, reference, outputs, strict=True):
        assert got.token_ids == want.token_ids, (
            f"{params} on {prompt!r} is not greedy:\n  greedy: {want.describe()}\n"
            f"  got:    {got.describe()}"
        )


@pytest.mark.parametrize("seed", [-1, -12345])
def test_negative_seed(tt_server: ServerInfo, tt_raw_http: RawHttp, seed: int) -> None:
    """Negative seeds are accepted; vLLM reads -1 as "no seed", any other one must reproduce."""
    request = {**sampled(seed), "return_token_ids": True}
    first = tt_raw_http.completions(request)
    assert first.status_code == 200, (
        f"seed {seed} rejected (HTTP {first.status_code}): {tt_raw_http.error_of(first).message!r}"
    )
    a = first.json()["choices"][0]["token_ids"]
    assert len(a) == MAX_TOKENS, f"seed {seed}: {len(a)} tokens, expected {MAX_TOKENS}"
    if seed != -1:
        second = tt_raw_http.completions(request)
        assert second.status_code == 200, f"seed {seed} failed the second time: {second.text}"
        b = second.json()["choices"][0]["token_ids"]
        assert a == b, f"seed {seed} not reproducible: {a} vs {b}"
    assert_healthy(tt_raw_http)
