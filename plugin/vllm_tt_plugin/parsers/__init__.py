"""Chat output parsers the plugin registers with vLLM (lazily: nothing here imports vLLM's
OpenAI server until a parser is selected with ``--reasoning-parser`` / ``--tool-call-parser``).

Their names replace vLLM's built-ins of the same name, a patch: ``vllm_patches`` registers them
(ledger P5, docs/VLLM_PATCHES.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParserEntry:
    name: str
    module: str
    class_name: str


REASONING_PARSERS = (
    ParserEntry("gemma4", "vllm_tt_plugin.parsers.gemma4_reasoning", "Gemma4ReasoningParser"),
)
TOOL_PARSERS = (ParserEntry("gemma4", "vllm_tt_plugin.parsers.gemma4_tools", "Gemma4ToolParser"),)
