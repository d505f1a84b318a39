"""The device watchdog: bounded device calls, the one error line, failure hooks, bounded close."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from vllm_tt_plugin.device.mesh import OpenedMesh, close_mesh
from vllm_tt_plugin.device.watchdog import (
    DeviceCall,
    DeviceFailedError,
    DeviceTimeoutError,
    DeviceWatchdog,
    arm_exit_fallback,
    run_bounded,
)
from vllm_tt_plugin.emulation.mesh import EmulatedMeshDevice
from vllm_tt_plugin.launch.mesh_spec import parse_mesh_device

DECODE = DeviceCall("decode", "Model.decode_forward", 3, 0.3)


@pytest.fixture
def caplog(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """vLLM's logging config stops propagation at the "vllm" logger once vLLM is imported (by
    another test in the same worker): attach the capture handler to the plugin's logger."""
    plugin = logging.getLogger("vllm.tt_plugin")
    plugin.addHandler(caplog.handler)
    old = plugin.level
    plugin.setLevel(logging.INFO)
    yield caplog
    plugin.setLevel(old)
    plugin.removeHandler(caplog.handler)


def test_a_call_returns_its_result_from_the_device_thread() -> None:
    watchdog = DeviceWatchdog()
    result = watchdog.run(DECODE, lambda: threading.current_thread().name)
    assert result == "tt-device-call"
    assert watchdog.failure is None


def test_a_hung_call_raises_after_the_bound_with_one_error_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watchdog = DeviceWatchdog()
    release = threading.Event()
    hooks: list[tuple[DeviceCall, BaseException]] = []
    watchdog.add_failure_hook(lambda call, exc: hooks.append((call, exc)))
    start = time.monotonic()
    with pytest.raises(DeviceTimeoutError) as info:
        watchdog.run(DECODE, release.wait)
    elapsed = time.monotonic() - start
    release.set()
    assert 0.3 <= elapsed < 2.0
    message = str(info.value)
    for part in ("decode step", "batch size 3", "Model.decode_forward", "0.3 s bound", "elapsed"):
        assert part in message
    # (the same record can reach the capture handler twice: directly and through the root)
    errors = {id(r): r for r in caplog.records if r.levelno >= logging.ERROR}
    assert [r.getMessage() for r in errors.values()] == [message]
    assert len(hooks) == 1 and hooks[0][0] is DECODE and hooks[0][1] is info.value


def test_a_call_in_two_stages_names_the_stage_that_hung_or_raised() -> None:
    """A decode submit that then reads the previous step back in the same hand-off: a hang or
    an error in the read-back is named as the read-back, under the call's own bound."""
    read_back = DeviceCall("decode read-back", "Model.read_decode_output", 3, 5.0)
    watchdog = DeviceWatchdog()
    release = threading.Event()

    def submit_then_read() -> None:
        watchdog.stage(read_back)
        release.wait()

    with pytest.raises(DeviceTimeoutError) as info:
        watchdog.run(DECODE, submit_then_read)
    release.set()
    assert "decode read-back step" in str(info.value)
    assert "Model.read_decode_output" in str(info.value) and "0.3 s bound" in str(info.value)
    # An exception in the second stage; the next call is named by its own description again.
    hooks: list[DeviceCall] = []
    fresh = DeviceWatchdog()
    fresh.add_failure_hook(lambda call, exc: hooks.append(call))

    def submit_then_fail() -> None:
        fresh.stage(read_back)
        raise RuntimeError("read failed")

    with pytest.raises(RuntimeError, match="read failed"):
        fresh.run(DECODE, submit_then_fail)
    assert [(c.kind, c.model_call) for c in hooks] == [("decode read-back", read_back.model_call)]
    assert fresh.run(DECODE, lambda: 7) == 7
    with pytest.raises(DeviceTimeoutError, match="decode step, batch size 3, model call Model"):
        fresh.run(DECODE, threading.Event().wait)


def test_after_a_timeout_no_call_queues_behind_the_hung_one() -> None:
    watchdog = DeviceWatchdog()
    release = threading.Event()
    with pytest.raises(DeviceTimeoutError):
        watchdog.run(DECODE, release.wait)
    ran: list[int] = []
    start = time.monotonic()
    with pytest.raises(DeviceFailedError, match="failed earlier"):
        watchdog.run(DECODE, lambda: ran.append(1))
    assert time.monotonic() - start < 0.1
    release.set()
    time.sleep(0.05)
    assert ran == []


