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


# --- issue #45: no false pass, no false alarm -------------------------------------------------


def test_a_bound_method_handed_to_a_helper_binds_without_the_helpers_own_arguments(
    tmp_path: Path,
) -> None:
    # Qwen3.6: `return warmup_decode_buckets(self, super().warmup_model_decode, *args, **kwargs)`.
    # The helper's `self` is its own argument, not one of the bound method's (it used to be
    # bound as the bound method's first argument: "kv_cache given positionally and by name").
    adapter = edit(
        ADAPTER,
        ("from models.demo.tt.generator import Generator",
         "from models.demo.tt.generator import Generator\n"
         "from models.demo.tt.buckets import warmup_decode_buckets"),
        ("    def allocate_kv_cache(",
         "    def warmup_model_decode(self, *args, **kwargs):\n"
         "        return warmup_decode_buckets(\n"
         "            self, super().warmup_model_decode, *args, **kwargs\n"
         "        )\n\n"
         "    def allocate_kv_cache("),
    )  # fmt: skip
    # The helper's body is read: it hands the method exactly *args / **kwargs.
    buckets = tmp_path / "models/demo/tt/buckets.py"
    buckets.parent.mkdir(parents=True)
    buckets.write_text(
        "def warmup_decode_buckets(model, warmup, *args, **kwargs):\n"
        "    for _ in model.buckets:\n"
        "        warmup(*args, **kwargs)\n"
    )
    found = run(tree(tmp_path, adapter=adapter))["warmup_model_decode"]
    assert found.status == "drift", found  # binds: Generator.warmup_model_decode was reached
    assert "given positionally and by name" not in found.detail
    assert "(kv_cache, enable_trace, max_batch_size, num_blocks, can_sample_on_device)" in (
        found.detail
    )
    # ... and a break behind the hand-off is still seen.
    generator = edit(
        GENERATOR, ("max_batch_size, num_blocks, can_sample", "num_blocks, can_sample")
    )
    found = run(tree(tmp_path, generator=generator, adapter=adapter))["warmup_model_decode"]
    assert found.status == "broken", found
    assert "unexpected argument 'max_batch_size'" in found.detail


def test_every_method_the_driven_methods_call_on_the_instance_must_resolve(tmp_path: Path) -> None:
    # DeepSeek-V3: the adapter's decode path calls self.sample_decode_on_device and a helper
    # that calls self._validate_and_initialize_sampling; a base that defines neither fails
    # with AttributeError at the first device-sampled decode.
    adapter = edit(
        ADAPTER,
        ("    def decode_forward(self, *args, **kwargs):\n"
         "        return super().decode_forward(*args, **kwargs)",
         "    def decode_forward(self, *args, **kwargs):\n"
         "        out = super().decode_forward(*args, **kwargs)\n"
         "        if self.tokenizer is not None and hasattr(self, 'maybe_hook'):\n"
         "            self.maybe_hook()\n"
         "        self.formatter(out)\n"
         "        return self._sample(out, kwargs.get('sampling_params'))\n\n"
         "    def _sample(self, logits, params):\n"
         "        self._validate_and_initialize_sampling(params)\n"
         "        return self.sample_decode_on_device(logits)"),
        ("    def allocate_kv_cache(",
         "    def __init__(self):\n"
         "        self.formatter = print\n\n"
         "    def allocate_kv_cache("),
    )  # fmt: skip
    found = run(tree(tmp_path, adapter=adapter))["decode_forward"]
    assert found.status == "missing", found
    assert found in failures([found])
    assert "DemoForCausalLM.decode_forward -> DemoForCausalLM._sample calls " in found.detail
    assert "self._validate_and_initialize_sampling(...), which no class in the MRO" in found.detail
    assert "self.sample_decode_on_device(...)" in found.detail
    # An attribute holding a callable (self.formatter) and a hasattr-guarded call are not.
    assert "formatter" not in found.detail and "maybe_hook" not in found.detail
    # A base that defines them: binds.
    generator = edit(
        GENERATOR,
        ("    def warmup_model_prefill(",
         "    def _validate_and_initialize_sampling(self, params): ...\n\n"
         "    def sample_decode_on_device(self, logits): ...\n\n"
         "    def warmup_model_prefill("),
    )  # fmt: skip
    found = run(tree(tmp_path, generator=generator, adapter=adapter))["decode_forward"]
    assert found.status == "drift", found


