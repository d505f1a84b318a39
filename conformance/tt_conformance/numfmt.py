"""How numbers read in the harness's messages and renderings (gate verdicts, tables, pages).

Shared by the data model's messages (the gate's regression lines) and every output format, so
a figure reads the same in a gate verdict, a Markdown table and an HTML page.
"""

from __future__ import annotations

import math

__all__ = ["format_number", "pct"]


def format_number(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}" if abs(value) >= 1000 or abs(value) < 0.01 else f"{value:.2f}"


def pct(value: float) -> str:
    """A relative change as a percentage (0.123 -> "12.3%")."""
    return "inf %" if math.isinf(value) else f"{value * 100:.1f}%"
