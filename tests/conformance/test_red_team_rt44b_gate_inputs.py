"""Red team rt44b against the gate's inputs: a launch option smuggled inside a neutral one,
unpinned weights, a saved gate OK judged against another baseline. Each attack refused (exit 2
naming it) or labelled, next to an honest run the same rule lets through.

Pairs are two independent hardware (T3K) runs (`_pair` of test_red_team_rt44_gate.py); the
candidate's file is then edited as the red team edited it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.test_red_team_rt44_gate import _gate, _pair


def _launch_pair(
    tmp_path: Path, make_report: Any, base_args: list[str], cand_args: list[str]
) -> tuple[Path, Path]:
    def launched(args: list[str]) -> Any:
        def edit(d: dict[str, Any]) -> None:
            d["server_options"] = {"max_num_seqs": 32, "vllm_args": ["--max-num-seqs=32", *args]}

        return edit

    b, c = _pair(tmp_path, make_report, launched(cand_args))
    data = json.loads(b.read_text())
    launched(base_args)(data)
    b.write_text(json.dumps(data))
    return b, c


# ------------------------------------- item 3 (#6): an option inside a neutral option's element


@pytest.mark.parametrize(
    ("smuggled", "named"),
    [
        (["--port=8000 --kv-cache-dtype=fp8"], "vllm_args.--port: not given -> '8000 --kv-"),
        (["--uvicorn-log-level=info --kv-cache-dtype=fp8"], "--uvicorn-log-level: not given"),
        (["--port", "8000 --kv-cache-dtype fp8"], "vllm_args.--port: not given -> '8000 --kv"),
        (["--port", "--kv-cache-dtype=fp8"], "vllm_args.--kv-cache-dtype: not given -> 'fp8'"),
        (["--host", "'0.0.0.0'"], "vllm_args.--host: not given -> \"'0.0.0.0'\""),
        (["--disable-log-stats", "--dtype=float16"], "vllm_args.--dtype: not given"),
    ],
)
def test_a_neutral_option_carrying_another_in_its_element_is_a_launch_difference(
    tmp_path: Path,
    make_report: Any,
    capsys: pytest.CaptureFixture[str],
    smuggled: list[str],
    named: str,
) -> None:
    """rt44b #6: one argv element '--port=8000 --kv-cache-dtype=fp8' read as the port (launch
    neutral): OK. An element is neutral only when it is exactly one shell word of a neutral
    option (or its value); anything else is kept as the option's value and differs."""
    b, c = _launch_pair(tmp_path, make_report, ["--port=8000"], smuggled)
    assert _gate(b, c) == 2
    assert named in capsys.readouterr().err


def test_honest_neutral_options_each_in_its_own_element_still_gate_ok(
    tmp_path: Path, make_report: Any
) -> None:
    """Control: another port, host and log levels, each exactly a neutral option (or its value
    element); a bare neutral flag takes no value, so the served model after it stays the
    model: the same setup."""
    b, c = _launch_pair(
        tmp_path,
        make_report,
        ["served-model", "--port=8000", "--host", "0.0.0.0"],
        ["--port", "8001", "--uvicorn-log-level=debug", "--disable-log-stats", "served-model"],
    )
    assert _gate(b, c) == 0