def test_the_keywords_an_adapter_passes_to_its_base_constructor_must_bind(tmp_path: Path) -> None:
    # DeepSeek-V3: initialize_vllm_model builds cls(..., vllm_context=True, ...) and the
    # adapter's __init__ passes everything on to a base __init__ that has no vllm_context.
    generator = edit(
        GENERATOR,
        ("    decode_input_update_contract = 1\n",
         "    decode_input_update_contract = 1\n\n"
         "    def __init__(\n"
         "        self, hf_config=None, mesh_device=None, model_path=None, tokenizer=None\n"
         "    ):\n"
         "        ...\n"),
    )  # fmt: skip
    adapter = edit(
        ADAPTER,
        ("        optimizations=None,\n    ):\n        ...",
         "        optimizations=None,\n    ):\n"
         "        model = cls(hf_config=hf_config, mesh_device=mesh_device, vllm_context=True)\n"
         "        return model\n\n"
         "    def __init__(self, *args, **kwargs):\n"
         "        super().__init__(*args, **kwargs)"),
    )  # fmt: skip
    found = run(tree(tmp_path, generator=generator, adapter=adapter))["initialize_vllm_model"]
    assert found.status == "broken", found
    assert "builds the model" in found.detail
    assert "unexpected argument 'vllm_context'" in found.detail
    assert "(models.demo.tt.generator:Generator).__init__(" in found.detail
    # A base that takes it: binds.
    ok = edit(generator, ("model_path=None, tokenizer=None", "model_path=None, vllm_context=False"))
    found = run(tree(tmp_path, generator=ok, adapter=adapter))["initialize_vllm_model"]
    assert found.status == "drift", found
    # Positional arguments count too: three into a two-parameter __init__.
    three = edit(adapter, ("cls(hf_config=hf_config, mesh_device=mesh_device, vllm_context=True)",
                           "cls(hf_config, mesh_device, 1, 2, 3)"))  # fmt: skip
    found = run(tree(tmp_path, generator=generator, adapter=three))["initialize_vllm_model"]
    assert found.status == "broken" and "positional" in found.detail, found


def test_content_the_adapter_takes_in_kwargs_and_never_reads_is_dropped(tmp_path: Path) -> None:
    # Mistral 3: prefill_forward(*args, **kwargs) reads tokens, prompt_lens and
    # kwargs.get("images"); the plugin sends the images as pixel_values / image_sizes and, with
    # device sampling, sampling_params: nothing reads them.
    adapter = "from loguru import logger\n" + edit(
        ADAPTER,
        ("    def prefill_forward(self, *args, **kwargs):\n"
         "        return super().prefill_forward_text(*args, **kwargs)",
         "    def prefill_forward(self, *args, **kwargs):\n"
         "        tokens = kwargs['tokens']\n"
         "        prompt_lens = kwargs['prompt_lens']\n"
         "        images = kwargs.get('images', None)\n"
         "        logger.info(f'prefill kwargs: {kwargs.keys()}')\n"
         "        return super().prefill_forward_text(\n"
         "            tokens=tokens, page_table=kwargs.get('page_table'),\n"
         "            kv_cache=kwargs.get('kv_cache'), prompt_lens=prompt_lens,\n"
         "        )"),
    )  # fmt: skip
    mm = {"multimodal_kwargs": ["pixel_values", "image_sizes"]}
    found = run(tree(tmp_path, adapter=adapter), **mm)["prefill_forward"]
    assert found.status == "dropped", found
    assert found in failures([found])
    assert "'pixel_values', 'image_sizes'" in found.detail
    assert "'sampling_params'" in found.detail
    assert "it reads 'images', which the plugin does not send" in found.detail
    # Not content: enable_trace / start_pos / empty_slots unread is not a finding.
    assert "'enable_trace'" not in found.detail
    # Passing **kwargs on whole, or reading the keys, is not dropping them.
    whole = edit(adapter, ("        return super().prefill_forward_text(\n",
                           "        self.model.prefill(**kwargs)\n"
                           "        return super().prefill_forward_text(\n"))  # fmt: skip
    found = run(tree(tmp_path / "b", adapter=whole), **mm)["prefill_forward"]
    assert found.status == "drift", found
    # A key read with kwargs["key"] that the plugin does not send is a KeyError.
    keyerror = edit(adapter, ("kwargs['prompt_lens']", "kwargs['lengths']"))
    found = run(tree(tmp_path / "c", adapter=keyerror), **mm)["prefill_forward"]
    assert found.status == "broken", found
    assert "reads kwargs['lengths'], which the plugin does not send (a KeyError)" in found.detail


