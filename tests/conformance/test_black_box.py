"""The harness is a black box over HTTP: none of its modules may pull in vLLM or the plugin."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import tt_conformance


def test_no_module_imports_vllm_or_the_plugin() -> None:
    modules = sorted(
        info.name for info in pkgutil.walk_packages(tt_conformance.__path__, "tt_conformance.")
    )
    assert "tt_conformance.pytest_plugin" in modules and "tt_conformance.gate" in modules
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('vllm', 'vllm_tt_plugin', 'torch'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
