"""Gemma 4 chat output format: the special tokens, reasoning/content splitting and tool-call
argument parsing, free of vLLM so the parsers on top stay thin (docs: GEMMA4_PARSERS.md).

Both splitters work on the whole text so far and are monotonic: as the text grows, what they
return only grows by appending. The streaming parsers send the difference between two calls;
with ``final=False`` a trailing fragment that could still become a special token is held back.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

CHANNEL_START = "<|channel>"
CHANNEL_END = "<channel|>"
TOOL_CALL_START = "<|tool_call>"
TOOL_CALL_END = "<tool_call|>"
STRING_DELIM = '<|"|>'
TURN_START = "<|turn>"
TOOL_RESPONSE_START = "<|tool_response>"
THOUGHT_LABEL = "thought\n"

_CALL_HEAD = re.compile(r"\s*call:([A-Za-z_][\w.\-]*)\s*\{")
_KEY = re.compile(r"[A-Za-z_][\w.\-]*")
_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?")
_BARE_END = ",}]"


def held_back(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest


# --- reasoning -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReasoningSplit:
    reasoning: str  # "" when there is none (yet)
    content: str
    has_reasoning: bool  # a reasoning region was opened
    open: bool  # the text ends inside the reasoning region
    pending: str  # the held-back tail (empty when final)


def split_reasoning(text: str, *, final: bool, opened: bool = False) -> ReasoningSplit:
    """Split model output into reasoning (between ``<|channel>`` and ``<channel|>``, label
    ``thought\\n`` stripped) and content (the rest). A tool-call start also ends the reasoning
    and stays in the content. ``opened``: the prompt already opened the channel."""
    content_parts: list[str] = []
    reasoning = ""
    pos = 0
    in_reasoning = opened
    seen = opened
    if not opened:
        start = text.find(CHANNEL_START)
        if start < 0 and final and CHANNEL_END in text:
            # A complete output whose channel the prompt opened (no start token generated).
            return split_reasoning(text, final=True, opened=True)
        if start < 0:
            keep = 0 if final else held_back(text, (CHANNEL_START, TOOL_CALL_START, CHANNEL_END))
            body = text[: len(text) - keep]
            return ReasoningSplit("", body, False, False, text[len(body) :])
        content_parts.append(text[:start])
        pos = start + len(CHANNEL_START)
        in_reasoning = seen = True
    end = text.find(CHANNEL_END, pos)
    call = text.find(TOOL_CALL_START, pos)
    stops = [i for i in (end, call) if i >= 0]
    if stops:
        stop = min(stops)
        reasoning = text[pos:stop]
        rest = text[stop + len(CHANNEL_END) :] if stop == end else text[stop:]
        keep = 0 if final else held_back(rest, (TOOL_CALL_START,))
        content_parts.append(rest[: len(rest) - keep])
        pending = rest[len(rest) - keep :]
        in_reasoning = False
    else:
        tail = text[pos:]
        keep = 0 if final else held_back(tail, (CHANNEL_END, TOOL_CALL_START))
        reasoning = tail[: len(tail) - keep]
        pending = tail[len(reasoning) :]
    if reasoning.startswith(THOUGHT_LABEL):
        reasoning = reasoning[len(THOUGHT_LABEL) :]
    elif in_reasoning and not final and THOUGHT_LABEL.startswith(reasoning + pending):
        pending, reasoning = reasoning + pending, ""
    return ReasoningSplit(reasoning, "".join(content_parts), seen, in_reasoning, pending)


# --- tool calls ------------------------------------------------------------------------------


class ArgumentsError(ValueError):
    """Tool-call arguments that do not follow the Gemma 4 value syntax."""


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, token: str) -> bool:
        return self.text.startswith(token, self.pos)

    def expect(self, token: str) -> None:
        self.skip_ws()
        if not self.peek(token):
            found = self.text[self.pos : self.pos + 12] or "end of text"
            raise ArgumentsError(f"expected {token!r} at offset {self.pos}, found {found!r}")
        self.pos += len(token)

    def value(self) -> Any:
        self.skip_ws()
        if self.peek(STRING_DELIM):
            start = self.pos + len(STRING_DELIM)
            end = self.text.find(STRING_DELIM, start)
            if end < 0:
                raise ArgumentsError(f"string opened at offset {self.pos} is not closed")
            self.pos = end + len(STRING_DELIM)
            return self.text[start:end]
        if self.peek("{"):
            return self.mapping()
        if self.peek("["):
            return self.sequence()
        return self.bare()

    def mapping(self) -> dict[str, Any]:
        self.expect("{")
        out: dict[str, Any] = {}
        self.skip_ws()
        if self.peek("}"):
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            key = _KEY.match(self.text, self.pos)
            if key is None:
                raise ArgumentsError(f"expected a bare key at offset {self.pos}")
            self.pos = key.end()
            self.expect(":")
            out[key.group(0)] = self.value()
            self.skip_ws()
            if self.peek(","):
                self.pos += 1
                continue
            self.expect("}")
            return out

    def sequence(self) -> list[Any]:
        self.expect("[")
        out: list[Any] = []
        self.skip_ws()
        if self.peek("]"):
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self.skip_ws()
            if self.peek(","):
                self.pos += 1
                continue
            self.expect("]")
            return out

    def bare(self) -> Any:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in _BARE_END:
            self.pos += 1
        word = self.text[start : self.pos].strip()
        if not word:
            raise ArgumentsError(f"expected a value at offset {start}")
        if word in ("true", "false"):
            return word == "true"
        if word == "null":
            return None
        if _INT.fullmatch(word):
            return int(word)
        if _FLOAT.fullmatch(word):
            return float(word)
        # Not in the format, but models drift: an unquoted word is kept as the string it reads.
        return word


def parse_arguments(text: str) -> dict[str, Any]:
    """``{key:value,...}`` in Gemma 4 syntax -> a dict (raises ArgumentsError)."""
    reader = _Reader(text)
    out = reader.mapping()
    reader.skip_ws()
    if reader.pos != len(text):
        raise ArgumentsError(f"unexpected text after the arguments: {text[reader.pos :]!r}")
    return out


def arguments_json(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


@dataclass(frozen=True)
class ScannedCall:
    name: str | None  # None until ``call:NAME{`` is complete
    closed: bool
    arguments: dict[str, Any] | None = None  # set when closed and well-formed
    error: str | None = None  # set when closed and malformed


@dataclass(frozen=True)
class ToolCallScan:
    content: str  # text before the first call (held-back tail excluded)
    calls: tuple[ScannedCall, ...]


def scan_tool_calls(text: str, *, final: bool) -> ToolCallScan:
    """Content before the first ``<|tool_call>`` and every call block after it. Text between or
    after calls is not content; an unterminated last block is reported with ``closed=False``."""
    first = text.find(TOOL_CALL_START)
    if first < 0:
        keep = 0 if final else held_back(text, (TOOL_CALL_START,))
        return ToolCallScan(text[: len(text) - keep], ())
    calls: list[ScannedCall] = []
    pos = first
    while pos >= 0:
        body_start = pos + len(TOOL_CALL_START)
        end = text.find(TOOL_CALL_END, body_start)
        body = text[body_start:] if end < 0 else text[body_start:end]
        head = _CALL_HEAD.match(body)
        name = head.group(1) if head else None
        if end < 0:
            calls.append(ScannedCall(name, closed=False))
            break
        if head is None:
            calls.append(ScannedCall(None, True, error=f"no 'call:NAME{{' in {body[:40]!r}"))
        else:
            try:
                args = parse_arguments(body[head.end() - 1 :])
                calls.append(ScannedCall(name, True, arguments=args))
            except ArgumentsError as exc:
                calls.append(ScannedCall(name, True, error=str(exc)))
        pos = text.find(TOOL_CALL_START, end + len(TOOL_CALL_END))
    return ToolCallScan(text[:first], tuple(calls))
