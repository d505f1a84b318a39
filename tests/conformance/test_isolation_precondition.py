"""The batched-prefill check's premise (tt_conformance.checks.draw_premise): a row whose first
token is the same for every seed served alone, or that comes back empty, is named, so a model
that makes a prompt's first token near certain cannot hide a prefill row drawn with another
row's noise (PrefillLastRowOffByOne passed the whole suite on the retrained llama of 2026-12-07
while the last row's prompt was "Once upon a time" with top_p 0.9)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from tt_conformance.checks.draw_premise import rows_whose_first_token_ignores_the_draw

ROWS = [
    {"prompt": "certain", "temperature": 1.5},
    {"prompt": "open", "temperature": 1.3, "top_k": 8},
]
SEEDS = range(900, 910)


def _serve(first: Callable[[dict[str, Any]], tuple[int, ...]]) -> Any:
    def complete(bodies: list[dict[str, Any]]) -> list[SimpleNamespace]:
        return [SimpleNamespace(token_ids=first(b)) for b in bodies]

    return complete


def test_a_row_whose_first_token_ignores_the_seed_is_named() -> None:
    complete = _serve(lambda b: (7, 1) if b["prompt"] == "certain" else (b["seed"] % 3, 1))
    found = rows_whose_first_token_ignores_the_draw(ROWS, SEEDS, complete)
    assert len(found) == 1 and "'certain'" not in found[0] and "certain" in found[0]
    assert "first token 7 for every seed" in found[0]


def test_rows_that_depend_on_their_draw_pass() -> None:
    complete = _serve(lambda b: (b["seed"] % 2,))
    assert rows_whose_first_token_ignores_the_draw(ROWS, SEEDS, complete) == []


def test_empty_completions_are_no_evidence_of_a_draw() -> None:
    """rt46c P03 / P15: one real token plus empty completions read as two first tokens."""
    complete = _serve(lambda b: (7,) if b["seed"] == 900 else ())
    found = rows_whose_first_token_ignores_the_draw(ROWS, SEEDS, complete)
    assert len(found) == 2 and all("9 of 10 seeds gave no token" in f for f in found)


def test_a_short_answer_is_named_not_read_as_rows() -> None:
    def complete(bodies: list[dict[str, Any]]) -> list[SimpleNamespace]:
        return [SimpleNamespace(token_ids=(b["seed"],)) for b in bodies[:-1]]

    found = rows_whose_first_token_ignores_the_draw(ROWS, SEEDS, complete)
    assert found == ["19 completions for the premise's 20 requests"]


def test_every_row_is_asked_over_every_seed_with_its_own_fields() -> None:
    asked: list[dict[str, Any]] = []

    def complete(bodies: list[dict[str, Any]]) -> list[SimpleNamespace]:
        asked.extend(bodies)
        return [SimpleNamespace(token_ids=(b["seed"],)) for b in bodies]

    rows_whose_first_token_ignores_the_draw(ROWS, SEEDS, complete)
    for row in ROWS:
        mine = [b for b in asked if b["prompt"] == row["prompt"]]
        assert {b["seed"] for b in mine} == set(SEEDS) and all(b["max_tokens"] == 1 for b in mine)
        assert all({k: b[k] for k in row} == row for b in mine)  # its own sampling fields
