"""The serving shapes the perf concern measures: (input length, output length, concurrency).

Written ``IN/OUT@C`` with C a number or ``max`` (the server's capacity, max_num_seqs x lanes,
resolved at run time so the check id stays the same on every server): the defaults are TT's
usual 128/128 at concurrency 1 and at capacity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_PERF_SHAPES",
    "PerfShape",
    "figure_key",
    "parse_perf_shapes",
]

DEFAULT_PERF_SHAPES = "128/128@1,128/128@max"
_SHAPE = re.compile(r"^(\d+)/(\d+)@(\d+|max)$")


@dataclass(frozen=True)
class PerfShape:
    input_len: int
    output_len: int
    concurrency: int | None  # None: the server's capacity

    @property
    def id(self) -> str:
        conc = "max" if self.concurrency is None else str(self.concurrency)
        return f"{self.input_len}/{self.output_len}@{conc}"

    def resolve(self, capacity: int) -> int:
        return capacity if self.concurrency is None else self.concurrency


def figure_key(input_len: int, output_len: int, concurrency: int) -> str:
    """The suffix of perf figure names: ``ttft_mean@i128o128c8``."""
    return f"i{input_len}o{output_len}c{concurrency}"


def parse_perf_shapes(text: str | None) -> tuple[PerfShape, ...]:
    """Parse ``IN/OUT@C[,IN/OUT@C...]``; ValueError names the bad shape."""
    raw = DEFAULT_PERF_SHAPES if text is None or not text.strip() else text
    shapes: list[PerfShape] = []
    for part in (p.strip() for p in raw.split(",")):
        match = _SHAPE.match(part)
        if not match:
            raise ValueError(
                f"bad perf shape {part!r}: expected IN/OUT@C with C a number or 'max', "
                "e.g. 128/128@1"
            )
        isl, osl = int(match.group(1)), int(match.group(2))
        conc = None if match.group(3) == "max" else int(match.group(3))
        if isl < 1 or osl < 2 or (conc is not None and conc < 1):
            raise ValueError(
                f"bad perf shape {part!r}: input length >= 1, output length >= 2 (TPOT needs "
                "two tokens) and concurrency >= 1"
            )
        shape = PerfShape(isl, osl, conc)
        if shape in shapes:
            raise ValueError(f"bad perf shape list: {part!r} is given twice")
        shapes.append(shape)
    return tuple(shapes)
