"""The environment registry: typed reads, injected mappings, one reader, docs generated from it."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import pytest

from vllm_tt_plugin.emulation.mesh import step_time_from_env
from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.launch.mesh_spec import mesh_spec_from_env
from vllm_tt_plugin.model_registry import RegistryError, TTModelRegistry

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "plugin" / "vllm_tt_plugin"


@pytest.mark.parametrize(
    ("var", "raw", "value"),
    [
        (envs.TT_VLLM_BUILTIN_MODELS, None, True),
        (envs.TT_VLLM_BUILTIN_MODELS, "  ", True),
        (envs.TT_VLLM_BUILTIN_MODELS, "0", False),
        (envs.TT_VLLM_BUILTIN_MODELS, "False", False),
        (envs.TT_VLLM_BUILTIN_MODELS, "yes", True),
        (envs.TT_VISIBLE_DEVICES, None, None),
        (envs.TT_VISIBLE_DEVICES, "4, 5,6,", [4, 5, 6]),
        (envs.TT_EMULATED_STEP_MS, None, 0.0),
        (envs.TT_EMULATED_STEP_MS, "2.5", 2.5),
        (envs.TT_REFERENCE_MAX_TOKENS_ALL_USERS, "", 32768),
        (envs.TT_REFERENCE_MAX_TOKENS_ALL_USERS, "4096", 4096),
        (envs.MESH_DEVICE, None, "N150"),
        (envs.MESH_DEVICE, " T3K ", "T3K"),
        (envs.EXTRA_MODELS_DIR, "/opt/models", Path("/opt/models")),
        (envs.TT_LLAMA_TEXT_VER, None, None),
        (envs.VLLM_USE_V2_MODEL_RUNNER, "1", True),
    ],
)
def test_values_parse_to_their_type_and_unset_means_default(
    var: envs.EnvVar[Any], raw: str | None, value: Any
) -> None:
    env = {} if raw is None else {var.name: raw}
    assert var.get(env) == value


@pytest.mark.parametrize(
    ("var", "raw", "fragment"),
    [
        (envs.TT_VLLM_BUILTIN_MODELS, "maybe", "must be 0 or 1"),
        (envs.TT_VISIBLE_DEVICES, "0,one", "comma-separated list of ints"),
        (envs.TT_EMULATED_STEP_MS, "fast", "number of milliseconds"),
        (envs.TT_EMULATED_STEP_MS, "-1", "must be >= 0"),
        (envs.TT_REFERENCE_MAX_TOKENS_ALL_USERS, "0", "positive integer"),
        (envs.TT_REFERENCE_MAX_TOKENS_ALL_USERS, "1e3", "positive integer"),
    ],
)
def test_a_bad_value_names_the_variable_and_the_value(
    var: envs.EnvVar[Any], raw: str, fragment: str
) -> None:
    with pytest.raises(envs.EnvError, match=fragment) as info:
        var.get({var.name: raw})
    assert f"{var.name}={raw!r}" in str(info.value)


def test_an_injected_mapping_is_read_instead_of_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MESH_DEVICE", "TG")
    monkeypatch.setenv("TT_VLLM_BUILTIN_MODELS", "0")
    assert envs.MESH_DEVICE.get() == "TG"
    assert envs.MESH_DEVICE.get({}) == "N150"
    assert mesh_spec_from_env({"MESH_DEVICE": "T3K"}).shape == (1, 8)
    assert TTModelRegistry.from_env({}).get("TTLlamaForCausalLM") is not None
    assert TTModelRegistry.from_env().get("TTLlamaForCausalLM") is None
    # The registry reports a bad flag as its own error, still naming the variable.
    with pytest.raises(RegistryError, match="TT_VLLM_BUILTIN_MODELS='maybe'"):
        TTModelRegistry.from_env({"TT_VLLM_BUILTIN_MODELS": "maybe"})


def test_converted_readers_use_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TT_EMULATED_STEP_MS", "250")
    assert step_time_from_env() == 0.25
    monkeypatch.setenv("TT_EMULATED_STEP_MS", "soon")
    with pytest.raises(envs.EnvError, match="TT_EMULATED_STEP_MS='soon'"):
        step_time_from_env()


def test_export_sets_the_variable_for_later_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    target: dict[str, str] = {}
    envs.TT_DP_DEVICE_GROUPS.export('{"groups": []}', target)
    assert target == {"TT_DP_DEVICE_GROUPS": '{"groups": []}'}
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    envs.VLLM_USE_V2_MODEL_RUNNER.export("0")
    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert envs.VLLM_USE_V2_MODEL_RUNNER.get() is False


# Modules that touch os.environ directly, and why.
DIRECT_ENVIRON_USERS = {
    "emulation/server.py": "copies the whole environment for the server it starts",
    "utils/hostless.py": "prepends host_stubs to PYTHONPATH (Python's variable, not ours)",
    "launch/envs.py": "the registry itself",
}


def _touches_environ(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):  # os.environ, os.getenv, os.putenv
        return (
            node.attr in ("environ", "getenv", "putenv")
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        )
    if isinstance(node, ast.ImportFrom):  # from os import environ
        return node.module == "os" and any(a.name in ("environ", "getenv") for a in node.names)
    return False


def _environ_uses(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [getattr(node, "lineno", 0) for node in ast.walk(tree) if _touches_environ(node)]


def test_only_the_registry_reads_the_environment() -> None:
    users = {
        str(path.relative_to(PLUGIN)): lines
        for path in sorted(PLUGIN.rglob("*.py"))
        if (lines := _environ_uses(path))
    }
    unexpected = {p: lines for p, lines in users.items() if p not in DIRECT_ENVIRON_USERS}
    assert unexpected == {}, f"read these through vllm_tt_plugin.launch.envs: {unexpected}"
    # An entry whose module no longer touches os.environ must go (the list cannot go stale).
    stale = set(DIRECT_ENVIRON_USERS) - set(users)
    assert stale == set(), f"remove from DIRECT_ENVIRON_USERS: {sorted(stale)}"