def test_capabilities_built_from_the_environment_are_checked_for_each_value(
    tmp_path: Path,
) -> None:
    # Qwen3.6 / Gemma 4: model_capabilities read os.environ. The device-sampled calls the class
    # declares under one value must be checked too (they were read "as defaults", never).
    generator = edit(GENERATOR, ("read_from_device=True, sampling_params=None, ",
                                 "read_from_device=True, "))  # fmt: skip
    adapter = edit(
        ADAPTER,
        ("from models.demo.tt.generator import Generator",
         "import os\n\nfrom models.demo.tt.generator import Generator\n\n"
         "_ON_DEVICE = os.environ.get('DEMO_SAMPLE_ON_DEVICE', '0').lower() in ('1', 'true')"),
        ('model_capabilities = {"supports_sample_on_device": True}',
         'model_capabilities = {"supports_prefix_caching": False,\n'
         '                          "supports_sample_on_device": _ON_DEVICE}'),
    )  # fmt: skip
    found = run(tree(tmp_path, generator=generator, adapter=adapter))
    decode = found["decode_forward"]
    assert decode.status == "broken", decode
    assert "[DEMO_SAMPLE_ON_DEVICE=1]" in decode.detail or "[DEMO_SAMPLE_ON_DEVICE=true]" in (
        decode.detail
    )
    assert "unexpected argument 'sampling_params'" in decode.detail
    assert "DEMO_SAMPLE_ON_DEVICE unset" in decode.detail  # the other variant, named
    facts = found["(class facts)"]
    assert "read the environment (DEMO_SAMPLE_ON_DEVICE)" in facts.detail
    # Capabilities the checker cannot evaluate: reported unknown, both values checked.
    opaque = edit(adapter, ("_ON_DEVICE = os.environ", "_ON_DEVICE = load_caps(os.environ"),
                  ("in ('1', 'true')", "in ('1', 'true'))"))  # fmt: skip
    opaque = opaque.replace("import os\n", "import os\n\nfrom somewhere import load_caps\n")
    found = run(tree(tmp_path / "b", generator=generator, adapter=opaque))
    assert found["decode_forward"].status == "broken", found["decode_forward"]
    assert "supports_sample_on_device unknown: checked True" in found["decode_forward"].detail
    assert "cannot evaluate model_capabilities['supports_sample_on_device']" in (
        found["(class facts)"].detail
    )


def test_a_class_with_block_hooks_but_no_output_tokens_per_step_is_reported(
    tmp_path: Path,
) -> None:
    # DiffusionGemma @ 00ca55d7: the block-output hooks, 256-token blocks returned, no
    # output_tokens_per_step: the plugin plans a token model and keeps one column.
    adapter = edit(
        ADAPTER,
        ("    def allocate_kv_cache(",
         "    def release_request(self, slot): ...\n\n"
         "    def release_persistent_capture(self): ...\n\n"
         "    def allocate_kv_cache("),
    )  # fmt: skip
    found = run(tree(tmp_path, adapter=adapter))
    block = found["output_tokens_per_step"]
    assert block.status == "broken" and block in failures([block])
    assert "plans a token model" in block.detail
    # Declared: the release hooks are planned and bound instead.
    declared = edit(
        adapter,
        ('{"supports_sample_on_device": True}',
         '{"supports_sample_on_device": True, "output_tokens_per_step": 256}'),
    )  # fmt: skip
    found = run(tree(tmp_path / "b", adapter=declared), block_output=True)
    assert "output_tokens_per_step" not in found
    assert found["release_request"].status in ("ok", "drift")


