"""The harness's environment registry: one reader, injected mappings, no direct os.environ use."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from tt_conformance import envs

HARNESS = Path(__file__).resolve().parents[2] / "conformance" / "tt_conformance"


def test_unset_or_blank_means_the_default_and_values_are_stripped() -> None:
    assert envs.MESH_DEVICE.get({}) == "unknown"
    assert envs.MESH_DEVICE.get({"MESH_DEVICE": "  "}) == "unknown"
    assert envs.MESH_DEVICE.get({"MESH_DEVICE": " t3k "}) == "t3k"
    assert envs.TT_SERVER_URL.get({}) is None


def test_first_set_takes_the_first_variable_that_is_set() -> None:
    keys = (envs.OPENAI_API_KEY, envs.VLLM_API_KEY)
    assert envs.first_set(*keys, env={"VLLM_API_KEY": "b"}) == "b"
    assert envs.first_set(*keys, env={"OPENAI_API_KEY": "a", "VLLM_API_KEY": "b"}) == "a"
    assert envs.first_set(*keys, env={"OPENAI_API_KEY": " ", "VLLM_API_KEY": "b"}) == "b"
    assert envs.first_set(*keys, env={}) is None


def test_an_injected_mapping_is_read_instead_of_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TT_SERVER_URL", "http://127.0.0.1:1")
    assert envs.TT_SERVER_URL.get() == "http://127.0.0.1:1"
    assert envs.TT_SERVER_URL.get({}) is None


def test_scoped_sets_then_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with envs.scoped({envs.HF_HUB_OFFLINE: "1", envs.HF_DATASETS_OFFLINE: "1"}):
        assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["HF_DATASETS_OFFLINE"] == "1"
    assert os.environ["HF_HUB_OFFLINE"] == "0"
    assert "HF_DATASETS_OFFLINE" not in os.environ
    target: dict[str, str] = {}
    with pytest.raises(RuntimeError), envs.scoped({envs.OPENAI_API_KEY: "k"}, target):
        assert target == {"OPENAI_API_KEY": "k"}
        raise RuntimeError("restored even when the block fails")
    assert target == {}


def _environ_lines(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("environ", "getenv", "putenv")
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(a.name in ("environ", "getenv") for a in node.names)
        ):
            lines.append(node.lineno)
    return lines


def test_only_the_registry_reads_the_environment() -> None:
    users = {
        str(path.relative_to(HARNESS)): lines
        for path in sorted(HARNESS.rglob("*.py"))
        if (lines := _environ_lines(path))
    }
    assert set(users) == {"envs.py"}, f"read these through tt_conformance.envs: {users}"
