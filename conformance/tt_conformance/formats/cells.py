"""Text that goes into a table cell: escaping, truncation, perf shapes, outcome order."""

from __future__ import annotations

from typing import Any

from tt_conformance.formats.escape import flat_text, md_text
from tt_conformance.report import PerfFigure

__all__ = ["MAX_CELL", "OUTCOME_ORDER", "md_cell", "shape_text"]

# Worst first, so a reader meets the failures before the passes.
OUTCOME_ORDER: dict[str, int] = {
    o: i for i, o in enumerate(("fail", "error", "xpass", "flaky", "xfail", "skip", "pass"))
}
MAX_CELL = 300


def md_cell(value: Any, limit: int = MAX_CELL) -> str:
    """Make any text safe inside a Markdown table cell: one line, no HTML, no cell break
    (`escape.md_text`), overlong text cut at ``limit``."""
    text = "" if value is None else flat_text(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return md_text(text)


def shape_text(fig: PerfFigure) -> str:
    if fig.input_len is None and fig.output_len is None and fig.concurrency is None:
        return "—"
    return f"{fig.input_len or '?'}/{fig.output_len or '?'} @ {fig.concurrency or '?'}"
