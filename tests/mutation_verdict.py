"""A pytest plugin for the plugin-side mutation campaign (tools/run_plugin_mutation.py).

mutmut reads pytest's exit status: 1 (a test failed) is a kill. pytest also exits 1 when a test
errors outside its call (a fixture or setup raising), which says nothing about the behaviour
under test; this plugin turns such a run, with no failing call, into ``UNJUDGED_EXIT`` so the
campaign counts it apart from the kills. A kill is a test that ran and failed.
"""

from __future__ import annotations

import pytest

UNJUDGED_EXIT = 40  # not a pytest or mutmut status: the driver reads it as "unjudged"

_calls_failed: list[str] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    # mutmut runs pytest many times in one process (and its forks): start each session clean.
    _calls_failed.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.failed:
        _calls_failed.append(report.nodeid)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if exitstatus == pytest.ExitCode.TESTS_FAILED and not _calls_failed:
        session.exitstatus = UNJUDGED_EXIT
