"""Engine tests: the real vLLM engine and OpenAI server on the host-emulated mesh.

`tox -e engine` runs them on pytest-xdist workers (each test starts its own servers, and a
server's start-up is mostly single-threaded imports, so two at once nearly halve the step on a
2-core host). A test whose assertions are wall-clock bounds (a server exits within 10 s of
SIGTERM, a watchdog fires within its bound) carries the ``solo`` marker: it runs with the machine
to itself, since a neighbour's start-up could push it past a bound the product must meet on an
idle host. The workers share a reader-writer lock for that (below); without xdist it is a no-op.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.engine)


def _lock(path: Path, mode: int) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, mode)
    return fd


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """A turnstile and a shared/exclusive lock across the xdist workers, held around the whole
    item (setup, call, teardown: a module's server starts in its first test's setup and stops in
    its last one's teardown). A solo test takes the turnstile (so no new test starts; without it
    a steady stream of shared holders would starve it), waits for the running tests to end, and
    runs alone; every other test passes the turnstile and holds the lock shared."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return (yield)
    # One pair of lock files per run, shared by its workers (xdist gives them one run id).
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "run")
    turnstile = Path(tempfile.gettempdir()) / f"tt-engine-{run}.turnstile"
    machine = Path(tempfile.gettempdir()) / f"tt-engine-{run}.machine"
    solo = item.get_closest_marker("solo") is not None
    gate = _lock(turnstile, fcntl.LOCK_EX)
    if not solo:
        os.close(gate)  # passed through; a solo test waiting behind it goes first
    held = _lock(machine, fcntl.LOCK_EX if solo else fcntl.LOCK_SH)
    try:
        return (yield)
    finally:
        os.close(held)
        if solo:
            os.close(gate)
