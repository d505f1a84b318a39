"""Device sampling draws tokens with vLLM's probabilities, not only from vLLM's allowed set.

The allowed-set check (test_device_sampling.py) catches a device token vLLM could never draw; a
sampler with the right support but the wrong shape (a temperature applied twice, a uniform draw
over the top k) passes it. Here the device's seeded draws are counted and compared with the
distribution vLLM's sampling gives from the host path's logprobs.

1. ``DRAWS`` requests per case, seeds ``SEED0 + i``, ``max_tokens=2``, all at once on the device
   path (the counters must show device-sampled decode steps; the first token is sampled where
   the plugin samples prefill, the second by a device decode step).
2. Draws are grouped by context (the prompt for the first token; the prompt plus the first token
   for the second); a context with at least ``MIN_DRAWS`` draws is teacher-forced once through
   the host path (20 raw logprobs) and its token probabilities are computed with vLLM's
   semantics (`reference.draw_distribution`: temperature, then top-k). Without a top-k the
   unlisted tokens are one bin whose probability is bounded from their known total mass (below
   temperature 1 it is tiny); a context whose top-k boundary is within the numeric tolerance, or
   whose unlisted tokens may hold more than 1e-4, is left out.
3. Pearson's chi-square of observed against expected counts (bins expecting fewer than 5 pooled)
   is summed over the contexts; the check fails when the pooled p-value is below ``ALPHA`` or a
   draw has probability 0.

Statistics: a correct device fails with probability ``ALPHA`` = 1e-4 (the chi-square
approximation with every bin expecting >= 5, given logits equal to the host path's to within
the tolerances). Power against a temperature applied twice is at least 0.75 per context on
language-model-like distributions (tests/conformance/test_draw_frequency_statistics.py), and the
mutation suite's TemperatureSquared is killed by this check (docs/CONFORMANCE.md).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest

from tt_conformance.checks._support import Body, body
from tt_conformance.checks.reference import (
    HOST_REASONS,
    REST,
    device_outputs,
    draw_distribution,
    prompt_ids,
    teacher_forced,
)
from tt_conformance.chisquare import Fit, chi2_sf, goodness_of_fit
from tt_conformance.ttmetrics import host_fallback

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo
    from tt_conformance.ttpath import TTPath

__all__ = ["ALPHA", "CASES", "DRAWS", "MIN_DRAWS"]

pytestmark = [pytest.mark.device_sampling, pytest.mark.xdist_group("exclusive")]

ALPHA = 1e-4  # false-alarm rate of one run on a correct device
DRAWS = 240  # per case; sent at once, so the server batches them
MIN_DRAWS = 40  # a context drawn fewer times is not tested (too few for the approximation)
SEED0 = 7000
# Well below temperature 1 a sampler that ignores or squares the temperature changes the shape of
# the distribution (its support stays: the allowed-set check cannot see it). No top-p: a nucleus
# boundary falls among small tokens, where the device's and the host's numerics may fairly
# disagree about it (the allowed-set check covers top-p exactly).
# The prompts have a few likely next tokens of unequal weight (a city's first letters, a colour),
# where temperature moves the most probability; most prompts are either near-certain or spread
# evenly over many words, and both hide a wrong temperature.
CASES: tuple[tuple[str, str, Body], ...] = (
    ("t0.5", "Alice lives in", {"temperature": 0.5}),
    ("top_k4_t0.5", "Alice gave Bob a", {"temperature": 0.5, "top_k": 4}),
)


def _worst(fits: list[tuple[str, Fit]]) -> str:
    label, fit = max(fits, key=lambda lf: lf[1].statistic)
    bins = ", ".join(f"{name}: {o} drawn, {e:.1f} expected" for name, o, e in fit.bins)
    return f"{label}: chi-square {fit.statistic:.1f} on {fit.df} df ({bins})"


def test_seeded_draw_frequencies_follow_vllms_distribution(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_raw_http: RawHttp,
    tt_path: TTPath,
) -> None:
    requests = [
        body(prompt, 2, ignore_eos=True, seed=SEED0 + i, **params)
        for _, prompt, params in CASES
        for i in range(DRAWS)
    ]
    outputs = device_outputs(tt_async_openai_client, tt_server.model, tt_path, requests)
    prompts = [tuple(prompt_ids(tt_raw_http, prompt)) for _, prompt, _ in CASES]
    # (case, tokens drawn before) -> how often each token was drawn next
    draws: dict[tuple[int, tuple[int, ...]], Counter[int]] = {}
    for i, out in enumerate(outputs):
        for pos, token in enumerate(out.token_ids):
            draws.setdefault((i // DRAWS, out.token_ids[:pos]), Counter())[token] += 1
    tested = sorted(key for key, c in draws.items() if c.total() >= MIN_DRAWS)
    tt_path.start()
    steps = teacher_forced(
        tt_async_openai_client,
        tt_server.model,
        [(prompts[case] + before, [0]) for case, before in tested],
    )  # one host step per context: the logprobs of the token after it
    tt_path.conclude(host_fallback(HOST_REASONS))
    fits: list[tuple[str, Fit]] = []
    for (case, before), (step,) in zip(tested, steps, strict=True):
        label, _, params = CASES[case]
        # Penalties count the tokens generated before (none in CASES today; kept exact anyway).
        probs = draw_distribution(step, params, Counter(before))
        if probs is not None:
            # Tokens outside the host's top 20 fall in its REST bin (when the tail has one).
            observed: Counter[int] = Counter()
            for token, n in draws[case, before].items():
                observed[REST if REST in probs and token not in step.top else token] += n
            fit = goodness_of_fit(observed, probs)
            fits.append((f"{label} after {list(before)}", fit))
    if not fits:
        pytest.skip(
            f"no context was testable: {len(tested)} drawn at least {MIN_DRAWS} times, none whose "
            "probabilities the 20 host logprobs determine (a top-k boundary inside the numeric "
            "tolerance, or too much mass outside them; nothing certified)"
        )
    statistic = sum(f.statistic for _, f in fits)
    df = sum(f.df for _, f in fits)
    p_value = chi2_sf(statistic, df) if df else 1.0
    assert p_value >= ALPHA, (
        f"device draws do not follow vLLM's distribution: pooled chi-square {statistic:.1f} on "
        f"{df} df over {len(fits)} contexts, p = {p_value:.2e} < {ALPHA}; worst {_worst(fits)}"
    )
