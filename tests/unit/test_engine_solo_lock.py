"""The engine tests' machine share (tests/engine/conftest.py): under two xdist workers a `solo`
test runs with no other test alongside it, while the others do run two at a time.

A pytest run over a synthetic copy of tests/engine (the real conftest, tests that record when
they ran) with `-n 2`, as `tox -e engine` runs the real ones.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

TESTS = """
import json, os, time
import pytest

def record(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    with open(os.environ["SPANS"], "a") as f:
        f.write(json.dumps([name, start, time.monotonic()]) + "\\n")

@pytest.mark.parametrize("i", range(6))
def test_shared(i):
    record(f"shared{i}", 0.4)

@pytest.mark.solo
@pytest.mark.parametrize("i", range(2))
def test_solo(i):
    record(f"solo{i}", 0.6)
"""


def test_a_solo_test_runs_alone_and_the_others_in_parallel(tmp_path: Path) -> None:
    engine = tmp_path / "tests" / "engine"
    engine.mkdir(parents=True)
    (tmp_path / "tests" / "__init__.py").write_text("")
    (engine / "__init__.py").write_text("")
    shutil.copy(REPO / "tests" / "engine" / "conftest.py", engine / "conftest.py")
    (engine / "test_spans.py").write_text(TESTS)
    spans_file = tmp_path / "spans.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/engine", "-n", "2", "--dist", "load", "-q",
         "-p", "no:cacheprovider", "-o", "markers=solo: x", "--rootdir", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**_env(), "SPANS": str(spans_file)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    assert len(spans) == 8
    solo = [s for s in spans if s[0].startswith("solo")]
    shared = [s for s in spans if s[0].startswith("shared")]
    for name, start, end in solo:
        overlapping = [o[0] for o in spans if o[0] != name and o[1] < end and start < o[2]]
        assert not overlapping, f"{name} ran alongside {overlapping}"
    # Without the solo ones, the rest did share the machine: some pair overlapped.
    assert any(a[1] < b[2] and b[1] < a[2] for a in shared for b in shared if a is not b)


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    env.pop("PYTEST_ADDOPTS", None)
    return env
