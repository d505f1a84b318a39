"""Write the bundled accuracy task `tt-patterns` (conformance/tt_conformance/tasks/).

    python tools/make_accuracy_task.py [--out FILE]

Items are continuations of the patterns the bundled reference models were trained on
(tools/reference_corpus.py): next day / month / number / letter, counting, small sums, and the
Q&A facts a story states. A model that learned its corpus scores well; one that emits fluent
nonsense does not. Deterministic (seed 7): rerun after changing the corpus word lists, then
measure the reference again (tools/measure_accuracy_reference.py).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference_corpus import CITIES, DAYS, FACTS, LETTERS, MONTHS, NAMES, NUMBER_WORDS, PLACES

OUT = Path(__file__).resolve().parents[1] / "conformance/tt_conformance/tasks/tt-patterns.jsonl"
FIRST_WORD = r"^\s*([A-Za-z]+)"
FIRST_NUMBER = r"^\s*(-?\d+)"


def items(seed: int = 7) -> list[dict[str, object]]:
    r = random.Random(seed)
    out: list[dict[str, object]] = []

    def qa(question: str, expected: str, **scoring: object) -> None:
        q, a = r.choice([("Q: ", "A:"), ("Question: ", "Answer:")])
        out.append({"prompt": f"{q}{question}\n{a}", "expected": expected, **scoring})

    for i, day in enumerate(DAYS):
        qa(f"What comes after {day}?", DAYS[(i + 1) % 7], scoring="regex", pattern=FIRST_WORD)
    for i, month in enumerate(MONTHS):
        qa(
            f"What month comes after {month}?",
            MONTHS[(i + 1) % 12],
            scoring="regex",
            pattern=FIRST_WORD,
        )
    for _ in range(16):
        a, b = r.randrange(10), r.randrange(10)
        qa(f"What is {a} plus {b}?", str(a + b), scoring="regex", pattern=r"is (-?\d+)")
    for thing, color in FACTS:
        qa(f"What color is the {thing}?", color, scoring="contains")
    for _ in range(12):
        name, city = r.choice(NAMES), r.choice(CITIES)
        qa(f"{name} lives in {city}. Where does {name} live?", city, scoring="contains")
    for _ in range(12):
        name, place = r.choice(NAMES), r.choice(PLACES)
        qa(f"{name} went to the {place}. Where did {name} go?", place, scoring="contains")
    for _ in range(16):  # counting, as the corpus writes it
        start, step = r.randrange(0, 60), r.choice([1, 1, 1, 2, 5, 10])
        n = r.randint(5, 9)
        nums = [start + step * k for k in range(n + 1)]
        out.append(
            {
                "prompt": " ".join(map(str, nums[:-1])),
                "expected": str(nums[-1]),
                "scoring": "regex",
                "pattern": FIRST_NUMBER,
                "max_tokens": 4,
            }
        )
    for _ in range(8):
        start = r.randrange(0, 18)
        letters = list(LETTERS[start : start + r.randint(4, 7) + 1])
        out.append(
            {
                "prompt": " ".join(letters[:-1]),
                "expected": letters[-1],
                "scoring": "regex",
                "pattern": r"^\s*([a-z])",
                "max_tokens": 3,
            }
        )
    for _ in range(8):
        start = r.randrange(1, 12)
        words = NUMBER_WORDS[start : start + r.randint(4, 7) + 1]
        out.append(
            {
                "prompt": " ".join(words[:-1]),
                "expected": words[-1],
                "scoring": "regex",
                "pattern": FIRST_WORD,
                "max_tokens": 4,
            }
        )
    for _ in range(8):
        start = r.randrange(7)
        run = [DAYS[(start + k) % 7] for k in range(r.randint(3, 5) + 1)]
        out.append(
            {
                "prompt": " ".join(run[:-1]),
                "expected": run[-1],
                "scoring": "regex",
                "pattern": FIRST_WORD,
                "max_tokens": 4,
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    lines = [json.dumps(item, sort_keys=True) for item in items()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} items -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
