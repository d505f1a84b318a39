"""McNemar's exact test for paired outcomes, one-sided: did the candidate lose more items?

Two runs scored on the same items (greedy, the same prompts) are paired: only the discordant
items tell them apart, ``lost`` (right in the baseline, wrong now) and ``gained`` (the reverse).
Under "no change" each discordant item is lost or gained with probability 1/2, so the p-value is
the binomial tail P(X >= lost), X ~ Binomial(lost + gained, 1/2). Unlike Fisher's test on the two
totals (fisher.py), it does not dilute twelve lost items among the 95 both runs got right.
Pure Python (exact integers), as fisher.py and chisquare.py beside it.
"""

from __future__ import annotations

import math
from fractions import Fraction

__all__ = ["mcnemar_lower", "smallest_p"]


def mcnemar_lower(lost: int, gained: int) -> float:
    """P(at least ``lost`` of the ``lost + gained`` discordant items lost | no change)."""
    if lost < 0 or gained < 0:
        raise ValueError(f"discordant counts must not be negative: lost {lost}, gained {gained}")
    n = lost + gained
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(lost, n + 1))
    return float(Fraction(tail, 2**n))


def smallest_p(items: int) -> float:
    """The smallest p-value the test can give on ``items`` paired items (every one lost): a
    task this small cannot show any drop as unlikely by chance below that level."""
    return mcnemar_lower(items, 0) if items > 0 else 1.0
