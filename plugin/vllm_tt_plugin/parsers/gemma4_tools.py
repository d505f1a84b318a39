"""``--tool-call-parser gemma4``: ``<|tool_call>call:NAME{key:value,...}<tool_call|>`` blocks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vllm.entrypoints.chat_utils import make_tool_call_id
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.engine.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
from vllm.tool_parsers import ToolParser

from vllm_tt_plugin.parsers.gemma4_format import (
    TOOL_CALL_END,
    TOOL_CALL_START,
    ScannedCall,
    arguments_json,
    scan_tool_calls,
)
from vllm_tt_plugin.utils.log import get_logger

logger = get_logger(__name__)


def _arguments(call: ScannedCall) -> str:
    if call.error is not None:
        # Keep the call (its name may already be streamed) but say why its arguments are empty.
        logger.warning("gemma4 tool call %r: malformed arguments (%s)", call.name, call.error)
        return "{}"
    return arguments_json(call.arguments or {})


class Gemma4ToolParser(ToolParser):  # type: ignore[misc]
    """Streaming and non-streaming; the arguments leave as JSON with non-ASCII kept as is."""

    def __init__(self, tokenizer: Any, tools: Any = None) -> None:
        super().__init__(tokenizer, tools)
        missing = [tok for tok in (TOOL_CALL_START, TOOL_CALL_END) if tok not in self.vocab]
        if missing:
            raise ValueError(
                f"--tool-call-parser gemma4: the tokenizer has no {', '.join(missing)} token "
                "(not a Gemma 4 tokenizer?)"
            )
        self._content_sent = 0  # characters of content streamed
        self._names_sent = 0  # calls whose name (and id) was streamed
        self._args_sent = 0  # calls whose arguments were streamed

    def adjust_request(
        self, request: ChatCompletionRequest | ResponsesRequest
    ) -> ChatCompletionRequest | ResponsesRequest:
        request = super().adjust_request(request)
        if request.tools and request.tool_choice != "none":
            # The call delimiters are special tokens: skipped, the parser could not see them.
            request.skip_special_tokens = False
        return request

    def extract_tool_calls(
        self, model_output: str, request: ChatCompletionRequest
    ) -> ExtractedToolCallInformation:
        scan = scan_tool_calls(model_output, final=True)
        calls = [
            ToolCall(function=FunctionCall(name=call.name, arguments=_arguments(call)))
            for call in scan.calls
            if call.closed and call.name is not None
        ]
        # Any call block, even an unterminated one that yields no call, counts as tool markup:
        # the message content is the text before it (vLLM's composed parser would otherwise
        # hand back the whole output, markup included, as content).
        return ExtractedToolCallInformation(
            tools_called=bool(scan.calls), tool_calls=calls, content=scan.content or None
        )

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: ChatCompletionRequest,
    ) -> DeltaMessage | None:
        scan = scan_tool_calls(current_text, final=False)
        content = scan.content[self._content_sent :]
        self._content_sent = len(scan.content)
        deltas: list[DeltaToolCall] = []
        named = [call for call in scan.calls if call.name is not None]
        for index in range(self._names_sent, len(named)):
            deltas.append(
                DeltaToolCall(
                    index=index,
                    id=make_tool_call_id(),
                    type="function",
                    function=DeltaFunctionCall(name=named[index].name),
                )
            )
            self._names_sent = index + 1
        for index in range(self._args_sent, len(named)):
            call = named[index]
            if not call.closed:
                break
            args = _arguments(call)
            deltas.append(DeltaToolCall(index=index, function=DeltaFunctionCall(arguments=args)))
            self.prev_tool_call_arr.append({"name": call.name, "arguments": args})
            self.streamed_args_for_tool.append(args)
            self._args_sent = index + 1
        self.current_tool_id = self._names_sent - 1
        if not content and not deltas:
            return None
        return DeltaMessage(content=content or None, tool_calls=deltas)
