"""The device watchdog: every model call that reaches the TT device runs under a time bound.

A hung tt-metal call (a wedged chip, a dispatch deadlock) cannot be interrupted from Python. So
the call runs on one dedicated daemon thread and the caller (vLLM's engine thread) waits for it
with a timeout. When the bound passes the caller raises :class:`DeviceTimeoutError`, which vLLM
handles like any device exception: the engine is dead, every in-flight request ends with the
error, ``/health`` stops answering 200 and the server exits. The stuck thread is a daemon, so it
cannot hold the process; the watchdog stays failed so no later call queues behind it; and where
we run inside vLLM's engine-core process an ``os._exit`` fallback makes sure the process ends even
if shutdown itself blocks on the wedged device (docs/RELIABILITY.md).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

from vllm_tt_plugin.log import get_logger

logger = get_logger(__name__)

T = TypeVar("T")

# After a device timeout, the engine-core process is ended this long after the failure if
# vLLM's own shutdown (which closes the mesh with its own bound) has not ended it.
EXIT_FALLBACK_S = 20.0


class DeviceTimeoutError(RuntimeError):
    """A device call did not return within its bound: the device is considered hung."""


class DeviceFailedError(RuntimeError):
    """A device call was refused because the device failed (timed out) earlier."""


@dataclass(frozen=True)
class DeviceCall:
    """What is about to run on the device, for the bound and for the one error line."""

    kind: str  # "prefill", "decode", "decode read-back", "warm-up", "KV allocation", ...
    model_call: str  # e.g. "TTReferenceLlamaForCausalLM.decode_forward"
    batch_size: int | None
    bound_s: float

    def describe(self) -> str:
        batch = "" if self.batch_size is None else f", batch size {self.batch_size}"
        return f"{self.kind} step{batch}, model call {self.model_call}"


FailureHook = Callable[[DeviceCall, BaseException], None]

# The first device failure of this process, as clients are told it (vllm_patches P6 carries it
# from the engine core to the API server). Process-wide: the engine core dies of the first one.
_fatal_reason: list[str] = []


def fatal_reason() -> str | None:
    """What failed on the device in this process, or None: the timeout's own message, or the
    step and model call that raised (the exception's text stays in the server log)."""
    return _fatal_reason[0] if _fatal_reason else None


def _record_fatal(reason: str) -> None:
    if not _fatal_reason:
        _fatal_reason.append(reason)


class DeviceWatchdog:
    """Runs device calls in order on one daemon thread; the caller waits at most the bound."""

    def __init__(self, thread_name: str = "tt-device-call") -> None:
        self._thread_name = thread_name
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._failure: BaseException | None = None
        self._hooks: list[FailureHook] = []
        self._hooks_ran = False

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def add_failure_hook(self, hook: FailureHook) -> None:
        """``hook(call, exc)`` runs once, in the caller's thread, on the first device failure
        (a timeout or an exception raised by the model call)."""
        self._hooks.append(hook)

    def run(self, call: DeviceCall, fn: Callable[[], T]) -> T:
        if self._failure is not None:
            raise DeviceFailedError(
                f"TT device failed earlier ({self._failure}); not calling {call.model_call}"
            ) from self._failure
        if threading.current_thread() is self._thread:
            return fn()  # a device call made from inside one (already bounded)
        future: Future[T] = Future()
        self._queue.put((fn, future))
        self._ensure_thread()
        start = time.monotonic()
        try:
            return future.result(timeout=call.bound_s)
        except FutureTimeout:
            elapsed = time.monotonic() - start
            exc = DeviceTimeoutError(
                f"TT device timeout: {call.describe()} did not return within the "
                f"{call.bound_s:g} s bound (elapsed {elapsed:.1f} s); the device is considered "
                "hung and the engine stops"
            )
            self._failure = exc
            logger.error("%s", exc)
            _record_fatal(str(exc))
            self._run_hooks(call, exc)
            raise exc from None
        except Exception as exc:
            _record_fatal(
                f"TT device error: {call.describe()} raised {type(exc).__name__}; the engine stops"
            )
            self._run_hooks(call, exc)
            raise

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name=self._thread_name, daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        while True:
            fn, future = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # delivered to the waiting caller
                future.set_exception(exc)

    def _run_hooks(self, call: DeviceCall, exc: BaseException) -> None:
        with self._lock:
            if self._hooks_ran:
                return
            self._hooks_ran = True
        for hook in self._hooks:
            try:
                hook(call, exc)
            except Exception:  # the original failure is what the engine must see
                logger.exception("TT: device failure hook %r failed", hook)


def run_bounded(fn: Callable[[], T], bound_s: float, name: str) -> tuple[bool, T | None]:
    """Run ``fn`` on a fresh daemon thread; ``(True, result)`` if it returned within the bound,
    ``(False, None)`` if not (the thread is abandoned). Exceptions propagate."""
    future: Future[T] = Future()

    def target() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=target, name=name, daemon=True).start()
    try:
        return True, future.result(timeout=bound_s)
    except FutureTimeout:
        return False, None


def arm_exit_fallback(delay_s: float = EXIT_FALLBACK_S) -> bool:
    """In a vLLM child process (engine core), end the process ``delay_s`` from now unless it has
    ended by then. Never armed in a process without a multiprocessing parent (tests, tools)."""
    if multiprocessing.parent_process() is None:
        return False

    def fire() -> None:
        logger.error(
            "TT: the process did not exit %.0f s after the device failure; exiting now", delay_s
        )
        os._exit(1)

    timer = threading.Timer(delay_s, fire)
    timer.daemon = True
    timer.start()
    return True
