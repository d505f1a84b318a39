"""``--reasoning-parser gemma4``: reasoning between ``<|channel>`` and ``<channel|>``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vllm.entrypoints.openai.engine.protocol import DeltaMessage
from vllm.reasoning import ReasoningParser

from vllm_tt_plugin.parsers.gemma4_format import (
    CHANNEL_END,
    CHANNEL_START,
    TOOL_CALL_START,
    TOOL_RESPONSE_START,
    TURN_START,
    split_reasoning,
)

if TYPE_CHECKING:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest


class Gemma4ReasoningParser(ReasoningParser):  # type: ignore[misc]
    """Streaming and non-streaming; text-based splitting, token-based end detection."""

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        vocab = self.vocab
        missing = [tok for tok in (CHANNEL_START, CHANNEL_END) if tok not in vocab]
        if missing:
            raise ValueError(
                f"--reasoning-parser gemma4: the tokenizer has no {', '.join(missing)} token "
                "(not a Gemma 4 tokenizer?)"
            )
        self.start_token_id = vocab[CHANNEL_START]
        self.end_token_id = vocab[CHANNEL_END]
        # Scanning back from the newest token: these end the reasoning ...
        self._ends = {self.end_token_id} | _ids(vocab, TOOL_CALL_START)
        # ... these mean it is (still or again) open, or a new turn began.
        self._opens = {self.start_token_id} | _ids(vocab, TURN_START, TOOL_RESPONSE_START)
        self._prompt_opened = False

    @property
    def reasoning_start_str(self) -> str:
        return CHANNEL_START

    @property
    def reasoning_end_str(self) -> str:
        return CHANNEL_END

    def _scan_back(self, input_ids: Sequence[int]) -> int | None:
        for token in reversed(input_ids):
            if token in self._ends or token in self._opens:
                return token
        return None

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        return self._scan_back(input_ids) in self._ends

    def adjust_initial_state_from_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        # A prompt that ends inside an open channel: the first generated text is reasoning.
        self._prompt_opened = self._scan_back(prompt_token_ids) == self.start_token_id

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        for i in range(len(input_ids) - 1, -1, -1):
            token = input_ids[i]
            if token == self.end_token_id:
                return input_ids[i + 1 :]
            if token in self._ends:  # a tool-call start belongs to the content
                return input_ids[i:]
            if token == self.start_token_id:
                return []
        return [] if self._prompt_opened else list(input_ids)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        count, inside = 0, self._prompt_opened
        for token in token_ids:
            if token == self.start_token_id:
                inside = True
            elif token in self._ends:
                inside = False
            elif inside:
                count += 1
        return count

    def extract_reasoning(
        self, model_output: str, request: ChatCompletionRequest | ResponsesRequest
    ) -> tuple[str | None, str | None]:
        split = split_reasoning(model_output, final=True, opened=self._prompt_opened)
        if not split.has_reasoning:
            return None, model_output
        return split.reasoning, split.content or None

    def extract_reasoning_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> DeltaMessage | None:
        before = split_reasoning(previous_text, final=False, opened=self._prompt_opened)
        now = split_reasoning(current_text, final=False, opened=self._prompt_opened)
        reasoning = now.reasoning[len(before.reasoning) :]
        content = now.content[len(before.content) :]
        if not reasoning and not content:
            return None
        return DeltaMessage(reasoning=reasoning or None, content=content or None)

    def get_streaming_fallback_content(
        self, previous_text: str, request: ChatCompletionRequest | ResponsesRequest
    ) -> str | None:
        """At the end of a stream whose reasoning never ended: a held-back tail outside the
        reasoning region (text that only looked like the start of a special token)."""
        split = split_reasoning(previous_text, final=False, opened=self._prompt_opened)
        return split.pending if split.pending and not split.open else None

    def adjust_request(
        self, request: ChatCompletionRequest | ResponsesRequest
    ) -> ChatCompletionRequest | ResponsesRequest:
        # The delimiters are special tokens: skipped, the parser could not see them.
        request.skip_special_tokens = False
        return request


def _ids(vocab: dict[str, int], *tokens: str) -> set[int]:
    return {vocab[token] for token in tokens if token in vocab}
