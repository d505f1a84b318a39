"""README's generated tables (tools/gen_docs.py) must match the code they are generated from."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.tool_modules import load_tool
from tt_conformance import envs as harness_envs
from vllm_tt_plugin import config
from vllm_tt_plugin.launch import envs

REPO = Path(__file__).resolve().parents[2]


def _gen_docs() -> ModuleType:
    return load_tool("gen_docs")


def test_readme_tables_match_the_code() -> None:
    gen_docs = _gen_docs()
    text = (REPO / "README.md").read_text()
    assert gen_docs.render(text) == text, "README.md is stale: run python tools/gen_docs.py"
    for var in [*envs.REGISTRY, *harness_envs.REGISTRY]:
        assert f"| `{var}` |" in text
    for key in config.option_specs():
        assert f"| `{key}` |" in text


def test_every_tt_option_is_documented_with_its_parsed_default() -> None:
    # The documented option set is the typed one: a field without a spec (or a spec without a
    # field) would be accepted undocumented or documented unaccepted.
    fields = [f.name for f in config.TTOptions.__dataclass_fields__.values()]
    assert sorted(config.option_specs()) == sorted(fields)
    gen_docs = _gen_docs()
    table = gen_docs.tt_options_table()
    defaults = config.parse_tt_options({})
    assert defaults.trace_mode == "all" and "| `trace_mode` | string | `all` |" in table
    assert defaults.device_timeout_s == 120.0 and "| `device_timeout_s` | number | `120` |" in table
    assert defaults.sample_on_device_mode is None
    assert "| `sample_on_device_mode` | string | unset | `all`, `decode_only`, `null` |" in table
    # The accepted values shown are the ones validation accepts.
    for key, spec in config.option_specs().items():
        for choice in spec.choices or ():
            if spec.choices_doc is None:
                assert f"`{choice}`" in spec.allowed_doc
                assert getattr(config.parse_tt_options({key: choice}), key) == choice


def test_gen_docs_check_fails_on_a_drifted_table(tmp_path: Path) -> None:
    gen_docs = _gen_docs()
    readme = tmp_path / "README.md"
    text = (REPO / "README.md").read_text()
    readme.write_text(text.replace("| `TT_EMULATED_STEP_MS` | float | `0.0` |", "| x | y | z |"))
    assert gen_docs.main(["--check", "--readme", str(readme)]) == 1
    assert gen_docs.main(["--readme", str(readme)]) == 0  # rewrites it
    assert readme.read_text() == text
    for old, new in (
        ("| `trace_mode` | string | `all` |", "| `trace_mode` | string | `none` |"),
        ("| `TT_SERVER_URL` | URL | unset |", "| `TT_SERVER_URL` | URL | `x` |"),
    ):
        assert old in text
        readme.write_text(text.replace(old, new))
        assert gen_docs.main(["--check", "--readme", str(readme)]) == 1, old
    readme.write_text("no markers here\n")
    with pytest.raises(ValueError, match="no '<!-- BEGIN GENERATED envs -->' block"):
        gen_docs.main(["--check", "--readme", str(readme)])
