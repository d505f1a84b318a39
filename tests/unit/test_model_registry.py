"""Registration sources, their precedence, selectors, bundles and overrides."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_tt_plugin import model_registry
from vllm_tt_plugin.model_registry import (
    RegistryError,
    TTModelRegistry,
    get_registry,
    parse_overrides,
    tt_arch,
)

LLAMA_TT = "models.tt_transformers.tt.generator_vllm:LlamaForCausalLM"
LLAMA_GALAXY = "models.demos.llama3_70b_galaxy.tt.generator_vllm:LlamaForCausalLM"


def bundle(root: Path, name: str, meta: Any) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    text = meta if isinstance(meta, str) else json.dumps(meta)
    (folder / "vllm_metadata.json").write_text(text)
    return folder


def test_builtin_map_defaults() -> None:
    reg = TTModelRegistry.from_env({})
    assert reg.resolve("TTLlamaForCausalLM").target == LLAMA_TT
    assert reg.resolve("TTLlamaForCausalLM").source == "builtin"
    assert not reg.resolve("TTLlamaForCausalLM").lane_data_parallel
    assert reg.resolve("TTGptOssForCausalLM").lane_data_parallel
    for arch in (
        "TTQwen2ForCausalLM",
        "TTQwen3ForCausalLM",
        "TTMistralForCausalLM",
        "TTGemma3ForConditionalGeneration",
        "TTMllamaForConditionalGeneration",
        "TTDeepseekV3ForCausalLM",
        "TTGemma4ForCausalLM",
        "TTDiffusionGemmaForBlockDiffusion",
        "TTDiffusionGemmaForCausalLM",
        "TTQwen3_5ForConditionalGeneration",
        "TTMistral3ForConditionalGeneration",
        "TTQwen2_5_VLForConditionalGeneration",
        "TTQwen3VLForConditionalGeneration",
        "TTGemma4ForConditionalGeneration",
        "TTGemma4UnifiedForConditionalGeneration",
    ):
        entry = reg.get(arch)
        assert entry is not None, arch
        assert entry.source == "builtin" and ":" in entry.target, entry
        # Lanes only for the Galaxy generators (selected by version) and GPT-OSS.
        assert not entry.lane_data_parallel, arch
    # Gemma 4 aliases share one serving class.
    gemma4 = {
        reg.resolve(a).target
        for a in (
            "TTGemma4ForCausalLM",
            "TTGemma4ForConditionalGeneration",
            "TTGemma4UnifiedForConditionalGeneration",
        )
    }
    assert len(gemma4) == 1


@pytest.mark.parametrize(
    ("env", "arch", "target", "lane_dp"),
    [
        ({"TT_LLAMA_TEXT_VER": "llama3_70b_galaxy"}, "TTLlamaForCausalLM", LLAMA_GALAXY, True),
        ({"TT_LLAMA_TEXT_VER": "tt_transformers"}, "TTLlamaForCausalLM", LLAMA_TT, False),
        (
            {"TT_QWEN3_TEXT_VER": "qwen3_32b_galaxy"},
            "TTQwen3ForCausalLM",
            "models.demos.llama3_70b_galaxy.tt.generator_vllm:QwenForCausalLM",
            True,
        ),
        (
            {},
            "TTQwen3_5ForConditionalGeneration",
            "models.demos.qwen35.tt.generator_vllm:Qwen3_5ForConditionalGeneration",
            False,
        ),
        (
            {"TT_QWEN35_TEXT_VER": "qwen35_galaxy"},
            "TTQwen3_5ForConditionalGeneration",
            "models.demos.qwen35_galaxy.tt.generator_vllm:Qwen3_5ForConditionalGeneration",
            False,
        ),
    ],
)
def test_version_selectors(env: dict[str, str], arch: str, target: str, lane_dp: bool) -> None:
    entry = TTModelRegistry.from_env(env).resolve(arch)
    assert (entry.target, entry.lane_data_parallel) == (target, lane_dp)


def test_unknown_selector_version_is_named() -> None:
    with pytest.raises(RegistryError, match="TT_LLAMA_TEXT_VER='llama5'.*tt_transformers"):
        TTModelRegistry.from_env({"TT_LLAMA_TEXT_VER": "llama5"})


def test_builtin_models_can_be_disabled(tmp_path: Path) -> None:
    bundle(tmp_path, "one", {"arch": "FooForCausalLM", "main_class": "foo_pkg.model:Foo"})
    reg = TTModelRegistry.from_env(
        {"TT_VLLM_BUILTIN_MODELS": "0", "EXTRA_MODELS_DIR": str(tmp_path)}
    )
    assert reg.get("TTLlamaForCausalLM") is None
    assert reg.resolve("TTFooForCausalLM").source == "bundle"
    with pytest.raises(RegistryError, match="TT_VLLM_BUILTIN_MODELS=.*0 or 1"):
        TTModelRegistry.from_env({"TT_VLLM_BUILTIN_MODELS": "maybe"})


def test_precedence_override_then_bundle_then_builtin(tmp_path: Path) -> None:
    bundle(tmp_path, "llama", {"arch": "LlamaForCausalLM", "main_class": "bundled.llama:Llama"})
    bundle(tmp_path, "qwen", {"arch": "Qwen2ForCausalLM", "main_class": "bundled.qwen:Qwen"})
    env = {
        "EXTRA_MODELS_DIR": str(tmp_path),
        "TT_MODEL_CLASS_OVERRIDES": "LlamaForCausalLM=override.llama:Llama",
    }
    reg = TTModelRegistry.from_env(env)
    assert (reg.resolve("TTLlamaForCausalLM").target, reg.resolve("TTLlamaForCausalLM").source) == (
        "override.llama:Llama",
        "override",
    )
    assert reg.resolve("TTQwen2ForCausalLM").source == "bundle"
    assert reg.resolve("TTMistralForCausalLM").source == "builtin"


def test_test_models_only_on_request_and_below_overrides() -> None:
    reg = TTModelRegistry.from_env({})
    assert reg.get("TTReferenceLlamaForCausalLM") is None
    with pytest.raises(RegistryError, match="register_test_models"):
        reg.resolve("ReferenceLlamaForCausalLM")
    reg.add_test_models()
    assert reg.resolve("TTReferenceLlamaForCausalLM").source == "test"
    overridden = TTModelRegistry.from_env(
        {"TT_MODEL_CLASS_OVERRIDES": "TTReferenceLlamaForCausalLM=my.variant:Broken"}
    )
    overridden.add_test_models()
    assert overridden.resolve("TTReferenceLlamaForCausalLM").target == "my.variant:Broken"


def test_bare_override_names_are_normalised() -> None:
    assert parse_overrides("Gemma4ForCausalLM=a.b:C, TTQwen2ForCausalLM = d.e:F") == [
        ("TTGemma4ForCausalLM", "a.b:C"),
        ("TTQwen2ForCausalLM", "d.e:F"),
    ]
    assert tt_arch("TTLlamaForCausalLM") == "TTLlamaForCausalLM"
    assert tt_arch("LlamaForCausalLM") == "TTLlamaForCausalLM"


@pytest.mark.parametrize(
    "value",
    ["TTGemma4ForCausalLM", "=a.b:C", "X=a.b", "X=a.b:", "X=:C", "X=a:b:c"],
)
def test_malformed_override_is_a_clear_error(value: str) -> None:
    with pytest.raises(RegistryError, match="TT_MODEL_CLASS_OVERRIDES"):
        parse_overrides(value)


def test_each_applied_override_is_logged_at_info(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, clean_registry: None
) -> None:
    monkeypatch.setenv(
        "TT_MODEL_CLASS_OVERRIDES",
        "TTGemma4ForCausalLM=models.demos.gemma4.tt.generator_vllm:Gemma4DFlashForCausalLM,"
        "Qwen2ForCausalLM=pkg.q:Q",
    )
    logger = logging.getLogger("vllm.tt_plugin.model_registry")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="vllm.tt_plugin.model_registry"):
            get_registry()
    finally:
        logger.removeHandler(caplog.handler)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert (
        "Applied TT_MODEL_CLASS_OVERRIDES: TTGemma4ForCausalLM -> "
        "models.demos.gemma4.tt.generator_vllm:Gemma4DFlashForCausalLM"
    ) in lines
    assert "Applied TT_MODEL_CLASS_OVERRIDES: TTQwen2ForCausalLM -> pkg.q:Q" in lines


def test_bundle_folder_is_appended_to_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = bundle(tmp_path, "mine", {"arch": "MineForCausalLM", "main_class": "mine_model:Mine"})
    (folder / "mine_model.py").write_text("class Mine:\n    model_capabilities = {}\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    first = sys.path[0]
    reg = TTModelRegistry.from_env({"EXTRA_MODELS_DIR": str(tmp_path)})
    assert sys.path[-1] == str(folder)
    assert sys.path[0] == first
    assert reg.resolve("TTMineForCausalLM").load_class().__name__ == "Mine"


@pytest.mark.parametrize(
    ("meta", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ({"main_class": "a:B"}, "'arch' is missing"),
        ({"arch": "X", "main_class": ""}, "'main_class' is missing"),
        ({"arch": "X", "main_class": "no_colon"}, "module.path:ClassName"),
        ({"arch": "X", "main_class": "a:B", "lane_data_parallel": "yes"}, "lane_data_parallel"),
    ],
)
def test_malformed_bundle_errors(tmp_path: Path, meta: Any, fragment: str) -> None:
    bundle(tmp_path, "bad", meta)
    with pytest.raises(RegistryError, match=fragment) as info:
        TTModelRegistry.from_env({"EXTRA_MODELS_DIR": str(tmp_path)})
    assert "bad" in str(info.value)


def test_bundle_without_metadata_and_missing_dir(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(RegistryError, match="has no vllm_metadata.json"):
        TTModelRegistry.from_env({"EXTRA_MODELS_DIR": str(tmp_path)})
    with pytest.raises(RegistryError, match="is not a directory"):
        TTModelRegistry.from_env({"EXTRA_MODELS_DIR": str(tmp_path / "nope")})


def test_unimportable_target_names_arch_and_source() -> None:
    reg = TTModelRegistry.from_env({})
    with pytest.raises(RegistryError, match="TTLlamaForCausalLM.*builtin.*PYTHONPATH"):
        reg.resolve("TTLlamaForCausalLM").load_class()
    reg2 = TTModelRegistry.from_env({"TT_MODEL_CLASS_OVERRIDES": "X=json:NoSuchClass"})
    with pytest.raises(RegistryError, match="has no class 'NoSuchClass'"):
        reg2.resolve("TTX").load_class()


def test_register_with_vllm_makes_archs_known(clean_registry: None) -> None:
    from vllm import ModelRegistry

    model_registry.register_with_vllm(get_registry())
    archs = ModelRegistry.get_supported_archs()
    assert "TTLlamaForCausalLM" in archs
    assert "ReferenceLlamaForCausalLM" in archs
