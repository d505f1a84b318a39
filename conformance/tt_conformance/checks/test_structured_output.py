"""Structured output: constrained requests produce valid output, and do not disturb their batch.

Promises:
- ``structured_outputs.choice``: the text is exactly one of the choices;
- ``structured_outputs.regex``: the text matches the pattern in full;
- ``response_format`` with a JSON schema (chat): the content parses as JSON and satisfies the
  schema (checked by the small validator below: types, required, enum, bounds, no extra keys);
- the same constrained requests mixed into a full batch of plain greedy requests still give
  valid output, and the plain requests give exactly their solo tokens.
Why: structured output is host-only on TT: the grammar bitmask is applied by vLLM's host sampler,
so every constrained request sends its whole batch through the fallback path.
Schemas bound every string and number so that any language model can finish within max_tokens.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    Output,
    achat,
    acomplete,
    capacity,
    complete_each,
    greedy,
    mismatches,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.server import ServerInfo

pytestmark = pytest.mark.structured_output

CHOICES = ["red", "green", "blue", "yellow"]
REGEX = r"[0-9]{3}-[0-9]{4}"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "enum": ["Alice", "Bob", "Carol"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "enum": ["Paris", "London", "Rome"]},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "city", "active"],
    "additionalProperties": False,
}
MAX_TOKENS = 64


def validate(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Errors of ``value`` against the JSON-schema subset used here (empty list = valid)."""
    errors: list[str] = []
    kind = schema.get("type")
    checks = {
        "object": lambda v: isinstance(v, dict),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
    }
    if kind is not None and not checks[kind](value):
        return [f"{path}: expected {kind}, got {type(value).__name__} {value!r}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: {value} < minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{path}: {value} > maximum {schema['maximum']}")
    if kind == "object":
        props = schema.get("properties", {})
        errors += [f"{path}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        if schema.get("additionalProperties") is False:
            errors += [f"{path}: unexpected key {k!r}" for k in value if k not in props]
        for key, sub in props.items():
            if key in value:
                errors += validate(value[key], sub, f"{path}.{key}")
    if kind == "array" and "items" in schema:
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors


def test_validator_rejects_bad_documents() -> None:
    """The validator itself: it must be able to say no."""
    good = {"name": "Bob", "age": 30, "city": "Rome", "active": True}
    assert validate(good, SCHEMA) == []
    for bad in (
        {**good, "age": "30"},
        {**good, "age": 121},
        {**good, "name": "Zed"},
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "city"},
        {**good, "active": 1},
        [good],
    ):
        assert validate(bad, SCHEMA), f"validator accepted {bad}"


Constrained = tuple[str, Callable[[Any], Coroutine[Any, Any, Output]], Callable[[Output], None]]


def constrained_requests(model: str) -> list[Constrained]:
    def choice_ok(out: Output) -> None:
        assert out.text in CHOICES, f"choice {CHOICES}: got {out.describe()}"

    def regex_ok(out: Output) -> None:
        assert re.fullmatch(REGEX, out.text), f"regex {REGEX!r}: got {out.describe()}"

    def json_ok(out: Output) -> None:
        assert out.finish_reason == "stop", f"JSON schema: did not finish: {out.describe()}"
        try:
            value = json.loads(out.text)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"JSON schema: not JSON ({exc}): {out.describe()}") from None
        problems = validate(value, SCHEMA)
        assert not problems, f"JSON schema violated: {problems}: {out.describe()}"

    return [
        (
            "choice",
            lambda c: acomplete(
                c,
                model,
                {
                    "prompt": "My favourite colour is",
                    "max_tokens": 16,
                    "temperature": 0.0,
                    "structured_outputs": {"choice": CHOICES},
                },
            ),
            choice_ok,
        ),
        (
            "regex",
            lambda c: acomplete(
                c,
                model,
                {
                    "prompt": "Call me at",
                    "max_tokens": 24,
                    "temperature": 0.0,
                    "structured_outputs": {"regex": REGEX},
                },
            ),
            regex_ok,
        ),
        (
            "json_schema",
            lambda c: achat(
                c,
                model,
                [{"role": "user", "content": "Describe a person as JSON."}],
                {
                    "max_tokens": MAX_TOKENS,
                    "temperature": 0.0,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "person", "schema": SCHEMA},
                    },
                },
            ),
            json_ok,
        ),
        (
            "json_schema_sampled",
            lambda c: achat(
                c,
                model,
                [{"role": "user", "content": "Give me a JSON object about someone."}],
                {
                    "max_tokens": MAX_TOKENS,
                    "temperature": 1.0,
                    "seed": 11,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "person", "schema": SCHEMA},
                    },
                },
            ),
            json_ok,
        ),
    ]


KINDS = ["choice", "regex", "json_schema", "json_schema_sampled"]


@pytest.mark.parametrize("kind", KINDS)
def test_constrained_output_valid(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, kind: str
) -> None:
    _, call, verify = next(c for c in constrained_requests(tt_server.model) if c[0] == kind)
    verify(asyncio.run(call(tt_async_openai_client)))


def test_constrained_mixed_into_full_batch(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI
) -> None:
    constrained = constrained_requests(tt_server.model)
    plain = [
        greedy(PLAIN_PROMPTS[i % len(PLAIN_PROMPTS)], 24, ignore_eos=True)
        for i in range(max(1, capacity(tt_server) - len(constrained)))
    ]
    solo = complete_each(tt_async_openai_client, tt_server.model, plain)

    async def run() -> tuple[list[Output], list[Output]]:
        mates = [
            asyncio.ensure_future(acomplete(tt_async_openai_client, tt_server.model, r))
            for r in plain
        ]
        outs = [asyncio.ensure_future(call(tt_async_openai_client)) for _, call, _ in constrained]
        return list(await asyncio.gather(*outs)), list(await asyncio.gather(*mates))

    outs, batched = asyncio.run(run())
    for (_, _, verify), out in zip(constrained, outs, strict=True):
        verify(out)
    problems = mismatches([f"plain {r['prompt']!r}" for r in plain], solo, batched)
    assert not problems, "plain requests changed output next to constrained ones:\n" + "\n".join(
        problems
    )
