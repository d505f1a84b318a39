"""Fisher's exact test for two proportions, one-sided: is the candidate's rate lower?

The gate compares two runs' accuracy (correct of n on the same task) with it: a drop is a
regression only when chance cannot explain it (`paired.ACCURACY_ALPHA`); runs that both
stored per-item outcomes are paired instead (mcnemar.py). Exact, so it holds for
the small sample counts accuracy tasks use, where a normal approximation does not. Pure Python
(log-factorials by ``math.lgamma``), as chisquare.py beside it.
"""

from __future__ import annotations

import math

__all__ = ["fisher_lower"]


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_lower(base_correct: int, base_n: int, cand_correct: int, cand_n: int) -> float:
    """P(a baseline count at least this high | both margins) under equal rates: the one-sided
    p-value that the candidate's rate is lower than the baseline's."""
    for name, correct, n in (
        ("baseline", base_correct, base_n),
        ("candidate", cand_correct, cand_n),
    ):
        if n < 0 or not 0 <= correct <= n:
            raise ValueError(f"{name}: {correct} correct of {n} is not a count")
    total_correct = base_correct + cand_correct
    total = base_n + cand_n
    if total == 0 or total_correct in (0, total):
        return 1.0  # every answer alike: nothing tells the runs apart
    low = max(0, total_correct - cand_n)
    high = min(base_n, total_correct)
    log_all = _log_choose(total, total_correct)
    terms = [
        _log_choose(base_n, k) + _log_choose(cand_n, total_correct - k) - log_all
        for k in range(max(base_correct, low), high + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))
