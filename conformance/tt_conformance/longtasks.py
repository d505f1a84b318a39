"""Long-context tasks with answers known in advance: passkey retrieval and passage copying.

Passkey retrieval is the standard long-context probe (Mohtashami and Jaggi, "Landmark Attention",
2023; used by LongLoRA and others): a five-digit key is hidden at some depth in repeated filler
sentences and asked for at the end. Any instruction-following or plain language model completes
``... The pass key is`` with the key when it can attend over the whole prompt at the right
positions. The bundled reference checkpoint cannot retrieve yet (too small and not trained for
it; docs/CONFORMANCE.md), so the emulated expectations list these checks as expected failures.

Passage copying: a passage repeated until the prompt is long; a model continues the repetition.

Pure functions over text; the check (checks/test_long_context.py) tokenizes through the server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "PASSKEY_FILLER",
    "PASSKEY_INTRO",
    "PASSKEY_QUESTION",
    "PASSKEY_TASK",
    "PLAIN_PROMPTS",
    "Passkey",
    "passkey_answer",
    "passkey_needle",
]

# Prompts any language model continues in a predictable way (counting, ordered lists,
# repetition, common openings). Checks never hard-code what the model answers to them.
# Here (not in checks/_support) so tools measuring a checkpoint use the checks' own texts.
PLAIN_PROMPTS: tuple[str, ...] = (
    "1 2 3 4 5 6 7",
    "Monday Tuesday Wednesday",
    "January February March April",
    "a b c d e f g",
    "The cat sat on the",
    "10 20 30 40 50",
    "red green blue red green blue",
    "Once upon a time there was a",
    "A B C D E F",
    "one two three four",
    "2 4 6 8 10",
    "Sunday Monday Tuesday",
)

PASSKEY_INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "it. I will quiz you about the important information there."
)
PASSKEY_FILLER = (
    " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
)
PASSKEY_QUESTION = " What is the pass key? The pass key is"
PASSKEY_TASK = "passkey"  # its name in a report's accuracy section
_LEADING_NUMBER = re.compile(r"\s*(\d+)")


def passkey_needle(key: int) -> str:
    return f" The pass key is {key}. Remember it. {key} is the pass key."


@dataclass(frozen=True)
class Passkey:
    """One prompt: ``before`` filler repetitions, the needle, ``after`` more, the question."""

    key: int
    before: int
    after: int

    def __post_init__(self) -> None:
        if not 10000 <= self.key <= 99999:
            raise ValueError(f"passkey {self.key} is not a five-digit number")
        if self.before < 0 or self.after < 0:
            raise ValueError(f"filler repetitions must not be negative: {self}")

    @property
    def prompt(self) -> str:
        return (
            PASSKEY_INTRO
            + PASSKEY_FILLER * self.before
            + passkey_needle(self.key)
            + PASSKEY_FILLER * self.after
            + PASSKEY_QUESTION
        )

    @property
    def answer(self) -> str:
        """The completion a model that retrieved the key writes (as the corpus spells it)."""
        return f" {self.key}."

    @property
    def depth(self) -> float:
        """Where the needle sits in the filler, 0 (start) to 1 (end)."""
        total = self.before + self.after
        return self.before / total if total else 0.0


def passkey_answer(completion: str) -> int | None:
    """The number a completion starts with (the retrieved key), or None."""
    m = _LEADING_NUMBER.match(completion)
    return int(m.group(1)) if m else None
