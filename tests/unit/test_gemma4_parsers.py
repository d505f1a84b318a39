"""The gemma4 reasoning and tool-call parsers (GEMMA4_PARSERS.md), driven through vLLM's own
composed parser (ParserManager -> DelegatingParser, as the OpenAI server builds it) with a real
tokenizer that carries the Gemma 4 special tokens. Streaming feeds the output one token at a
time, as the server does, and must agree with the non-streaming result."""

from __future__ import annotations

import json
from typing import Any

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.parser.parser_manager import ParserManager
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager

from tests.conftest import BUNDLED_MODEL
from tests.gemma4_checkpoint import build_gemma4_checkpoint
from vllm_tt_plugin import entrypoints
from vllm_tt_plugin.parsers.gemma4_reasoning import Gemma4ReasoningParser
from vllm_tt_plugin.parsers.gemma4_tools import Gemma4ToolParser

Q = '<|"|>'
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
FULL = (
    "<|channel>thought\nThe user wants the weather.<channel|>Checking now."
    f"<|tool_call>call:get_weather{{location:{Q}Zürich, CH{Q},days:3,ratio:-0.5,"
    f"opts:{{units:{Q}metric{Q},alerts:[true,false,null],nested:{{deep:[1,{{k:{Q}v{Q}}}]}}}},"
    f"note:{Q}a, b: {{c}}{Q}}}<tool_call|>"
    f"<|tool_call>call:get_time{{tz:{Q}CET{Q}}}<tool_call|>"
)
FULL_ARGS = [
    {
        "location": "Zürich, CH",
        "days": 3,
        "ratio": -0.5,
        "opts": {
            "units": "metric",
            "alerts": [True, False, None],
            "nested": {"deep": [1, {"k": "v"}]},
        },
        "note": "a, b: {c}",
    },
    {"tz": "CET"},
]


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> PreTrainedTokenizerFast:
    return AutoTokenizer.from_pretrained(build_gemma4_checkpoint(tmp_path_factory.mktemp("g4")))


@pytest.fixture(scope="module")
def parser_cls() -> Any:
    entrypoints.register()
    return ParserManager.get_parser(
        tool_parser_name="gemma4", reasoning_parser_name="gemma4", enable_auto_tools=True
    )


def _request(**kwargs: Any) -> ChatCompletionRequest:
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": TOOLS,
        **kwargs,
    }
    return ChatCompletionRequest(**body)


def _prompt(tok: PreTrainedTokenizerFast) -> list[int]:
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    return tok(text, add_special_tokens=False).input_ids


def _parse(parser_cls: Any, tok: PreTrainedTokenizerFast, text: str) -> tuple[Any, Any, Any]:
    request = _request()
    parser = parser_cls(tok, request.tools)
    return parser.parse(text, request, enable_auto_tools=True)


def _stream(parser_cls: Any, tok: PreTrainedTokenizerFast, text: str) -> dict[str, Any]:
    """Feed ``text`` token by token (whole characters only, as vLLM's detokenizer does)."""
    request = _request()
    parser = parser_cls(tok, request.tools)
    ids = tok(text, add_special_tokens=False).input_ids
    out: dict[str, Any] = {"reasoning": "", "content": "", "calls": {}, "deltas": []}
    sent, pending = "", []
    for i, token in enumerate(ids):
        pending.append(token)
        decoded = tok.decode(ids[: i + 1], skip_special_tokens=False)
        last = i == len(ids) - 1
        if decoded.endswith("\ufffd") and not last:
            continue
        delta = parser.parse_delta(
            decoded[len(sent) :], pending, request, prompt_token_ids=_prompt(tok), finished=last
        )
        sent, pending = decoded, []
        if delta is None:
            continue
        out["deltas"].append(delta)
        out["reasoning"] += delta.reasoning or ""
        out["content"] += delta.content or ""
        for call in delta.tool_calls:
            entry = out["calls"].setdefault(call.index, {"name": None, "args": [], "id": None})
            if call.id:
                assert entry["id"] is None, "a call's id is sent once"
                entry["id"] = call.id
            if call.function and call.function.name:
                assert entry["name"] is None, "a call's name is sent once"
                entry["name"] = call.function.name
            if call.function and call.function.arguments:
                entry["args"].append(call.function.arguments)
    return out


# --- registration ---------------------------------------------------------------------------


def test_register_names_both_parsers_gemma4_lazily_replacing_vllms_builtin() -> None:
    # Load vLLM's own gemma4 parsers first: the plugin must still win afterwards.
    ReasoningParserManager.get_reasoning_parser("gemma4")
    ToolParserManager.get_tool_parser("gemma4")
    entrypoints.register()
    assert ReasoningParserManager.lazy_parsers["gemma4"] == (
        "vllm_tt_plugin.parsers.gemma4_reasoning",
        "Gemma4ReasoningParser",
    )
    assert ToolParserManager.lazy_parsers["gemma4"] == (
        "vllm_tt_plugin.parsers.gemma4_tools",
        "Gemma4ToolParser",
    )
    assert ReasoningParserManager.get_reasoning_parser("gemma4") is Gemma4ReasoningParser
    assert ToolParserManager.get_tool_parser("gemma4") is Gemma4ToolParser
    entrypoints.register()  # idempotent
    assert ToolParserManager.get_tool_parser("gemma4") is Gemma4ToolParser


