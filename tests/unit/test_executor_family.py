"""tt-metal's executor-backed generators (models/common/models/): each one refused at launch.

The classes are read at the tenstorrent/tt-metal commits launch/executor_family.py names; no
tt-metal checkout is needed (the refusal happens before the class is imported).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_checkpoint_config
from vllm_tt_plugin import model_registry
from vllm_tt_plugin.launch.executor_family import EXECUTOR_GENERATORS, ExecutorGenerator
from vllm_tt_plugin.model_registry import ModelTarget, TTModelRegistry, launch_refusal

# The per-model folders of models/common/models/ that hold a generator.py (find_files over
# tenstorrent/tt-metal), plus the top-level generator.py.
SHIPPED_GENERATOR_MODULES = {
    "models.common.models.generator",
    "models.common.models.llama3_1b.generator",
    "models.common.models.llama3_8b.generator",
    "models.common.models.llama32_1b.generator",
    "models.common.models.llama32_3b.generator",
    "models.common.models.llama33_70b.generator",
    "models.common.models.mistral_7b.generator",
    "models.common.models.phi4.generator",
    "models.common.models.qwen25_7b.generator",
    "models.common.models.qwen25_72b.generator",
    "models.common.models.qwen25_coder_32b.generator",
    "models.common.models.qwen2_7b.generator",
    "models.common.models.deepseek_r1_distill_qwen_14b.generator",
    "models.common.models.qwen3_32b.generator",
}

# What each form's refusal must name: the exact break, read from the newest version.
FORM_FRAGMENTS = {
    "composition": ("takes no tt_data_parallel", "self.executor"),
    "builder": ("defines no initialize_vllm_model", "from_pretrained(mesh_device, gen_cfg)"),
    "facade": (
        "VLLMAdapter discards",
        "prompt_tokens and output_tokens",
        "penalties would be dropped silently",
    ),
}


def _ids(generator: ExecutorGenerator) -> str:
    return generator.target.rpartition(".generator:")[0].rpartition(".")[2]


def test_every_generator_tt_metal_ships_is_listed_once() -> None:
    modules = [g.target.partition(":")[0] for g in EXECUTOR_GENERATORS]
    assert sorted(modules) == sorted(SHIPPED_GENERATOR_MODULES)
    assert all(len(g.commit) == 40 for g in EXECUTOR_GENERATORS)


@pytest.mark.parametrize("generator", EXECUTOR_GENERATORS, ids=_ids)
@pytest.mark.parametrize("source", ["override", "bundle"])
def test_each_generator_is_refused_from_any_source_naming_class_and_break(
    generator: ExecutorGenerator, source: Any
) -> None:
    # Reachable (and covered by the parity check), never half-served.
    assert model_registry.KNOWN_TARGETS[generator.target] == generator.archs
    assert model_registry.all_builtin_targets()[generator.target] == generator.archs
    for arch in generator.archs:
        message = launch_refusal(ModelTarget(arch, generator.target, source)) or ""
        assert f"{arch} from {source} ({generator.target}) cannot be served" in message
        for fragment in FORM_FRAGMENTS[generator.form]:
            assert fragment in message, message
        assert f"tenstorrent/tt-metal @ {generator.commit[:8]}" in message
        assert 'docs/TT_MODEL_CONTRACT.md, "Refused at launch"' in message


def test_none_is_built_in_under_any_selector() -> None:
    targets = {g.target for g in EXECUTOR_GENERATORS}
    for versions in model_registry.selector_table().values():
        for table in versions.values():
            assert not targets & {target for target, _lane in table.values()}
    assert not targets & {t.target for t in TTModelRegistry.from_env({}).architectures().values()}


@pytest.mark.parametrize(
    ("module_class", "fragment"),
    [
        ("models.common.models.generator:Llama3Generator", "takes no tt_data_parallel"),
        ("models.common.models.llama32_1b.generator:Llama32_1BGenerator", "no initialize_vllm"),
        ("models.common.models.llama3_8b.generator:Llama3Generator", "VLLMAdapter discards"),
    ],
)
def test_launch_stops_at_config_time_before_the_class_is_imported(
    make_config: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    module_class: str,
    fragment: str,
) -> None:
    monkeypatch.setenv("TT_MODEL_CLASS_OVERRIDES", f"TTLlamaForCausalLM={module_class}")
    model = write_checkpoint_config(tmp_path / "llama", architectures=["LlamaForCausalLM"])
    with pytest.raises(Exception) as info:
        make_config(model=model, model_class=None)
    message = str(info.value)
    assert f"TTLlamaForCausalLM from override ({module_class}) cannot be served" in message
    assert fragment in message and "Refused at launch" in message
    # models.common is not importable here: a refusal after the import would say so instead.
    assert "Cannot import" not in message


class _FacadeDeclarations:
    """The class-level declarations of the facade generators (e.g. phi4/generator.py @ 6ce5d392)."""

    model_capabilities = {
        "supports_prefix_caching": True,
        "supports_async_decode": True,
        "supports_sample_on_device": True,
        "accepts_trace_mode": True,
    }


def test_the_facade_premise_the_plugin_would_send_the_histories_it_discards() -> None:
    # The refusal rests on this: read as the plugin reads any class, the facade gets device
    # sampling with device penalties, so a penalised decode carries prompt_tokens and
    # output_tokens, the two keys VLLMAdapter discards. Should the plugin ever plan otherwise,
    # this fails and the facade reason in launch/executor_family.py is stale.
    from vllm_tt_plugin.contract.call_plan import decode_keywords, derive_facts
    from vllm_tt_plugin.launch.capabilities import ModelCapabilities

    caps = ModelCapabilities.from_model_class(_FacadeDeclarations)
    assert caps.supports_sample_on_device and caps.supports_device_penalties
    facts = derive_facts(
        decode_contract=0,  # no decode_input_update_contract in the facades
        device_sampling=caps.supports_sample_on_device,
        output_tokens_per_step=caps.output_tokens_per_step,
        has_method=lambda name: True,
        takes=lambda method, param: False,
        device_penalties=caps.supports_device_penalties,
    )
    sent = decode_keywords(facts, on_device=True, penalties=True, remap=False, mrope=False)
    assert {"prompt_tokens", "output_tokens"} <= set(sent)
