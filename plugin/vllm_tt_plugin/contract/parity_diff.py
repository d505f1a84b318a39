"""The interface half of a tt-metal bump report: ``contract.parity --diff OLD NEW``.

Both trees (checkouts, or skeleton trees from ``contract.skeleton``) are checked for every
registry target; a target's verdict is ``binds`` (nothing fails), ``fails`` (a failing finding:
the methods are named), or ``not in the tree``. The report lists the targets whose verdict
changes, with each method whose status changed and the new finding's reason, then the count of
unchanged targets; it exits 1 when a target that bound in OLD fails (or is not in the tree) in
NEW, or a method fails that did not (a finding merged over environment variants names its
variant: failing in another variant is a change), else 0 (2: bad input). ``--table TREE``
prints one tree's verdicts as a Markdown table (the per-tree table of docs/CONTRACT_PARITY.md).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class FindingLike(Protocol):
    """A ``parity.Finding`` (this module does not import the checker: it imports this one)."""

    @property
    def target(self) -> str: ...

    @property
    def method(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def detail(self) -> str: ...


_REASON = 240  # characters of a finding's detail shown in a report line


@dataclass(frozen=True)
class Verdict:
    target: str
    archs: tuple[str, ...]
    verdict: str  # "binds", "fails", "not in the tree"
    statuses: Mapping[str, str]  # method -> status
    details: Mapping[str, str]  # method -> detail
    failing_methods: tuple[str, ...]


def verdicts(
    found: Sequence[FindingLike],
    targets: Mapping[str, tuple[str, ...]],
    failing: Collection[str],
) -> dict[str, Verdict]:
    """Each target's verdict from one tree's findings (``failing``: the statuses that fail)."""
    out: dict[str, Verdict] = {}
    for target, archs in targets.items():
        mine = [f for f in found if f.target == target]
        bad = tuple(f.method for f in mine if f.status in failing)
        # A finding merged over environment variants names the variant it comes from: the
        # same status in another variant (the default deployment going from binding to
        # broken) is a change.
        if any(f.status == "no_class" for f in mine):
            verdict = "not in the tree"
        else:
            verdict = "fails" if bad else "binds"
        out[target] = Verdict(
            target,
            archs,
            verdict,
            {f.method: f.status + _variant(f.detail) for f in mine},
            {f.method: f.detail for f in mine},
            bad,
        )
    return out


def _variant(detail: str) -> str:
    """`` [label]`` of a finding merged over variants (``[label] ... (other variants: ...)``)."""
    if detail.startswith("[") and "(other variants: " in detail:
        return " " + detail[: detail.index("]") + 1]
    return ""


def regressed(old: Mapping[str, Verdict], new: Mapping[str, Verdict]) -> list[str]:
    """Targets that bind in ``old`` and fail (or are no longer in the tree) in ``new``, or have
    a method that fails where it did not (another environment variant counts: the default
    deployment newly broken)."""
    out = []
    for target, after in new.items():
        before = old.get(target)
        if before is not None and before.verdict == "binds" and after.verdict == "not in the tree":
            out.append(target)  # a target that bound is gone (renamed, moved): never a pass
            continue
        if before is None or after.verdict != "fails" or before.verdict == "not in the tree":
            continue

        def where(v: Verdict, m: str) -> str:
            return m + v.statuses[m].partition(" ")[2]  # the method and its variant label

        was = {where(before, m) for m in before.failing_methods}
        if before.verdict == "binds" or {where(after, m) for m in after.failing_methods} - was:
            out.append(target)
    return out


def _short(text: str) -> str:
    return text if len(text) <= _REASON else text[: _REASON - 3] + "..."


def diff_report(old: Mapping[str, Verdict], new: Mapping[str, Verdict]) -> list[str]:
    """Report lines: each target whose verdict changed, and why."""
    lines: list[str] = []
    unchanged = changed = 0
    for target in sorted(set(old) | set(new)):
        before, after = old.get(target), new.get(target)
        was = before.verdict if before else "not a target"
        now = after.verdict if after else "not a target"
        failing_before = {m: before.statuses[m] for m in before.failing_methods} if before else {}
        failing_after = {m: after.statuses[m] for m in after.failing_methods} if after else {}
        if was == now and failing_before == failing_after:
            unchanged += 1
            continue
        changed += 1
        either = after or before
        archs = either.archs if either is not None else ()
        other = " (other failures)" if was == now else ""
        lines.append(f"{target}  [{', '.join(archs)}]: {was} -> {now}{other}")
        methods = dict.fromkeys(
            [*(before.statuses if before else {}), *(after.statuses if after else {})]
        )
        for method in methods:
            s_old = before.statuses.get(method, "-") if before else "-"
            s_new = after.statuses.get(method, "-") if after else "-"
            if s_old == s_new:
                continue
            why = after.details.get(method, "") if after else ""
            lines.append(f"  {method}: {s_old} -> {s_new}" + (f": {_short(why)}" if why else ""))
    lines.append(f"diff: {changed} target(s) change verdict or failure, {unchanged} unchanged")
    return lines


def table(rows: Mapping[str, Verdict], tree: str) -> list[str]:
    """A Markdown table of one tree's verdicts (targets not in the tree left out)."""
    lines = [f"| target ({tree}) | verdict | failing methods |", "|---|---|---|"]
    for target, v in sorted(rows.items()):
        if v.verdict == "not in the tree":
            continue
        failing = ", ".join(f"`{m}` ({v.statuses[m]})" for m in v.failing_methods) or "-"
        lines.append(f"| `{target.rpartition(':')[2]}` | {v.verdict} | {failing} |")
    return lines


def run(
    mode: str,
    trees: Sequence[Path],
    findings: Sequence[Sequence[FindingLike]],
    targets: Mapping[str, tuple[str, ...]],
    failing: Collection[str],
) -> list[str]:
    """``--table`` (one tree) or ``--diff`` (two) report lines from each tree's findings."""
    rows = [verdicts(f, targets, failing) for f in findings]
    if mode == "table":
        return table(rows[0], trees[0].name)
    return [f"contract-parity --diff {trees[0]} {trees[1]}", *diff_report(rows[0], rows[1])]


def exit_code(
    mode: str,
    findings: Sequence[Sequence[FindingLike]],
    targets: Mapping[str, tuple[str, ...]],
    failing: Collection[str],
) -> int:
    """``--diff``: 1 when a target that bound in OLD fails in NEW (or fails in a new way, or is
    no longer in the tree), else 0; ``--table``: 0."""
    if mode != "diff":
        return 0
    rows = [verdicts(f, targets, failing) for f in findings]
    return 1 if regressed(rows[0], rows[1]) else 0
