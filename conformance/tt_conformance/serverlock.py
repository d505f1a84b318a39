"""Make xdist_group("exclusive") mean what it says: the server is otherwise idle.

--dist loadgroup only runs the exclusive checks one after another on one worker; the other
workers would keep sending their own requests meanwhile, which spoils KV-capacity and perf
checks. So every check on an xdist worker holds a lock file for its whole setup/call/teardown:
shared (flock LOCK_SH) for ordinary checks, exclusive (LOCK_EX) for the "exclusive" group. A
waiting exclusive check holds nothing, so there is no deadlock; it may wait for running shared
checks to finish. POSIX only (fcntl); elsewhere checks simply run unlocked.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

__all__ = [
    "EXCLUSIVE_GROUP",
    "ServerLockPlugin",
    "is_exclusive",
]

if sys.platform != "win32":
    import fcntl

EXCLUSIVE_GROUP = "exclusive"


def is_exclusive(item: pytest.Item) -> bool:
    for mark in item.iter_markers("xdist_group"):
        name = mark.args[0] if mark.args else mark.kwargs.get("name")
        if name == EXCLUSIVE_GROUP:
            return True
    return False


class ServerLockPlugin:
    """Registered on xdist workers only; the controller creates the lock file."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        if sys.platform == "win32":  # no fcntl
            return (yield)
        fcntl.flock(self._fd, fcntl.LOCK_EX if is_exclusive(item) else fcntl.LOCK_SH)
        try:
            return (yield)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def pytest_unconfigure(self) -> None:
        os.close(self._fd)
