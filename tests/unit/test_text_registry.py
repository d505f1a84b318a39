"""tt-transformers' table of text architectures (``tt_transformers.vllm_registry``) in the registry.

A fake importable package on ``sys.path`` (tmp_path) stands in for tenstorrent/tt-transformers,
with the interface its ``src/tt_transformers/vllm_registry.py`` @ fb8071b3 exports: one class
per architecture (``architecture``, ``generators``, classmethod ``initialize_vllm_model``) in
``__all__``.
"""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_tt_plugin import model_registry
from vllm_tt_plugin.model_registry import RegistryError, TTModelRegistry, get_registry

TT_LLAMA = "models.tt_transformers.tt.generator_vllm:LlamaForCausalLM"
GALAXY_LLAMA = "models.demos.llama3_70b_galaxy.tt.generator_vllm:LlamaForCausalLM"

TABLE = """
__all__ = [
    "GeneratorEntry", "LlamaForCausalLM", "Phi3ForCausalLM", "Qwen3ForCausalLM", "resolve_hf_id"
]


class GeneratorEntry:
    pass


def resolve_hf_id(name):
    return name


class _ArchitectureDispatcher:
    model_capabilities = {"supports_prefix_caching": True}

    @classmethod
    def initialize_vllm_model(cls, hf_config, mesh_device, max_batch_size, max_seq_len, **kw):
        return None


class LlamaForCausalLM(_ArchitectureDispatcher):
    architecture = "LlamaForCausalLM"
    generators = (GeneratorEntry(),)


class Qwen3ForCausalLM(_ArchitectureDispatcher):
    architecture = "Qwen3ForCausalLM"
    generators = (GeneratorEntry(),)


class Phi3ForCausalLM(_ArchitectureDispatcher):
    architecture = "Phi3ForCausalLM"
    generators = (GeneratorEntry(),)
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An importable ``tt_transformers`` package; the test writes its ``vllm_registry``."""
    pkg = tmp_path / "tt_transformers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.split(".")[0] == "tt_transformers"]:
        monkeypatch.delitem(sys.modules, name)
    model_registry.reset_registry()
    yield pkg
    for name in [m for m in sys.modules if m.split(".")[0] == "tt_transformers"]:
        del sys.modules[name]
    model_registry.reset_registry()


def write(pkg: Path, text: str) -> None:
    (pkg / "vllm_registry.py").write_text(textwrap.dedent(text))


def test_without_the_package_the_plugins_table_serves(caplog: pytest.LogCaptureFixture) -> None:
    assert "tt_transformers" not in sys.modules
    registry = TTModelRegistry.from_env({})
    assert registry.text_table is None
    assert registry.resolve("LlamaForCausalLM").target == TT_LLAMA
    assert registry.resolve("LlamaForCausalLM").source == "builtin"
    # Phi-3 has no tt-metal class in the plugin's table: the refusal names the missing package.
    with pytest.raises(RegistryError, match=r"only by tt_transformers\.vllm_registry"):
        registry.resolve("Phi3ForCausalLM")
    model_registry.reset_registry()
    with caplog.at_level(logging.INFO, logger=model_registry.logger.name):
        get_registry()
    assert "the plugin's built-in table" in caplog.text
    model_registry.reset_registry()


