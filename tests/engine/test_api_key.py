"""A server started with --api-key (as tt-inference-server deployments are): the conformance
suite passes with --tt-api-key and fails clearly without it.

One emulated server; the suite's checks that use every client kind (raw HTTP for error bodies,
the async openai client for accuracy, streaming for perf) run in a pytest subprocess with the
options `tox -e hw` uses (--tt-require-server, xdist loadgroup), first with the key, then
without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.harness import serve
from tt_conformance.formats.json import report_to_dict
from tt_conformance.report import load_report

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
KEY = "tt-test-key-5c1e"
SELECTION = (
    "tt_conformance.checks.test_errors",
    "tt_conformance.checks.test_accuracy",
    "tt_conformance.checks.test_serving_perf",
)
EXPECTATIONS = REPO / "reports/baselines/tt-reference-llama/emulated-T3K/expectations.json"


def run_suite(url: str, report_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", *SELECTION,
        "--tt-server-url", url, "--tt-require-server", "--tt-device", "emulated",
        "--tt-max-num-seqs", "8", "--tt-expectations", str(EXPECTATIONS),
        "--tt-report-dir", str(report_dir), "-n", "2", "--dist", "loadgroup", "-q", "-rfE",
        *extra,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "VLLM_API_KEY")}
    return subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False, env=env
    )


def test_suite_needs_and_uses_the_api_key(tmp_path: Path) -> None:
    server = serve(
        tt={"sample_on_device_mode": "all"},
        vllm_args=["--max-num-seqs=8", "--max-model-len=1024", f"--api-key={KEY}"],
        env={"TT_REFERENCE_MAX_TOKENS_ALL_USERS": "2048"},
    )
    with server:
        with_key = run_suite(server.url, tmp_path / "with", "--tt-api-key", KEY)
        without = run_suite(server.url, tmp_path / "without")
    assert with_key.returncode == 0, with_key.stdout[-3000:]
    report = load_report(tmp_path / "with" / "latest.json")
    outcomes = {c.id: c.outcome for c in report.checks}
    assert outcomes and set(outcomes.values()) == {"pass"}, outcomes
    assert report.accuracy and report.accuracy[0].verdict == "pass"
    assert any(name.startswith("ttft_mean@i128o128c") for name in report.perf)
    assert KEY not in json.dumps(report_to_dict(report))  # the key is never published

    assert without.returncode == 1, without.stdout[-3000:]
    assert "HTTP 401" in without.stdout and "pass --tt-api-key" in without.stdout
    refused = load_report(tmp_path / "without" / "latest.json")
    assert refused.checks and {c.outcome for c in refused.checks} == {"error"}
    assert refused.tier is not None and refused.tier.tier == "fail"
