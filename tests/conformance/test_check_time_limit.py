"""Every check runs under a time limit (pytest-timeout): a wedged server fails the check at the
limit instead of hanging the run."""

from __future__ import annotations

import time

import pytest

from tests.conformance.test_plugin import _report
from tt_conformance import pytest_plugin

pytest.importorskip("pytest_timeout")

SLOW_CHECK = "import time\n\ndef test_hangs(tt_server):\n    time.sleep(30)\n"


def test_a_check_over_the_default_limit_fails_at_the_limit(
    pytester: pytest.Pytester, fake_server, harness_args, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pytest_plugin, "DEFAULT_CHECK_TIMEOUT_S", 1.0)
    pytester.makepyfile(test_slow=SLOW_CHECK)
    start = time.monotonic()
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out"
    )
    assert time.monotonic() - start < 20
    result.assert_outcomes(failed=1)
    check = _report(pytester.path / "out").checks[0]
    assert check.outcome == "fail" and "Timeout" in (check.reason or ""), check.reason
