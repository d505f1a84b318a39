"""Loading a script from tools/ as a module in tests (tools/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import REPO


def load_tool(name: str) -> ModuleType:
    """tools/NAME.py, executed once per call and registered under ``tt_tools_NAME`` (dataclasses
    look their module up by name)."""
    spec = importlib.util.spec_from_file_location(f"tt_tools_{name}", REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
