"""The emulated drivers' ``--update-baseline`` goes through promote's refusals.

It used to copy the report over baseline.json whatever it held: a run failing a check became the
baseline, and every later gate took that check's failure as "still failing", not a regression.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.tool_modules import load_tool
from tt_conformance.writers import write_report

DRIVER = load_tool("run_emu_conformance")


def test_a_run_failing_a_check_does_not_become_the_baseline(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    baselines = tmp_path / "baselines"
    good = write_report(make_report({"m::a": "pass", "m::b": "pass"}), tmp_path / "good").json
    assert DRIVER.update_baseline(good, baselines, "emu") == 0
    written = baselines / "org--model-a" / "N150" / "baseline.json"
    assert written.read_bytes() == good.read_bytes()

    failing = make_report({"m::a": "pass", "m::b": "fail"}, finished_at="2025-01-02T00:00:00Z")
    bad = write_report(failing.replace(started_at="2025-01-02T00:00:00Z"), tmp_path / "bad").json
    assert DRIVER.update_baseline(bad, baselines, "emu") == 2
    out = capsys.readouterr().out
    assert "[emu] baseline not updated" in out and "m::b (fail)" in out
    assert written.read_bytes() == good.read_bytes()  # the passing baseline stays
    assert json.loads(written.read_text())["run_id"] != failing.run_id
