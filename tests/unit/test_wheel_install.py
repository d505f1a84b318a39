"""The plugin as a user installs it: its wheel, in a fresh venv outside the checkout.

The wheel is built (``pip wheel --no-deps --no-build-isolation``, offline, with this
environment's locked setuptools) from a copy of the sources, so nothing is written into the
checkout, and installed with ``--no-deps`` into a venv in a temporary directory. From a directory
outside the checkout, with no PYTHONPATH into it, the vLLM entry points the wheel declares are
resolved and called (with a ttnn importable and without), vLLM resolves its platform through
them, the repository-only defaults fail naming what to pass instead, and the harness's console
scripts answer ``--help``. No module may be loaded from the checkout's sources.

vLLM and torch come from this test environment through a ``.pth`` line in the venv:
``venv --system-site-packages`` run by this environment's interpreter (itself a venv) would
expose the base interpreter's site-packages, not this environment's. A path line also keeps this
environment's editable install of the plugin (a ``.pth`` import hook) out of the venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

TIMEOUT_S = 300
# What the wheel is built from (pyproject.toml names the readme and the package directories).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "plugin", "conformance")
CONSOLE_SCRIPTS = ("tt-conformance", "tt-conformance-matrix", "tt-conformance-gate")
# This environment: vLLM and torch live here (it may sit inside the checkout, as .tox/ does).
TEST_ENV = Path(sys.prefix).resolve()

PROBE = r"""
import importlib.metadata as md, json, sys

import tt_conformance
import vllm_tt_plugin
from tt_conformance.schema import load_schema
from vllm_tt_plugin.contract.signatures import FixtureError, load_profiles
from vllm_tt_plugin.utils.checkout import checkout_root

with_ttnn = sys.argv[1] == "ttnn"
out = {"packages": [vllm_tt_plugin.__file__, tt_conformance.__file__], "calls": {}}
for group in ("vllm.platform_plugins", "vllm.general_plugins"):
    for ep in md.entry_points(group=group):
        if ep.dist is not None and ep.dist.name == "vllm-tt-plugin":
            key = f"{group}:{ep.name}"
            out["calls"][key] = {"dist": str(ep.dist.locate_file("")), "result": ep.load()()}
if with_ttnn:
    from vllm.platforms import current_platform  # vLLM's own resolution through the plugin
    from vllm.reasoning import ReasoningParserManager

    out["platform"] = type(current_platform).__qualname__
    out["gemma4_parser"] = ReasoningParserManager.lazy_parsers["gemma4"][0]
out["checkout_root"] = checkout_root() and str(checkout_root())
out["schema_id"] = load_schema("report.schema.json")["$id"]  # package data, from the wheel
from tt_conformance.selection import installed_suite

suite = installed_suite()  # the check modules' manifest (package data) against the files
out["suite"] = [len(suite.modules), list(suite.modified)]
try:
    out["profiles"] = len(load_profiles())  # package data, from the wheel
except FixtureError as exc:
    out["fixture_error"] = str(exc)
