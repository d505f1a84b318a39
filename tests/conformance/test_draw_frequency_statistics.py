"""The draw-frequency check's statistics: the chi-square survival function against closed forms,
`draw_distribution` against vLLM's semantics computed on the whole vocabulary, and the pooled
test's false-alarm rate and power measured by simulation (seeded, so every run sees the same
draws; the figures are quoted in docs/CONFORMANCE.md)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from tt_conformance.checks.reference import REST, TAIL_TOLERANCE, Step, draw_distribution
from tt_conformance.checks.test_draw_frequencies import ALPHA, CASES, DRAWS, MIN_DRAWS
from tt_conformance.chisquare import chi2_sf, goodness_of_fit

VOCAB = 60
CANDIDATES = 5  # language-model-like distributions: a few plausible next tokens, a long tail


@pytest.mark.parametrize("x", [0.01, 0.5, 1.0, 3.84, 10.0, 40.0, 120.0])
def test_chi2_sf_matches_closed_forms(x: float) -> None:
    assert chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-9, abs=1e-300)
    assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-9)
    assert chi2_sf(x, 4) == pytest.approx(math.exp(-x / 2) * (1 + x / 2), rel=1e-9)
    assert chi2_sf(0.0, 3) == 1.0


def test_chi2_sf_tabulated_critical_values() -> None:
    # Upper 0.05 and 0.0001 points (standard tables).
    assert chi2_sf(3.841459, 1) == pytest.approx(0.05, rel=1e-5)
    assert chi2_sf(18.307038, 10) == pytest.approx(0.05, rel=1e-5)
    assert chi2_sf(35.564, 10) == pytest.approx(1e-4, rel=2e-3)
    with pytest.raises(ValueError, match="degrees of freedom"):
        chi2_sf(1.0, 0)


def test_goodness_of_fit_pools_small_bins_and_flags_impossible_draws() -> None:
    probs = {1: 0.5, 2: 0.3, 3: 0.15, 4: 0.05}
    fit = goodness_of_fit(Counter({1: 10, 2: 6, 3: 3, 4: 1}), probs)  # expected 10, 6, 3, 1
    assert [name for name, _, _ in fit.bins] == ["token 1", "token 2 + rest"]
    assert fit.df == 1 and fit.statistic == pytest.approx(0.0)
    bad = goodness_of_fit(Counter({1: 19, 9: 1}), probs)
    assert bad.statistic == math.inf and bad.p_value == 0.0 and bad.bins[0][0] == "token 9"


def full_distribution(logprobs: dict[int, float], params: dict[str, float]) -> dict[int, float]:
    """vLLM's draw probabilities over the whole vocabulary (temperature, top-k, top-p)."""
    t, p = params["temperature"], params.get("top_p", 1.0)
    k = int(params.get("top_k", 0)) or len(logprobs)
    ranked = sorted(logprobs, key=lambda x: -logprobs[x])[:k]
    weights = {x: math.exp(logprobs[x] / t) for x in ranked}
    total = sum(weights.values())
    kept, above = {}, 0.0
    for x in ranked:
        if above >= p:
            break
        kept[x] = weights[x] / total
        above += weights[x] / total
    norm = sum(kept.values())
    return {x: q / norm for x, q in kept.items()}


def logprobs_of(rng: random.Random, spread: float) -> dict[int, float]:
    logits = {x: rng.gauss(0.0, spread) for x in range(VOCAB)}
    z = math.log(sum(math.exp(v) for v in logits.values()))
    return {x: v - z for x, v in logits.items()}


def lm_like(rng: random.Random) -> dict[int, float]:
    """``CANDIDATES`` plausible tokens (logits N(0, 1)) over a tail 7 nats lower (N(-7, 1))."""
    logits = {x: rng.gauss(0.0 if x < CANDIDATES else -7.0, 1.0) for x in range(VOCAB)}
    z = math.log(sum(math.exp(v) for v in logits.values()))
    return {x: v - z for x, v in logits.items()}


def top20(logprobs: dict[int, float]) -> Step:
    return Step(dict(sorted(logprobs.items(), key=lambda kv: -kv[1])[:20]))


