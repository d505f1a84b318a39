"""The situation matrix: per concern, the shapes a server meets, generated rather than hand-picked.

A concern's situations are axes (arrival order, where a prefill chunk starts relative to a KV
block, a sampling field's value range, ...), each with the values worth meeting. The checks
that own a concern draw their cases from here (``cells``) and compare each with their own
independent reference; the report records which cells ran (``matrix_cells``) next to what the
server counted (``situations``), so "covered" is measured, not assumed.

How the cells are chosen. A full product grows as the product of the axes' sizes and every
cell costs server time (a forward cell several thousand prefill tokens on an emulated CPU), so
a concern uses the full product only when it is small. Otherwise it uses a pairwise (strength 2)
covering design: every value of every axis meets every value of every other axis in at least
one cell. Faults that need one value (a penalty dropped) or the interaction of two (a chunk
start inside a block while another request decodes beside it) are met; interactions of three
axes are left to chance. The generator is a deterministic greedy (AETG-like, without the random
candidates): each new cell starts from the first pair not yet covered and fills the other axes
with the value covering most uncovered pairs, ties to the earlier value. The same matrix gives
the same cells on every run and every machine, so a failing cell reproduces by its label.
Every concern states ``max_cells``: a generator or axis change that would grow the suite past
its time budget fails the unit tests instead of slowing every run.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CONCERNS",
    "FORWARD_KV",
    "PENALTIES",
    "SAMPLING_FIELDS",
    "Axis",
    "Cell",
    "Concern",
    "cells",
    "product_size",
]

Value = str | int | float | None
Strength = Literal["full", "pairwise"]


@dataclass(frozen=True)
class Axis:
    """One dimension of a concern's situations and the values the matrix meets on it."""

    name: str
    values: tuple[Value, ...]

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"axis name {self.name!r} is not an identifier")
        if not self.values:
            raise ValueError(f"axis {self.name!r} has no values")
        labels = [_label(v) for v in self.values]
        if len(set(labels)) != len(labels):
            raise ValueError(f"axis {self.name!r} repeats a value: {labels}")


@dataclass(frozen=True)
class Concern:
    """A concern's axes, how they are combined and the most cells a run may spend on them."""

    name: str
    axes: tuple[Axis, ...]
    strength: Strength
    max_cells: int

    def __post_init__(self) -> None:
        if not self.axes:
            raise ValueError(f"concern {self.name!r} has no axes")
        names = [a.name for a in self.axes]
        if len(set(names)) != len(names):
            raise ValueError(f"concern {self.name!r} repeats an axis: {names}")
        if self.strength not in ("full", "pairwise"):
            raise ValueError(f"concern {self.name!r}: unknown strength {self.strength!r}")


@dataclass(frozen=True)
class Cell:
    """One case: a value for every axis of its concern, in the concern's axis order."""

    concern: str
    values: tuple[tuple[str, Value], ...]

    def __getitem__(self, axis: str) -> Value:
        for name, value in self.values:
            if name == axis:
                return value
        raise KeyError(f"{self.concern} cell has no axis {axis!r}")

    def as_dict(self) -> dict[str, Value]:
        return dict(self.values)

    @property
    def label(self) -> str:
        """Stable and readable: ``axis=value`` joined by commas (the report's cell name)."""
        return ",".join(f"{name}={_label(value)}" for name, value in self.values)


def _label(value: Value) -> str:
    return "none" if value is None else str(value)


def _full(axes: tuple[Axis, ...]) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(len(a.values)) for a in axes)))


def _pairs_of(row: tuple[int, ...]) -> Iterator[tuple[int, int, int, int]]:
    for i, j in itertools.combinations(range(len(row)), 2):
        yield i, row[i], j, row[j]


def _pair(m: int, x: int, k: int, v: int) -> tuple[int, int, int, int]:
    """The pair (axis m = x, axis k = v) as the uncovered set keys it: lower axis first."""
    return (m, x, k, v) if m < k else (k, v, m, x)


def _best_value(
    k: int, size: int, row: dict[int, int], uncovered: set[tuple[int, int, int, int]]
) -> int:
    """The value of axis ``k`` covering most uncovered pairs with the row's fixed values;
    ties to the earlier value, so the design is the same on every run."""

    def gain(v: int) -> tuple[int, int]:
        return sum(_pair(m, x, k, v) in uncovered for m, x in row.items()), -v

    return max(range(size), key=gain)


