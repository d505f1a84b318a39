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
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

from vllm_tt_plugin.utils.log import get_logger

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
    """Runs device calls in order on one daemon thread; the caller waits at most the bound.

    The hand-off is a one-call slot and two raw locks (``_go``: a call is in the slot; ``_done``:
    its outcome is), not a Future per call and a queue. Each side signals the other as its last
    step before it blocks, so the woken thread finds the GIL free: a Future's Condition (and the
    queue's wake-up) leave the signalling thread holding the GIL for some more Python, and the
    woken thread then sleeps a second time waiting for it. Measured inside the engine on this
    2-core VM, that second wake-up was most of a ~70-100 us hand-off each way
    (docs/BENCHMARKS.md). Callers on several threads take turns through ``_caller``."""

    def __init__(self, thread_name: str = "tt-device-call") -> None:
        self._thread_name = thread_name
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # thread start and the hooks' once
        self._caller = threading.Lock()  # one call in the slot at a time
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        # The slot: (call number, fn) in, (call number, returned?, value) out. The number drops
        # an outcome left by a caller that stopped waiting (interrupted) before it arrived.
        self._calls = 0
        self._call: tuple[int, Callable[[], Any]] | None = None
        self._outcome: tuple[int, bool, Any] = (0, False, None)
        self._failure: BaseException | None = None
        # What the call in the slot runs now, for its error line (``stage``).
        self._stage: DeviceCall | None = None
        self._hooks: list[FailureHook] = []
        self._hooks_ran = False

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def add_failure_hook(self, hook: FailureHook) -> None:
        """``hook(call, exc)`` runs once, in the caller's thread, on the first device failure
        (a timeout or an exception raised by the model call)."""
        self._hooks.append(hook)

    def stage(self, call: DeviceCall) -> None:
        """Called from inside a running call that does two device operations in one hand-off
        (a decode submit, then the previous decode's read-back): what it runs from now on, as
        a timeout or an exception will name it. The call's bound stays the one it started with."""
        running = self._stage
        self._stage = call if running is None else replace(call, bound_s=running.bound_s)

    def run(self, call: DeviceCall, fn: Callable[[], T]) -> T:
        if self._failure is not None:
            raise self._refusal(call)
        if threading.current_thread() is self._thread:
            return fn()  # a device call made from inside one (already bounded)
        if self._thread is None:
            self._ensure_thread()
        start = time.monotonic()
        bound = min(call.bound_s, threading.TIMEOUT_MAX)
        # Waiting behind another thread's call counts against this call's bound, as in a queue.
        if not self._caller.acquire(True, bound):
            raise self._timed_out(call, start)
        try:
            if self._failure is not None:  # the call held before this one timed out
                raise self._refusal(call)
            self._calls += 1
            number = self._calls
            self._stage = call
            self._call = (number, fn)
            remaining = max(0.0, bound - (time.monotonic() - start))
            self._done.acquire(False)  # a release left for a caller that stopped waiting
            self._go.release()
            while True:
                if not self._done.acquire(True, remaining):
                    raise self._timed_out(self._stage or call, start)
                done, ok, value = self._outcome
                if done == number:
                    break
                remaining = max(0.0, bound - (time.monotonic() - start))  # a stale outcome
            self._outcome = (0, False, None)
            call = self._stage or call
        finally:
            self._caller.release()
        if ok:
            return cast("T", value)
        if isinstance(value, Exception):
            _record_fatal(
                f"TT device error: {call.describe()} raised {type(value).__name__}; "
                "the engine stops"
            )
            self._run_hooks(call, value)
        raise value

    def _refusal(self, call: DeviceCall) -> DeviceFailedError:
        exc = DeviceFailedError(
            f"TT device failed earlier ({self._failure}); not calling {call.model_call}"
        )
        exc.__cause__ = self._failure
        return exc

    def _timed_out(self, call: DeviceCall, start: float) -> DeviceTimeoutError:
        """Fail the watchdog: the call (or the one it waited behind) is hung on the device."""
        elapsed = time.monotonic() - start
        exc = DeviceTimeoutError(
            f"TT device timeout: {call.describe()} did not return within the "
            f"{call.bound_s:g} s bound (elapsed {elapsed:.1f} s); the device is considered "
            "hung and the engine stops"
        )
        exc.__suppress_context__ = True
        self._failure = exc
        logger.error("%s", exc)
        _record_fatal(str(exc))
        self._run_hooks(call, exc)
        return exc

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name=self._thread_name, daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        go, done = self._go, self._done
        while True:
            go.acquire()
            slot, self._call = self._call, None
            if slot is None:
                continue
            number, fn = slot
            try:
                outcome: tuple[int, bool, Any] = (number, True, fn())
            except BaseException as exc:  # delivered to the waiting caller
                outcome = (number, False, exc)
            self._outcome = outcome
            del outcome, slot, fn  # no reference to the result outlives the hand-off
            # Then straight back to go.acquire(), which drops the GIL. Only this thread releases
            # ``done``: unlocked means a release is still pending for a caller that stopped
            # waiting, and the next caller reads the outcome just written after taking it.
            if done.locked():
                done.release()

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
