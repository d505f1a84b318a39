"""The spec's test commands: `pytest tests/ --ignore=tests/tt` collects the hostless tests only
(engine tests and stub parity opt in by path or variable), and `pytest tests/tt` is the
conformance suite with the same check modules as `pytest --pyargs tt_conformance.checks`."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _collected(*args: str, env: dict[str, str] | None = None) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "TT_ENGINE_TESTS": "", "TT_STUB_PARITY_TESTS": "", **(env or {})},
        timeout=300,
    )
    assert run.returncode in (0, 5), run.stdout + run.stderr  # 5: nothing collected
    # Some parameter ids carry an object address; it differs from run to run.
    return [
        re.sub(r" at 0x[0-9a-f]+", "", line) for line in run.stdout.splitlines() if "::" in line
    ]


# Everything under tests/ but the opt-in layers (and the conformance suite, by the spec's own
# --ignore), so the run stays cheap.
_WITHOUT_HOSTLESS = ("--ignore=tests/unit", "--ignore=tests/conformance", "--ignore=tests/tt")


def test_a_run_over_tests_leaves_engine_tests_and_stub_parity_out() -> None:
    assert _collected("tests/", *_WITHOUT_HOSTLESS) == []


@pytest.mark.parametrize(
    ("layer", "env"),
    [("engine", "TT_ENGINE_TESTS"), ("stub_parity", "TT_STUB_PARITY_TESTS")],
)
def test_a_layer_opts_in_by_its_variable_or_by_its_path(layer: str, env: str) -> None:
    by_env = _collected("tests/", *_WITHOUT_HOSTLESS, env={env: "1"})
    assert by_env and all(item.startswith(f"tests/{layer}/") for item in by_env)
    assert _collected(f"tests/{layer}") == by_env


def test_tests_tt_is_the_conformance_suite_under_its_own_module_names() -> None:
    via_tests_tt = _collected("tests/tt")
    assert via_tests_tt == _collected("--pyargs", "tt_conformance.checks")
    assert len(via_tests_tt) > 50
