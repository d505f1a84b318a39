"""The interface half of a tt-metal bump report: ``contract.parity --diff OLD NEW``.

Both trees (checkouts, or skeleton trees from ``contract.skeleton``) are checked for every
registry target; a target's verdict is ``binds`` (nothing fails), ``fails`` (a failing finding:
the methods are named), or ``not in the tree``. The report lists the targets whose verdict
changes, with each method whose status changed and the new finding's reason, then the count of
unchanged targets; it exits 1 when a target that bound in OLD fails (or is not in the tree) in
NEW, or a method fails that did not (a finding merged over environment variants names its
variant: failing in another variant is a change), or a failing method fails for a call variant
it did not (``failure_keys``: the same status is not the same failure; a call failing for
another reason is reported, not counted), else 0 (2: bad input). ``--table TREE``
prints one tree's verdicts as a Markdown table (the per-tree table of docs/CONTRACT_PARITY.md).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
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
    # (method, call variant, reason class) of every failure: the same status can hide a
    # change from "remap decodes fail" to "every device decode fails" (rt45f D1).
    failures: frozenset[tuple[str, str, str]] = field(default_factory=frozenset)


_CALL = re.compile(r"^\[[^\]]*\] |^([\w+\-]+) call\b[^:]*: ")
_NOISE = re.compile(r"\[[^\]]*\]|\([^()]*\)")
_BINDING = re.compile(r"^[^:]* \.\w+: ")


def failure_keys(method: str, detail: str) -> set[tuple[str, str, str]]:
    """A failing finding's detail as (method, call variant, reason class) per failure it
    lists (``; ``-separated): file:line references and parenthesised signatures or values left
    out, so the same failure of a moved or re-signed method compares equal."""
    keys: set[tuple[str, str, str]] = set()
    variant = ""
    for part in detail.split("; "):
        match = _CALL.match(part)
        if match:  # else a further problem of the same call (a TypeError lists several)
            variant = match.group(1) or ""
        reason = part[match.end() :] if match else part
        while True:
            shorter = _NOISE.sub("", reason)
            if shorter == reason:
                break
            reason = shorter
        # "<family> (<target>).m(<signature>): problem" -> "problem"
        reason = _BINDING.sub("", " ".join(reason.split()))
        if reason:
            keys.add((method, variant, reason))
    return keys


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
            frozenset(
                k for f in mine if f.status in failing for k in failure_keys(f.method, f.detail)
            ),
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
        # A call (variant) of a failing method that newly fails counts too (rt45f D1); the
        # same call failing for another reason is reported, not a regression.
        newly = {where(after, m) for m in after.failing_methods} - was
        if before.verdict == "binds" or newly or _newly_failing_calls(before, after):
            out.append(target)
    return out


def _calls(v: Verdict) -> set[tuple[str, str]]:
    return {(method, variant) for method, variant, _ in v.failures}


def _newly_failing_calls(before: Verdict, after: Verdict) -> set[tuple[str, str]]:
    """Call variants of ``after``'s failures that ``before`` did not fail and that the plugin
    already made to ``before``: their options (``device``, ``remap``, ...) all appear in
    ``before``'s failing variants. A variant the old class was not planned for (device calls
    of a class that newly declares device sampling) is reported, not counted."""
    made = {flag for _, variant in _calls(before) for flag in variant.split("+") if flag}
    return {
        (m, v) for m, v in _calls(after) - _calls(before)
        if v and set(v.split("+")) - {"plain"} <= made
    }  # fmt: skip


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
        new_failures = (after.failures - before.failures) if before and after else frozenset()
        if was == now and failing_before == failing_after and not new_failures:
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
        for method, variant, reason in sorted(new_failures):
            status = after.statuses.get(method, "-") if after is not None else "-"
            if before is not None and before.statuses.get(method) == status:
                call = f"{variant} call: " if variant else ""
                how = (
                    "fails another way" if (method, variant) in _calls(before) else "newly failing"
                )
                lines.append(f"  {method}: {status}, {how}: {call}{_short(reason)}")
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
