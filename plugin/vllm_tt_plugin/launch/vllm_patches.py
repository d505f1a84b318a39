"""Every place the plugin patches vLLM behaviour at runtime. Ledger: docs/VLLM_PATCHES.md.

Each patch is idempotent, applied only on the TT platform, and says how to drop it.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.utils.log import get_logger

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


# P6: ENGINE_CORE_DEAD + this + the reason (UTF-8) is the dying core's last frame.
DEAD_REASON_SEPARATOR = b"\x00tt-reason:"
# The reason the API-server process received (P6); the first engine core to die sets it.
_dead_reason: list[str] = []


def _carry_device_failure_to_clients() -> None:
    """P6: requests ended by a failed TT device get an error naming it, not only vLLM's
    generic "EngineCore encountered an issue".

    The engine core's last frame to the API server is the bare ``ENGINE_CORE_DEAD`` sentinel,
    and the API server builds a fresh, reason-less ``EngineDeadError`` wherever it meets a dead
    engine. So (1) in the engine core, the sentinel gets the watchdog's fatal reason appended
    (``_send_engine_dead`` sets the class constant the output thread compares against, in the
    dying process only); (2) in the API server, ``validate_alive`` recognises the longer frame
    and keeps the reason; (3) every ``EngineDeadError`` built after that leads with it, which
    is what the HTTP 500 body and the streaming error event carry. Drop when vLLM forwards the
    engine core's fatal error to clients.
    """
    from vllm.v1.engine import core, core_client, exceptions

    from vllm_tt_plugin.device.watchdog import fatal_reason

    proc = core.EngineCoreProc
    if getattr(proc._send_engine_dead, "_tt_patched", False):
        return
    sentinel = bytes(proc.ENGINE_CORE_DEAD)
    prefix = sentinel + DEAD_REASON_SEPARATOR
    original_send = proc._send_engine_dead
    original_validate = core_client.BackgroundResources.validate_alive
    original_init = exceptions.EngineDeadError.__init__

    def _send_engine_dead(self: Any) -> None:
        reason = fatal_reason()
        if reason:
            proc.ENGINE_CORE_DEAD = prefix + reason.encode()
        original_send(self)

    def validate_alive(self: Any, frames: Any) -> None:
        if len(frames) == 1 and frames[0].buffer[: len(prefix)] == prefix:
            if not _dead_reason:
                _dead_reason.append(bytes(frames[0].buffer[len(prefix) :]).decode(errors="replace"))
            self.engine_dead = True
            raise exceptions.EngineDeadError()
        original_validate(self, frames)

    def __init__(self: Any, *args: Any, suppress_context: bool = False, **kwargs: Any) -> None:
        original_init(self, *args, suppress_context=suppress_context, **kwargs)
        if _dead_reason and self.args:
            self.args = (f"{_dead_reason[0]}. {self.args[0]}", *self.args[1:])

    _send_engine_dead._tt_patched = True  # type: ignore[attr-defined]
    proc._send_engine_dead = _send_engine_dead
    core_client.BackgroundResources.validate_alive = validate_alive
    exceptions.EngineDeadError.__init__ = __init__


# P7: the last seconds of vLLM's shutdown timeout are kept for the TT teardown (finishing the
# step, closing the mesh, resetting fabric; a healthy close takes well under a second).
SHUTDOWN_TEARDOWN_S = 6


def reserve_shutdown_teardown(vllm_config: Any) -> None:
    """P7, API-server side (the platform calls it): vLLM's default ``shutdown_timeout`` 0 kills
    the engine core at once on SIGTERM, before the worker can close the mesh; raise it to
    ``SHUTDOWN_TEARDOWN_S``. Idempotent (the config may be checked more than once)."""
    current = int(getattr(vllm_config, "shutdown_timeout", 0) or 0)
    if current < SHUTDOWN_TEARDOWN_S:
        logger.info(
            "TT: shutdown_timeout raised from %d s to %d s: the engine core needs that long to "
            "close the mesh on SIGTERM (in-flight requests are still aborted at once)",
            current,
            SHUTDOWN_TEARDOWN_S,
        )
        vllm_config.shutdown_timeout = SHUTDOWN_TEARDOWN_S


def _bound_shutdown_drain() -> None:
    """P7, engine-core side: on SIGTERM the core drains in-flight requests for at most
    ``shutdown_timeout - SHUTDOWN_TEARDOWN_S`` (0 with vLLM's default: at once), then aborts the
    rest, so its teardown (closing the mesh) ends before the API server kills it at
    ``shutdown_timeout``. vLLM drains until no work is left and the kill comes first under load.
    Drop when vLLM leaves a platform time for device teardown after its drain.
    """
    from vllm.v1.engine.core import EngineCoreProc, EngineShutdownState
    from vllm.v1.request import RequestStatus

    original = EngineCoreProc._handle_shutdown
    if getattr(original, "_tt_patched", False):
        return

    def _handle_shutdown(self: Any) -> bool:
        if self.shutdown_state == EngineShutdownState.REQUESTED:
            drain_s = max(0.0, float(self.vllm_config.shutdown_timeout) - SHUTDOWN_TEARDOWN_S)
            self._tt_drain_deadline = time.monotonic() + drain_s
        keep_running = original(self)
        deadline = getattr(self, "_tt_drain_deadline", None)
        if keep_running and deadline is not None and time.monotonic() >= deadline:
            left = self.scheduler.get_num_unfinished_requests()
            if left:
                logger.info(
                    "TT: shutdown: aborting %d in-flight request(s) so the device teardown "
                    "fits in the shutdown timeout",
                    left,
                )
                aborted = self.scheduler.finish_requests(None, RequestStatus.FINISHED_ABORTED)
                self._send_abort_outputs(aborted)
        return bool(keep_running)

    _handle_shutdown._tt_patched = True  # type: ignore[attr-defined]
    EngineCoreProc._handle_shutdown = _handle_shutdown


def _carry_startup_failure_to_exit() -> None:
    """P8: an engine core that fails to start (the mesh would not open) ends the API server with
    the plugin's reason, not only vLLM's generic "Engine core initialization failed. See root
    cause above.", which points into a log where ttnn and vLLM printed much else.

    The core records its one-line reason (startup_reason.record, keyed by this process's pid);
    when ``wait_for_engine_startup`` raises, the reasons of this process's children lead the
    exception's message, so the server's last line names them. Drop when vLLM forwards an engine
    core's start-up error to the process that launched it.
    """
    from vllm.v1.engine import utils

    from vllm_tt_plugin.device import startup_reason

    original = utils.wait_for_engine_startup
    if getattr(original, "_tt_patched", False):
        return

    @functools.wraps(original)
    def wait_for_engine_startup(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except RuntimeError as exc:
            reasons = startup_reason.collect()
            if reasons and exc.args:
                exc.args = (f"{' / '.join(reasons)} {exc.args[0]}", *exc.args[1:])
            raise

    wait_for_engine_startup._tt_patched = True  # type: ignore[attr-defined]
    utils.wait_for_engine_startup = wait_for_engine_startup


def replace_builtin_parsers() -> None:
    """P5: the plugin's chat parsers (``vllm_tt_plugin.parsers``) replace vLLM's built-ins of the
    same name (``gemma4``): each is registered lazily, and a vLLM class of that name already
    loaded into the manager's eager cache, which it consults first, is dropped.

    Importing the managers first also keeps vLLM's own lazy registration (run when
    ``vllm.reasoning`` / ``vllm.tool_parsers`` is first imported) from overwriting ours. Checked
    on every call, not once: a built-in may be loaded between two plugin loads. Drop when the
    plugin's parsers are registered under their own names only.
    """
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    from vllm_tt_plugin.parsers import REASONING_PARSERS, TOOL_PARSERS

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
    replace_builtin_parsers()  # re-checked every call (see P5)
    if _applied:
        return
    _guard_accelerator_empty_cache()
    _raise_unchunked_prefill_budget()
    _carry_device_failure_to_clients()
    _bound_shutdown_drain()
    _carry_startup_failure_to_exit()
    _applied = True
