"""A start-up failure's reason, carried from an engine-core process to the API server's exit.

vLLM 0.26.0's API server learns only that an engine core exited during start-up ("Engine core
initialization failed. See root cause above. Failed core proc(s): {...}"); the reason is in the
core's log, among everything else it printed. The core records the plugin's one-line reason in a
file named after the process that started it and its own pid; that process (vllm_patches P8)
reads and removes the files of its children when the start-up fails and puts the reasons in its
exception. Standard library only.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_PREFIX = "tt-vllm-startup-failure"


def _directory() -> Path:
    return Path(tempfile.gettempdir())


def record(reason: str) -> None:
    """Leave this process's reason for the process that started it (best effort)."""
    path = _directory() / f"{_PREFIX}-{os.getppid()}-{os.getpid()}.txt"
    try:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(reason + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # the log still has the reason; only the exit message goes without it


def collect() -> list[str]:
    """The reasons this process's children recorded, removed once read (oldest first)."""
    files = sorted(_directory().glob(f"{_PREFIX}-{os.getpid()}-*.txt"), key=_mtime)
    reasons = []
    for path in files:
        try:
            reason = path.read_text(encoding="utf-8").strip()
            path.unlink()
        except OSError:
            continue
        if reason and reason not in reasons:
            reasons.append(reason)
    return reasons


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
