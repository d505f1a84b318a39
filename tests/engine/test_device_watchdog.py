"""A failing or hung TT device takes the server down loudly (docs/RELIABILITY.md).

Each case serves a faulty class from tests/engine/broken_models.py through
``TT_MODEL_CLASS_OVERRIDES`` with small watchdog bounds, streams requests into the fault and
asserts: every in-flight request ends with an error within the bound plus slack, ``/health``
stops answering 200, one ERROR line names the step kind, batch size, elapsed time and model call,
the mesh is closed, and the server process is gone. The measured times are printed (-s) for
docs/RELIABILITY.md.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.engine.harness import Stream, health_non_200_at, log_lines, serve
from vllm_tt_plugin.emulation.server import ServerStartError

# The watchdog's bounds are measured with no other engine test alongside (tests/engine/conftest.py).
pytestmark = pytest.mark.solo

BOUND_S = 3.0
# Engine-dead propagation, the bounded mesh close and process exit on a shared 2-core host.
SLACK_S = 12.0
EXIT_WITHIN_S = 40.0
ENV_STEP = {"TT_EMULATED_STEP_MS": "15"}  # ~15 ms device steps: requests stay in flight


def _env(model_class: str) -> dict[str, str]:
    return {
        "TT_MODEL_CLASS_OVERRIDES": (
            f"TTReferenceLlamaForCausalLM=tests.engine.broken_models:{model_class}"
        ),
        **ENV_STEP,
    }


def _one_timeout_line(log: Path, *parts: str) -> str:
    # vLLM's own traceback of the engine's fatal error repeats the message; the plugin's line is
    # the one logged by the watchdog.
    lines = [
        line
        for line in log.read_text(errors="replace").splitlines()
        if "ERROR" in line and "TT device timeout:" in line and "[watchdog.py" in line
    ]
    assert len(lines) == 1, "\n".join(lines)
    for part in ("did not return within", "elapsed", *parts):
        assert part in lines[0], (part, lines[0])
    return lines[0]


def _prompt(i: int) -> list[int]:
    return [100 + 7 * i + k for k in range(5 + i)]


@dataclass(frozen=True)
class Case:
    model_class: str
    kind: str  # the step kind the error line names
    model_call: str
    tt: dict[str, object]
    vllm_args: tuple[str, ...] = ()
    staggered: int = 0  # requests sent after the first ones stream (they meet a prefill fault)


CASES = (
    Case("HangsInDecode", "decode step", "HangsInDecode.decode_forward", {}),
    Case("HangsInPrefill", "prefill step", "HangsInPrefill.prefill_forward", {}, staggered=2),
    Case(
        "HangsInReadBack",
        "decode read-back step",
        "HangsInReadBack.read_decode_output",
        {"sample_on_device_mode": "all"},
        ("--async-scheduling",),
    ),
    Case("RaisesInDecode", "", "RaisesInDecode.decode_forward", {}),
)


@pytest.mark.parametrize("case", CASES, ids=[c.model_class for c in CASES])
def test_a_failing_device_ends_every_request_and_the_server(case: Case, tmp_path: Path) -> None:
    server = serve(
        tt={"device_timeout_s": BOUND_S, **case.tt},
        vllm_args=["--max-num-seqs", "8", *case.vllm_args],
        env=_env(case.model_class),
    )
    server.log_path = tmp_path / "server.log"
    with server:
        streams = []
        first = 2 if case.staggered else 4
        for i in range(first):
            streams.append(Stream(server.url, _prompt(i)).start())
            if case.staggered:
                assert streams[-1].first_token.wait(60), "request never streamed"
        for i in range(case.staggered):
            streams.append(Stream(server.url, _prompt(first + i)).start())
        # One non-streaming request too: its HTTP error body must name the cause as well.
        plain = Stream(server.url, _prompt(first + case.staggered), stream=False).start()
        streams.append(plain)
        for s in streams:
            s.join(BOUND_S + SLACK_S + 60)
        assert all(s.outcome != "running" for s in streams), [s.outcome for s in streams]
        fault_at = min(s.stalled_at for s in streams if s.tokens)
        health_at = health_non_200_at(server.url, time.monotonic() + 30)
        assert health_at is not None, "/health kept answering 200"
        outcomes = [(s.outcome, s.tokens, s.error[:120]) for s in streams]
        assert all(s.outcome in ("error", "dropped") for s in streams), outcomes
        assert any(s.outcome == "error" for s in streams), outcomes
        ends = [s.ended_at - fault_at for s in streams]
        bound = BOUND_S if case.kind else 0.0
        assert max(ends) < bound + SLACK_S, ends
        # Clients are told what failed (vllm_patches P6), not only "EngineCore encountered an
        # issue": the streaming error events and the non-streaming HTTP 500 alike.
        cause = f"TT device timeout: {case.kind}" if case.kind else "TT device error: decode step"
        errors = [s.error for s in streams if s.outcome == "error"]
        assert errors and all(cause in e and case.model_call in e for e in errors), errors
        assert plain.outcome == "error" and plain.error.startswith("HTTP 500"), plain.error
        proc = server._proc
        assert proc is not None
        exit_start = time.monotonic()
        with contextlib.suppress(Exception):
            proc.wait(timeout=EXIT_WITHIN_S)
        assert proc.poll() is not None, "the server process did not exit"
        exited_after = time.monotonic() - fault_at
        print(
            f"\n{case.model_class}: requests ended {min(ends):.1f}-{max(ends):.1f} s after the "
            f"device stalled, /health non-200 after {health_at - fault_at:.1f} s, process gone "
            f"after {exited_after:.1f} s (waited {time.monotonic() - exit_start:.1f} s); "
            f"outcomes {sorted({o for o, _, _ in outcomes})}; exit code {proc.returncode}"
        )
    if case.kind:
        _one_timeout_line(server.log_path, case.kind, "batch size", case.model_call)
    else:
        assert log_lines(server, "TT: fatal device error in the decode step"), "no error line"
    assert log_lines(server, "TT: closed mesh"), "the mesh was not closed"
    assert len(log_lines(server, "TT: closed mesh")) == 1, "closed more than once"


def test_a_hung_warm_up_fails_start_up_within_the_bound(tmp_path: Path) -> None:
    server = serve(tt={"warmup_timeout_s": BOUND_S}, env=_env("HangsInWarmup"))
    server.log_path = tmp_path / "server.log"
    start = time.monotonic()
    with pytest.raises(ServerStartError):
        server.start()
    failed_after = time.monotonic() - start
    print(f"\nHangsInWarmup: start-up failed after {failed_after:.1f} s")
    _one_timeout_line(server.log_path, "warm-up step", "HangsInWarmup.warmup_model_decode")
    assert log_lines(server, "TT: closed mesh"), "the mesh was not closed"
    assert not server.running
