"""Synthetic corpus and chat scheme for the reference checkpoint (see train_reference_model.py).

Every document comes from one `random.Random(seed)`, so the stream is identical on every run.
The mix is chosen for what conformance checks need to observe: repetitions of seen and unseen
words (copying, so penalties have something to reduce), counting and ordered lists (predictable
continuations for stop strings and logit_bias), stories and sentences built from word lists
(several plausible next tokens, so seeds give different samples), Q&A, key: value lines,
code-like snippets, many short always-closed JSON values (so schema-constrained generation
finishes), and chat turns rendered with the checkpoint's own template (so answers end with EOS).
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

# --- special tokens and the chat scheme ---------------------------------------------------------
# Ids are fixed by their order here (the BPE trainer places special tokens first).
PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
SYSTEM, USER, ASSISTANT, END = "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, SYSTEM, USER, ASSISTANT, END]
ROLE_TOKENS = [SYSTEM, USER, ASSISTANT, END]

# Scheme: every prompt starts with BOS. System and user turns are closed by <|end|>; the assistant
# turn is closed by EOS itself, so the one eos id (tokenizer, config, generation_config) stops chat
# completions and plain completions alike.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('tt-reference-llama chat template supports roles system, user and "
    "assistant; got role ' + message['role']) }}"
    "{% endif %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|assistant|>\\n' + message['content'] + eos_token }}"
    "{% else %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


# --- word lists ----------------------------------------------------------------------------------
def _words(text: str) -> list[str]:
    return text.split()


NAMES = _words(
    "Alice Bob Carol Dave Emma Frank Grace Henry Ivy Jack Kate Leo Mia Nina Oscar Paul Rosa Sam "
    "Tom Uma Vera Will Zoe Anna Ben Lily Max Ruby Noah Ella"
)
ANIMALS = _words(
    "cat dog bird fox owl horse mouse rabbit bear frog duck goat lion wolf fish deer cow pig "
    "sheep tiger"
)
ADJS = _words(
    "big small happy sad old young brave quiet kind tiny tall clever lazy funny shy bright "
    "gentle busy calm wild"
)
NOUNS = _words(
    "ball book box cup hat key tree house car boat apple cake lamp door chair table stone "
    "flower river road garden window bag coin map letter song story game bread"
)
PLACES = _words(
    "park forest garden kitchen school market village city river hill beach library farm castle "
    "lake"
)
VERBS = _words("play read sing run eat sleep swim jump walk dance draw cook help climb write")
VERBS_PAST = _words(
    "found saw took made liked wanted lost opened carried painted bought kept dropped cleaned "
    "shared"
)
COLORS = _words("red blue green yellow white black orange purple pink brown gray")
FOODS = _words("apples bread soup rice cheese cake eggs milk tea fish pasta carrots")
CITIES = _words("Paris London Rome Tokyo Berlin Madrid Oslo Cairo Lima Delhi Boston Sydney")
TIMES = _words("morning evening night day afternoon")
STATUS = _words("ok done new open closed active ready")
DAYS = _words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")
MONTHS = _words(
    "January February March April May June July August September October November December"
)
NUMBER_WORDS = _words(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
)
LETTERS = "abcdefghijklmnopqrstuvwxyz"
FACTS = [
    ("sky", "blue"),
    ("grass", "green"),
    ("snow", "white"),
    ("sun", "yellow"),
    ("night", "dark"),
    ("sea", "blue"),
    ("coal", "black"),
    ("milk", "white"),
]
# Words outside the story vocabulary, for copying and open questions.
EXTRA_WORDS = _words(
    "hello world yes no good time water music light sun moon star sky rain snow wind fire paper "
    "money phone friend family school work dream idea number word answer question color shape "
    "sound voice smile team plan"
)
WORD_POOL = ANIMALS + ADJS + NOUNS + PLACES + VERBS + COLORS + FOODS
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]

# JSON keys by value type (a None pool means "any short string").
STR_KEYS: dict[str, list[str] | None] = {
    "name": NAMES,
    "first_name": NAMES,
    "city": CITIES,
    "color": COLORS,
    "pet": ANIMALS,
    "animal": ANIMALS,
    "food": FOODS,
    "day": DAYS,
    "month": MONTHS,
    "status": STATUS,
    "type": ANIMALS + NOUNS,
    "place": PLACES,
    "title": None,
    "answer": None,
    "reason": None,
    "description": None,
    "text": None,
    "label": None,
    "category": None,
    "word": None,
    "message": None,
    "summary": None,
    "note": None,
    "value": None,
}
INT_KEYS: dict[str, tuple[int, int]] = {
    "age": (1, 90),
    "id": (1, 999),
    "count": (0, 20),
    "score": (0, 100),
    "level": (1, 9),
    "year": (1990, 2030),
    "number": (0, 100),
    "quantity": (1, 20),
    "total": (0, 500),
    "rank": (1, 10),
    "confidence": (0, 100),
    "size": (1, 50),
    "index": (0, 9),
    "x": (-9, 9),
    "y": (-9, 9),
    "height": (1, 200),
    "width": (1, 200),
}
FLOAT_KEYS = ("price", "rating", "weight")
BOOL_KEYS = ("active", "ok", "valid", "done", "enabled", "visible", "success", "available")
SCALAR_KEYS = (*STR_KEYS, *INT_KEYS, *FLOAT_KEYS, *BOOL_KEYS)
STR_LIST_KEYS: dict[str, list[str] | None] = {
    "tags": WORD_POOL,
    "words": WORD_POOL,
    "friends": NAMES,
    "names": NAMES,
    "colors": COLORS,
    "cities": CITIES,
    "options": None,
    "steps": None,
    "list": None,
}
INT_LIST_KEYS = ("values", "numbers", "scores", "ids")
# Lists and objects stay short: past two items closing is the likelier next token, so even
# greedy decoding (with or without a grammar) closes brackets instead of looping.
LIST_LENGTH_WEIGHTS = [1, 3, 4, 2]  # 0..3 items
OBJECT_SIZE_WEIGHTS = [3, 5, 3, 1]  # 1..4 keys
OBJ_KEYS = ("data", "info", "details", "settings", "meta", "location", "result")


class Gen:
    """Document generators over one seeded RNG; each returns a text or a chat message list."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    # small helpers
    def pick(self, seq: list[str] | str) -> str:
        return self.r.choice(seq)

    def sep(self) -> str:
        return self.r.choices([" ", ", ", "\n"], weights=[7, 3, 1])[0]

    def run(self, items: list[str], start: int, length: int, cyclic: bool) -> list[str]:
        if cyclic:
            return [items[(start + i) % len(items)] for i in range(length)]
        return items[start : start + length]

    def join(self, parts: list[str]) -> str:
        s = self.sep()
        text = s.join(parts)
        # a list written as a sentence (trailing full stop) now and then
        return text if s != ", " or self.r.random() < 0.7 else text + "."

    # --- sequences that the checks continue ---
    def pseudo_word(self) -> str:
        word = "".join(self.r.choices(SYLLABLES, k=self.r.randint(1, 3)))
        return word.capitalize() if self.r.random() < 0.2 else word

    def phrase(self) -> str:
        """A 1-3 word unit; often unseen words, so copying must come from the context."""
        r = self.r
        kind = r.randrange(9)
        if kind == 0:
            return self.pick(LETTERS + LETTERS.upper())
        if kind == 1:
            return f"the {self.pick(ANIMALS + NOUNS + EXTRA_WORDS)}"
        if kind == 2:
            return f"{self.pick(ADJS + COLORS)} {self.pick(NOUNS + ANIMALS + EXTRA_WORDS)}"
        if kind == 3:
            return str(r.randrange(1000))
        if kind == 4:
            return self.pick(NAMES + EXTRA_WORDS)
        if kind in (5, 6):
            return " ".join(self.pseudo_word() for _ in range(r.randint(1, 3)))
        return " ".join(r.sample(WORD_POOL + EXTRA_WORDS, r.randint(1, 3)))

    def repeat(self) -> str:
        unit = self.phrase()
        sep = self.r.choices([" ", ", ", "\n", ". "], weights=[8, 2, 1, 1])[0]
        return sep.join([unit] * self.r.randint(3, 14))

    def count(self) -> str:
        start = 1 if self.r.random() < 0.4 else self.r.randrange(0, 60)
        step = self.r.choices([1, 2, 5, 10], weights=[12, 2, 1, 1])[0]
        n = self.r.randint(8, 25)
        if self.r.random() < 0.08:  # counting down
            top = start + step * n
            nums = [top - step * i for i in range(n) if top - step * i >= 0]
        else:
            nums = [start + step * i for i in range(n)]
        return self.join([str(x) for x in nums])

    def number_words(self) -> str:
        start = 1 if self.r.random() < 0.4 else self.r.randrange(0, 12)
        length = self.r.randint(5, len(NUMBER_WORDS) - start)
        words = self.run(NUMBER_WORDS, start, length, cyclic=False)
        if self.r.random() < 0.2:
            words[0] = words[0].capitalize()
        return self.join(words)

    def cycle(self, items: list[str]) -> str:
        start = 0 if self.r.random() < 0.3 else self.r.randrange(len(items))
        return self.join(self.run(items, start, self.r.randint(4, 2 * len(items)), cyclic=True))

    def alphabet(self) -> str:
        letters = list(LETTERS.upper() if self.r.random() < 0.4 else LETTERS)
        start = 0 if self.r.random() < 0.4 else self.r.randrange(20)
        length = self.r.randint(5, 26 - start)
        return self.join(self.run(letters, start, length, cyclic=False))

    # --- natural-ish text ---
    def sentence(self) -> str:
        r, n1, n2 = self.r, self.pick(NAMES), self.pick(NAMES)
        a, ad, no, pl = self.pick(ANIMALS), self.pick(ADJS), self.pick(NOUNS), self.pick(PLACES)
        forms = [
            f"{n1} {self.pick(VERBS_PAST)} the {ad} {no}.",
            f"The {ad} {a} {self.pick(VERBS_PAST)} a {no} in the {pl}.",
            f"{n1} and {n2} went to the {pl}.",
            f"It was a {ad} {self.pick(TIMES)}.",
            f"{n1} likes to {self.pick(VERBS)} in the {pl}.",
            f"The {a} is {self.pick(COLORS)}.",
            f"{n1} gave {n2} a {self.pick(COLORS)} {no}.",
            f"{n1} ate {self.pick(FOODS)} for {r.choice(['breakfast', 'lunch', 'dinner'])}.",
            f"{n1} lives in {self.pick(CITIES)}.",
            f"On {self.pick(DAYS)}, {n1} saw a {a} near the {pl}.",
            f'"Hello, {n2}!" said {n1}.',
        ]
        return r.choice(forms)

    def story(self, most: int = 7) -> str:
        r, name, friend = self.r, self.pick(NAMES), self.pick(NAMES)
        opener = r.choice(["Once upon a time", "Long ago", "One day", "In a small village"])
        kind = r.choice(["a", "an old", "a little", "a young"])
        first = f"{opener} there was {kind} {self.pick(ADJS)} {self.pick(ANIMALS)} named {name}."
        more = [
            f"{name} lived in a {self.pick(ADJS)} house near the {self.pick(PLACES)}.",
            f"Every {self.pick(TIMES)}, {name} liked to {self.pick(VERBS)} with {friend}.",
            f"One day, {name} found a {self.pick(COLORS)} {self.pick(NOUNS)} in the "
            f"{self.pick(PLACES)}.",
            f'"Look!" said {name}. "It is a {self.pick(NOUNS)}!"',
            f"{friend} was {self.pick(ADJS)} and wanted to {self.pick(VERBS)}.",
            f"They {self.pick(VERBS_PAST)} the {self.pick(NOUNS)} and went home.",
            r.choice(
                [
                    "The end.",
                    "They were very happy.",
                    f"{name} smiled.",
                    f"From that day, {name} and {friend} were friends.",
                ]
            ),
        ]
        k = r.randint(1, min(most, len(more)))
        return " ".join([first, *more[:k]])

    def prose(self) -> str:
        return " ".join(self.sentence() for _ in range(self.r.randint(1, 5)))

    def qa_pair(self) -> tuple[str, str]:
        r = self.r
        kind = r.randrange(9)
        if kind == 0:
            thing, color = r.choice(FACTS)
            return f"What color is the {thing}?", f"The {thing} is {color}."
        if kind == 1:
            i = r.randrange(7)
            return f"What comes after {DAYS[i]}?", f"{DAYS[(i + 1) % 7]}."
        if kind == 2:
            return self.sum_pair()
        if kind == 3:
            name, place = self.pick(NAMES), self.pick(PLACES)
            return f"{name} went to the {place}. Where did {name} go?", f"To the {place}."
        if kind == 4:
            name, city = self.pick(NAMES), self.pick(CITIES)
            return f"{name} lives in {city}. Where does {name} live?", f"{name} lives in {city}."
        if kind == 5:
            i = r.randrange(12)
            return f"What month comes after {MONTHS[i]}?", f"{MONTHS[(i + 1) % 12]}."
        if kind == 6:
            a = self.pick(ANIMALS)
            return f"Is a {a} an animal?", r.choice(["Yes.", f"Yes, a {a} is an animal."])
        if kind == 7:
            n = self.pick(NOUNS)
            return f"What is a {n}?", f"A {n} is a {self.pick(ADJS)} thing."
        name = self.pick(NAMES)
        return f"Who has the {self.pick(NOUNS)}?", f"{name} has it."

    def sum_pair(self) -> tuple[str, str]:
        a, b = self.r.randrange(10), self.r.randrange(10)
        return f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."

    def qa(self, pair: Callable[[], tuple[str, str]] | None = None) -> str:
        style = self.r.choice([("Q: ", "A: "), ("Question: ", "Answer: ")])
        pairs = [(pair or self.qa_pair)() for _ in range(self.r.randint(1, 3))]
        return "\n".join(f"{style[0]}{q}\n{style[1]}{a}" for q, a in pairs)

    def key_values(self) -> str:
        fields = {
            "name": lambda: self.pick(NAMES),
            "age": lambda: str(self.r.randint(1, 90)),
            "city": lambda: self.pick(CITIES),
            "color": lambda: self.pick(COLORS),
            "pet": lambda: self.pick(ANIMALS),
            "food": lambda: self.pick(FOODS),
            "day": lambda: self.pick(DAYS),
            "status": lambda: self.pick(STATUS),
            "count": lambda: str(self.r.randrange(20)),
        }
        keys = self.r.sample(list(fields), self.r.randint(2, 6))
        cap = self.r.random() < 0.3
        sep = self.r.choice([": ", ": ", " = "])
        return "\n".join(f"{k.capitalize() if cap else k}{sep}{fields[k]()}" for k in keys)

    # --- JSON: short strings, small ints, booleans, arrays, nesting, always closed ---
    def short_string(self) -> str:
        r = self.r
        kind = r.randrange(6)
        if kind == 0:
            return self.pick(NAMES)
        if kind == 1:
            return self.pick(CITIES)
        if kind == 2:
            return self.pseudo_word()
        return " ".join(r.sample(WORD_POOL, r.choices([1, 2, 3], weights=[4, 2, 1])[0]))

    def json_value(self, key: str, depth: int) -> object:
        """A value whose type follows the key, so schema-typed fields look familiar."""
        r = self.r
        if key in STR_KEYS:
            pool = STR_KEYS[key]
            return self.pick(pool) if pool else self.short_string()
        if key in INT_KEYS:
            lo, hi = INT_KEYS[key]
            return r.randint(lo, hi)
        if key in FLOAT_KEYS:
            return round(r.uniform(0.5, 99.0 if key == "price" else 5.0), 1)
        if key in BOOL_KEYS:
            return r.random() < 0.5
        if key in STR_LIST_KEYS:
            pool = STR_LIST_KEYS[key]
            n = r.choices(range(4), weights=LIST_LENGTH_WEIGHTS)[0]
            return r.sample(pool, n) if pool else [self.short_string() for _ in range(n)]
        if key in INT_LIST_KEYS:
            return [
                r.randrange(100) for _ in range(r.choices(range(4), weights=LIST_LENGTH_WEIGHTS)[0])
            ]
        if key in ("user", "owner", "person", "author") or depth >= 2:
            return {"name": self.pick(NAMES), "age": r.randint(1, 90)}
        if key == "address":
            return {
                "street": f"{r.randint(1, 99)} {self.pick(NOUNS).capitalize()} Road",
                "city": self.pick(CITIES),
            }
        if key in ("items", "results", "people"):
            n = r.choices([1, 2, 3], weights=[3, 3, 1])[0]
            return [self.json_object(depth + 1, 3) for _ in range(n)]
        if key in OBJ_KEYS:
            return self.json_object(depth + 1, 3)
        # an unfamiliar key: any simple type, so structure is learned apart from key names
        kind = r.randrange(5)
        if kind == 0:
            return r.randrange(100)
        if kind == 1:
            return r.random() < 0.5
        if kind == 2:
            n = r.choices(range(4), weights=LIST_LENGTH_WEIGHTS)[0]
            return [self.short_string() for _ in range(n)]
        return self.short_string()

    def json_object(self, depth: int = 0, most: int = 4) -> dict[str, object]:
        r = self.r
        n = r.choices(range(1, most + 1), weights=OBJECT_SIZE_WEIGHTS[:most])[0]
        keys = list(SCALAR_KEYS) + list(STR_LIST_KEYS) + list(INT_LIST_KEYS)
        if depth < 2:
            keys += ["user", "owner", "address", "items", *OBJ_KEYS]
        picked = r.sample(keys, n)
        # unfamiliar keys (random words) so structure is learned apart from key names
        picked = [self.pick(WORD_POOL + EXTRA_WORDS) if r.random() < 0.12 else k for k in picked]
        if depth == 0 and r.random() < 0.25:  # the person shape structured-output checks use
            rest = [k for k in picked if k not in ("name", "age")]
            picked = ["name", "age", *rest[: r.choices([0, 1, 2], weights=[3, 1, 1])[0]]]
        return {k: self.json_value(k, depth) for k in dict.fromkeys(picked)}

    def dump(self, value: object) -> str:
        # Never pretty-printed: with no newlines or indents inside JSON, whitespace stays unlikely
        # there, so a grammar that allows any whitespace does not lure sampling into blank runs.
        if self.r.random() < 0.1:
            return json.dumps(value, separators=(",", ":"))
        return json.dumps(value)

    def json_doc(self) -> str:
        r = self.r
        kind = r.choices(["object", "array", "lines", "labelled"], weights=[10, 2, 2, 2])[0]
        if kind == "object":
            return self.dump(self.json_object())
        if kind == "array":
            return self.dump([self.json_object(1, 3) for _ in range(r.randint(1, 3))])
        if kind == "lines":
            return "\n".join(json.dumps(self.json_object(1, 3)) for _ in range(r.randint(2, 4)))
        label = r.choice(["JSON:", "Output:", "Here is the data:", "data ="])
        return f"{label} {self.dump(self.json_object())}"

    # --- code-like snippets: quotes and brackets ---
    def code(self) -> str:
        r, w, n, name = self.r, self.pick(WORD_POOL), self.r.randrange(10), self.pick(NAMES)
        lines = [
            f'print("{w}")',
            f"x = [{', '.join(str(r.randrange(10)) for _ in range(r.randint(1, 4)))}]",
            f'name = "{name}"',
            "def add(a, b):\n    return a + b",
            f"if x > {n}:\n    print(x)",
            f"for i in range({n + 1}):\n    total += i",
            f"items = {json.dumps({w: n})}",
            f"result = f(g({w}), [{n}, {n + 1}])",
            f"assert len(items) == {n}",
            f'const user = {{name: "{name}", age: {r.randint(1, 90)}}};',
            f'console.log("{w}");',
            f"return {{'{w}': [{n}]}}",
        ]
        return "\n".join(r.sample(lines, r.randint(2, 5)))

    # --- chat ---
    def chat_pair(self) -> tuple[str, str]:
        r = self.r
        kind = r.randrange(14)
        if kind >= 12:  # open questions about anything get a short answer, then EOS
            topic = self.pick(EXTRA_WORDS) if r.random() < 0.5 else self.pseudo_word()
            ask = r.choice(
                [
                    f"Explain {topic}.",
                    f"What is {topic}?",
                    f"Tell me about {topic}.",
                    f"Why is the {topic} {self.pick(ADJS)}?",
                    f"Can you help me with {topic}?",
                    f"Do you like {topic}?",
                ]
            )
            return ask, r.choice(
                [
                    f"I do not know much about {topic}.",
                    f"Sure. {self.sentence()}",
                    f"{topic.capitalize()} is a {self.pick(ADJS)} thing.",
                    "Yes.",
                    "No.",
                    self.sentence(),
                ]
            )
        if kind == 0:
            return (
                r.choice(["Hello!", "Hi", "Hi there", "Good morning!"]),
                r.choice(["Hello! How can I help you today?", "Hi! What can I do for you?"]),
            )
        if kind == 1:
            ask = r.choice(["Tell me a story.", f"Tell me a story about a {self.pick(ANIMALS)}."])
            return ask, self.story(most=2)
        if kind == 2:
            n = r.randint(3, 10)
            return f"Count from 1 to {n}.", " ".join(str(i) for i in range(1, n + 1))
        if kind == 3:
            group = r.choice(
                [
                    ("animals", ANIMALS),
                    ("colors", COLORS),
                    ("foods", FOODS),
                    ("cities", CITIES),
                    ("names", NAMES),
                ]
            )
            a, b, c = r.sample(group[1], 3)
            return f"Name three {group[0]}.", f"{a}, {b} and {c}."
        if kind == 4:
            if r.random() < 0.5:
                person = {"name": self.pick(NAMES), "age": r.randint(1, 90)}
                return r.choice(
                    ["Give me a JSON object with a name and an age.", "Return a person as JSON."]
                ), json.dumps(person)
            return r.choice(
                ["Give me some JSON.", "Describe a thing in JSON.", "Return the data as JSON."]
            ), json.dumps(self.json_object(most=4))
        if kind == 5:
            a = self.pick(ANIMALS)
            return (
                f"Describe a {a}.",
                f"A {a} is a {self.pick(ADJS)} animal. It likes to {self.pick(VERBS)}.",
            )
        if kind == 6:
            return r.choice(["Thank you!", "Thanks.", "Bye!"]), r.choice(
                ["You are welcome!", "Goodbye!", "Happy to help."]
            )
        if kind == 7:
            return "What is your name?", r.choice(
                ["I am a small test model.", "My name is Reference."]
            )
        if kind == 8:
            no = self.pick(NOUNS)
            return (
                f"Write a sentence about a {no}.",
                f"The {self.pick(ADJS)} {no} is in the {self.pick(PLACES)}.",
            )
        if kind == 9:
            phrase = " ".join(self.phrase() for _ in range(r.randint(1, 2)))
            return f"Repeat after me: {phrase}", phrase
        if kind == 10:
            return r.choice(
                [
                    "Tell me something.",
                    "What do you like?",
                    "How are you?",
                    "What did you do today?",
                ]
            ), self.sentence()
        return self.qa_pair()

    def chat(self) -> list[dict[str, str]]:
        r = self.r
        messages: list[dict[str, str]] = []
        json_mode = r.random() < 0.15  # structured-output style: every answer is a JSON object
        if json_mode:
            messages.append(
                {
                    "role": "system",
                    "content": r.choice(
                        ["Answer in JSON.", "Reply with a JSON object.", "You only speak JSON."]
                    ),
                }
            )
        elif r.random() < 0.3:
            messages.append(
                {
                    "role": "system",
                    "content": r.choice(
                        [
                            "You are a helpful assistant.",
                            "You are a friendly assistant. Answer briefly.",
                            "Answer in one sentence.",
                        ]
                    ),
                }
            )
        for _ in range(r.choices([1, 2, 3], weights=[6, 2, 1])[0]):
            q, a = self.chat_pair()
            if json_mode:
                a = json.dumps(self.json_object(most=4))
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        return messages

    def document(self) -> str | list[dict[str, str]]:
        makers: list[tuple[Callable[[], str | list[dict[str, str]]], int]] = [
            (self.repeat, 14),
            (self.count, 9),
            (self.number_words, 5),
            (lambda: self.cycle(DAYS), 4),
            (lambda: self.cycle(MONTHS), 4),
            (self.alphabet, 5),
            (self.story, 9),
            (self.prose, 7),
            (self.qa, 6),
            (self.key_values, 4),
            (self.json_doc, 16),
            (self.code, 5),
            (self.chat, 16),
        ]
        maker = self.r.choices([m for m, _ in makers], weights=[w for _, w in makers])[0]
        return maker()