def test_a_raising_call_propagates_and_runs_the_hooks_once() -> None:
    watchdog = DeviceWatchdog()
    hooks: list[str] = []
    watchdog.add_failure_hook(lambda call, exc: hooks.append(str(exc)))

    def boom() -> None:
        raise ValueError("device said no")

    for _ in range(2):
        with pytest.raises(ValueError, match="device said no"):
            watchdog.run(DECODE, boom)
    assert hooks == ["device said no"]
    assert watchdog.failure is None  # a raise is the engine's to handle; no poisoning


def test_a_failing_hook_does_not_hide_the_device_error() -> None:
    watchdog = DeviceWatchdog()

    def bad_hook(call: DeviceCall, exc: BaseException) -> None:
        raise RuntimeError("hook broke")

    watchdog.add_failure_hook(bad_hook)
    with pytest.raises(DeviceTimeoutError):
        watchdog.run(DECODE, threading.Event().wait)


def test_a_device_call_made_from_a_device_call_runs_inline() -> None:
    watchdog = DeviceWatchdog()

    def outer() -> tuple[str, str]:
        return threading.current_thread().name, watchdog.run(
            DECODE, lambda: threading.current_thread().name
        )

    assert watchdog.run(DECODE, outer) == ("tt-device-call", "tt-device-call")


def test_calls_from_several_threads_each_get_their_own_result_in_turn() -> None:
    watchdog = DeviceWatchdog()
    running = [0]
    overlap: list[int] = []
    results: dict[int, list[int]] = {}

    def call(i: int) -> int:
        running[0] += 1
        overlap.append(running[0])
        time.sleep(0.001)
        running[0] -= 1
        return i * i

    def caller(t: int) -> None:
        results[t] = [watchdog.run(DECODE, lambda i=i: call(i)) for i in range(t, t + 40)]

    threads = [threading.Thread(target=caller, args=(t * 100,)) for t in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(overlap) == {1}  # one call on the device at a time
    assert results == {t * 100: [i * i for i in range(t * 100, t * 100 + 40)] for t in range(3)}


def test_a_call_waiting_behind_a_hung_one_times_out_within_its_own_bound() -> None:
    watchdog = DeviceWatchdog()
    release = threading.Event()
    first: list[BaseException] = []

    def hang() -> None:
        try:
            watchdog.run(DeviceCall("decode", "Model.decode_forward", 3, 5.0), release.wait)
        except DeviceTimeoutError as exc:
            first.append(exc)

    hung = threading.Thread(target=hang)
    hung.start()
    time.sleep(0.1)  # the hung call holds the device
    start = time.monotonic()
    with pytest.raises(DeviceTimeoutError, match="0.3 s bound"):
        watchdog.run(DECODE, lambda: 1)
    assert 0.3 <= time.monotonic() - start < 2.0
    with pytest.raises(DeviceFailedError):
        watchdog.run(DECODE, lambda: 1)
    release.set()
    hung.join()
    assert first == []  # the hung call itself returned once released


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals: main thread"
)
def test_a_caller_that_stops_waiting_leaves_no_outcome_for_the_next_call() -> None:
    import signal

    class Interrupted(Exception):
        pass

    def interrupt(signum: int, frame: Any) -> None:
        raise Interrupted

    watchdog = DeviceWatchdog()
    bound = DeviceCall("decode", "Model.decode_forward", 3, 10.0)
    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(Interrupted):  # the caller stops waiting; the call goes on
            watchdog.run(bound, lambda: (time.sleep(0.3), "first")[1])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert watchdog.run(bound, lambda: "second") == "second"  # queued behind the first
    time.sleep(0.05)
    assert watchdog.run(bound, lambda: "third") == "third"
    assert watchdog.failure is None


def test_run_bounded_reports_a_stuck_function() -> None:
    assert run_bounded(lambda: 7, 1.0, "t") == (True, 7)
    start = time.monotonic()
    assert run_bounded(threading.Event().wait, 0.2, "t") == (False, None)
    assert time.monotonic() - start < 1.0


