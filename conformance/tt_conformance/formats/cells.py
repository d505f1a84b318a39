"""Text that goes into a table cell: escaping, truncation, perf shapes, outcome order."""

from __future__ import annotations

import re
from typing import Any

from tt_conformance.report import PerfFigure

__all__ = ["MAX_CELL", "OUTCOME_ORDER", "md_cell", "shape_text"]

# Worst first, so a reader meets the failures before the passes.
OUTCOME_ORDER: dict[str, int] = {
    o: i for i, o in enumerate(("fail", "error", "xpass", "flaky", "xfail", "skip", "pass"))
}
MAX_CELL = 300
_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")


def md_cell(value: Any, limit: int = MAX_CELL) -> str:
    """Make any text safe inside a Markdown table cell (pipes, newlines, overlong text)."""
    text = "" if value is None else str(value)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    # Only a "<" that could open a tag is escaped: a bare ">" or "<=" reads as itself.
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    return _TAG_OPEN.sub("&lt;", text)


def shape_text(fig: PerfFigure) -> str:
    if fig.input_len is None and fig.output_len is None and fig.concurrency is None:
        return "—"
    return f"{fig.input_len or '?'}/{fig.output_len or '?'} @ {fig.concurrency or '?'}"
