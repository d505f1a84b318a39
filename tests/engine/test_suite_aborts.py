"""The conformance suite against a real emulated vLLM server that is killed mid-run: the run
stops within seconds and its report is aborted (conformance/tt_conformance/abort.py). The
measured time is printed (-s) for docs/CONFORMANCE.md."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.engine.harness import metric, run_suite, serve

# The stop bound is measured with no other engine test alongside (tests/engine/conftest.py).
pytestmark = pytest.mark.solo

KILL_AFTER_REQUESTS = 20  # completed requests before the kill: the suite is under way
STOPPED_WITHIN_S = 30.0  # pytest's own teardown and the report on a shared 2-core host


def test_a_server_killed_mid_suite_gives_an_aborted_report(tmp_path: Path) -> None:
    server = serve(vllm_args=["--max-num-seqs", "8"])
    server.log_path = tmp_path / "server.log"
    killed_at: list[float] = []
    with server:
        proc = server._proc
        assert proc is not None

        def kill_when_under_way() -> None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                with contextlib.suppress(requests.RequestException):
                    if metric(server.url, "vllm:request_success_total") >= KILL_AFTER_REQUESTS:
                        break
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGKILL)  # the API server and its engine core
            killed_at.append(time.monotonic())

        killer = threading.Thread(target=kill_when_under_way, daemon=True)
        killer.start()
        run = run_suite(server.url, ["test_isolation", "test_seeding"], tmp_path / "reports")
        ended = time.monotonic()
        killer.join(10)
    assert killed_at, "the server was never killed"
    stopped_after = ended - killed_at[0]
    report = run.report
    assert report is not None, run.stdout[-3000:]
    print(
        f"\nkilled mid-suite: run over {stopped_after:.1f} s after the kill; "
        f"{len(report.checks)} checks reported, aborted={report.aborted}"
    )
    assert report.aborted is not None, run.stdout[-3000:]
    assert "cannot connect" in report.aborted.reason, report.aborted.reason
    assert report.aborted.not_run and report.aborted.not_run > 0, report.aborted
    # The check under way when the server died is reported (failed); the rest never ran.
    assert report.checks and report.aborted.during, run.outcomes
    assert report.aborted.during.rpartition("::")[2] in {
        c.id.rpartition("::")[2] for c in report.checks
    }
    assert report.tier is not None and report.tier.tier == "fail"
    assert run.returncode != 0
    assert stopped_after < STOPPED_WITHIN_S, stopped_after