def test_a_tokenizer_without_the_gemma4_tokens_is_refused_by_name() -> None:
    plain = AutoTokenizer.from_pretrained(BUNDLED_MODEL)
    with pytest.raises(ValueError, match=r"reasoning-parser gemma4.*<\|channel>"):
        Gemma4ReasoningParser(plain)
    with pytest.raises(ValueError, match=r"tool-call-parser gemma4.*<\|tool_call>"):
        Gemma4ToolParser(plain)


# --- non-streaming --------------------------------------------------------------------------


def test_reasoning_content_and_two_calls_with_nested_values(parser_cls: Any, tok: Any) -> None:
    reasoning, content, calls = _parse(parser_cls, tok, FULL)
    assert reasoning == "The user wants the weather."  # the thought label is stripped
    assert content == "Checking now."
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert [json.loads(c.arguments) for c in calls] == FULL_ARGS
    assert "Zürich" in calls[0].arguments  # non-ASCII kept as is, not \u-escaped


def test_plain_text_is_content(parser_cls: Any, tok: Any) -> None:
    assert _parse(parser_cls, tok, "Just an answer, {no: call}.") == (
        None,
        "Just an answer, {no: call}.",
        None,
    )


def test_text_before_a_call_is_content_without_reasoning(parser_cls: Any, tok: Any) -> None:
    reasoning, content, calls = _parse(
        parser_cls, tok, f"Let me look.<|tool_call>call:get_time{{tz:{Q}UTC{Q}}}<tool_call|>"
    )
    assert reasoning is None
    assert content == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_time", {"tz": "UTC"})]


def test_an_unterminated_call_block_is_ignored(parser_cls: Any, tok: Any) -> None:
    text = f"Before.<|tool_call>call:get_time{{tz:{Q}UTC{Q}}}<tool_call|><|tool_call>call:get_w"
    _, content, calls = _parse(parser_cls, tok, text)
    assert content == "Before."
    assert [c.name for c in calls] == ["get_time"]
    _, content, calls = _parse(parser_cls, tok, "Before.<|tool_call>call:get_time{tz:")
    assert (content, calls) == ("Before.", [])


def test_an_unterminated_reasoning_block_is_all_reasoning(parser_cls: Any, tok: Any) -> None:
    reasoning, content, calls = _parse(parser_cls, tok, "<|channel>thought\nStill thinking")
    assert (reasoning, content, calls) == ("Still thinking", None, None)


def test_a_tool_call_ends_open_reasoning(parser_cls: Any, tok: Any) -> None:
    reasoning, content, calls = _parse(
        parser_cls, tok, f"<|channel>hmm<|tool_call>call:get_time{{tz:{Q}UTC{Q}}}<tool_call|>"
    )
    assert reasoning == "hmm"
    assert content is None
    assert [c.name for c in calls] == ["get_time"]


def test_scalars_and_empty_containers(parser_cls: Any, tok: Any) -> None:
    text = (
        "<|tool_call>call:get_time{a:1e3,b:-7,c:0.25,d:true,e:null,f:[],g:{},"
        f"h:{Q}{Q},i: {Q} spaced {Q} }}<tool_call|>"
    )
    _, _, calls = _parse(parser_cls, tok, text)
    assert json.loads(calls[0].arguments) == {
        "a": 1000.0, "b": -7, "c": 0.25, "d": True, "e": None, "f": [], "g": {}, "h": "",
        "i": " spaced ",
    }  # fmt: skip


# --- streaming ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        FULL,
        "Just an answer, no call.",
        f"Let me look.<|tool_call>call:get_time{{tz:{Q}UTC{Q}}}<tool_call|>",
        "<|channel>thought\nPondering<channel|>Done: 42.",
        f"<|channel>hmm<|tool_call>call:get_time{{tz:{Q}UTC{Q}}}<tool_call|>",
    ],
    ids=["full", "plain", "text-then-call", "reasoning-then-text", "call-ends-reasoning"],
)
def test_streaming_agrees_with_non_streaming(parser_cls: Any, tok: Any, text: str) -> None:
    reasoning, content, calls = _parse(parser_cls, tok, text)
    got = _stream(parser_cls, tok, text)
    assert got["reasoning"] == (reasoning or "")
    assert got["content"] == (content or "")
    streamed = [got["calls"][i] for i in sorted(got["calls"])]
    assert [c["name"] for c in streamed] == [c.name for c in calls or []]
    # The arguments of each call arrive as one delta, when it closes.
    assert all(len(c["args"]) == 1 for c in streamed)
    assert [json.loads(c["args"][0]) for c in streamed] == [
        json.loads(c.arguments) for c in calls or []
    ]
    assert all(c["id"] for c in streamed)
    for delta in got["deltas"]:
        for field in (delta.content or "", delta.reasoning or ""):
            assert "<|" not in field and "|>" not in field, delta


