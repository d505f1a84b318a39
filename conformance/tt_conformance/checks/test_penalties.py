"""Penalties: repetition, presence and frequency penalties reduce repetition, per request.

Promises:
- on a prompt that makes greedy decoding repeat itself, each penalty (repetition_penalty > 1,
  presence_penalty > 0, frequency_penalty > 0) makes the greedy output less repetitive than the
  same request without it (the most frequent token occurs fewer times);
- penalised greedy decoding is deterministic, so a batch whose requests carry different penalty
  values gives each request exactly the tokens it gives alone.
Why: on TT the device applies penalties from per-slot penalty state (prompt tokens, output token
counts) that the plugin rebuilds on every reload; a penalty that is dropped, applied to the wrong
slot or computed from stale history changes these outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    capacity,
    complete_all,
    complete_each,
    describe_body,
    greedy,
    max_count,
    mismatches,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.server import ServerInfo

pytestmark = pytest.mark.penalties

MAX_TOKENS = 24
# Prompts that push any language model into repeating a short unit.
REPETITIVE_PROMPTS = (
    "a a a a a a a a a a a a",
    "the the the the the the the the",
    "1 1 1 1 1 1 1 1 1 1",
)
PENALTIES = {
    "repetition_penalty": 2.0,
    "presence_penalty": 2.0,
    "frequency_penalty": 2.0,
}


def _most_repetitive(tt_server: ServerInfo, client: AsyncOpenAI) -> tuple[str, tuple[int, ...]]:
    outputs = complete_each(
        client,
        tt_server.model,
        [greedy(p, MAX_TOKENS, ignore_eos=True) for p in REPETITIVE_PROMPTS],
    )
    prompt, out = max(
        zip(REPETITIVE_PROMPTS, outputs, strict=True), key=lambda po: max_count(po[1].token_ids)
    )
    assert max_count(out.token_ids) >= MAX_TOKENS // 4, (
        "precondition: no prompt made greedy decoding repetitive, so a penalty has nothing to "
        f"reduce; outputs: {[o.describe() for o in outputs]}"
    )
    return prompt, out.token_ids


@pytest.mark.parametrize("name", list(PENALTIES))
def test_penalty_reduces_repetition(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, name: str
) -> None:
    prompt, plain = _most_repetitive(tt_server, tt_async_openai_client)
    value = PENALTIES[name]
    out = complete_each(
        tt_async_openai_client,
        tt_server.model,
        [greedy(prompt, MAX_TOKENS, ignore_eos=True, **{name: value})],
    )[0]
    assert max_count(out.token_ids) < max_count(plain), (
        f"{name}={value} did not reduce repetition on {prompt!r}: the most frequent token occurs "
        f"{max_count(out.token_ids)} times with it and {max_count(plain)} times without "
        f"(without: {list(plain)}; with: {out.describe()})"
    )


def test_penalty_on_other_row_does_not_leak(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI
) -> None:
    """A strongly penalised request next to an unpenalised one leaves the latter unchanged."""
    prompt, plain = _most_repetitive(tt_server, tt_async_openai_client)
    requests = [
        greedy(prompt, MAX_TOKENS, ignore_eos=True, repetition_penalty=2.0, frequency_penalty=2.0),
        greedy(prompt, MAX_TOKENS, ignore_eos=True),
    ]
    outs = complete_all(tt_async_openai_client, tt_server.model, requests)
    assert outs[1].token_ids == plain, (
        f"an unpenalised request changed next to a penalised copy: alone {list(plain)}, "
        f"batched {outs[1].describe()}"
    )


MIXED: tuple[dict[str, float], ...] = (
    {},
    {"repetition_penalty": 1.2},
    {"presence_penalty": 0.8},
    {"frequency_penalty": 0.8},
    {"repetition_penalty": 1.5, "presence_penalty": 0.5},
    {"frequency_penalty": 1.5, "presence_penalty": -0.5},
    {"repetition_penalty": 0.9},
    {"repetition_penalty": 2.0, "frequency_penalty": 1.0, "presence_penalty": 1.0},
)


def test_mixed_penalties_match_solo(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI
) -> None:
    prompts = REPETITIVE_PROMPTS + PLAIN_PROMPTS
    requests = [
        greedy(prompts[i % len(prompts)], MAX_TOKENS, ignore_eos=True, **MIXED[i % len(MIXED)])
        for i in range(capacity(tt_server))
    ]
    solo = complete_each(tt_async_openai_client, tt_server.model, requests)
    batched = complete_all(tt_async_openai_client, tt_server.model, requests)
    problems = mismatches([describe_body(r) for r in requests], solo, batched)
    assert not problems, "penalised greedy requests changed output when batched:\n" + "\n".join(
        problems
    )
