"""The retained tt-run launch description (not used by the vLLM 0.26 serving path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_tt_plugin.launch.mesh_spec import parse_mesh_device
from vllm_tt_plugin.launcher import (
    main,
    rank_bindings,
    render_rank_binding,
    tt_run_command,
)
from vllm_tt_plugin.utils.device_discovery import discover_in_process


def test_rank_bindings_follow_the_dp_device_groups() -> None:
    spec = parse_mesh_device("T3K")
    bindings = rank_bindings(spec, discover_in_process(1, 8, 2, emulated=True))
    assert [b.env["TT_VISIBLE_DEVICES"] for b in bindings] == ["0,1,2,3", "4,5,6,7"]
    assert {b.env["MESH_DEVICE"] for b in bindings} == {"(1,4)"}
    text = render_rank_binding(bindings)
    assert text.startswith("rank_bindings:\n  - rank: 0\n    mesh_id: 0\n")
    assert '      TT_VISIBLE_DEVICES: "4,5,6,7"' in text


def test_tt_run_command_line() -> None:
    assert tt_run_command(Path("r.yaml"), ["vllm", "serve", "m"], "--np 2") == [
        "tt-run",
        "--rank-binding",
        "r.yaml",
        "--mpi-args",
        "--np 2",
        "vllm",
        "serve",
        "m",
    ]
    with pytest.raises(ValueError, match="needs the program"):
        tt_run_command(Path("r.yaml"), [])


def test_cli_writes_the_binding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ranks.yaml"
    assert main(["--mesh", "TG", "--dp", "4", "--out", str(out), "--", "vllm", "serve", "m"]) == 0
    assert out.read_text().count("- rank:") == 4
    assert capsys.readouterr().out.strip() == f"tt-run --rank-binding {out} vllm serve m"