def test_a_class_level_method_alias_is_the_method(tmp_path: Path) -> None:
    # Llama 3.1 8B QB2: `allocate_kv_cache = allocate_vllm_kv_cache` in the class body.
    adapter = edit(
        ADAPTER,
        ("    def allocate_kv_cache(self, kv_cache_shape, dtype, num_layers):\n        ...",
         "    def allocate_vllm_kv_cache(self, kv_cache_shape, dtype, num_layers):\n        ...\n\n"
         "    allocate_kv_cache = allocate_vllm_kv_cache"),
    )  # fmt: skip
    found = run(tree(tmp_path, adapter=adapter))["allocate_kv_cache"]
    assert found.status == "drift", found  # found and bound, not "missing"
    assert "(kv_cache_shape, dtype, num_layers)" in found.detail
    # ... and an alias of something that does not take the call still breaks.
    bad = edit(adapter, ("allocate_vllm_kv_cache(self, kv_cache_shape, dtype, num_layers)",
                         "allocate_vllm_kv_cache(self, kv_cache_shape)"))  # fmt: skip
    found = run(tree(tmp_path / "b", adapter=bad))["allocate_kv_cache"]
    assert found.status == "broken", found


def test_penalty_histories_are_planned_only_for_a_class_that_takes_penalties_on_device(
    tmp_path: Path,
) -> None:
    # A class without supports_device_penalties gets penalty batches host-sampled: the plugin
    # never sends prompt_tokens / output_tokens, so a decode that cannot take them binds.
    generator = edit(GENERATOR, ("prompt_tokens=None, output_tokens=None,\n        ", ""))
    found = run(tree(tmp_path, generator=generator))["decode_forward"]
    assert found.status == "broken" and "unexpected argument 'prompt_tokens'" in found.detail
    adapter = edit(
        ADAPTER,
        ('{"supports_sample_on_device": True}',
         '{"supports_sample_on_device": True, "supports_device_penalties": False}'),
    )  # fmt: skip
    found = run(tree(tmp_path / "b", generator=generator, adapter=adapter))["decode_forward"]
    assert found.status == "drift", found


def test_a_call_a_base_from_outside_tt_metal_may_define_is_unresolved_not_missing(
    tmp_path: Path,
) -> None:
    adapter = edit(
        ADAPTER,
        ("from models.demo.tt.generator import Generator",
         "from models.demo.tt.generator import Generator\nimport torch"),
        ("class DemoForCausalLM(Generator):", "class DemoForCausalLM(Generator, torch.nn.Module):"),
        ("    def decode_forward(self, *args, **kwargs):\n",
         "    def decode_forward(self, *args, **kwargs):\n        self.eval()\n"),
    )  # fmt: skip
    found = run(tree(tmp_path, adapter=adapter))["decode_forward"]
    assert found.status == "unresolved", found
    assert "the base torch.nn:Module from outside tt-metal may define it" in found.detail
    assert found in failures([found])
    # vLLM's interface mixins define nothing the adapter calls on itself: still missing.
    mixin = edit(
        adapter,
        ("import torch", "from vllm.model_executor.models.interfaces import SupportsMultiModal"),
        ("torch.nn.Module", "SupportsMultiModal"),
    )
    found = run(tree(tmp_path / "b", adapter=mixin))["decode_forward"]
    assert found.status == "missing", found


# --- issue #45, second red team: false binds and false alarms --------------------------------


