"""A server that dies or turns unhealthy mid-run stops the run within seconds (abort.py).

The server under test is the fake OpenAI server in its own process; the suite's checks block on
a request the server never answers in time (a wedged engine), so without the abort every one of
them would wait out its 60 s request.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.conformance.fake_server_process import FakeServerProcess, fake_server_process
from tt_conformance.baseline import gate_run
from tt_conformance.formats.markdown import render_matrix_markdown
from tt_conformance.gate import EXIT_REGRESSION
from tt_conformance.matrix import find_reports, fold
from tt_conformance.report import load_report

BLOCKING = 4  # checks after the first blocked one; each would block 60 s
CHECKS = f"""
import os, pathlib
import pytest, requests

def test_1_ok(tt_raw_http):
    assert tt_raw_http.health().status_code == 200

def test_2_blocked(tt_server):
    pathlib.Path(os.environ["TT_ABORT_MARKER"]).write_text("blocked")
    requests.get(f"{{tt_server.base_url}}/slow?s=60", timeout=120)

@pytest.mark.parametrize("n", range({BLOCKING}))
def test_3_more(tt_server, n):
    requests.get(f"{{tt_server.base_url}}/slow?s=60", timeout=120)
"""


def _run_and_break(
    pytester: pytest.Pytester,
    harness_args: list[str],
    server: FakeServerProcess,
    marker: Path,
    fault: str,
    *extra: str,
) -> tuple[pytest.RunResult, float]:
    """Run the suite; once a check is blocked on the server, break it (kill or unhealthy).
    Returns the run and the seconds from the fault to the end of the run."""
    broke_at: list[float] = []

    def break_when_blocked() -> None:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the check is inside its request now
        if fault == "kill":
            server.kill()
        else:
            server.control(health_status=503)
        broke_at.append(time.monotonic())

    breaker = threading.Thread(target=break_when_blocked, daemon=True)
    breaker.start()
    result = pytester.runpytest_subprocess(
        *harness_args,
        f"--tt-server-url={server.url}",
        "--tt-report-dir=out",
        *extra,
        timeout=150,
    )
    ended = time.monotonic()
    breaker.join(5)
    assert broke_at, "the suite never reached the blocking check"
    return result, ended - broke_at[0]


@pytest.mark.parametrize(
    ("fault", "extra"),
    [("kill", ()), ("unhealthy", ()), ("kill", ("-p", "xdist", "-n", "2"))],
    ids=["killed", "unhealthy", "killed-xdist"],
)
def test_a_server_lost_mid_run_aborts_the_run_within_seconds(
    pytester: pytest.Pytester,
    harness_args: list[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    fault: str,
    extra: tuple[str, ...],
) -> None:
    if extra:
        pytest.importorskip("xdist")
    marker = tmp_path / "blocked"
    monkeypatch.setenv("TT_ABORT_MARKER", str(marker))
    pytester.makepyfile(test_suite=CHECKS)
    with fake_server_process() as server:
        result, after_fault = _run_and_break(pytester, harness_args, server, marker, fault, *extra)
    print(f"\n{fault}{' (xdist)' if extra else ''}: run ended {after_fault:.1f} s after the fault")
    # One 60 s request would already exceed this; the poll and the interrupt take seconds.
    assert after_fault < 20, result.stdout.str()[-3000:]
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*RUN ABORTED: *"])
    report = load_report(pytester.path / "out" / "latest.json")
    assert report.aborted is not None, report
    expected = "cannot connect" if fault == "kill" else "answered HTTP 503"
    assert expected in report.aborted.reason, report.aborted.reason
    outcomes = {c.id.rpartition("::")[2]: c.outcome for c in report.checks}
    assert outcomes.get("test_1_ok") == "pass", outcomes
    assert outcomes.get("test_2_blocked") == "fail", outcomes
    # The checks that ran are in the report; the rest are counted as not run.
    assert report.aborted.not_run == 2 + BLOCKING - len(report.checks), report.aborted
    if not extra:
        assert report.aborted.not_run == BLOCKING  # stopped right after the blocked check
        assert report.aborted.during and report.aborted.during.endswith("test_2_blocked")
    assert report.tier is not None and report.tier.tier == "fail"
    assert report.tier.reason.startswith("run aborted:"), report.tier.reason
    # The matrix shows the run as aborted; the gate fails it even without a baseline.
    cells = fold(find_reports(pytester.path / "out"))
    assert [c.status for c in cells] == ["aborted"]
    assert "| aborted |" in render_matrix_markdown(cells, "now")
    gate = gate_run(report, tmp_path / "no-baselines")
    assert gate.exit_code == EXIT_REGRESSION and "ABORTED" in gate.text, gate.text


def test_a_healthy_run_is_not_aborted(
    pytester: pytest.Pytester, fake_server, harness_args: list[str]
) -> None:
    pytester.makepyfile(test_ok=CHECKS.split("def test_2")[0])
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out"
    )
    result.assert_outcomes(passed=1)
    report = load_report(pytester.path / "out" / "latest.json")
    assert report.aborted is None and report.tier is not None and report.tier.tier != "fail"
