"""Engine test: Gemma 4 reasoning and tool calls through the real OpenAI server.

A scripted reference model (tests/engine/scripted_models.py) on the emulated mesh emits, greedily,
Gemma 4 chat output: a reasoning channel, text, and two tool calls with nested arguments. Served
with ``--reasoning-parser gemma4 --tool-call-parser gemma4 --enable-auto-tool-choice`` (the
plugin's parsers, registered from its general-plugin entry point), the chat API must return the
reasoning in ``reasoning`` (vLLM 0.26.0's name for ``reasoning_content``), the text as content
and the calls as ``tool_calls`` with JSON arguments, streaming and not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from transformers import AutoTokenizer

from tests.engine.harness import serve
from tests.engine.scripted_models import SCRIPT_ENV
from tests.gemma4_checkpoint import build_gemma4_checkpoint

# One server for the module: its tests stay on one xdist worker (tests/engine/conftest.py).
pytestmark = pytest.mark.xdist_group("gemma4_chat_parsers")

Q = '<|"|>'
SCRIPT = (
    "<|channel>thought\nThe user asks about Paris.<channel|>Let me check."
    f"<|tool_call>call:get_weather{{city:{Q}Paris{Q},days:2,opts:{{units:{Q}metric{Q},"
    f"alerts:[true,null]}}}}<tool_call|><|tool_call>call:get_time{{tz:{Q}CET{Q}}}<tool_call|>"
)
WEATHER_ARGS = {"city": "Paris", "days": 2, "opts": {"units": "metric", "alerts": [True, None]}}
CALLS = [("get_weather", WEATHER_ARGS), ("get_time", {"tz": "CET"})]
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name, _ in CALLS
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    model = build_gemma4_checkpoint(tmp_path_factory.mktemp("gemma4-chat"))
    tok = AutoTokenizer.from_pretrained(model)
    ids = tok(SCRIPT, add_special_tokens=False).input_ids
    assert tok.decode(ids, skip_special_tokens=False) == SCRIPT
    env = {
        "TT_MODEL_CLASS_OVERRIDES": (
            "TTReferenceLlamaForCausalLM=tests.engine.scripted_models:ScriptedOutput"
        ),
        SCRIPT_ENV: ",".join(map(str, [*ids, tok.eos_token_id])),
    }
    args = [
        "--max-model-len", "512", "--max-num-seqs", "4",
        "--reasoning-parser", "gemma4",
        "--tool-call-parser", "gemma4", "--enable-auto-tool-choice",
    ]  # fmt: skip
    with serve(vllm_args=args, env=env, model=Path(model)) as srv:
        yield srv


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "ref",
        "messages": [{"role": "user", "content": "Weather and time in Paris?"}],
        "tools": TOOLS,
        "max_tokens": 200,
        "temperature": 0,
        **extra,
    }


def test_tool_calls_and_reasoning_arrive_through_the_chat_api(server: Any) -> None:
    r = requests.post(f"{server.url}/v1/chat/completions", json=_body(), timeout=300)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    message = choice["message"]
    assert choice["finish_reason"] == "tool_calls"
    assert message["reasoning"] == "The user asks about Paris."
    assert message["content"] == "Let me check."
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message["tool_calls"]
    ]
    assert calls == CALLS
    assert all(c["type"] == "function" and c["id"] for c in message["tool_calls"])


def test_streamed_deltas_carry_the_same_reasoning_content_and_calls(server: Any) -> None:
    r = requests.post(
        f"{server.url}/v1/chat/completions", json=_body(stream=True), timeout=300, stream=True
    )
    assert r.status_code == 200, r.text
    reasoning, content, finish = "", "", None
    calls: dict[int, dict[str, Any]] = {}
    for line in r.iter_lines():
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        choice = json.loads(line[len(b"data: ") :])["choices"][0]
        delta = choice["delta"]
        reasoning += delta.get("reasoning") or ""
        content += delta.get("content") or ""
        for call in delta.get("tool_calls") or []:
            entry = calls.setdefault(call["index"], {"name": "", "arguments": ""})
            function = call.get("function") or {}
            entry["name"] += function.get("name") or ""
            entry["arguments"] += function.get("arguments") or ""
        finish = choice.get("finish_reason") or finish
    assert reasoning == "The user asks about Paris."
    assert content == "Let me check."
    assert [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)] == CALLS
    assert finish == "tool_calls"


def test_without_tools_reasoning_is_split_and_the_call_text_is_content(server: Any) -> None:
    body = _body()
    del body["tools"]
    r = requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    # The reasoning parser keeps special tokens itself; with no tools nothing is a call.
    assert choice["message"]["reasoning"] == "The user asks about Paris."
    assert choice["message"]["content"] == SCRIPT.split("<channel|>", 1)[1]
    assert not choice["message"].get("tool_calls")
    assert choice["finish_reason"] == "stop"
