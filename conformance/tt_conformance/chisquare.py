"""Pearson's chi-square goodness of fit, for draw frequencies against known probabilities.

The draw-frequency check (checks/test_device_sampling.py) counts the device's seeded draws per
token and compares them with the probabilities vLLM's sampling gives from the host path's
logprobs. Pure Python: the survival function is the regularised upper incomplete gamma function
Q(df/2, x/2), computed by its series or continued fraction (Numerical Recipes, 3rd ed., 6.2),
so the harness needs no SciPy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MIN_EXPECTED", "Fit", "chi2_sf", "goodness_of_fit"]

MIN_EXPECTED = 5.0  # the usual rule for the chi-square approximation: every bin expects >= 5
_EPS = 1e-15
_TINY = 1e-300


def _lower_series(a: float, x: float) -> float:
    """P(a, x) by its power series (converges fast for x < a + 1)."""
    term = total = 1.0 / a
    ap = a
    for _ in range(10_000):
        ap += 1.0
        term *= x / ap
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _upper_fraction(a: float, x: float) -> float:
    """Q(a, x) by Lentz's continued fraction (converges fast for x >= a + 1)."""
    b = x + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h * math.exp(-x + a * math.log(x) - math.lgamma(a))


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square distributed with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if x <= 0.0:
        return 1.0
    if math.isinf(x):
        return 0.0
    a, half = df / 2.0, x / 2.0
    if half < a + 1.0:
        return max(0.0, 1.0 - _lower_series(a, half))
    return _upper_fraction(a, half)


@dataclass(frozen=True)
class Fit:
    """One goodness-of-fit result: the statistic, its degrees of freedom and bins."""

    statistic: float
    df: int
    bins: tuple[tuple[str, int, float], ...]  # (label, observed, expected)

    @property
    def p_value(self) -> float:
        return chi2_sf(self.statistic, self.df) if self.df > 0 else 1.0


def goodness_of_fit(observed: Mapping[int, int], probabilities: Mapping[int, float]) -> Fit:
    """Pearson's statistic of ``observed`` counts per token against ``probabilities``.

    Tokens expected fewer than ``MIN_EXPECTED`` times are pooled into one bin ("rest"); a draw
    of a token with probability 0 (outside ``probabilities``) makes the statistic infinite.
    With a single bin left there is nothing to test (df 0, p-value 1).
    """
    n = sum(observed.values())
    total = sum(probabilities.values())
    if n == 0 or total <= 0.0:
        raise ValueError("goodness_of_fit needs draws and a distribution")
    if any(t not in probabilities or probabilities[t] <= 0.0 for t, k in observed.items() if k):
        impossible = sorted(t for t, k in observed.items() if k and probabilities.get(t, 0) <= 0)
        drawn = tuple((f"token {t}", observed[t], 0.0) for t in impossible)
        return Fit(math.inf, max(1, len(probabilities) - 1), drawn)
    expected = {t: n * p / total for t, p in probabilities.items()}
    big = sorted((t for t, e in expected.items() if e >= MIN_EXPECTED), key=lambda t: -expected[t])
    small = [t for t in expected if expected[t] < MIN_EXPECTED]
    bins = [(f"token {t}", observed.get(t, 0), expected[t]) for t in big]
    rest = (sum(observed.get(t, 0) for t in small), sum(expected[t] for t in small))
    if small and rest[1] >= MIN_EXPECTED:
        bins.append(("rest", *rest))
    elif small and bins:  # too little to stand alone: pooled with the least likely big bin
        label, o, e = bins.pop()
        bins.append((f"{label} + rest", o + rest[0], e + rest[1]))
    elif small:
        bins.append(("rest", *rest))
    statistic = sum((o - e) ** 2 / e for _, o, e in bins)
    return Fit(statistic, len(bins) - 1, tuple(bins))
