"""The long-context tasks' text: the passkey prompt's parts and order, depth, and how an answer
is read back from a completion."""

from __future__ import annotations

import pytest

from tt_conformance.longtasks import (
    PASSKEY_FILLER,
    PASSKEY_INTRO,
    PASSKEY_QUESTION,
    Passkey,
    passkey_answer,
    passkey_needle,
)


def test_the_needle_sits_between_the_requested_filler_runs() -> None:
    task = Passkey(key=45678, before=3, after=2)
    prompt = task.prompt
    assert prompt.startswith(PASSKEY_INTRO) and prompt.endswith(PASSKEY_QUESTION)
    head, tail = prompt.split(passkey_needle(45678))
    assert head == PASSKEY_INTRO + PASSKEY_FILLER * 3
    assert tail == PASSKEY_FILLER * 2 + PASSKEY_QUESTION
    assert prompt.count("45678") == 2  # the needle names it twice; the question never
    assert task.depth == pytest.approx(0.6)
    assert Passkey(10000, 0, 0).depth == 0.0


def test_answers_are_read_from_the_leading_number() -> None:
    assert passkey_answer(" 45678.") == 45678
    assert passkey_answer("45678 is the pass key") == 45678
    assert passkey_answer(" the key is 45678") is None
    assert passkey_answer("") is None
    assert passkey_answer(Passkey(12345, 1, 1).answer) == 12345


@pytest.mark.parametrize(("key", "before", "after"), [(9999, 0, 0), (100000, 0, 0), (12345, -1, 0)])
def test_bad_tasks_are_refused(key: int, before: int, after: int) -> None:
    with pytest.raises(ValueError, match="five-digit|negative"):
        Passkey(key, before, after)
