"""The parity checker against round 5's fact and MRO attacks (rt45e): class facts the plugin
refuses or reads otherwise than the checker did, bases the checker cannot read, stub and
``None`` hooks, and the instance ``initialize_vllm_model`` really returns.

Each case is one red-team tree reduced to a one-module adapter (the third red team's ``BASE``,
edited); the checker must report the status named, with a reason naming the offender, or bind
(the controls). Python's and the plugin's behaviour for each was checked on the red team's tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_redteam import (
    ADAPTER,
    BASE,
    COMMIT,
    CONTRACT,
    DECODE,
    DECODE_V0,
    DECODE_V1,
    INIT_BODY,
    OTHER,
    TARGET,
    USES,
    edit,
    run,
)
from vllm_tt_plugin.contract.parity import failures
from vllm_tt_plugin.contract.skeleton import write_skeletons

CAPS = '"supports_sample_on_device": True, "supports_device_penalties": False'
PENALTIES = '"supports_device_penalties": False'
V0_DECODE = f"    def decode_forward({DECODE_V0}):\n        return sampling_params\n"
CLASS = "class DemoForCausalLM:"
# A base in the checkout whose decode takes everything (the adapter's own decode removed).
DEMO_BASE = {OTHER: "class DemoBase:\n" + USES}
IMPORT_BASE = "from models.demo.tt.other import DemoBase\n"
PASS_THROUGH = (
    "    def decode_forward(self, *args, **kwargs):\n"
    "        return super().decode_forward(*args, **kwargs)\n"
)
HOOKS = (
    "    def read_decode_output(self, output, async_read=False):\n        return output, []\n\n"
    "    def process_decode_output_host(self, output, is_tokens=False):\n        return output\n"
)

PROTOCOL = (
    "from typing import Any, Protocol\n\n\nclass DemoInterface(Protocol):\n"
    "    def read_decode_output(self, output, async_read: bool = False) -> Any: ...\n\n"
    "    def process_decode_output_host(self, output, is_tokens: bool = False) -> Any:\n"
    '        """Host tensors of a decode."""\n'
)


def based(bases: str, imports: str, decode: str = "") -> str:
    """The adapter deriving from ``bases``, its own decode replaced by ``decode``."""
    return imports + edit(BASE, (CLASS, f"class DemoForCausalLM({bases}):"), (DECODE, decode))


def caps(*changes: tuple[str, str]) -> str:
    return edit(BASE, *changes)


def v0_class(contract: str) -> str:
    """A version-0 decode (reset_batch, no reload commands) under ``contract``."""
    text = edit(BASE, (CONTRACT, contract))
    start = text.index("    def decode_forward(")
    return text[:start] + V0_DECODE


def required_v1(contract: str) -> str:
    """A decode that requires the four reload commands (binds only as version 1)."""
    optional = (
        "reload_inputs=True, reload_page_table=True, reload_sampling_params=True, "
        "reset_sampling_state=False"
    )
    required = "reload_inputs, reload_page_table, reload_sampling_params, reset_sampling_state"
    return edit(BASE, (CONTRACT, contract), (optional, required))


# name -> (the tree's modules, {method: status}, a text the first method's reason must hold)
Case = tuple[dict[str, str | bytes], dict[str, str], str]
REFUSED: dict[str, Case] = {
    # A04 / A12: a flag of the wrong type: the plugin's CapabilityError at launch.
    "a04_flag_int": (
        {ADAPTER: caps(('"supports_sample_on_device": True', '"supports_sample_on_device": 1'))},
        {"model_capabilities": "broken"},
        "['supports_sample_on_device'] must be a bool, got 1",
    ),
    "a12_flag_str": (
        {
            ADAPTER: caps(
                ('"supports_sample_on_device": True', '"supports_sample_on_device": "True"')
            )
        },
        {"model_capabilities": "broken"},
        "must be a bool, got 'True'",
    ),
    # A05b: a read-only mapping is not a dict to the plugin.
    "a05b_mapping_proxy": (
        {ADAPTER: "import types\n" + caps((f"{{{CAPS}}}", f"types.MappingProxyType({{{CAPS}}})"))},
        {"model_capabilities": "broken"},
        "must be a dict, got mappingproxy",
    ),
    # A31 / A31b: decode_contract_version raises TypeError on these.
    "a31_contract_float": (
        {ADAPTER: edit(BASE, (CONTRACT, "    decode_input_update_contract = 1.0\n"))},
        {"decode_input_update_contract": "broken"},
        "must be a non-negative integer, got 1.0",
    ),
    "a31b_contract_negative": (
        {ADAPTER: edit(BASE, (CONTRACT, "    decode_input_update_contract = -1\n"))},
        {"decode_input_update_contract": "broken"},
        "got -1",
    ),
    "a31c_contract_str": (
        {ADAPTER: edit(BASE, (CONTRACT, '    decode_input_update_contract = "1"\n'))},
        {"decode_input_update_contract": "broken"},
        "got '1'",
    ),
    # D02: the class-body constant shadows the module's: version 1, the v0 decode breaks.
    "d02_class_constant_shadows": (
        {
            ADAPTER: "_RELOAD = 0\n"
            + v0_class("    _RELOAD = 1\n    decode_input_update_contract = _RELOAD\n")
        },
        {"decode_forward": "broken"},
        "reload_inputs",
    ),
    # A30: True is version 1 to the plugin (isinstance(True, int)): the v0 decode breaks.
    "a30_contract_true_v0_decode": (
        {ADAPTER: v0_class("    decode_input_update_contract = True\n")},
        {"decode_forward": "broken"},
        "reload_inputs",
    ),
    # A11e: device penalties on under TT_PEN=1: the histories go into an unread **kwargs.
    "a11e_penalties_from_env": (
        {
            ADAPTER: "import os\n"
            + caps((PENALTIES, '"supports_device_penalties": os.environ.get("TT_PEN", "0") == "1"'))
        },
        {"decode_forward": "dropped"},
        "[TT_PEN=1]",
    ),
    # A11: with the variable set the flag is a str: CapabilityError in that variant.
    "a11_penalties_getenv_str": (
        {
            ADAPTER: "import os\n"
            + caps((PENALTIES, '"supports_device_penalties": os.getenv("TT_PEN", False)'))
        },
        {"model_capabilities": "broken"},
        "[TT_PEN=1] ",
    ),
    # Y03: facts of a base from outside tt-metal are unknown: version 1 breaks the v0 decode.
    "y03_outside_base_facts": (
        {
            ADAPTER: "from tt_transformers.generator import GeneratorBase\n"
            + v0_class("").replace(CLASS, "class DemoForCausalLM(GeneratorBase):")
        },
        {"decode_forward": "broken", "(class facts)": "facts"},
        "checked 1",
    ),
    # Y04: a tracing mixin from outside tt-metal comes first: it may define decode_forward.
    "y04_unreadable_base_first": (
        {
            **DEMO_BASE,
            ADAPTER: based(
                "DecodeTraceMixin, DemoBase",
                "from tt_transformers.tracing import DecodeTraceMixin\n" + IMPORT_BASE,
            ),
        },
        {"decode_forward": "unresolved"},
        "the base tt_transformers.tracing:DecodeTraceMixin is not read",
    ),
    # Y04: the same with a tt-metal base the checkout lacks.
    "y04b_missing_models_base_first": (
        {
            **DEMO_BASE,
            ADAPTER: based(
                "TraceMixin, DemoBase", "from models.gone.tracing import TraceMixin\n" + IMPORT_BASE
            ),
        },
        {"decode_forward": "unresolved"},
        "the base TraceMixin (models.gone.tracing) is not in this checkout",
    ),
    # T07b is held as unresolved; N02: object.__init__ takes no keywords.
    "n02_object_init_keywords": (
        {
            ADAPTER: edit(
                BASE,
                (
                    "    def __init__(self, generator):\n        self.generator = generator\n",
                    "    def __init__(self, generator, **kwargs):\n"
                    "        super().__init__(**kwargs)\n",
                ),
                (INIT_BODY, "        return cls(None, mesh_device=mesh_device)"),
            )
        },
        {"initialize_vllm_model": "broken"},
        "object",
    ),
    "t07b_base_from_a_call": (
        {
            OTHER: DEMO_BASE[OTHER] + "\n\ndef with_trace(cls):\n    return cls\n",
            ADAPTER: based(
                "with_trace(DemoBase)",
                IMPORT_BASE + "from models.demo.tt.other import with_trace\n",
                PASS_THROUGH,
            ),
        },
        {"decode_forward": "unresolved"},
        "with_trace(DemoBase)",
    ),
    # P03: an explicit typing.Protocol base's stubs are callable: read-back planned, None back.
    "p03_protocol_stub_hooks": (
        {
            OTHER: PROTOCOL,
            ADAPTER: based(
                "DemoInterface", "from models.demo.tt.other import DemoInterface\n", DECODE
            ),
        },
        {"read_decode_output": "broken", "process_decode_output_host": "broken"},
        "stub of the typing Protocol DemoInterface",
    ),
    # A20: a multi-device subclass returned by the load: its decode takes no reload commands.
    "a20_returns_a_subclass": (
        {
            ADAPTER: edit(
                BASE,
                (
                    INIT_BODY,
                    (
                        "        if mesh_device.get_num_devices() > 1:\n"
                        "            return _MeshDemo(None)\n        return cls(None)"
                    ),
                ),
            )
            + f"\n\nclass _MeshDemo(DemoForCausalLM):\n{V0_DECODE}"
        },
        {"(returned model)": "broken"},
        "returns a _MeshDemo",
    ),
    # A20b: the load returns the generator itself (a class outside the checkout).
    "a20b_returns_the_generator": (
        {
            ADAPTER: "from models.gone.generator import DemoGenerator\n"
            + edit(BASE, (INIT_BODY, "        return DemoGenerator(hf_config)"))
        },
        {"(returned model)": "unresolved"},
        "returns an object the checker does not follow",
    ),
}
CONTROLS: dict[str, dict[str, str | bytes]] = {
    "base": {ADAPTER: BASE},
    # D01: the class-body constant is 1: version 1, the v1 decode binds.
    "d01_class_constant": {
        ADAPTER: required_v1("    _RELOAD = 1\n    decode_input_update_contract = _RELOAD\n")
    },
    # A30: True is version 1: the v1 decode (required reload commands) binds.
    "a30_contract_true": {ADAPTER: required_v1("    decode_input_update_contract = True\n")},
    # A module constant read after a class-level one of the same name defined below it.
    "class_constant_after_use": {
        ADAPTER: "_RELOAD = 1\n"
        + required_v1("    decode_input_update_contract = _RELOAD\n    _RELOAD = 0\n")
    },
    "empty_mapping_proxy": {
        ADAPTER: "from types import MappingProxyType\n"
        + caps((f"{{{CAPS}}}", "MappingProxyType({})")).replace(
            "        return sampling_params\n", "        return 1\n"
        )
    },
    # Penalties from the environment, the histories read: every variant binds.
    "penalties_env_histories_read": {
        ADAPTER: "import os\n"
        + caps(
            (PENALTIES, '"supports_device_penalties": os.environ.get("TT_PEN", "0") == "1"'),
            (
                DECODE,
                f"    def decode_forward({DECODE_V1}):\n        return [sampling_params, "
                "kwargs.get('prompt_tokens'), kwargs.get('output_tokens')]\n",
            ),
        )
    },
    # A library base first (torch defines none of the plugin's names): the base's decode binds.
    "library_base_first": {
        **DEMO_BASE,
        ADAPTER: based("nn.Module, DemoBase", "from torch import nn\n" + IMPORT_BASE),
    },
    # N04: a cooperative super().__init__(**kwargs) with nothing left: object.__init__ binds.
    "n04_cooperative_init": {
        ADAPTER: edit(
            BASE,
            (
                "    def __init__(self, generator):\n        self.generator = generator\n",
                "    def __init__(self, generator, **kwargs):\n        super().__init__(**kwargs)\n"
                "        self.generator = generator\n",
            ),
        )
    },
    # F03: inherited read-back hooks switched off with None: absent, host tensors expected.
    "f03_hooks_none": {
        OTHER: "class DemoBase:\n" + HOOKS,
        ADAPTER: based("DemoBase", IMPORT_BASE, DECODE).replace(
            "    decode_input_update_contract = 1\n",
            "    decode_input_update_contract = 1\n    read_decode_output = None\n"
            "    process_decode_output_host = None\n",
        ),
    },
    # F04: an inherited get_kv_cache_spec switched off with None: not hybrid, no tables sent.
    "f04_kv_cache_spec_none": {
        OTHER: "class DemoBase:\n    @classmethod\n    def get_kv_cache_spec(cls, vllm_config):\n"
        "        return {}\n",
        ADAPTER: based("DemoBase", IMPORT_BASE, DECODE).replace(
            "    decode_input_update_contract = 1\n",
            "    decode_input_update_contract = 1\n    get_kv_cache_spec = None\n",
        ),
    },
    # A Protocol whose hooks have bodies: inherited like any base's methods, they bind.
    "protocol_with_bodies": {
        OTHER: PROTOCOL.replace(": ...\n", ":\n        return output, []\n")
        + "        return output\n",
        ADAPTER: based("DemoInterface", "from models.demo.tt.other import DemoInterface\n", DECODE),
    },
    # The served class, built into a local that is returned, or through the base's load.
    "load_returns_a_local": {
        ADAPTER: edit(BASE, (INIT_BODY, "        model = cls(None)\n        return model"))
    },
    "load_through_super": {
        ADAPTER: edit(BASE, (CLASS, "class _Base:"))
        + "\n\nclass DemoForCausalLM(_Base):\n    @classmethod\n    def initialize_vllm_model("
        "cls, hf_config, mesh_device, max_batch_size, **kwargs):\n"
        "        return super().initialize_vllm_model(hf_config, mesh_device, max_batch_size, "
        "**kwargs)\n"
    },
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_attack_is_refused_naming_the_offender(tmp_path: Path, name: str) -> None:
    files, expected, reason = REFUSED[name]
    found = run(tmp_path, files)
    got = {m: found[m].status if m in found else "(no finding)" for m in expected}
    assert got == expected, [found[m] for m in expected if m in found]
    first = found[next(iter(expected))]
    assert reason in first.detail, first
    assert failures(list(found.values()))


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_control_python_serves_binds(tmp_path: Path, name: str) -> None:
    found = run(tmp_path, CONTROLS[name])
    assert failures(list(found.values())) == [], failures(list(found.values()))
    assert found["decode_forward"].status in ("ok", "drift"), found["decode_forward"]


def test_every_env_variant_of_a_capability_is_checked(tmp_path: Path) -> None:
    files, _, _ = REFUSED["a11e_penalties_from_env"]
    facts = run(tmp_path, files)["(class facts)"].detail
    # 0 plans as unset (penalties off): one variant of each outcome is listed.
    assert "[TT_PEN unset]" in facts and "[TT_PEN=1]" in facts, facts


CASES = {**{n: files for n, (files, _, _) in REFUSED.items()}, **CONTROLS}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_skeleton_of_an_attack_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    tree = run(tmp_path / "tree", CASES[name])
    write_skeletons(tmp_path / "tree", tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    skeleton = run(tmp_path / "skel", {})
    assert {m: f.status for m, f in skeleton.items()} == {m: f.status for m, f in tree.items()}
