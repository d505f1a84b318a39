"""The parity checker on synthetic tt-metal trees: each way a TT host fails that it must report.

Each tree is a few small modules shaped like tt-metal's (``generator.py`` with the
``Generator`` base, ``generator_vllm.py`` with the adapter class the registry targets), read by
the checker's real entry points (``check`` with a ``CheckoutReader``).
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from typing import Any

import torch

from vllm_tt_plugin.adapter.model_adapter import ModelAdapter
from vllm_tt_plugin.contract.call_plan import METHODS, ServedFacts, plan_calls
from vllm_tt_plugin.contract.call_types import DecodeCall, LoadCall, WarmupPlan
from vllm_tt_plugin.contract.parity import CheckoutReader, Finding, check, failures, plan_facts
from vllm_tt_plugin.contract.reload_contract import FULL_RELOAD
from vllm_tt_plugin.contract.signatures import FamilyProfile, profiles_from_mapping

TARGET = "models.demo.tt.generator_vllm:DemoForCausalLM"

GENERATOR = """
class Generator:
    decode_input_update_contract = 1

    def prefill_forward_text(
        self, tokens, page_table=None, kv_cache=None, prompt_lens=None, empty_slots=None,
        enable_trace=False, sampling_params=None, start_pos=None,
    ):
        ...

    def decode_forward(
        self, tokens, start_pos, page_table=None, kv_cache=None, enable_trace=True,
        read_from_device=True, sampling_params=None, prompt_tokens=None, output_tokens=None,
        slot_remap=None, *, reload_inputs=True, reload_page_table=False,
        reload_sampling_params=False, reset_sampling_state=False,
    ):
        ...

    def warmup_model_prefill(self, kv_cache, enable_trace, can_sample_on_device):
        ...

    def warmup_model_decode(
        self, kv_cache, enable_trace, max_batch_size, num_blocks, can_sample_on_device
    ):
        ...
"""

ADAPTER = """
from models.demo.tt.generator import Generator


class DemoForCausalLM(Generator):
    model_capabilities = {"supports_sample_on_device": True}

    @classmethod
    def initialize_vllm_model(
        cls, hf_config, mesh_device, max_batch_size, max_seq_len, tt_data_parallel=1,
        optimizations=None,
    ):
        ...

    def prefill_forward(self, *args, **kwargs):
        return super().prefill_forward_text(*args, **kwargs)

    def decode_forward(self, *args, **kwargs):
        return super().decode_forward(*args, **kwargs)

    def allocate_kv_cache(self, kv_cache_shape, dtype, num_layers):
        ...