def test_streaming_sends_the_name_as_soon_as_it_is_complete(parser_cls: Any, tok: Any) -> None:
    got = _stream(parser_cls, tok, FULL)
    order = [
        (call.index, "name" if call.function.name else "args")
        for delta in got["deltas"]
        for call in delta.tool_calls
        if call.function
    ]
    assert order == [(0, "name"), (0, "args"), (1, "name"), (1, "args")]


def _feed_chars(parse: Any, text: str) -> list[Any]:
    deltas = []
    for i in range(1, len(text) + 1):
        deltas.append(parse(text[: i - 1], text[:i], text[i - 1 : i]))
    return [d for d in deltas if d is not None]


def test_partial_special_tokens_are_held_back_in_content(tok: Any) -> None:
    """Text arriving character by character (a detokenizer splitting a marker): no fragment of
    ``<|tool_call>`` leaks as content, and a '<' that is not a marker is sent once resolved."""
    parser = Gemma4ToolParser(tok, _request().tools)
    text = f"a<b <|tool_call>call:get_time{{tz:{Q}UTC{Q}}}<tool_call|>"
    deltas = _feed_chars(
        lambda prev, cur, delta: parser.extract_tool_calls_streaming(
            prev, cur, delta, [], [], [], _request()
        ),
        text,
    )
    contents = [d.content for d in deltas if d.content]
    assert "".join(contents) == "a<b "
    assert all("<|" not in c for c in contents)
    names = [tc.function.name for d in deltas for tc in d.tool_calls if tc.function.name]
    assert names == ["get_time"]


def test_reasoning_stream_holds_back_the_label_and_partial_markers(tok: Any) -> None:
    parser = Gemma4ReasoningParser(tok)
    text = "<|channel>thought\nA<b.<channel|>Answer"
    deltas = _feed_chars(
        lambda prev, cur, delta: parser.extract_reasoning_streaming(prev, cur, delta, [], [], []),
        text,
    )
    reasoning = [d.reasoning for d in deltas if d.reasoning]
    content = [d.content for d in deltas if d.content]
    assert "".join(reasoning) == "A<b."
    assert "".join(content) == "Answer"
    assert not any("thou" in r or "<cha" in r for r in reasoning)


def test_reasoning_the_prompt_opened_streams_as_reasoning(tok: Any) -> None:
    parser = Gemma4ReasoningParser(tok)
    parser.adjust_initial_state_from_prompt(tok("<|turn>model\n<|channel>").input_ids)
    deltas = _feed_chars(
        lambda prev, cur, delta: parser.extract_reasoning_streaming(prev, cur, delta, [], [], []),
        "thought\nX<channel|>Y",
    )
    assert "".join(d.reasoning or "" for d in deltas) == "X"
    assert "".join(d.content or "" for d in deltas) == "Y"


# --- reasoning end and special tokens -------------------------------------------------------


def test_reasoning_end_scans_back_from_the_newest_token(tok: Any) -> None:
    parser = Gemma4ReasoningParser(tok)
    v = tok.get_vocab()
    start, end, call = v["<|channel>"], v["<channel|>"], v["<|tool_call>"]
    turn, response = v["<|turn>"], v["<|tool_response>"]
    word = tok("word", add_special_tokens=False).input_ids
    assert not parser.is_reasoning_end([start, *word])
    assert parser.is_reasoning_end([start, *word, end, *word])
    assert parser.is_reasoning_end([start, *word, call, *word])
    assert not parser.is_reasoning_end([start, *word, end, *word, turn, *word])
    assert not parser.is_reasoning_end([end, response, *word])
    assert not parser.is_reasoning_end([end, *word, start])
    assert not parser.is_reasoning_end(word)
    assert parser.extract_content_ids([start, *word, end, *word]) == word
    assert parser.count_reasoning_tokens([start, *word, end, *word]) == len(word)


def test_special_tokens_are_kept_for_the_requests_the_parsers_handle(tok: Any) -> None:
    assert Gemma4ReasoningParser(tok).adjust_request(_request()).skip_special_tokens is False
    tools = Gemma4ToolParser(tok, _request().tools)
    assert tools.adjust_request(_request()).skip_special_tokens is False
    assert tools.adjust_request(_request(tool_choice="none")).skip_special_tokens is True
    assert tools.adjust_request(_request(tools=None)).skip_special_tokens is True
    # Why: decoded with special tokens skipped, the markers the parsers split on are gone.
    ids = tok(FULL, add_special_tokens=False).input_ids
    assert "<|tool_call>" not in tok.decode(ids, skip_special_tokens=True)


def test_the_composed_parser_keeps_special_tokens(parser_cls: Any, tok: Any) -> None:
    request = _request()
    assert parser_cls(tok, request.tools).adjust_request(request).skip_special_tokens is False
