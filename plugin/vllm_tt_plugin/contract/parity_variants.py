"""One verdict per method when a class's facts vary with the environment: the worst finding
over the variants, naming the variant it comes from (``parity.check_target``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_tt_plugin.contract.parity_rules import SEVERITY, Finding

if TYPE_CHECKING:
    from vllm_tt_plugin.contract.source_env import ClassFacts


def merge_variants(
    target: str, archs: tuple[str, ...], per_variant: list[tuple[ClassFacts | None, list[Finding]]]
) -> list[Finding]:
    """One finding per method: the worst over the variants, naming the variant it comes from."""
    order: list[str] = []
    by_method: dict[str, list[tuple[str, Finding]]] = {}
    for facts, findings in per_variant:
        label = facts.variant if facts is not None else ""
        for f in findings:
            if f.method not in by_method:
                order.append(f.method)
            by_method.setdefault(f.method, []).append((label, f))
    merged: list[Finding] = []
    for method in order:
        entries = by_method[method]
        statuses = {f.status for _, f in entries}
        if len(statuses) == 1 and len({f.detail for _, f in entries}) == 1:
            merged.append(entries[0][1])
            continue
        label, worst = min(entries, key=lambda e: SEVERITY.index(e[1].status))
        others = ", ".join(f"{f.status} [{lbl}]" for lbl, f in entries if f is not worst)
        merged.append(
            Finding(
                target,
                archs,
                method,
                worst.status,
                f"[{label}] {worst.detail} (other variants: {others})",
            )
        )
    return merged