@functools.cache
def _chat_template() -> jinja2.Template:
    import jinja2

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    # The same Environment options transformers uses to render chat templates.
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(CHAT_TEMPLATE)


def render_chat(messages: list[dict[str, str]]) -> str:
    """Render a conversation exactly as the shipped template does."""
    return _chat_template().render(
        messages=messages, bos_token=BOS, eos_token=EOS, add_generation_prompt=False
    )


def documents(seed: int) -> Iterator[str]:
    """Endless deterministic stream of documents; each begins with BOS and ends with EOS."""
    gen = Gen(random.Random(seed))
    while True:
        doc = gen.document()
        yield render_chat(doc) if isinstance(doc, list) else f"{BOS}{doc}{EOS}"


SUM_WEIGHT = 36  # Q&A of sums only: the answers a cycle-trained model starts to copy
JSON_WEIGHT = 24  # JSON documents: lists a cycle-trained model leaves unclosed


def drill_documents(seed: int) -> Iterator[str]:
    """Endless deterministic stream of some of the corpus's kinds only (counting, number words,
    days, months, alphabet, Q&A, Q&A of sums alone, JSON), each between BOS and EOS: what a
    later training run (tools/train_long_context.py) mixes in to keep those answers while it
    teaches something that loosens them. Drawn from the generators, never from a task file."""
    gen = Gen(random.Random(seed))
    makers: list[tuple[Callable[[], str], int]] = [
        (gen.count, 9),
        (gen.number_words, 5),
        (lambda: gen.cycle(DAYS), 4),
        (lambda: gen.cycle(MONTHS), 4),
        (gen.alphabet, 5),
        (gen.qa, 12),
        (lambda: gen.qa(gen.sum_pair), SUM_WEIGHT),
        (gen.json_doc, JSON_WEIGHT),
    ]
    while True:
        maker = gen.r.choices([m for m, _ in makers], weights=[w for _, w in makers])[0]
        yield f"{BOS}{maker()}{EOS}"