def test_a_module_that_does_not_parse_or_decode_fails_naming_file_and_line(
    tmp_path: Path,
) -> None:
    # The adapter module does not parse: it used to vanish as "no_class" (exit 0).
    broken = run(tree(tmp_path / "a", adapter=ADAPTER + "\ndef oops(:\n"))
    found = broken["(source)"]
    assert found.status == "unreadable" and found in failures([found]), found
    assert "models/demo/tt/generator_vllm.py:" in found.detail and "does not parse" in found.detail
    # An invalid byte in a string of the base: the import fails.
    root = tree(tmp_path / "b")
    base = root / "models/demo/tt/generator.py"
    original = base.read_bytes()
    base.write_bytes(original + b'\nNAME = "caf\xe9"\n')
    found = run(root)["(source)"]
    assert found.status == "unreadable" and "generator.py:" in found.detail, found
    assert "does not decode" in found.detail
    # ... but a PEP 263 coding line makes the same byte valid Python.
    base.write_bytes(b"# -*- coding: latin-1 -*-\n" + base.read_bytes())
    assert failures(list(run(root).values())) == []
    # In a comment, on the first line or later, the import skips it undecoded (CPython 3.6 to
    # 3.13): the module binds as before.
    for bad in (b"# caf\xe9\n" + original, original + b"\n# caf\xe9\n"):
        base.write_bytes(bad)
        assert failures(list(run(root).values())) == []


DECODE = (
    "    def decode_forward(self, *args, **kwargs):\n"
    "        return super().decode_forward(*args, **kwargs)"
)


def decode_as(tmp_path: Path, body: str, head: str = "", generator: str = GENERATOR) -> Finding:
    """The adapter's decode_forward replaced by ``body`` (``head``: module-level code)."""
    cls = "\n\nclass DemoForCausalLM"
    adapter = edit(ADAPTER, (DECODE, body), (cls, f"\n{head}{cls}"))
    return run(tree(tmp_path, generator=generator, adapter=adapter))["decode_forward"]


def test_an_explicit_base_call_with_self_is_a_forward(tmp_path: Path) -> None:
    # `Generator.decode_forward(self, *args, **kwargs)` is looked up on Generator's MRO.
    generator = edit(GENERATOR, ("enable_trace=True,\n        read_from", "\n        read_from"))
    body = (
        "    def decode_forward(self, *args, **kwargs):\n"
        "        return Generator.decode_forward(self, *args, **kwargs)"
    )
    found = decode_as(tmp_path / "a", body, generator=generator)
    assert found.status == "broken" and "unexpected argument 'enable_trace'" in found.detail, found
    assert decode_as(tmp_path / "b", body).status == "drift"  # binds to the unchanged base


def test_arguments_a_forward_adds_meet_what_the_plugin_sends(tmp_path: Path) -> None:
    # A keyword given by name and in **kwargs: Python's "got multiple values" TypeError.
    found = decode_as(
        tmp_path / "a",
        "    def decode_forward(self, *args, **kwargs):\n"
        "        return super().decode_forward(*args, enable_trace=False, **kwargs)",
    )
    assert found.status == "broken" and "'enable_trace' twice" in found.detail, found
    # functools.partial(super().m, None)(*args, **kwargs): the None goes first.
    found = decode_as(
        tmp_path / "b",
        "    def decode_forward(self, *args, **kwargs):\n"
        "        return functools.partial(super().decode_forward, None)(*args, **kwargs)",
        head="import functools",
    )
    assert found.status == "broken" and "given positionally and by name" in found.detail, found
    # A checkout helper handed super().m: its body is read, and adds a None.
    helper = "def run_bucketed(fn, *args, **kwargs):\n    return fn(None, *args, **kwargs)\n"
    handed = (
        "    def decode_forward(self, *args, **kwargs):\n"
        "        return run_bucketed(super().decode_forward, *args, **kwargs)"
    )
    found = decode_as(tmp_path / "c", handed, head=helper)
    assert found.status == "broken" and "given positionally and by name" in found.detail, found
    # ... a helper the checker cannot read is unresolved, never ok.
    found = decode_as(tmp_path / "d", handed, head="from elsewhere import run_bucketed")
    assert found.status == "unresolved" and "run_bucketed is not read" in found.detail, found


