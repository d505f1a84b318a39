"""The batched-prefill check's premise (test_isolation._first_draw_precondition): a row whose first
token is the same for every seed served alone is named, so a model that makes a prompt's first
token near certain cannot hide a prefill row drawn with another row's noise (PrefillLastRowOffByOne
passed the whole suite on the retrained llama of 2026-12-07 while the last row's prompt was
"Once upon a time" with top_p 0.9)."""

from __future__ import annotations

from typing import Any

import pytest

from tt_conformance.checks import test_isolation as isolation
from tt_conformance.checks._support import Output


def _serve(first_token: Any) -> Any:
    """A stand-in for complete_each whose first token is ``first_token(body)``."""

    def complete_each(client: object, model: str, bodies: list[dict[str, Any]]) -> list[Output]:
        return [Output("x", (first_token(b), 5), "length") for b in bodies]

    return complete_each


def test_a_row_whose_first_token_ignores_the_seed_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    certain = isolation.PREFILL_ROWS[3]["prompt"]
    monkeypatch.setattr(
        isolation,
        "complete_each",
        _serve(lambda b: 7 if b["prompt"] == certain else b["seed"] % 3),
    )
    found = isolation._first_draw_precondition(object(), "m")  # type: ignore[arg-type]
    assert len(found) == 1 and repr(certain) in found[0] and "[(7,)]" in found[0]


def test_rows_that_depend_on_their_draw_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "complete_each", _serve(lambda b: b["seed"] % 2))
    assert isolation._first_draw_precondition(object(), "m") == []  # type: ignore[arg-type]


def test_the_premise_is_asked_of_every_row_over_every_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, Any]] = []

    def complete_each(client: object, model: str, bodies: list[dict[str, Any]]) -> list[Output]:
        asked.extend(bodies)
        return [Output("x", (b["seed"],), "length") for b in bodies]

    monkeypatch.setattr(isolation, "complete_each", complete_each)
    isolation._first_draw_precondition(object(), "m")  # type: ignore[arg-type]
    seeds = set(isolation.PRECONDITION_SEEDS)
    for row in isolation.PREFILL_ROWS:
        mine = [b for b in asked if b["prompt"] == row["prompt"]]
        assert {b["seed"] for b in mine} == seeds and all(b["max_tokens"] == 1 for b in mine)
        # The row's own sampling fields, not greedy: the premise is about its draw.
        assert all(b["temperature"] == row["temperature"] for b in mine)
