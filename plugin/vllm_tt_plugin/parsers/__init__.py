"""Chat output parsers the plugin registers with vLLM (lazily: nothing here imports vLLM's
OpenAI server until a parser is selected with ``--reasoning-parser`` / ``--tool-call-parser``)."""

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


def register_parsers() -> None:
    """Register the plugin's parsers under their names, replacing vLLM's built-ins of the same
    name (docs/VLLM_PATCHES.md). Idempotent."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    for entry in REASONING_PARSERS:
        loaded = ReasoningParserManager.reasoning_parsers.get(entry.name)
        if loaded is not None and loaded.__module__ != entry.module:
            del ReasoningParserManager.reasoning_parsers[entry.name]
        ReasoningParserManager.register_lazy_module(entry.name, entry.module, entry.class_name)
    for entry in TOOL_PARSERS:
        loaded_tool = ToolParserManager.tool_parsers.get(entry.name)
        if loaded_tool is not None and loaded_tool.__module__ != entry.module:
            del ToolParserManager.tool_parsers[entry.name]
        ToolParserManager.register_lazy_module(entry.name, entry.module, entry.class_name)
