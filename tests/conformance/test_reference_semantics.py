"""The allowed-set test of ``checks/reference.py`` against vLLM's sampling semantics computed in
full: on random distributions it never rejects a token vLLM's sampler could draw (no false
alarm), and it rejects the tokens a sampler that drops a parameter draws (power)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from tt_conformance.checks.reference import RANK_TOLERANCE, Step, check_tokens, violation

VOCAB = 60


def distribution(rng: random.Random, peak: float) -> dict[int, float]:
    logits = {t: rng.gauss(0.0, 1.0) * peak for t in range(VOCAB)}
    z = math.log(sum(math.exp(v) for v in logits.values()))
    return {t: v - z for t, v in logits.items()}


def step_of(logprobs: dict[int, float]) -> Step:
    top = dict(sorted(logprobs.items(), key=lambda kv: -kv[1])[:20])
    return Step(top)


def allowed(logprobs: dict[int, float], params: dict[str, float], counts: Counter[int]) -> set[int]:
    """vLLM's support in full: penalties, temperature, top-k, then top-p, on all tokens."""
    freq = params.get("frequency_penalty", 0.0)
    pres = params.get("presence_penalty", 0.0)
    scores = {t: lp - freq * counts[t] - pres * (counts[t] > 0) for t, lp in logprobs.items()}
    ranked = sorted(scores, key=lambda t: -scores[t])
    if params.get("temperature", 1.0) == 0.0:
        return {ranked[0]}
    k = int(params.get("top_k", 0)) or len(ranked)
    kept = ranked[:k]
    t = params.get("temperature", 1.0)
    weights = [math.exp(scores[x] / t) for x in kept]
    total = sum(weights)
    out, mass = set(), 0.0
    for x, w in zip(kept, weights, strict=True):
        out.add(x)
        mass += w / total
        if mass >= params.get("top_p", 1.0):
            break
    return out


CASES = [
    {"temperature": 0.0},
    {"temperature": 1.0, "top_k": 3},
    {"temperature": 0.7, "top_k": 8},
    {"temperature": 1.0, "top_p": 0.3},
    {"temperature": 1.3, "top_k": 10, "top_p": 0.6},
    {"temperature": 0.0, "frequency_penalty": 1.0},
    {"temperature": 1.0, "top_k": 5, "frequency_penalty": 0.8, "presence_penalty": 0.3},
]


@pytest.mark.parametrize("params", CASES, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_no_false_alarm_and_power(params: dict[str, float]) -> None:
    rng = random.Random(7)
    rejected_outside = 0
    outside_total = 0
    for trial in range(200):
        lp = distribution(rng, peak=rng.choice((0.5, 1.5, 3.0)))
        counts = Counter(
            {rng.randrange(VOCAB): rng.randint(1, 3) for _ in range(6)} if trial % 2 else {}
        )
        step = step_of(lp)
        ok = allowed(lp, params, counts)
        for token in range(VOCAB):
            why = violation(step, params, counts, token)
            if token in ok:
                assert why is None, (trial, token, why)  # never a false alarm
            else:
                outside_total += 1
                rejected_outside += why is not None
    # Power: most tokens outside the support are caught (the rest sit within the tolerance of
    # the boundary or outside the host's top 20 where only a bound is known).
    assert rejected_outside / outside_total > 0.6, (rejected_outside, outside_total)


def test_tokens_within_the_tolerance_of_the_boundary_are_not_rejected() -> None:
    lp = {0: math.log(0.5), 1: math.log(0.5) - RANK_TOLERANCE / 2, 2: math.log(0.01)}
    step = Step(lp)
    assert violation(step, {"temperature": 0.0}, Counter(), 1) is None  # a near tie
    assert violation(step, {"temperature": 0.0}, Counter(), 2) is not None


def test_check_tokens_counts_the_generated_tokens_for_penalties() -> None:
    # Token 0 leads by 1.5 nats; with frequency_penalty 2.0 a second 0 ranks below token 1.
    step = Step({0: -0.3, 1: -1.8, 2: -4.0})
    params = {"temperature": 0.0, "frequency_penalty": 2.0}
    assert check_tokens("x", params, [0, 0], [step, step]) != []
    assert check_tokens("x", params, [0, 0, 1], [step, step, step])[0].startswith("x, token 1")
    assert check_tokens("x", params, [0, 1], [step, step]) == []