"""


def profiles(**facts: Any) -> dict[str, FamilyProfile]:
    """A fixture that lists no methods for the target (the checkout is what is checked)."""
    recorded = {"decode_contract": 1, "device_sampling": True, **facts}
    return profiles_from_mapping({"profiles": {TARGET: {"family": "demo", "facts": recorded}}})


def tree(root: Path, generator: str = GENERATOR, adapter: str = ADAPTER) -> Path:
    for rel, text in {
        "models/demo/tt/generator.py": generator,
        "models/demo/tt/generator_vllm.py": adapter,
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def edit(text: str, *changes: tuple[str, str]) -> str:
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    return text


def run(root: Path, **facts: Any) -> dict[str, Finding]:
    found = check(CheckoutReader(root), profiles(**facts), {TARGET: ("TTDemoForCausalLM",)})
    return {f.method: f for f in found}


def test_the_unchanged_tree_binds(tmp_path: Path) -> None:
    found = run(tree(tmp_path))
    assert failures(list(found.values())) == []
    # Binds; "drift" only because this fixture lists no signatures to compare with.
    assert found["decode_forward"].status == "drift"
    assert found["warmup_model_prefill"].status == "drift"


def test_forwarding_that_ends_nowhere_is_missing(tmp_path: Path) -> None:
    # Galaxy / Qwen-VL: a pass-through to decode_forward_text, which no base defines.
    adapter = edit(ADAPTER, ("super().decode_forward(*args", "super().decode_forward_text(*args"))
    found = run(tree(tmp_path, adapter=adapter))["decode_forward"]
    assert found.status == "missing", found
    assert "forwards to super().decode_forward_text(...)" in found.detail
    assert "generator_vllm.py:" in found.detail
    assert found in failures([found])


def test_super_with_a_class_starts_after_that_class(tmp_path: Path) -> None:
    # Gemma3 / GptOss: super(HybridAttentionForCausalLM, self).decode_forward skips the hybrid
    # base's NotImplementedError stub and reaches Generator.decode_forward.
    hybrid = edit(
        ADAPTER,
        (
            "class DemoForCausalLM(Generator):",
            "class HybridAttentionForCausalLM(Generator):\n"
            "    def decode_forward(self, *args, **kwargs):\n"
            "        raise NotImplementedError\n\n\n"
            "class DemoForCausalLM(HybridAttentionForCausalLM):",
        ),
        (
            "super().decode_forward(*args, **kwargs)",
            "super(HybridAttentionForCausalLM, self).decode_forward(*args, **kwargs)",
        ),
    )
    found = run(tree(tmp_path, adapter=hybrid))["decode_forward"]
    assert found.status == "drift", found  # binds; not the stub, so not abstract
    assert "reload_inputs=" in found.detail  # Generator.decode_forward's signature was read

    # ... so a break in Generator.decode_forward is seen (the stub's (*args, **kwargs) hid it).
    generator = edit(GENERATOR, ("read_from_device=True, sampling_params", "sampling_params"))
    found = run(tree(tmp_path, generator=generator, adapter=hybrid))["decode_forward"]
    assert found.status == "broken", found
    assert "(models.demo.tt.generator:Generator).decode_forward(" in found.detail
    assert "unexpected argument 'read_from_device'" in found.detail


def test_self_hand_offs_and_bound_methods_passed_on_are_followed(tmp_path: Path) -> None:
    generator = edit(
        GENERATOR,
        (
            "    def prefill_forward_text(\n",
            "    def prefill_forward_text(self, *args, **kwargs):\n"
            "        return self._prefill_forward_text_impl(*args, **kwargs)\n\n"
            "    def _prefill_forward_text_impl(\n",
        ),
        ("prompt_lens=None, empty_slots=None,", "prompt_lens=None,"),
        (
            "    def decode_forward(\n",
            "    def decode_forward(self, *args, **kwargs):\n"
            "        return self._run_traced(self._decode_forward_impl, *args, **kwargs)\n\n"
            "    def _run_traced(self, fn, *args, **kwargs):\n"
            "        return fn(*args, **kwargs)\n\n"
            "    def _decode_forward_impl(\n",
        ),
        (", reset_sampling_state=False,", ","),
    )
    found = run(tree(tmp_path, generator=generator))
    prefill, decode = found["prefill_forward"], found["decode_forward"]
    assert prefill.status == "broken", prefill
    assert "Generator).prefill_forward_text" not in prefill.detail  # the pass-through binds
    assert ")._prefill_forward_text_impl(" in prefill.detail
    assert "unexpected argument 'empty_slots'" in prefill.detail
    assert decode.status == "broken", decode
    assert ")._decode_forward_impl(" in decode.detail
    assert "unexpected argument 'reset_sampling_state'" in decode.detail


def test_a_not_implemented_stub_is_abstract_and_fails(tmp_path: Path) -> None:
    stub = edit(
        ADAPTER,
        (
            "class DemoForCausalLM(Generator):",
            "class HybridAttentionForCausalLM(Generator):\n"
            "    def decode_forward(self, *args, **kwargs):\n"
            '        """Subclasses route to their generator."""\n'
            '        raise NotImplementedError("hybrid decode")\n\n\n'
            "class DemoForCausalLM(HybridAttentionForCausalLM):",
        ),
        (
            "    def decode_forward(self, *args, **kwargs):\n        return super()",
            "    def _x(self):\n        return super()",
        ),
    )
    found = run(tree(tmp_path, adapter=stub))["decode_forward"]
    assert found.status == "abstract", found
    assert "HybridAttentionForCausalLM.decode_forward only raises NotImplementedError" in (
        found.detail
    )
    assert found in failures([found])


def test_each_link_binds_only_the_arguments_that_reach_it(tmp_path: Path) -> None:
    # T3000: the adapter's decode_forward consumes the reload commands and slot_remap and
    # passes the rest on to a base decode that does not take them.
    adapter = edit(
        ADAPTER,
        (
            "def decode_forward(self, *args, **kwargs):",
            "def decode_forward(\n        self, *args, reload_inputs, reload_page_table,\n"
            "        reload_sampling_params, reset_sampling_state, slot_remap=None, **kwargs\n"
            "    ):",
        ),
    )
    generator = edit(
        GENERATOR,
        (
            "slot_remap=None, *, reload_inputs=True, reload_page_table=False,\n"
            "        reload_sampling_params=False, reset_sampling_state=False,",
            "",
        ),
    )
    found = run(tree(tmp_path, generator=generator, adapter=adapter))["decode_forward"]
    assert found.status == "drift", found
    # A real break below the pass-through is named, and only it.
    generator = edit(generator, ("enable_trace=True,\n        read_from_device=True,", ""))
    found = run(tree(tmp_path, generator=generator, adapter=adapter))["decode_forward"]
    assert found.status == "broken", found
    assert "unexpected argument 'enable_trace'" in found.detail
    assert "unexpected argument 'read_from_device'" in found.detail
    assert "unexpected argument 'reload_inputs'" not in found.detail
    assert "unexpected argument 'slot_remap'" not in found.detail


def test_facts_are_read_from_the_class_and_a_disagreeing_fixture_is_reported(
    tmp_path: Path,
) -> None:
    # The class declares neither decode_input_update_contract nor device sampling: the plugin
    # sends the version-0, host-sampled decode (no reload commands, no slot_remap).
    generator = edit(
        GENERATOR,
        ("    decode_input_update_contract = 1\n", ""),
        (
            "read_from_device=True, sampling_params=None, prompt_tokens=None, output_tokens=None,\n"
            "        slot_remap=None, *, reload_inputs=True, reload_page_table=False,\n"
            "        reload_sampling_params=False, reset_sampling_state=False,",
            "read_from_device=True,",
        ),
    )
    adapter = edit(ADAPTER, ('{"supports_sample_on_device": True}', "{}"))
    found = run(tree(tmp_path, generator=generator, adapter=adapter))
    assert found["decode_forward"].status == "drift", found["decode_forward"]
    facts = found["(class facts)"]
    assert facts.status == "facts" and failures([facts]) == []
    assert "decode_contract (decode_input_update_contract): fixture 1, class 0" in facts.detail
    assert "device_sampling (supports_sample_on_device): fixture True, class False" in facts.detail

    # A version-0 class that samples on the device gets reset_batch, which this decode refuses.
    found = run(tree(tmp_path, generator=generator))["decode_forward"]
    assert found.status == "broken"
    assert "unexpected argument 'reset_batch'" in found.detail
    assert "argument 'reload_inputs'" not in found.detail
    assert "argument 'slot_remap'" not in found.detail


def test_the_adapter_and_the_checker_plan_from_the_same_facts(tmp_path: Path) -> None:
    """The checker's facts for a class equal what ModelAdapter reads from the same class
    imported, and the adapter's decode call is one the checker plans."""
    source = """
    class Generator:
        def __init__(self):
            self.decode_input_update_contract = 1
            self.calls = []

        def decode_forward(self, *args, **kwargs):
            self.calls.append(kwargs)
            return torch.zeros((4, 1, 8))


    class DemoForCausalLM(Generator):
        model_capabilities = {"supports_sample_on_device": True}

        @classmethod
        def initialize_vllm_model(
            cls, hf_config, mesh_device, max_batch_size, max_seq_len, tt_data_parallel=1,
            optimizations=None,
        ):
            return cls()

        @classmethod
        def get_kv_cache_spec(cls, vllm_config):
            return {}

        def prefill_forward(self, *args, page_tables_per_layer=None, **kwargs):
            ...
    """
    path = tmp_path / "models/demo/tt/generator_vllm.py"
    path.parent.mkdir(parents=True)
    path.write_text("import torch\n" + textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location("synthetic_demo_adapter", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    adapter = ModelAdapter(module.DemoForCausalLM)
    adapter.load(LoadCall("hf", "mesh", 4, 64, 1, None))
    checker_facts, _ = plan_facts(CheckoutReader(tmp_path), profiles()[TARGET])
    assert adapter.facts == checker_facts
    assert checker_facts.hybrid_tables == "page_tables_per_layer"

    tables = [torch.zeros((4, 1), dtype=torch.int32)]
    adapter.submit_decode(DecodeCall(
        tokens=torch.zeros((4, 1), dtype=torch.int32), start_pos=torch.zeros(4, dtype=torch.int32),
        page_tables=tables, kv_cache="kv", enable_trace=False, command=FULL_RELOAD,
        slot_remap=torch.arange(4), sampling_params=None, prompt_tokens=None,
        output_tokens=None, uses_mrope=False, rope_deltas=None, layer_groups=(0, 0),
    ))  # fmt: skip
    sent = set(adapter.model.calls[-1])
    planned = plan_calls("decode_forward", checker_facts, ServedFacts())
    assert any(set(p.keywords) == sent for p in planned), (sent, planned)


def test_warmups_are_optional_in_the_checker_and_the_adapter(tmp_path: Path) -> None:
    generator = GENERATOR.split("    def warmup_model_prefill")[0]
    found = run(tree(tmp_path, generator=generator))
    assert found["warmup_model_prefill"].status == "absent"
    assert found["warmup_model_decode"].status == "absent"
    assert failures(list(found.values())) == []
    assert all(p.optional for p in METHODS if p.method.startswith("warmup_"))

    class NoWarmup:  # the adapter skips what the model lacks, as the checker now says
        @classmethod
        def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int,
                                  **kwargs: Any) -> NoWarmup:  # fmt: skip
            return cls()

        def prefill_forward(self, **kwargs: Any) -> None: ...

        def decode_forward(self, **kwargs: Any) -> None: ...

    adapter = ModelAdapter(NoWarmup)
    adapter.load(LoadCall("hf", "mesh", 4, 64, 1, None))
    adapter.warm_up(WarmupPlan("kv", 4, 4, False, False, True, True))


def test_a_base_outside_the_checkout_is_unresolved_not_missing(tmp_path: Path) -> None:
    # The adapter's Generator comes from a module the checkout does not hold: the checker
    # cannot tell whether it defines the forwarded-to methods, and says which base is absent.
    adapter = edit(ADAPTER, ("from models.demo.tt.generator import", "from models.gone.tt import"))
    found = run(tree(tmp_path, adapter=adapter))
    decode = found["decode_forward"]
    assert decode.status == "unresolved", decode
    assert "Generator (models.gone.tt)" in decode.detail
    assert found["warmup_model_prefill"].status == "unresolved"  # not "absent"
    assert decode in failures([decode])
    # A base from outside tt-metal (vLLM's interfaces) is not tt-metal's to hold.
    vllm_base = edit(
        ADAPTER,
        ("class DemoForCausalLM(Generator):", "class DemoForCausalLM(Generator, SupportsMM):"),
        ("from models.demo.tt.generator import Generator",
         "from models.demo.tt.generator import Generator\n"
         "from vllm.model_executor.models.interfaces import SupportsMM"),
    )  # fmt: skip
    assert failures(list(run(tree(tmp_path / "b", adapter=vllm_base)).values())) == []
