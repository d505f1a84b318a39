"""The host-overhead benchmark's CPU budget (benchmarks/cpu_budget.py): CPU is charged to the
process role that spent it, and scaled to one decode step."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from benchmarks.cpu_budget import CpuSnapshot, per_step

BURN_S = 0.5
# A stand-in server: a parent that sleeps, with a child titled like vLLM's engine core that
# burns BURN_S of CPU once told to (a file appears) and then sleeps.
CHILD = f"""
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
t = time.process_time()
while time.process_time() - t < {BURN_S}:
    pass
open(sys.argv[1] + ".done", "w").close()
time.sleep(60)
"""
PARENT = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], "VLLM::EngineCore"])
time.sleep(60)
"""


def test_cpu_is_charged_to_the_engine_role(tmp_path) -> None:
    go = tmp_path / "go"
    server = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(go)])
    try:
        deadline = time.monotonic() + 30
        while not psutil.Process(server.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        before = CpuSnapshot.take(server.pid)
        go.touch()
        while not (tmp_path / "go.done").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        after = CpuSnapshot.take(server.pid)
    finally:
        for child in psutil.Process(server.pid).children(recursive=True):
            child.kill()
        server.kill()
        server.wait()
    spent = {role: after.by_role[role] - before.by_role[role] for role in after.by_role}
    assert spent["engine"] >= 0.8 * BURN_S
    assert spent["api_server"] < 0.2 * BURN_S
    assert after.busy_s - before.busy_s >= 0.8 * BURN_S  # the machine saw it too


def snap(engine: float, api: float, client: float, busy: float) -> CpuSnapshot:
    return CpuSnapshot({"engine": engine, "api_server": api, "client": client}, busy, cores=2)


def test_a_windows_budget_is_per_decode_step_and_the_cores_busy_fraction() -> None:
    # 40 decode steps in 1 s: 80 ms engine CPU, 40 ms API server, 4 ms client, 1 s machine-wide
    before = snap(1.0, 1.0, 1.0, 10.0)
    after = snap(1.08, 1.04, 1.004, 11.0)
    budget = per_step(before, after, steps=40, wall_s=1.0)
    assert budget["engine_cpu_ms"] == pytest.approx(2.0)
    assert budget["api_server_cpu_ms"] == pytest.approx(1.0)
    assert budget["client_cpu_ms"] == pytest.approx(0.1)
    assert budget["cores_busy"] == pytest.approx(0.5)  # 1 s of CPU over 1 s on 2 cores