def test_exit_fallback_is_never_armed_outside_a_vllm_child_process() -> None:
    assert arm_exit_fallback(0.01) is False


def _emulated(name: str = "N300") -> OpenedMesh:
    spec = parse_mesh_device(name)
    return OpenedMesh(EmulatedMeshDevice(spec), spec, True, None, False)


def test_close_mesh_closes_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    opened = _emulated()
    assert opened.device.run(lambda: 1) == 1
    assert close_mesh(opened, bound_s=5.0, why="test") is True
    assert any("closed mesh" in r.getMessage() for r in caplog.records)
    with pytest.raises(RuntimeError, match="closed"):
        opened.device.run(lambda: 1)


def test_a_mesh_that_cannot_close_is_logged_within_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    opened = _emulated()
    release = threading.Event()
    opened.device.enqueue(release.wait)  # the device is stuck in a call
    start = time.monotonic()
    assert close_mesh(opened, bound_s=0.3) is False
    assert time.monotonic() - start < 2.0
    release.set()
    assert any("did not close within 0.3 s" in r.getMessage() for r in caplog.records)


def test_adapter_calls_run_under_the_serving_bound() -> None:
    from vllm_tt_plugin.adapter.model_adapter import ModelAdapter
    from vllm_tt_plugin.contract.call_types import DecodeSubmission

    class Hangs:
        @classmethod
        def initialize_vllm_model(cls, *args: Any, **kwargs: Any) -> Hangs:
            return cls()

        def prefill_forward(self, **kwargs: Any) -> None:
            return None

        def decode_forward(self, **kwargs: Any) -> None:
            return None

        def read_decode_output(self, out: Any, async_read: bool) -> Any:
            return out, [threading.Event().wait]  # an event that never completes

        def process_decode_output_host(self, out: Any, is_tokens: bool) -> Any:
            return out

    adapter = ModelAdapter(Hangs, device_timeout_s=0.3, warmup_timeout_s=5.0)
    adapter._model = Hangs()
    start = time.monotonic()
    with pytest.raises(DeviceTimeoutError, match=r"decode read-back step, batch size 2"):
        adapter.read_decode(DecodeSubmission(None, True, False, 2), overlapped=True)
    assert time.monotonic() - start < 2.0


def test_the_device_timeout_reaches_the_api_servers_engine_dead_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """P6 round trip with vLLM's real classes: the dying engine core's last frame carries the
    watchdog's reason, and the API server's EngineDeadError (what clients get) leads with it."""
    import queue

    import zmq
    from vllm.v1.engine.core import EngineCoreProc
    from vllm.v1.engine.core_client import BackgroundResources
    from vllm.v1.engine.exceptions import EngineDeadError

    from vllm_tt_plugin.device import watchdog
    from vllm_tt_plugin.launch import vllm_patches

    vllm_patches.apply()
    monkeypatch.setattr(watchdog, "_fatal_reason", [])
    monkeypatch.setattr(vllm_patches, "_dead_reason", [])
    monkeypatch.setattr(EngineCoreProc, "ENGINE_CORE_DEAD", EngineCoreProc.ENGINE_CORE_DEAD)
    plain = str(EngineDeadError())
    with pytest.raises(DeviceTimeoutError):
        DeviceWatchdog().run(DECODE, lambda: time.sleep(5))
    # The engine core side: _send_engine_dead queues the frame its output thread sends.
    core = object.__new__(EngineCoreProc)
    core.output_queue = queue.Queue()
    core.output_thread = threading.Thread(target=lambda: None)
    core.output_thread.start()
    core._send_engine_dead()
    frame = core.output_queue.get_nowait()
    assert frame == EngineCoreProc.ENGINE_CORE_DEAD  # the thread sends what matches it
    # The API server side.
    ctx = zmq.Context()
    try:
        resources = BackgroundResources(ctx=ctx)
        with pytest.raises(EngineDeadError):
            resources.validate_alive([zmq.Frame(frame)])
        assert resources.engine_dead
    finally:
        ctx.term()
    message = str(EngineDeadError(suppress_context=True))
    assert message.startswith(
        "TT device timeout: decode step, batch size 3, model call Model.decode_forward did not "
        "return within the 0.3 s bound"
    ), message
    assert message.endswith(plain)
