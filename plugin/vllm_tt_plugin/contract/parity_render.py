"""How the parity checker prints: the findings per target with a summary line, and a failure
of the checker itself as one line (no traceback)."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from pathlib import Path

from vllm_tt_plugin.contract.parity_rules import Finding


def render(findings: Sequence[Finding]) -> str:
    lines: list[str] = []
    current = None
    for f in findings:
        if f.target != current:
            current = f.target
            lines.append(f"{f.target}  [{', '.join(f.archs)}]")
        lines.append(f"  {f.status:<10} {f.method}: {f.detail}")
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.status] = counts.get(f.status, 0) + 1
    lines.append("summary: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def internal_error(exc: Exception) -> str:
    """The message (no traceback) for a failure of the checker itself on some tree."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
    return (
        f"contract-parity: internal error{at}: {type(exc).__name__}: {exc} (a checker bug on "
        "this tree: nothing was checked; please report it)"
    )
