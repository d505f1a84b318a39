"""README's generated tables (tools/gen_docs.py) must match the code they are generated from."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from vllm_tt_plugin import envs

REPO = Path(__file__).resolve().parents[2]


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "tools" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_tables_match_the_code() -> None:
    gen_docs = _gen_docs()
    text = (REPO / "README.md").read_text()
    assert gen_docs.render(text) == text, "README.md is stale: run python tools/gen_docs.py"
    for var in envs.REGISTRY:
        assert f"| `{var}` |" in text


def test_gen_docs_check_fails_on_a_drifted_table(tmp_path: Path) -> None:
    gen_docs = _gen_docs()
    readme = tmp_path / "README.md"
    text = (REPO / "README.md").read_text()
    readme.write_text(text.replace("| `TT_EMULATED_STEP_MS` | float | `0.0` |", "| x | y | z |"))
    assert gen_docs.main(["--check", "--readme", str(readme)]) == 1
    assert gen_docs.main(["--readme", str(readme)]) == 0  # rewrites it
    assert readme.read_text() == text
    readme.write_text("no markers here\n")
    with pytest.raises(ValueError, match="no '<!-- BEGIN GENERATED envs -->' block"):
        gen_docs.main(["--check", "--readme", str(readme)])