def test_calls_written_other_ways_are_followed_or_unresolved(tmp_path: Path) -> None:
    # getattr(super(), "literal")(...) is super().literal(...).
    found = decode_as(
        tmp_path / "a",
        "    def decode_forward(self, *args, **kwargs):\n"
        '        return getattr(super(), "decode_forward_text")(*args, **kwargs)',
    )
    assert found.status == "missing" and "decode_forward_text" in found.detail, found
    # A local bound to a method, then called.
    found = decode_as(
        tmp_path / "b",
        DECODE.replace("return super()", "out = super()")
        + "\n        sampler = self.sample_decode_on_device\n        return sampler(out)",
    )
    assert found.status == "missing" and "sample_decode_on_device" in found.detail, found
    # The instance handed to a module function: its calls on it are not seen.
    found = decode_as(
        tmp_path / "c",
        DECODE.replace("return super()", "out = super()") + "\n        return _finish(self, out)",
        head="def _finish(model, out):\n    return model.sample_decode_on_device(out)\n",
    )
    assert found.status == "unresolved" and "hands self to _finish" in found.detail, found
    # A decorator may change the signature Python calls.
    found = decode_as(tmp_path / "d", "    @_trace\n" + DECODE, head="def _trace(fn): ...\n")
    assert found.status == "unresolved" and "decorated with @_trace" in found.detail, found
    # A duplicate def: Python keeps the last.
    found = decode_as(
        tmp_path / "e",
        DECODE + "\n\n    def decode_forward(self, tokens, page_table, kv_cache):\n        pass",
    )
    assert found.status == "broken" and "unexpected argument 'start_pos'" in found.detail, found


def test_content_popped_or_deleted_without_use_is_dropped(tmp_path: Path) -> None:
    pop = DECODE.replace(
        "        return", '        kwargs.pop("sampling_params", None)\n        return'
    )
    found = decode_as(tmp_path / "a", pop)
    assert found.status == "dropped" and "removes 'sampling_params'" in found.detail, found
    # An unconditional del of a keyword the plugin does not always send: a KeyError.
    delete = DECODE.replace(
        "        return", '        del kwargs["sampling_params"]\n        return'
    )
    found = decode_as(tmp_path / "b", delete)
    assert found.status == "broken" and "kwargs['sampling_params']" in found.detail, found
    # A popped value that is used is read.
    used = DECODE.replace(
        "super().decode_forward(*args, **kwargs)",
        'super().decode_forward(*args, sampling_params=kwargs.pop("sampling_params", None), '
        "**kwargs)",
    )
    assert decode_as(tmp_path / "c", used).status == "drift"


def test_capabilities_the_plugin_refuses_or_cannot_know_are_not_bound_silently(
    tmp_path: Path,
) -> None:
    caps = '    model_capabilities = {"supports_sample_on_device": True}'
    prop = "    @property\n    def model_capabilities(self):\n        return {}"
    found = run(tree(tmp_path / "a", adapter=edit(ADAPTER, (caps, prop))))["model_capabilities"]
    assert found.status == "broken" and "CapabilityError" in found.detail, found
    listed = run(
        tree(tmp_path / "b", adapter=edit(ADAPTER, (caps, "    model_capabilities = [1]")))
    )
    assert listed["model_capabilities"].status == "broken"
    # Changed after the class body: not known here, both sampling variants are checked.
    after = edit(ADAPTER, (caps, "    model_capabilities = {}")) + (
        '\nDemoForCausalLM.model_capabilities["supports_sample_on_device"] = True\n'
    )
    found = run(tree(tmp_path / "c", adapter=after))["(class facts)"]
    assert "checked False" in found.detail and "checked True" in found.detail, found


def test_cls_built_with_a_keyword_mapping_binds_its_keys_or_is_unresolved(tmp_path: Path) -> None:
    # No __init__ takes vllm_context (object's takes none): cls(**kw) must not slip through.
    init = "        optimizations=None,\n    ):\n        ..."

    def built(root: Path, body: str) -> Finding:
        adapter = edit(ADAPTER, (init, "        optimizations=None,\n    ):\n" + body))
        adapter += "\n\ndef make_kwargs():\n    return {}\n"  # a name the module binds
        return run(tree(root, adapter=adapter))["initialize_vllm_model"]

    found = built(tmp_path / "a", "        kw = dict(vllm_context=True)\n        return cls(**kw)")
    assert found.status == "broken", found
    found = built(tmp_path / "b", '        return cls(**{"vllm_context": True})')
    assert found.status == "broken", found
    found = built(tmp_path / "c", "        return cls(**make_kwargs())")
    assert found.status == "unresolved" and "cannot count" in found.detail, found


