"""Stop the run fast when the server under test dies or turns unhealthy mid-run.

Without this a dead server costs every remaining check its client timeout (600 s) or its
per-check limit. Each process that runs checks (the single process, or every xdist worker)
watches ``GET /health``:

- a daemon thread probes it every ``POLL_INTERVAL_S``; ``FAILURES_TO_ABORT`` failed probes in a
  row (connection refused, no answer within ``HEALTH_TIMEOUT_S``, a status other than 200)
  declare the server gone;
- a check that fails is followed by one probe at once, so a server that died under a check is
  noticed without waiting for the poll;
- a check still blocked on the dead server when it is declared gone is interrupted: the main
  thread gets ``INTERRUPT_SIGNAL`` and the check fails with :class:`ServerGone`.

Then ``session.shouldstop`` ends the run after the current check (xdist carries a worker's stop
to the controller), and the report gets the top-level ``aborted`` status (report.Aborted).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Generator
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any

import pytest
import requests

from tt_conformance.report import utc_now_iso
from tt_conformance.server import bearer

__all__ = [
    "FAILURES_TO_ABORT",
    "HEALTH_TIMEOUT_S",
    "INTERRUPT_SIGNAL",
    "POLL_INTERVAL_S",
    "WORKEROUTPUT_KEY",
    "AbortInfo",
    "HealthWatch",
    "ServerGone",
    "health_problem",
]

HEALTH_TIMEOUT_S = 2.0
POLL_INTERVAL_S = 1.0
FAILURES_TO_ABORT = 2  # one lost probe on a loaded host is not a dead server
INTERRUPT_SIGNAL = getattr(signal, "SIGUSR2", None)  # pytest-timeout uses SIGALRM
WORKEROUTPUT_KEY = "tt_conformance_abort"


class ServerGone(BaseException):
    """Raised in a check blocked on a server that was declared gone. A BaseException, so a
    check's own ``except Exception`` does not swallow it; pytest still reports the check failed."""


@dataclass(frozen=True)
class AbortInfo:
    reason: str
    at: str
    during: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AbortInfo:
        return cls(reason=str(data["reason"]), at=str(data["at"]), during=data.get("during"))


def health_problem(base_url: str, api_key: str | None = None) -> str | None:
    """Why the server is not healthy, or None when ``/health`` answers 200."""
    url = f"{base_url}/health"
    try:
        resp = requests.get(url, timeout=HEALTH_TIMEOUT_S, headers=bearer(api_key))
    except requests.Timeout:
        return f"GET {url} did not answer within {HEALTH_TIMEOUT_S:g} s"
    except requests.ConnectionError as exc:
        return f"GET {url} failed: cannot connect ({type(exc).__name__})"
    except requests.RequestException as exc:
        return f"GET {url} failed: {type(exc).__name__}: {exc}"
    if resp.status_code != 200:
        return f"GET {url} answered HTTP {resp.status_code}"
    return None


class HealthWatch:
    """The watcher of one check-running process, registered as a pytest plugin there."""

    def __init__(
        self, base_url: str, api_key: str | None, interval_s: float = POLL_INTERVAL_S
    ) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.interval_s = interval_s
        self.info: AbortInfo | None = None
        self._current: str | None = None  # node id of the check being run
        self._in_call = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._main_ident = threading.main_thread().ident
        self._previous_handler: Any = None

    # --- declaring the server gone -----------------------------------------------------------

    def declare(self, reason: str) -> None:
        with self._lock:
            if self.info is not None:
                return
            self.info = AbortInfo(reason=reason, at=utc_now_iso(), during=self._current)
            interrupt = self._in_call
        if interrupt and INTERRUPT_SIGNAL is not None and self._main_ident is not None:
            # A real signal to the main thread: it ends a blocking socket read (EINTR) and runs
            # the handler, which raises ServerGone in the check.
            signal.pthread_kill(self._main_ident, INTERRUPT_SIGNAL)

    def _poll(self) -> None:
        failures = 0
        while not self._stop.wait(self.interval_s):
            problem = health_problem(self.base_url, self.api_key)
            failures = failures + 1 if problem else 0
            if problem and failures >= FAILURES_TO_ABORT:
                self.declare(f"the server under test went away mid-run: {problem}")
                return

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._in_call and self.info is not None:
            raise ServerGone(f"tt-conformance: run aborted: {self.info.reason}")

    # --- pytest hooks ------------------------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if INTERRUPT_SIGNAL is not None and threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(INTERRUPT_SIGNAL, self._on_signal)
        self._thread = threading.Thread(target=self._poll, name="tt-health-watch", daemon=True)
        self._thread.start()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        self._current = item.nodeid
        try:
            return (yield)
        finally:
            if self.info is not None:
                item.session.shouldstop = f"tt-conformance: run aborted: {self.info.reason}"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        if self.info is not None:
            raise ServerGone(f"tt-conformance: run aborted: {self.info.reason}")
        self._in_call = True
        try:
            return (yield)
        finally:
            self._in_call = False

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.failed and self.info is None:
            # Did the server die under this check? Ask now instead of at the next poll.
            problem = health_problem(self.base_url, self.api_key)
            if problem:
                self.declare(f"the server under test went away mid-run: {problem}")
        return report

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._stop.set()
        if self._previous_handler is not None:
            with contextlib.suppress(ValueError):
                signal.signal(INTERRUPT_SIGNAL, self._previous_handler)  # type: ignore[arg-type]
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None and self.info is not None:
            workeroutput[WORKEROUTPUT_KEY] = self.info.to_json()