def _pairwise(axes: tuple[Axis, ...]) -> list[tuple[int, ...]]:
    sizes = [len(a.values) for a in axes]
    if len(axes) < 2:
        return _full(axes)
    uncovered = {
        (i, vi, j, vj)
        for i, j in itertools.combinations(range(len(axes)), 2)
        for vi in range(sizes[i])
        for vj in range(sizes[j])
    }
    rows: list[tuple[int, ...]] = []
    while uncovered:
        i, vi, j, vj = min(uncovered)
        row: dict[int, int] = {i: vi, j: vj}
        for k in range(len(axes)):
            if k not in row:
                row[k] = _best_value(k, sizes[k], row, uncovered)
        done = tuple(row[k] for k in range(len(axes)))
        uncovered -= set(_pairs_of(done))
        rows.append(done)
    return rows


def cells(concern: Concern) -> tuple[Cell, ...]:
    """The concern's cells, deterministically; refuses more than ``max_cells``."""
    rows = _full(concern.axes) if concern.strength == "full" else _pairwise(concern.axes)
    if len(rows) > concern.max_cells:
        raise ValueError(
            f"concern {concern.name!r}: {len(rows)} cells ({concern.strength}) exceed its "
            f"budget of {concern.max_cells}"
        )
    axes = concern.axes
    return tuple(
        Cell(concern.name, tuple((a.name, a.values[v]) for a, v in zip(axes, row, strict=True)))
        for row in rows
    )


def product_size(concern: Concern) -> int:
    """Cells of the full product (what pairwise saves against)."""
    return math.prod(len(a.values) for a in concern.axes)


# --------------------------------------------------------------------------- the concerns

# Prefill chunks, KV blocks and batch shapes, compared with transformers' forward
# (checks/test_forward_reference.py). Each cell is one group of three prompts whose lengths sum
# past a prefill step's token budget, so vLLM cuts the last one; the companions' lengths put the
# cut (the continuation's first position) on or off a block boundary.
# - arrival: together (the group alone on an idle server), beside_decode (the group joins a
#   request that is decoding: the batch grows around a resident row), after_finish (a short
#   request finishes first, so the group joins a batch that lost a row);
# - chunk_start: where the cut prompt's continuation starts relative to its KV block (a few
#   slots in, a few slots before the block's end, or on its first slot);
# - prompt_end: where the cut prompt ends relative to a block boundary (below: decode crosses
#   into the next block; at: the last prompt token fills a block; past: one token into a block).
# Whether vLLM cuts a group is the server's decision (the group must land in one scheduler
# step), so two of the three chunk starts are off a boundary: most cells aim at the situation
# the plugin's own code handles (a continuation writing into a block it already filled). The
# full product (27 cells) would cost about 40 s of emulated serving; pairwise gives 9 (about
# 14 s) and still meets every arrival with every chunk start and every prompt end.
FORWARD_KV = Concern(
    name="forward_reference",
    axes=(
        Axis("arrival", ("together", "beside_decode", "after_finish")),
        Axis("chunk_start", ("mid_block_early", "mid_block_late", "on_block")),
        Axis("prompt_end", ("below_block", "at_block", "past_block")),
    ),
    strength="pairwise",
    max_cells=10,
)

# Penalties and logprobs on device-sampled greedy rows, each compared with the same request
# served alone (checks/test_penalties.py). Values: off, the edges vLLM accepts that change the
# outcome (repetition < 1 rewards repeats, presence < 0 likewise), typical and strong values;
# logprobs off / 0 (the sampled token only) / 1 / 5. 4 x 4 x 3 x 4 = 192 in full; pairwise
# gives 16 to 20 rows, two full batches of the emulated server's 8 sequences.
PENALTIES = Concern(
    name="penalties",
    axes=(
        Axis("repetition_penalty", (1.0, 0.9, 1.2, 2.0)),
        Axis("presence_penalty", (0.0, -0.5, 0.8, 2.0)),
        Axis("frequency_penalty", (0.0, 0.8, 1.5)),
        Axis("logprobs", (None, 0, 1, 5)),
    ),
    strength="pairwise",
    max_cells=20,
)

# Seeded sampling fields, each request compared with itself served alone
# (checks/test_isolation.py): temperature low / neutral / high; top_p off (1.0), typical and
# narrow; top_k off, 1 (greedy by another road), typical and the device's largest (20); min_p off
# and on (min_p is host-only: its cells run as batches of their own, so a batch is all on one
# path). 4 x 4 x 3 x 2 = 96 in full; pairwise gives 16 to 20.
SAMPLING_FIELDS = Concern(
    name="sampling_fields",
    axes=(
        Axis("top_k", (None, 1, 5, 20)),
        Axis("top_p", (1.0, 0.95, 0.7, 0.3)),
        Axis("temperature", (0.4, 1.0, 1.5)),
        Axis("min_p", (0.0, 0.1)),
    ),
    strength="pairwise",
    max_cells=20,
)

CONCERNS: tuple[Concern, ...] = (FORWARD_KV, PENALTIES, SAMPLING_FIELDS)