@pytest.mark.parametrize("params", [p for _, _, p in CASES])
def test_draw_distribution_equals_vllms_on_the_whole_vocabulary(params: dict[str, float]) -> None:
    rng = random.Random(5)
    determined = 0
    for _ in range(200):
        lp = logprobs_of(rng, 3.0)
        step = top20(lp)
        got = draw_distribution(step, params, Counter())
        if got is None:
            continue
        determined += 1
        want = full_distribution(lp, params)
        listed = {x: q for x, q in want.items() if x in step.top}
        assert got.keys() - {REST} == listed.keys()
        for x, q in listed.items():  # exact, up to the tail's bound (at most 1e-4)
            assert got[x] == pytest.approx(q, rel=1.5 * TAIL_TOLERANCE, abs=1e-300)
        if REST in got:  # the bound holds the true tail
            assert got[REST] >= sum(q for x, q in want.items() if x not in step.top) - 1e-12
        else:
            assert set(want) <= set(step.top)
    assert determined >= 60  # an undetermined context is left out


def test_draw_distribution_refuses_what_20_logprobs_cannot_determine() -> None:
    lp = logprobs_of(random.Random(1), 1.5)
    assert draw_distribution(top20(lp), {"temperature": 0.0}, Counter()) is None
    one = draw_distribution(top20(lp), {"temperature": 1.0, "top_k": 1}, Counter())
    assert one is not None and list(one.values()) == [1.0]
    assert draw_distribution(top20(lp), {"temperature": 1.0}, Counter()) is None  # no top-k
    assert draw_distribution(top20(lp), {"temperature": 1.0, "top_k": 20}, Counter()) is None
    nucleus = {"temperature": 0.5, "top_k": 3, "top_p": 0.9}
    assert draw_distribution(top20(lp), nucleus, Counter()) is None
    flat = logprobs_of(random.Random(1), 0.3)  # the 40 unlisted tokens hold much at t = 0.9
    assert draw_distribution(top20(flat), {"temperature": 0.9}, Counter()) is None
    tie = Step({1: -1.0, 2: -1.05, 3: -3.0, **{10 + i: -5.0 - i for i in range(17)}})
    assert draw_distribution(tie, {"temperature": 1.0, "top_k": 1}, Counter()) is None


def simulated_p_values(
    params: dict[str, float], runs: int, draw_temperature: float, seed: int
) -> list[float]:
    """One p-value per simulated context of ``DRAWS`` draws at ``draw_temperature``."""
    rng = random.Random(seed)
    out = []
    for _ in range(runs):
        lp = lm_like(rng)
        probs = draw_distribution(top20(lp), params, Counter())
        if probs is None:
            continue
        sampler = full_distribution(lp, {**params, "temperature": draw_temperature})
        tokens, weights = zip(*sampler.items(), strict=True)
        drawn = Counter(
            t if t in probs or REST not in probs else REST
            for t in rng.choices(tokens, weights, k=DRAWS)
        )
        out.append(goodness_of_fit(drawn, probs).p_value)
    return out


@pytest.mark.parametrize("params", [p for _, _, p in CASES])
def test_false_alarm_rate_is_nominal(params: dict[str, float]) -> None:
    """On a correct sampler the p-values are (near) uniform: the rejection rate at 1 % and 5 %
    stays inside a 4-sigma binomial band, so the stated 1e-4 holds up to the approximation."""
    p_values = simulated_p_values(params, 3000, params["temperature"], seed=11)
    n = len(p_values)
    assert n >= 1500
    for level in (0.01, 0.05):
        rate = sum(p < level for p in p_values) / n
        assert abs(rate - level) <= 4 * math.sqrt(level * (1 - level) / n), (level, rate)
    assert sum(p < ALPHA for p in p_values) <= 2  # 3000 runs x 1e-4: 0.3 expected


@pytest.mark.parametrize("params", [p for _, _, p in CASES])
def test_power_against_a_squared_temperature(params: dict[str, float]) -> None:
    """A sampler that applies the temperature twice is caught in one context of DRAWS draws
    in at least 75 % of language-model-like distributions at ALPHA (the misses: one token so
    likely that both temperatures draw almost only it). The check pools several contexts."""
    t = params["temperature"]
    p_values = simulated_p_values(params, 300, t * t, seed=12)
    power = sum(p < ALPHA for p in p_values) / len(p_values)
    assert power >= 0.75, power
    assert MIN_DRAWS <= DRAWS
