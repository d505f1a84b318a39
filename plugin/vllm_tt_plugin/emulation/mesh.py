"""A host-emulated mesh device (docs/EMULATED_MESH.md).

Selected with the TT option ``emulated_mesh: true``; MESH_DEVICE still gives the shape. It never
touches ttnn's device API. Like a real mesh it runs device work in order on its own "device"
(a worker thread), so host work overlaps it and async read-back is real, and it can be given a
fixed per-step device time (``TT_EMULATED_STEP_MS``) so scheduling overhead can be measured
against a device-bound limit. ``TT_EMULATED_TIMING_ONLY`` makes it a timing-only device: the
reference models skip their compute, so a call costs the step time and almost no host CPU.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Generic, TypeVar

from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.launch.mesh_spec import MeshSpec

T = TypeVar("T")


# How often a step file (TT_EMULATED_STEP_FILE) is re-read, at most.
STEP_FILE_POLL_S = 0.2
# A sleep overshoots its deadline by the kernel's timer slack plus the wake-up (100-150 us on
# this 2-core VM, measured); a wait sleeps until this long before the deadline, then polls.
POLL_WINDOW_S = 0.0002


def wait_until(deadline: float) -> None:
    """Return at ``deadline`` (``time.perf_counter``), within a few us. A tt-metal host waiting
    on an event polls the device's completion queue, so the modelled step ends when the device
    does, not a wake-up later. The poll yields the GIL on every turn (``sleep(0)``)."""
    remaining = deadline - time.perf_counter() - POLL_WINDOW_S
    if remaining > 0:
        time.sleep(remaining)  # the GIL released
    while time.perf_counter() < deadline:
        time.sleep(0)


def step_time_from_env() -> float:
    """Emulated device time per model call, in seconds (0 = as fast as the host computes)."""
    return envs.TT_EMULATED_STEP_MS.get() / 1000.0


class StepFile:
    """A step time (ms) in a file, re-read when it changes, at most every ``STEP_FILE_POLL_S``.
    An unreadable or malformed file keeps the last value (the writer may be mid-write)."""

    def __init__(self, path: Path, initial_s: float) -> None:
        self.path = path
        self.value_s = initial_s
        self._checked = -STEP_FILE_POLL_S
        self._mtime_ns = -1

    def step_time_s(self) -> float:
        now = time.monotonic()
        if now - self._checked >= STEP_FILE_POLL_S:
            self._checked = now
            try:
                mtime = self.path.stat().st_mtime_ns
                if mtime != self._mtime_ns:
                    ms = float(self.path.read_text().strip())
                    if ms >= 0:
                        self.value_s, self._mtime_ns = ms / 1000.0, mtime
            except (OSError, ValueError):
                pass
        return self.value_s


class EmulatedEvent(Generic[T]):
    """Completion of one enqueued device operation (``synchronize()`` waits for it)."""

    def __init__(self, future: Future[T]) -> None:
        self._future = future

    def synchronize(self) -> None:
        self._future.result()

    def done(self) -> bool:
        return self._future.done()

    def result(self) -> T:
        return self._future.result()


def _computed_now(fn: Callable[[], T]) -> Callable[[], T]:
    """Run ``fn`` now, on the caller's thread; the returned callable replays its outcome.

    (The timing-only device: ``EmulatedMeshDevice._timed``.)"""
    try:
        value = fn()
    except BaseException as exc:  # delivered when the device "finishes" the call
        error = exc

        def fail() -> T:
            raise error

        return fail
    return lambda: value


class TimedEvent:
    """A timing-only device call: its outcome is known, it completes at ``deadline``."""

    def __init__(self, deadline: float, outcome: Callable[[], Any]) -> None:
        self._deadline = deadline
        self._outcome = outcome

    def synchronize(self) -> None:
        """Wait for completion; re-raises a failure of the call, as a real event wait does."""
        self.result()

    def done(self) -> bool:
        return time.perf_counter() >= self._deadline

    def result(self) -> Any:
        wait_until(self._deadline)
        return self._outcome()


class EmulatedMeshDevice:
    """Stands in for a ttnn MeshDevice on a host with no TT chips."""

    is_emulated = True

    def __init__(
        self,
        spec: MeshSpec,
        step_time_s: float | None = None,
        device_ids: list[int] | None = None,
        timing_only: bool | None = None,
    ) -> None:
        self.spec = spec
        self.step_time_s = step_time_from_env() if step_time_s is None else step_time_s
        # Models on a timing-only mesh skip their compute (test_models/timing_only.py).
        self.timing_only = (
            envs.TT_EMULATED_TIMING_ONLY.get() if timing_only is None else timing_only
        )
        step_file = envs.TT_EMULATED_STEP_FILE.get()
        self._step_file = None if step_file is None else StepFile(step_file, self.step_time_s)
        ids = list(range(spec.num_devices)) if device_ids is None else list(device_ids)
        if len(ids) != spec.num_devices:
            raise ValueError(
                f"emulated mesh {spec.shape} needs {spec.num_devices} device ids, got {ids}"
            )
        self._device_ids = ids
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any], bool] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None  # the "device" starts on first use
        self._busy_until = 0.0  # timing-only: when the last enqueued call completes
        self._closed = False

    # --- the parts of the MeshDevice surface models use -------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return self.spec.shape

    def get_num_devices(self) -> int:
        return self.spec.num_devices

    def get_device_ids(self) -> list[int]:
        return list(self._device_ids)

    def create_submeshes(self, shape: tuple[int, int]) -> list[EmulatedMeshDevice]:
        """Tile the mesh into submeshes of ``shape`` (row-major), like MeshDevice does."""
        rows, cols = shape
        if self.spec.rows % rows or self.spec.cols % cols:
            raise ValueError(f"cannot tile mesh {self.spec.shape} into {shape} submeshes")
        subs: list[EmulatedMeshDevice] = []
        for r0 in range(0, self.spec.rows, rows):
            for c0 in range(0, self.spec.cols, cols):
                ids = [
                    self._device_ids[(r0 + r) * self.spec.cols + (c0 + c)]
                    for r in range(rows)
                    for c in range(cols)
                ]
                spec = MeshSpec(f"{self.spec.name}[{len(subs)}]", rows, cols, self.spec.family)
                subs.append(EmulatedMeshDevice(spec, self.step_time_s, ids, self.timing_only))
        return subs

    # --- the emulated command queue -----------------------------------------------------------
    def enqueue(
        self, fn: Callable[[], T], started: float | None = None, step: bool = True
    ) -> EmulatedEvent[T] | TimedEvent:
        """Run ``fn`` on the device thread after everything enqueued before it. ``started``
        (``time.perf_counter``): when the model call enqueuing it began; on the timing-only
        device its step counts from then (``_timed``). ``step=False``: a small host-to-device
        load, not a device step; it keeps its place in the queue but adds no step time."""
        if self._closed:
            raise RuntimeError("the emulated mesh device is closed")
        if self.timing_only:
            return self._timed(fn, started, step)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="tt-emulated-device", daemon=True
            )
            self._thread.start()
        future: Future[T] = Future()
        self._queue.put((fn, future, step))
        return EmulatedEvent(future)

    def _timed(self, fn: Callable[[], T], started: float | None, step: bool) -> TimedEvent:
        """Timing-only: compute now, on the caller's thread (device calls come in order from one
        thread, so the state they touch is the same), and complete one step time after the
        device would have started the call. No device thread: Python work there would fight the
        host for the GIL and stretch the modelled step (hardware needs no GIL), and a sleeping
        waiter wakes at the deadline itself. The step starts when the model call began
        (``started``): the reference model's own parsing and checks, like its compute, are the
        emulator's cost, inside the device time, not host time the benchmark should see."""
        if self._step_file is not None:
            self.step_time_s = self._step_file.step_time_s()
        start = time.perf_counter() if started is None else started
        outcome = _computed_now(fn)
        self._busy_until = max(self._busy_until, start) + (self.step_time_s if step else 0.0)
        return TimedEvent(self._busy_until, outcome)

    def run(self, fn: Callable[[], T], started: float | None = None) -> T:
        """Enqueue ``fn`` and wait for its result (a synchronous device call)."""
        return self.enqueue(fn, started).result()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, future, step = item
            if not future.set_running_or_notify_cancel():
                continue
            start = time.perf_counter()
            try:
                result = fn()
            except BaseException as exc:  # delivered to whoever synchronizes on it
                future.set_exception(exc)
                continue
            if self._step_file is not None:
                self.step_time_s = self._step_file.step_time_s()
            if step:
                wait_until(start + self.step_time_s)
            future.set_result(result)

    def close(self, join_timeout_s: float = 30.0) -> None:
        """Stop the device thread after the work queued before; raises when it is stuck (a hung
        call on the device), as closing a wedged real mesh fails."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=join_timeout_s)
            if self._thread.is_alive():
                raise RuntimeError(
                    f"emulated mesh {self.spec.name}: the device thread is stuck in a call"
                )

    def __repr__(self) -> str:
        timing = ", timing-only" if self.timing_only else ""
        return f"EmulatedMeshDevice({self.spec.name}, shape={self.shape}{timing})"