def test_an_importable_table_serves_its_architectures_first(
    package: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(package, TABLE)
    registry = TTModelRegistry.from_env({})
    assert registry.text_table is not None
    served = {
        a: t.target for a, t in registry.architectures().items() if t.source == "tt_transformers"
    }
    assert served == {
        "TTLlamaForCausalLM": "tt_transformers.vllm_registry:LlamaForCausalLM",
        "TTQwen3ForCausalLM": "tt_transformers.vllm_registry:Qwen3ForCausalLM",
        "TTPhi3ForCausalLM": "tt_transformers.vllm_registry:Phi3ForCausalLM",
    }
    # What the table does not name stays on the plugin's table (the fallback).
    assert registry.resolve("MistralForCausalLM").source == "builtin"
    assert registry.resolve("Gemma4ForCausalLM").source == "builtin"
    # The target imports: the class the plugin loads is the table's.
    assert registry.resolve("Phi3ForCausalLM").load_class().__name__ == "Phi3ForCausalLM"
    with caplog.at_level(logging.INFO, logger=model_registry.logger.name):
        get_registry()
    assert "TT text models: tt_transformers.vllm_registry (" in caplog.text
    assert "TTLlamaForCausalLM, TTPhi3ForCausalLM, TTQwen3ForCausalLM" in caplog.text


def test_overrides_bundles_and_a_chosen_selector_outrank_the_table(package: Path) -> None:
    write(package, TABLE)
    env = {"TT_MODEL_CLASS_OVERRIDES": "TTQwen3ForCausalLM=my.mod:Qwen"}
    registry = TTModelRegistry.from_env(env)
    assert registry.resolve("Qwen3ForCausalLM").source == "override"
    chosen = TTModelRegistry.from_env({"TT_LLAMA_TEXT_VER": "llama3_70b_galaxy"})
    assert chosen.resolve("LlamaForCausalLM").target == GALAXY_LLAMA
    assert chosen.resolve("Qwen3ForCausalLM").source == "tt_transformers"
    # The default value, spelled out, is no choice of another generator.
    default = TTModelRegistry.from_env({"TT_LLAMA_TEXT_VER": "tt_transformers"})
    assert default.resolve("LlamaForCausalLM").source == "tt_transformers"
    # Built-ins off: neither table serves.
    off = TTModelRegistry.from_env({"TT_VLLM_BUILTIN_MODELS": "0"})
    assert off.get("LlamaForCausalLM") is None and off.text_table is None


def test_a_tt_transformers_without_the_table_falls_back(package: Path) -> None:
    registry = TTModelRegistry.from_env({})  # the package has no vllm_registry module
    assert registry.text_table is None
    assert registry.resolve("LlamaForCausalLM").source == "builtin"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("__all__ = 'LlamaForCausalLM'\n", "__all__ must be a list"),
        ("__all__ = ['LlamaForCausalLM']\n", "names 'LlamaForCausalLM', which it does not define"),
        ("__all__ = []\n", "exports no architecture class"),
        ("import not_a_module_anywhere\n", "cannot be imported: No module named"),
        ("raise RuntimeError('boom')\n", "cannot be imported: RuntimeError: boom"),
        (
            TABLE.replace('architecture = "Phi3ForCausalLM"', "architecture = 3"),
            "Phi3ForCausalLM.architecture must be an architecture name, got 3",
        ),
        (
            TABLE.replace(
                "generators = (GeneratorEntry(),)\n\n\nclass Qwen3",
                "generators = ()\n\n\nclass Qwen3",
            ),
            "LlamaForCausalLM.generators must be a non-empty tuple",
        ),
        (
            TABLE.replace('architecture = "Phi3ForCausalLM"', 'architecture = "LlamaForCausalLM"'),
            "LlamaForCausalLM is served by both LlamaForCausalLM and Phi3ForCausalLM",
        ),
        (
            TABLE + "\n\nclass Broken:\n    architecture = 'X'\n    generators = (1,)\n"
            "\n\n__all__ = [*__all__, 'Broken']\n",
            "Broken has no initialize_vllm_model",
        ),
    ],
)
def test_a_malformed_table_is_refused_naming_it(package: Path, text: str, fragment: str) -> None:
    write(package, text)
    with pytest.raises(RegistryError) as info:
        TTModelRegistry.from_env({})
    message = str(info.value)
    assert fragment in message
    assert "tt_transformers.vllm_registry" in message
    if "cannot be imported" not in fragment:  # the module's file is named
        assert str(package / "vllm_registry.py") in message
    assert "TT_VLLM_BUILTIN_MODELS=0" in message  # the way around
    # With the built-in map off the broken table is not read.
    assert TTModelRegistry.from_env({"TT_VLLM_BUILTIN_MODELS": "0"}).text_table is None
