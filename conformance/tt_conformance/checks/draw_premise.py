"""A sampled check's premise, measured on the server: the first token of each row it compares
depends on that row's draw.

A check that compares a row batched with the same row served alone sees a row drawn with the
wrong noise (another row's seed, another position's) only where the draw changes the token. On
a prompt whose first token the model makes near certain it cannot see that fault, and a retrained
model can make any prompt certain (the bundled llama did so for "Once upon a time" on
2026-12-07). So the check first serves each row alone over several seeds and names the rows
whose first token never changes, or that return no token at all.

Limit: the premise shows the draw matters, not how much. A row whose likeliest first token has
probability q passes it with ten seeds unless all ten agree, yet a wrong-noise draw keeps that
token with probability about q**2 + (1 - q)**2 / n for n tokens sharing the rest: about 0.25 at
q = 0.39 (the bundled models' least uncertain row), about 0.65 at q = 0.8, so on a flatter or
sharper model the check's chance of seeing the fault moves with it (measured: rt46c P16).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["Completion", "rows_whose_first_token_ignores_the_draw"]


class Completion(Protocol):
    """What the premise reads of a completion: its token ids."""

    @property
    def token_ids(self) -> tuple[int, ...]: ...


def rows_whose_first_token_ignores_the_draw(
    rows: Sequence[dict[str, Any]],
    seeds: Sequence[int],
    complete: Callable[[list[dict[str, Any]]], Sequence[Completion]],
) -> list[str]:
    """Each row served alone, one token, once per seed (``complete`` serves a list of request
    bodies in order); the rows whose first token took one value over every seed, or that came
    back without a token (an empty completion says nothing about the draw), each described."""
    bodies = [
        {**row, "seed": seed, "max_tokens": 1, "ignore_eos": True} for row in rows for seed in seeds
    ]
    outs = list(complete(bodies))
    if len(outs) != len(bodies):
        return [f"{len(outs)} completions for the premise's {len(bodies)} requests"]
    per_row, problems = len(seeds), []
    for i, row in enumerate(rows):
        firsts = [o.token_ids[:1] for o in outs[i * per_row : (i + 1) * per_row]]
        shown = ", ".join(f"{k}: {v}" for k, v in row.items() if k != "seed")
        if any(not f for f in firsts):
            problems.append(
                f"{shown}: {sum(not f for f in firsts)} of {per_row} seeds gave no token"
            )
        elif len(set(firsts)) < 2:
            problems.append(f"{shown}: first token {firsts[0][0]} for every seed")
    return problems
