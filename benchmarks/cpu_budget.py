"""Where a benchmark's CPU goes: per process role, and how busy the machine's cores are.

A server run on this machine shares its two cores between vLLM's API server process, its engine
core process (where the plugin runs) and the benchmark's client. Each phase time the engine
publishes grows when another process holds a core, so a row needs the whole budget beside it: the
CPU seconds each role used per decode step, and the cores' busy fraction over the same interval
(1.0 = every core busy all the time: the host, not the device, sets the pace).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

ROLES = ("engine", "api_server", "client")


def _role(proc: psutil.Process, server_pid: int) -> str | None:
    """vLLM names its engine-core processes ``VLLM::EngineCore`` (setproctitle)."""
    try:
        title = " ".join(proc.cmdline()) or proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    if "EngineCore" in title:
        return "engine"
    return "api_server" if proc.pid == server_pid or "APIServer" in title else None


def process_clock(pid: int) -> int:
    """The CPU-time clock id of process ``pid`` (what glibc's ``clock_getcpuclockid`` returns
    on Linux: ``(~pid << 3) | CPUCLOCK_SCHED``): its threads' scheduler runtime in ns, exited
    threads included, where /proc's utime and stime count 10 ms ticks."""
    return ((~pid) << 3) | 2


def _cpu_s(proc: psutil.Process) -> float:
    try:
        return time.clock_gettime(process_clock(proc.pid))
    except OSError:  # not Linux, or the process ended: its ticks, if still readable
        try:
            times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return 0.0
        return float(times.user + times.system)


@dataclass(frozen=True)
class CpuSnapshot:
    by_role: dict[str, float]  # CPU seconds so far, per role
    busy_s: float  # machine-wide non-idle CPU seconds so far (all cores)
    cores: int

    @classmethod
    def take(cls, server_pid: int) -> CpuSnapshot:
        by_role = dict.fromkeys(ROLES, 0.0)
        server = psutil.Process(server_pid)
        for proc in [server, *server.children(recursive=True)]:
            role = _role(proc, server_pid)
            if role is not None:
                by_role[role] += _cpu_s(proc)
        by_role["client"] = _cpu_s(psutil.Process(os.getpid()))
        t = psutil.cpu_times()
        idle = t.idle + getattr(t, "iowait", 0.0)
        busy = sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        return cls(by_role, float(busy), psutil.cpu_count() or 1)


def per_step(
    before: CpuSnapshot, after: CpuSnapshot, steps: float, wall_s: float
) -> dict[str, float]:
    """CPU ms per decode step by role over ``steps`` decode steps, and the cores' busy fraction
    over the same ``wall_s``."""
    scale = 1000.0 / max(steps, 1e-9)
    out = {f"{r}_cpu_ms": round((after.by_role[r] - before.by_role[r]) * scale, 3) for r in ROLES}
    out["cores_busy"] = round((after.busy_s - before.busy_s) / (wall_s * after.cores), 3)
    return out
