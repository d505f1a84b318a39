"""Accuracy of two runs on one task: paired by item where both stored their items.

The gate's accuracy decision (gate.py calls `compare_task` per task both runs scored):

- both runs stored per-item outcomes on the same items: McNemar's exact test on the discordant
  items (mcnemar.py). Greedy decoding on the same prompts is paired data; Fisher's test on the
  totals would call twelve items lost and none gained "within chance";
- the baseline stored only totals (a report written before per-item outcomes): Fisher's exact
  test on the totals (fisher.py), and the verdict says to regenerate it; a candidate without
  items against a baseline with them is refused (it would trade McNemar for the laxer Fisher);
- a run stored no correct count (an lm-eval result written before per-item outcomes): a lower
  score cannot be judged, so the gate fails closed; an equal or higher one is a note;
- another item set or sample count is an identity difference (`ItemSetChanged`, exit 2), unless
  allowed by name (``--allow-difference accuracy`` or ``accuracy.<task>``): then Fisher on the
  totals, and the identity lines say so;
- a drop the test cannot call unlikely at any split (a task of a few items: 3/3 -> 0/3 reaches
  p = 0.125 at best) is a regression, never "within chance".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tt_conformance.fisher import fisher_lower
from tt_conformance.mcnemar import mcnemar_lower, smallest_p
from tt_conformance.report import AccuracyResult

__all__ = [
    "ACCURACY_ALPHA",
    "ACCURACY_AXIS",
    "AccuracyChange",
    "AccuracyNotComparable",
    "ItemSetChanged",
    "compare_task",
]

# A lower score is a regression when chance explains it less than once in a hundred runs.
ACCURACY_ALPHA = 0.01
# The name --allow-difference takes for an accepted change of a task's items.
ACCURACY_AXIS = "accuracy"
Verdict = Literal["regression", "improvement", "note"]
REGENERATE = (
    "regenerate it with this harness (tox -e emu -- --update-baseline for the emulated one)"
)


class ItemSetChanged(ValueError):
    """The runs scored different items or counts: not a like-for-like accuracy comparison."""


class AccuracyNotComparable(ValueError):
    """A lower score the stored data cannot judge (no correct count recorded)."""


@dataclass(frozen=True)
class AccuracyChange:
    task: str
    verdict: Verdict
    text: str
    identity: str | None = None  # an allowed item-set difference, for the identity lines


def _counts(a: AccuracyResult) -> str:
    got = "?" if a.correct is None else str(a.correct)
    return f"{a.score:.3f} ({got}/{a.num_samples})"


def _item_difference(base: AccuracyResult, cand: AccuracyResult) -> str | None:
    """What changed in the item set (None: the same items, or unknown but the same count)."""
    if base.items is not None and cand.items is not None:
        before = {i.id for i in base.items}
        after = {i.id for i in cand.items}
        if before == after:
            return None
        return (
            f"n {base.num_samples} -> {cand.num_samples}, {len(before - after)} baseline items "
            f"not in the candidate, {len(after - before)} new"
        )
    if base.num_samples != cand.num_samples:
        return f"n {base.num_samples} -> {cand.num_samples}"
    return None


def compare_task(
    base: AccuracyResult, cand: AccuracyResult, allowed: frozenset[str] = frozenset()
) -> AccuracyChange | None:
    """The verdict on one task both runs scored (None: nothing to say)."""
    task = base.task
    change = f"accuracy on {task}: {_counts(base)} -> {_counts(cand)}"
    if base.correct is None or cand.correct is None:
        side = "baseline" if base.correct is None else "candidate"
        why = f"the {side} records no correct count (written before per-item outcomes)"
        if cand.score < base.score:
            raise AccuracyNotComparable(f"{change}: lower, and {why}: {REGENERATE}")
        return AccuracyChange(task, "note", f"{change}: not compared, {why}: {REGENERATE}")
    if base.items is not None and cand.items is None:
        raise AccuracyNotComparable(
            f"{change}: the baseline stored every item's outcome, the candidate none (not a run of "
            "this harness, or its items were removed): gate a run that records them"
        )
    moved = _item_difference(base, cand)
    identity = None
    if moved is not None:
        names = {ACCURACY_AXIS, f"{ACCURACY_AXIS}.{task}"}
        if not names & allowed:
            raise ItemSetChanged(
                f"{ACCURACY_AXIS}.{task}: the runs scored other items ({moved}); gate like with "
                f"like, or accept it with --allow-difference {ACCURACY_AXIS}.{task}"
            )
        identity = f"{ACCURACY_AXIS}.{task}: {moved}"
    if moved is None and base.items is not None and cand.items is not None:
        return _paired(base, cand, change)
    return _unpaired(base, cand, change, identity)


def _paired(base: AccuracyResult, cand: AccuracyResult, change: str) -> AccuracyChange | None:
    assert base.items is not None and cand.items is not None
    before = {i.id: i.correct for i in base.items}
    lost = sum(1 for i in cand.items if before[i.id] and not i.correct)
    gained = sum(1 for i in cand.items if i.correct and not before[i.id])
    if not lost and not gained:
        return None
    low, high = mcnemar_lower(lost, gained), mcnemar_lower(gained, lost)
    test = f"{lost} lost, {gained} gained of {len(cand.items)} paired items"
    return _judge(base.task, change, low, high, lost > gained, smallest_p(len(cand.items)), test)


def _unpaired(
    base: AccuracyResult, cand: AccuracyResult, change: str, identity: str | None
) -> AccuracyChange | None:
    assert base.correct is not None and cand.correct is not None
    b, bn, c, cn = base.correct, base.num_samples, cand.correct, cand.num_samples
    missing = [name for name, a in (("baseline", base), ("candidate", cand)) if a.items is None]
    why = (
        f"by totals (Fisher's exact test): the {' and '.join(missing)} "
        f"{'records' if len(missing) == 1 else 'record'} no per-item outcomes, so items that "
        f"swapped are not seen; {REGENERATE}"
        if missing
        else "by totals (Fisher's exact test): the runs scored other items"
    )
    if b * cn == c * bn:
        text = f"{change}: unchanged" + (f"; compared {why}" if missing else "")
        return AccuracyChange(base.task, "note", text, identity)
    low, high = fisher_lower(b, bn, c, cn), fisher_lower(c, cn, b, bn)
    floor = fisher_lower(bn, bn, 0, cn) if bn and cn else 1.0
    lower = c * bn < b * cn
    judged = _judge(base.task, change, low, high, lower, floor, why)
    if judged is None:
        return AccuracyChange(base.task, "note", f"{change}: compared {why}", identity)
    return AccuracyChange(judged.task, judged.verdict, judged.text, identity)


def _judge(
    task: str, change: str, low: float, high: float, lower: bool, floor: float, test: str
) -> AccuracyChange | None:
    if low < ACCURACY_ALPHA:
        return AccuracyChange(task, "regression", f"{change}: lower, p = {low:.2g} ({test})")
    if lower and floor >= ACCURACY_ALPHA:
        return AccuracyChange(
            task,
            "regression",
            f"{change}: lower, and too few items to call any drop chance (the least p the test "
            f"reaches is {floor:.2g}, above {ACCURACY_ALPHA}; {test})",
        )
    if high < ACCURACY_ALPHA:
        return AccuracyChange(task, "improvement", f"{change}: higher, p = {high:.2g} ({test})")
    if low == high == 1.0:
        return None
    return AccuracyChange(
        task, "note", f"{change}: within chance (p = {min(low, high):.2g}; {test})"
    )