out["loaded"] = sorted(
    {f for m in list(sys.modules.values()) if isinstance(f := getattr(m, "__file__", None), str)}
)
out["sys_path"] = sys.path
print("PROBE " + json.dumps(out))
"""


def in_checkout_sources(path: str) -> bool:
    """Under the checkout but not in this test environment (which may live in its .tox/).
    Relative names (torch's ``_ops.py``, sys.path's ``''``) are not files on a path."""
    if not os.path.isabs(path):
        return False
    resolved = Path(path).resolve()
    inside = resolved == REPO or REPO in resolved.parents
    return inside and not (resolved == TEST_ENV or TEST_ENV in resolved.parents)


@dataclass(frozen=True)
class Installed:
    root: Path  # the temporary directory: the commands' cwd
    python: Path
    site_packages: Path
    stubs: Path  # a copy of the host ttnn stub (the wheel does not ship it)
    env: dict[str, str]

    def run(self, *cmd: str | Path, pythonpath: Path | None = None) -> Any:
        env = dict(self.env)
        if pythonpath is not None:
            env["PYTHONPATH"] = str(pythonpath)
        return subprocess.run(
            [str(c) for c in cmd],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # Offline (the build and the install use only what is here), no user site-packages.
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    return env


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    root = Path(tempfile.mkdtemp(prefix="tt-wheel-")).resolve()
    try:
        assert not in_checkout_sources(str(root)), f"{root} must be outside the checkout"
        src = root / "src"
        src.mkdir()
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
        for name in SOURCES:
            if (REPO / name).is_dir():
                shutil.copytree(REPO / name, src / name, ignore=ignore)
            else:
                shutil.copy2(REPO / name, src / name)
        env = _clean_env()
        wheels = root / "dist"
        pip = [sys.executable, "-m", "pip"]
        build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", wheels, src]
        run = subprocess.run(
            build, cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        assert run.returncode == 0, run.stdout + run.stderr
        (wheel,) = wheels.glob("vllm_tt_plugin-*.whl")

        venv.EnvBuilder(with_pip=False).create(root / "venv")
        python = root / "venv" / "bin" / "python"
        paths = json.loads(
            subprocess.check_output(
                [python, "-c", "import json, sysconfig; print(json.dumps(sysconfig.get_paths()))"],
                env=env,
                text=True,
            )
        )
        site_packages = Path(paths["purelib"])
        here = sysconfig.get_paths()
        test_env_dirs = dict.fromkeys([here["purelib"], here["platlib"]])
        (site_packages / "tt_test_env.pth").write_text("\n".join(test_env_dirs) + "\n")

        install = [*pip, "--python", python, "install", "--no-deps", "-q", wheel]
        run = subprocess.run(
            install, cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        assert run.returncode == 0, run.stdout + run.stderr
        stubs = root / "stubs"
        shutil.copytree(REPO / "host_stubs", stubs, ignore=ignore)
        yield Installed(root, python, site_packages.resolve(), stubs, env)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _probe(installed: Installed, with_ttnn: bool) -> dict[str, Any]:
    stubs = installed.stubs if with_ttnn else None
    run = installed.run(
        installed.python, "-c", PROBE, "ttnn" if with_ttnn else "none", pythonpath=stubs
    )
    assert run.returncode == 0, run.stdout + run.stderr
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("PROBE ")]
    out: dict[str, Any] = json.loads(line.removeprefix("PROBE "))
    from_checkout = [p for p in out["loaded"] + out["sys_path"] if p and in_checkout_sources(p)]
    assert from_checkout == [], "loaded from the checkout, not the wheel"
    for package in out["packages"]:
        assert installed.site_packages in Path(package).resolve().parents, package
    for call in out["calls"].values():
        assert Path(call["dist"]).resolve() == installed.site_packages, call
    assert out["checkout_root"] is None
    assert out["schema_id"].endswith("/schemas/report.schema.json")
    assert out["suite"][0] >= 10 and out["suite"][1] == []  # the manifest ships, and matches
    assert "fixture_error" not in out, out.get("fixture_error")
    assert out["profiles"] >= 16  # every registry target's profile, and their bases
    return out


def test_the_entry_points_select_and_register_the_tt_platform_from_the_wheel(
    installed: Installed,
) -> None:
    out = _probe(installed, with_ttnn=True)
    assert out["calls"] == {
        "vllm.platform_plugins:tt": {
            "dist": str(installed.site_packages),
            "result": "vllm_tt_plugin.platform.TTPlatform",
        },
        "vllm.general_plugins:tt_model_registry": {
            "dist": str(installed.site_packages),
            "result": None,
        },
    }
    assert out["platform"] == "TTPlatform"
    assert out["gemma4_parser"] == "vllm_tt_plugin.parsers.gemma4_reasoning"  # P5 applied


def test_without_ttnn_the_entry_points_stand_aside(installed: Installed) -> None:
    out = _probe(installed, with_ttnn=False)
    assert out["calls"]["vllm.platform_plugins:tt"]["result"] is None
    assert "vllm.general_plugins:tt_model_registry" in out["calls"]


def test_repository_only_defaults_name_what_to_pass_instead(installed: Installed) -> None:
    server = installed.run(installed.python, "-m", "vllm_tt_plugin.emulation.server")
    assert server.returncode == 2, server.stdout + server.stderr
    assert "bundled reference checkpoint" in server.stderr
    assert "--model DIR" in server.stderr


def test_the_parity_checker_and_the_skeleton_tool_run_from_the_wheel(installed: Installed) -> None:
    """Where TT engineers run them: an installed plugin, TT_METAL_HOME a checkout (here a copy
    of a committed skeleton tree, outside the checkout), no repository files."""
    skip = installed.run(installed.python, "-m", "vllm_tt_plugin.contract.parity")
    assert skip.returncode == 0, skip.stdout + skip.stderr
    assert "TT_METAL_HOME not set: skipping" in skip.stdout
    home = installed.root / "tt-metal"
    shutil.copytree(
        REPO / "fixtures/tt_metal/skeletons/tt_transformers-21a4db48", home, symlinks=False
    )
    env = dict(installed.env, TT_METAL_HOME=str(home))
    cmd = [str(installed.python), "-m", "vllm_tt_plugin.contract.parity"]
    ran = subprocess.run([*cmd, "--arch", "TTLlamaForCausalLM"], cwd=installed.root, env=env,
                         capture_output=True, text=True, timeout=TIMEOUT_S)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "every call the plugin makes binds to this checkout" in ran.stdout
    assert "tt_metal_signatures.json" in ran.stdout  # the packaged fixture
    every = subprocess.run(cmd, cwd=installed.root, env=env, capture_output=True, text=True,
                           timeout=TIMEOUT_S)  # fmt: skip
    assert every.returncode == 1, every.stdout + every.stderr  # Mistral 3 drops its images
    assert "dropped    prefill_forward" in every.stdout
    out = installed.root / "skeleton"
    tool = installed.run(installed.python, "-m", "vllm_tt_plugin.contract.skeleton", home, out)
    assert tool.returncode == 0, tool.stdout + tool.stderr
    assert (out / "models/tt_transformers/tt/generator_vllm.py").is_file()


@pytest.mark.parametrize("script", CONSOLE_SCRIPTS)
def test_the_harness_console_scripts_run_from_the_wheel(installed: Installed, script: str) -> None:
    run = installed.run(installed.root / "venv" / "bin" / script, "--help")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("usage:")