def test_bases_written_other_ways_resolve_and_composition_is_unresolved(tmp_path: Path) -> None:
    imp = "from models.demo.tt.generator import Generator"
    cases = {
        # re-exported with `from ... import *` (twice)
        "star": (imp, "from models.demo.tt.common import *"),
        # an optional import without a fallback: the try branch is what the tree has (an
        # `except` that binds the base too is unresolved: test_contract_parity_round4_flow)
        "try": (imp, f"try:\n    {imp}\nexcept ImportError:\n    pass"),
    }
    for name, change in cases.items():
        root = tree(tmp_path / name, adapter=edit(ADAPTER, change))
        (root / "models/demo/tt/common.py").write_text("from models.demo.tt.generator import *\n")
        assert failures(list(run(root).values())) == [], name
    # a module-level alias of the base class
    generator = (
        edit(GENERATOR, ("class Generator:", "class GeneratorV2:")) + "\nGenerator = GeneratorV2\n"
    )
    assert failures(list(run(tree(tmp_path / "alias", generator=generator)).values())) == []
    # __getattr__ composition: a method not found may be delegated, so not "missing"
    adapter = edit(
        ADAPTER,
        ("class DemoForCausalLM(Generator):", "class DemoForCausalLM:"),
        (DECODE, "    def __getattr__(self, name):\n        return getattr(self.generator, name)"),
        ("return super().prefill_forward_text(", "return self.generator.prefill_forward_text("),
    )
    found = run(tree(tmp_path / "getattr", adapter=adapter))["decode_forward"]
    assert found.status == "unresolved" and "__getattr__" in found.detail, found


def test_arguments_handed_to_an_object_the_instance_holds_are_unresolved(tmp_path: Path) -> None:
    # The executor-backed generators (models/common/models): a (*args, **kwargs) method that hands
    # everything to self.executor binds trivially, but what reaches the executor is not checked.
    adapter = edit(
        ADAPTER,
        ("return super().decode_forward(*args, **kwargs)",
         "return self.executor.decode_forward(*args, **kwargs)"),
    )  # fmt: skip
    found = run(tree(tmp_path / "a", adapter=adapter))["decode_forward"]
    assert found.status == "unresolved", found
    assert "self.executor.decode_forward(...) (composition)" in found.detail
    # A helper of the instance's own is followed as before, and other calls are not composition.
    own = "from loguru import logger as log\n" + edit(
        ADAPTER,
        ("return super().decode_forward(*args, **kwargs)",
         "log.info(*args)\n        return super().decode_forward(*args, **kwargs)"),
    )  # fmt: skip
    assert run(tree(tmp_path / "b", adapter=own))["decode_forward"].status == "drift"


def test_an_adapter_importing_plugin_internals_this_plugin_lacks_is_broken(tmp_path: Path) -> None:
    # Gemma 4 31B QB2 imports vllm_tt_plugin.whole_prompt_cache inside a method the plugin calls:
    # an ImportError on a TT host serving with this plugin.
    def adapter(line: str) -> str:
        return edit(
            ADAPTER,
            ("return super().decode_forward(*args, **kwargs)",
             f"{line}\n        return super().decode_forward(*args, **kwargs)"),
        )  # fmt: skip

    found = run(
        tree(tmp_path / "a", adapter=adapter("from vllm_tt_plugin.whole_prompt_cache import Spec"))
    )["decode_forward"]
    assert found.status == "broken", found
    assert "imports vllm_tt_plugin.whole_prompt_cache (Spec), which this plugin does not ship" in (
        found.detail
    )
    # A name the plugin's module lacks is named; what it ships binds.
    lacks = adapter("from vllm_tt_plugin.model_registry import tt_arch, NoSuchName")
    found = run(tree(tmp_path / "b", adapter=lacks))["decode_forward"]
    assert found.status == "broken" and "NoSuchName from vllm_tt_plugin.model_registry" in (
        found.detail
    )
    ships = adapter("from vllm_tt_plugin.model_registry import tt_arch")
    assert run(tree(tmp_path / "c", adapter=ships))["decode_forward"].status == "drift"
