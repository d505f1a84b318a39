"""Plugin loggers live under vLLM's ``vllm`` logger so they share its handler and level
(``VLLM_LOGGING_LEVEL``); a plain module logger would be silenced by the root WARNING level."""

from __future__ import annotations

import logging


def get_logger(module_name: str) -> logging.Logger:
    return logging.getLogger(f"vllm.tt_plugin.{module_name.removeprefix('vllm_tt_plugin.')}")
