"""Every place the plugin patches vLLM behaviour at runtime. Ledger: docs/VLLM_PATCHES.md.

Each patch is idempotent, applied only on the TT platform, and says how to drop it.
"""

from __future__ import annotations

from typing import Any

from vllm_tt_plugin import envs
from vllm_tt_plugin.log import get_logger

logger = get_logger(__name__)

_applied = False


def _guard_accelerator_empty_cache() -> None:
    """P1: torch.accelerator.empty_cache() raises when no accelerator is registered with torch.

    vLLM calls it unconditionally on several paths (engine shutdown, memory profiling). TT
    devices are not torch accelerators, so on TT hosts and CPU-only hosts it would crash.
    Drop when vLLM guards the call itself.
    """
    import torch

    if torch.accelerator.current_accelerator() is not None:
        return
    original = torch.accelerator.empty_cache
    if getattr(original, "_tt_guarded", False):
        return

    def empty_cache() -> None:
        if torch.accelerator.current_accelerator() is not None:
            original()

    empty_cache._tt_guarded = True  # type: ignore[attr-defined]
    torch.accelerator.empty_cache = empty_cache


def _raise_unchunked_prefill_budget() -> None:
    """P4: with ``--no-enable-chunked-prefill`` a budget below ``max_model_len`` is raised to it.

    The TT rule is that a whole prompt then fits one prefill step. vLLM instead rejects an
    explicit ``--max-num-batched-tokens`` below ``max_model_len`` while building its
    SchedulerConfig, before any platform hook runs, so the raise happens right after vLLM sets
    its batch defaults. (A model that lacks chunked prefill is handled later, in the platform:
    chunking is still on when vLLM validates.) Drop when vLLM lets a platform adjust the budget
    before validation.
    """
    from vllm.engine.arg_utils import EngineArgs

    original = EngineArgs._set_default_max_num_seqs_and_batched_tokens_args
    if getattr(original, "_tt_patched", False):
        return

    def set_defaults(self: EngineArgs, usage_context: Any, model_config: Any, *args: Any) -> None:
        original(self, usage_context, model_config, *args)
        budget, max_len = self.max_num_batched_tokens, model_config.max_model_len
        if self.enable_chunked_prefill is False and budget is not None and budget < max_len:
            logger.info(
                "TT: chunked prefill is off, so a whole prompt must fit one prefill step: "
                "max_num_batched_tokens raised from %d to max_model_len %d",
                budget,
                max_len,
            )
            self.max_num_batched_tokens = max_len
            if self.max_num_scheduled_tokens is not None:
                self.max_num_scheduled_tokens = max(self.max_num_scheduled_tokens, max_len)

    set_defaults._tt_patched = True  # type: ignore[attr-defined]
    EngineArgs._set_default_max_num_seqs_and_batched_tokens_args = set_defaults


def pin_v1_model_runner() -> None:
    """P3: the plugin implements the V1 model-runner contract only; V2 is refused.

    Pinned through the environment so every process (engine core, workers) agrees.
    """
    if envs.VLLM_USE_V2_MODEL_RUNNER.get():
        raise ValueError(
            "VLLM_USE_V2_MODEL_RUNNER=1 is not supported on TT: the plugin implements the V1 "
            "model-runner contract only. Unset it or set VLLM_USE_V2_MODEL_RUNNER=0."
        )
    envs.VLLM_USE_V2_MODEL_RUNNER.export("0")


def apply() -> None:
    global _applied
    if _applied:
        return
    _guard_accelerator_empty_cache()
    _raise_unchunked_prefill_budget()
    _applied = True
