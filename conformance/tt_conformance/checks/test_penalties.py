"""Penalties: repetition, presence and frequency penalties reduce repetition, per request.

Promises:
- on a prompt that makes greedy decoding repeat itself, each penalty (repetition_penalty > 1,
  presence_penalty > 0, frequency_penalty > 0) makes the greedy output less repetitive than the
  same request without it (the most frequent token occurs fewer times);
- penalised greedy decoding is deterministic, so a batch whose requests carry different penalty
  values gives each request exactly the tokens it gives alone; the cases are the penalties
  matrix (tt_conformance.situation_matrix.PENALTIES), with and without logprobs;
- on a repeated pattern ("a b c a b c a b c"), which greedy decoding continues by repeating it,
  greedy with each presence, frequency or repetition penalty gives exactly the tokens vLLM's host
  path gives for the same request, so it differs from the unpenalised output wherever the host
  path's does (a penalty the device drops, or computes from other counts, shows up here).
Why: on TT the device applies penalties from per-slot penalty state (prompt tokens, output token
counts) that the plugin rebuilds on every reload; a penalty that is dropped, applied to the wrong
slot or computed from stale history changes these outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    Body,
    Output,
    capacity,
    complete_all,
    complete_each,
    greedy,
    max_count,
    mismatches,
)
from tt_conformance.checks.reference import HOST_ONLY, HOST_REASONS, device_outputs
from tt_conformance.situation_matrix import PENALTIES as PENALTY_MATRIX
from tt_conformance.situation_matrix import Cell, cells
from tt_conformance.ttmetrics import host_fallback

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.fixtures import RecordCell
    from tt_conformance.server import ServerInfo
    from tt_conformance.ttpath import TTPath

pytestmark = pytest.mark.penalties

MAX_TOKENS = 24
# The same request's sampled-token logprob alone and batched (device_sampling's tolerance for
# device against host: a batch with a top-k logprobs row may take the host path).
LOGPROB_TOLERANCE = 0.05
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


def _matrix_body(prompt: str, cell: Cell) -> dict[str, Any]:
    fields = cell.as_dict()
    logprobs = fields.pop("logprobs")
    extra = {} if logprobs is None else {"logprobs": logprobs}
    return greedy(prompt, MAX_TOKENS, ignore_eos=True, **fields, **extra)


def _logprob_gaps(label: str, solo: Output, batched: Output) -> list[str]:
    """The sampled tokens' logprobs, alone against batched (same tokens: compared first)."""
    if solo.logprobs is None or batched.logprobs is None:
        return []
    pairs = zip(solo.logprobs.token_logprobs, batched.logprobs.token_logprobs, strict=True)
    return [
        f"  {label}: token {i} logprob {a:.4f} alone, {b:.4f} batched"
        for i, (a, b) in enumerate(pairs)
        if abs(a - b) > LOGPROB_TOLERANCE
    ]


def test_mixed_penalties_match_solo(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, tt_record_cell: RecordCell
) -> None:
    """Every cell of the penalties matrix (situation_matrix.PENALTIES: each penalty off, below,
    typical and strong, with logprobs off / 0 / 1 / 5), served alone and then in full batches
    of mixed cells: each request's tokens (and logprobs) must be its solo ones."""
    prompts = REPETITIVE_PROMPTS + PLAIN_PROMPTS
    matrix = cells(PENALTY_MATRIX)
    requests = [_matrix_body(prompts[i % len(prompts)], c) for i, c in enumerate(matrix)]
    solo = complete_each(tt_async_openai_client, tt_server.model, requests)
    size = capacity(tt_server)
    batched: list[Output] = []
    for start in range(0, len(requests), size):
        batched += complete_all(
            tt_async_openai_client, tt_server.model, requests[start : start + size]
        )
    labels = [c.label for c in matrix]
    problems = mismatches(labels, solo, batched)
    if not problems:
        for label, a, b in zip(labels, solo, batched, strict=True):
            problems += _logprob_gaps(label, a, b)
    for cell in matrix:
        tt_record_cell(PENALTY_MATRIX.name, cell.label)
    assert not problems, "penalised greedy requests changed output when batched:\n" + "\n".join(
        problems
    )


# The common penalty test: a short cycle written out three times, which greedy decoding carries
# on by repeating it; each penalty pushes the repeated tokens down, so greedy leaves the cycle.
PATTERN_PROMPTS = ("a b c a b c a b c", "red blue green red blue green red blue green")
PATTERN_PENALTIES: tuple[Body, ...] = (
    {"presence_penalty": 1.0},
    {"presence_penalty": 2.0},
    {"frequency_penalty": 1.0},
    {"frequency_penalty": 2.0},
    {"repetition_penalty": 1.3},
    {"repetition_penalty": 2.0},
)


def test_penalties_on_a_repeated_pattern_match_the_host_path(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, tt_path: TTPath
) -> None:
    cases: list[tuple[str, Body]] = [
        (prompt, params) for prompt in PATTERN_PROMPTS for params in ({}, *PATTERN_PENALTIES)
    ]
    requests = [greedy(prompt, MAX_TOKENS, ignore_eos=True, **p) for prompt, p in cases]
    device = device_outputs(tt_async_openai_client, tt_server.model, tt_path, requests)
    # The same requests on vLLM's host sampler (HOST_ONLY routes them there; min_p does not
    # change a greedy choice): the reference for what each penalty does to greedy decoding.
    tt_path.start()
    host = complete_all(
        tt_async_openai_client,
        tt_server.model,
        [{**r, **HOST_ONLY, "logprobs": 1} for r in requests],
    )
    tt_path.conclude(host_fallback(HOST_REASONS))
    plain = {prompt: out.token_ids for (prompt, p), out in zip(cases, host, strict=True) if not p}
    changed = [
        (prompt, p)
        for (prompt, p), out in zip(cases, host, strict=True)
        if p and out.token_ids != plain[prompt]
    ]
    assert changed, (
        "precondition: no penalty changed the host path's greedy output on a repeated pattern, "
        "so this check cannot see penalties; unpenalised host outputs: "
        f"{[h.describe() for (_, p), h in zip(cases, host, strict=True) if not p]}"
    )
    problems = [
        f"{prompt!r} {p or 'no penalty'}: device {d.describe()}, host path {h.describe()}"
        + (" (the host path differs from the unpenalised output)" if (prompt, p) in changed else "")
        for (prompt, p), d, h in zip(cases, device, host, strict=True)
        if d.token_ids != h.token_ids
    ]
    assert not problems, (
        "penalised greedy decoding on a repeated pattern differs from vLLM's host path:\n  "
        + "\n  ".join(problems)
    )
