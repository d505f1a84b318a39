"""The parity checker against the third red team's trees (issue #45): module-level and class-level
constructs the checker once read as binding (a false pass) or as failing (a false alarm).

Each case is the essence of one red-team tree: a one-class adapter module (no base), edited; the
checker must report the failing status named (or bind: the controls). Python's own behaviour
for each case was checked by importing the tree and making the plugin's calls.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from vllm_tt_plugin.contract.parity import CheckoutReader, Finding, check, failures
from vllm_tt_plugin.contract.signatures import FamilyProfile, profiles_from_mapping
from vllm_tt_plugin.contract.skeleton import write_skeletons

TARGET = "models.demo.tt.generator_vllm:DemoForCausalLM"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
ADAPTER = "models/demo/tt/generator_vllm.py"
OTHER = "models/demo/tt/other.py"
DECODE_V1 = (
    "self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False, "
    "read_from_device=True, sampling_params=None, reload_inputs=True, reload_page_table=True, "
    "reload_sampling_params=True, reset_sampling_state=False, **kwargs"
)
DECODE_V0 = (
    "self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False, "
    "read_from_device=True, sampling_params=None, reset_batch=False"
)
# The version's reload commands, which a decode must act on (rt45g C05: one it takes and never
# uses is dropped): handed back with the result.
ACTS = "reload_inputs, reload_page_table, reload_sampling_params, reset_sampling_state"
BASE = f"""
class DemoForCausalLM:
    model_capabilities = {{"supports_sample_on_device": True, "supports_device_penalties": False}}
    decode_input_update_contract = 1

    def __init__(self, generator):
        self.generator = generator

    @classmethod
    def initialize_vllm_model(
        cls, hf_config, mesh_device, max_batch_size, *, max_seq_len=None, tt_data_parallel=1,
        optimizations=None,
    ):
        return cls(None)

    @classmethod
    def get_max_tokens_all_users(cls, **kwargs):
        return 1

    def allocate_kv_cache(self, kv_cache_shape, dtype, num_layers):
        return None

    def prefill_forward(
        self, tokens, page_table, kv_cache, prompt_lens, *, sampling_params=None,
        start_pos=None, enable_trace=False, empty_slots=None,
    ):
        return sampling_params, empty_slots

    def decode_forward({DECODE_V1}):
        return sampling_params, ({ACTS})
"""
INIT = "    @classmethod\n    def initialize_vllm_model("
GMT = "    @classmethod\n    def get_max_tokens_all_users("
DECODE = f"    def decode_forward({DECODE_V1}):\n        return sampling_params, ({ACTS})\n"
# A base class's decode (the adapter's own is removed by text, so this one differs).
USES = f"    def decode_forward({DECODE_V1}):\n        return [sampling_params, {ACTS}]\n"
CONTRACT = "    decode_input_update_contract = 1\n"
CAPS_ON = '"supports_sample_on_device": True'
INIT_BODY = "        return cls(None)"
PREFILL_BODY = "        return sampling_params, empty_slots\n\n    def decode_forward"


def edit(text: str, *changes: tuple[str, str]) -> str:
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    return text


def v0_decode(text: str) -> str:
    """The class declares no contract (version 0) and its decode takes reset_batch only."""
    return edit(
        text,
        (CONTRACT, ""),
        (DECODE, f"    def decode_forward({DECODE_V0}):\n        return reset_batch\n"),
    )


def profiles() -> dict[str, FamilyProfile]:
    facts = {"decode_contract": 1, "device_sampling": True}
    return profiles_from_mapping({"profiles": {TARGET: {"family": "demo", "facts": facts}}})


def run(root: Path, files: dict[str, str | bytes]) -> dict[str, Finding]:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content))
    found = check(CheckoutReader(root), profiles(), {TARGET: ("TTDemoForCausalLM",)})
    return {f.method: f for f in found}


# A decode that takes no sampling_params (and no **kwargs to hold them).
NO_SAMPLING = (
    "sampling_params=None, reload_inputs=True, reload_page_table=True, "
    "reload_sampling_params=True, reset_sampling_state=False, **kwargs",
    "reload_inputs=True, reload_page_table=True, reload_sampling_params=True, "
    "reset_sampling_state=False, slot_remap=None",
)
BAD_DEF = "def _bad(self, tokens):\n    return tokens\n"
# name -> (the tree's modules, {method: the status the checker must report})
REFUSED: dict[str, tuple[dict[str, str | bytes], dict[str, str]]] = {
    # The plugin calls these on the class: a plain def takes its first argument as `self`.
    "a01_noclassmethod_init": (
        {ADAPTER: edit(BASE, (INIT, "    def initialize_vllm_model("))},
        {"initialize_vllm_model": "broken"},
    ),
    "a02_noclassmethod_gmt": (
        {ADAPTER: edit(BASE, (GMT, "    def get_max_tokens_all_users("))},
        {"get_max_tokens_all_users": "broken"},
    ),
    # A method redefined in a class-level if / try: which def Python keeps is not evaluated.
    "a10_if_classlevel": (
        {
            ADAPTER: "import os\n" + BASE + "\n    if os.environ.get('X') is None:\n"
            "        def decode_forward(self, tokens, start_pos):\n            return tokens\n"
        },
        {"decode_forward": "unresolved"},
    ),
    "a11_try_classlevel": (
        {
            ADAPTER: BASE + "\n    try:\n        import not_a_module\n    except ImportError:\n"
            "        def decode_forward(self, tokens, start_pos):\n            return tokens\n"
        },
        {"decode_forward": "unresolved"},
    ),
    # Replaced after the class body.
    "a13_monkeypatch": (
        {ADAPTER: BASE + f"\n\n{BAD_DEF}\n\nDemoForCausalLM.decode_forward = _bad\n"},
        {"decode_forward": "unresolved"},
    ),
    "a14_setattr": (
        {ADAPTER: BASE + "\n\nsetattr(DemoForCausalLM, 'decode_forward', lambda self, t: t)\n"},
        {"decode_forward": "unresolved"},
    ),
    # The registry's name rebound to another class: the last binding is what is imported.
    "a15_rebind_name": (
        {
            ADAPTER: BASE + "\n\nclass _Other:\n    @classmethod\n"
            "    def initialize_vllm_model(cls, hf_config):\n        return cls()\n\n\n"
            "DemoForCausalLM = _Other\n"
        },
        {"initialize_vllm_model": "broken", "decode_forward": "missing"},
    ),
    # The contract the plugin plans the decode on is the loaded instance's.
    "b01_init_cond_contract": (
        {
            ADAPTER: "import os\n"
            + edit(
                v0_decode(BASE),
                (
                    "        self.generator = generator\n",
                    "        self.generator = generator\n        if os.environ.get('V1') == '1':\n"
                    "            self.decode_input_update_contract = 1\n",
                ),
            )
        },
        {"decode_input_update_contract": "unresolved", "decode_forward": "broken"},
    ),
    "b02_contract_set_in_init_vllm": (
        {
            ADAPTER: edit(
                v0_decode(BASE),
                (
                    INIT_BODY,
                    "        m = cls(None)\n        m.decode_input_update_contract = 1\n"
                    "        return m",
                ),
            )
        },
        {"decode_input_update_contract": "unresolved", "decode_forward": "broken"},
    ),
    "b03_contract_property": (
        {
            ADAPTER: edit(
                v0_decode(BASE),
                (
                    "    def __init__",
                    "    @property\n    def decode_input_update_contract(self):\n"
                    "        return 1\n\n    def __init__",
                ),
            )
        },
        {"decode_input_update_contract": "unresolved", "decode_forward": "broken"},
    ),
    "b04_base_init_not_called": (
        {
            ADAPTER: edit(
                v0_decode(BASE),
                (
                    "class DemoForCausalLM:",
                    "class _Base:\n    def __init__(self):\n"
                    "        self.decode_input_update_contract = 1\n\n\n"
                    "class DemoForCausalLM(_Base):",
                ),
            )
        },
        {"decode_input_update_contract": "unresolved"},
    ),
    "b05_contract_module_level": (
        {ADAPTER: v0_decode(BASE) + "\n\nDemoForCausalLM.decode_input_update_contract = 1\n"},
        {"decode_input_update_contract": "unresolved", "decode_forward": "broken"},
    ),
    # Device sampling switched on after the dict: the decode must take sampling_params.
    "b13_caps_classbody_item": (
        {
            ADAPTER: edit(
                BASE,
                (CAPS_ON, CAPS_ON.replace("True", "False")),
                (
                    CONTRACT,
                    CONTRACT + '    model_capabilities["supports_sample_on_device"] = True\n',
                ),
                NO_SAMPLING,
            )
        },
        {"decode_forward": "broken"},
    ),
    "b14_caps_classbody_update": (
        {
            ADAPTER: edit(
                BASE,
                (CAPS_ON, CAPS_ON.replace("True", "False")),
                (
                    CONTRACT,
                    CONTRACT + "    model_capabilities.update(supports_sample_on_device=True)\n",
                ),
                NO_SAMPLING,
            )
        },
        {"decode_forward": "broken"},
    ),
    "b15_caps_module_dict_mutated": (
        {
            ADAPTER: '_CAPS = {}\n_CAPS["supports_sample_on_device"] = True\n'
            + edit(
                BASE,
                (
                    "model_capabilities = {" + CAPS_ON + ', "supports_device_penalties": False}',
                    "model_capabilities = _CAPS",
                ),
                NO_SAMPLING,
            )
        },
        {"decode_forward": "broken"},
    ),
    # `from m import *` binds only m.__all__, or its public names: the base is a NameError.
    "d07_star_all": (
        {
            OTHER: "__all__ = ['Other']\n\n\nclass Other:\n    pass\n\n\nclass Generator:\n" + USES,
            ADAPTER: "from models.demo.tt.other import *\n"
            + edit(
                BASE, ("class DemoForCausalLM:", "class DemoForCausalLM(Generator):"), (DECODE, "")
            ),
        },
        {"(source)": "broken"},
    ),
    "d07c_star_private": (
        {
            OTHER: "class _Generator:\n" + USES,
            ADAPTER: "from models.demo.tt.other import *\n"
            + edit(
                BASE, ("class DemoForCausalLM:", "class DemoForCausalLM(_Generator):"), (DECODE, "")
            ),
        },
        {"(source)": "broken"},
    ),
    # A module still being imported has bound only the names above the line it paused at.
    "d17_circular": (
        {
            OTHER: "from models.demo.tt.generator_vllm import DemoForCausalLM\n\n\nclass A:\n"
            "    pass\n",
            ADAPTER: "from models.demo.tt.other import A\n"
            + edit(BASE, ("class DemoForCausalLM:", "class DemoForCausalLM(A):")),
        },
        {"(source)": "broken"},
    ),
    # The import finds the package directory before the module file of the same name.
    "f09_pkg_shadows_py": (
        {
            ADAPTER: BASE,
            "models/demo/tt/generator_vllm/__init__.py": edit(
                BASE,
                (DECODE, "    def decode_forward(self, tokens, start_pos):\n        return 1\n"),
            ),
        },
        {"decode_forward": "broken"},
    ),
    # Plugin modules this plugin does not ship, imported other ways.
    "g04_importlib": (
        {
            ADAPTER: "import importlib\n"
            + edit(
                BASE,
                (
                    PREFILL_BODY,
                    (
                        "        importlib.import_module('vllm_tt_plugin.whole_prompt_cache')\n"
                        + PREFILL_BODY
                    ),
                ),
            )
        },
        {"prefill_forward": "broken"},
    ),
    "g05_dunder_import": (
        {
            ADAPTER: edit(
                BASE,
                (
                    PREFILL_BODY,
                    ("        __import__('vllm_tt_plugin.whole_prompt_cache')\n" + PREFILL_BODY),
                ),
            )
        },
        {"prefill_forward": "broken"},
    ),
    "g09_modlevel_import": (
        {ADAPTER: "from vllm_tt_plugin.whole_prompt_cache import X\n" + BASE},
        {"(source)": "broken"},
    ),
    "g12_import_in_modfunc": (
        {
            ADAPTER: "def _spec():\n    from vllm_tt_plugin.whole_prompt_cache import X\n"
            "    return X\n\n\n" + edit(BASE, (PREFILL_BODY, "        _spec()\n" + PREFILL_BODY))
        },
        {"prefill_forward": "broken"},
    ),
    # The model built other ways than cls(...): its __init__ must take the arguments.
    "h05_classname_call": (
        {ADAPTER: edit(BASE, (INIT_BODY, "        return DemoForCausalLM(None, bad_kw=1)"))},
        {"initialize_vllm_model": "broken"},
    ),
    "h07_cls_alias": (
        {
            ADAPTER: edit(
                BASE, (INIT_BODY, "        make = cls\n        return make(None, bad_kw=1)")
            )
        },
        {"initialize_vllm_model": "broken"},
    ),
    "h08_typecls": (
        {
            ADAPTER: edit(
                BASE, (INIT_BODY, "        return type(cls.__name__, (cls,), {})(None, bad_kw=1)")
            )
        },
        {"initialize_vllm_model": "unresolved"},
    ),
    # Beyond the named trees: an instance attribute hides the def; an async link down the path.
    "self_shadows_method": (
        {
            ADAPTER: edit(
                BASE,
                (
                    "        self.generator = generator\n",
                    "        self.generator = generator\n        self.decode_forward = generator\n",
                ),
            )
        },
        {"decode_forward": "unresolved"},
    ),
    "async_link": (
        {
            ADAPTER: edit(
                BASE,
                (
                    DECODE,
                    "    def decode_forward(self, *args, **kwargs):\n"
                    "        return self._impl(*args, **kwargs)\n\n"
                    + DECODE.replace("def decode_forward", "async def _impl"),
                ),
            )
        },
        {"decode_forward": "unresolved"},
    ),
    # The registry's class defined again under a module-level `if`: which one is kept.
    "module_if_redefines": (
        {
            ADAPTER: "import os\n"
            + BASE
            + "\n\nif os.environ.get('X'):\n    class DemoForCausalLM:\n        pass\n"
        },
        {"(source)": "unresolved"},
    ),
    "j03_async_def": (
        {ADAPTER: edit(BASE, ("    def decode_forward(", "    async def decode_forward("))},
        {"decode_forward": "broken"},
    ),
}
BAD_B = "class _B:\n    def decode_forward(self, tokens, start_pos):\n        return 1\n\n\n"
GOOD_B = "class _B:\n" + USES + "\n\n"
# Trees Python imports and serves: the checker must let them bind.
CONTROLS: dict[str, dict[str, str | bytes]] = {
    "base": {ADAPTER: BASE},
    "a03_static_init": {
        ADAPTER: edit(
            BASE,
            (
                INIT + "\n        cls, ",
                "    @staticmethod\n    def initialize_vllm_model(\n        ",
            ),
            (INIT_BODY, "        return DemoForCausalLM(None)"),
        )
    },
    "a08b_assign_modfunc_ok": {
        ADAPTER: f"def _decode({DECODE_V1}):\n    return sampling_params"
        "\n\n\n" + edit(BASE, (DECODE, "    decode_forward = _decode\n"))
    },
    "a12b_shadow_subclass_ok": {
        ADAPTER: BASE
        + (
            "\n\nclass DemoForCausalLM(DemoForCausalLM):\n"
            "    def decode_forward(self, *args, **kw):\n"
            "        return super().decode_forward(*args, **kw)\n"
        )
    },
    "d01b_diamond_c3_good": {
        ADAPTER: edit(
            BASE,
            (
                "class DemoForCausalLM:",
                (
                    BAD_B + "class _L(_B):\n    pass\n\n\n"
                    "class _R(_B):\n" + USES + "\n\n"
                    "class DemoForCausalLM(_L, _R):"
                ),
            ),
            (DECODE, ""),
        )
    },
    "d07b_star_all_ok": {
        OTHER: "__all__ = ['Generator']\n\n\nclass Generator:\n" + USES,
        ADAPTER: "from models.demo.tt.other import *\n"
        + edit(BASE, ("class DemoForCausalLM:", "class DemoForCausalLM(Generator):"), (DECODE, "")),
    },
    "d16_coop_mixin": {
        ADAPTER: edit(
            BASE,
            (
                "class DemoForCausalLM:",
                (
                    "class _M:\n    def decode_forward(self, *args, **kwargs):\n"
                    "        return super().decode_forward(*args, **kwargs)\n\n\n"
                    + GOOD_B
                    + "class DemoForCausalLM(_M, _B):"
                ),
            ),
            (DECODE, ""),
        )
    },
    # `Base = _B` keeps the first _B though a later class rebinds the name.
    "d18_alias_before_redef": {
        ADAPTER: edit(
            BASE,
            (
                "class DemoForCausalLM:",
                (GOOD_B + "Base = _B\n\n\n" + BAD_B + "class DemoForCausalLM(Base):"),
            ),
            (DECODE, ""),
        )
    },
    # An invalid UTF-8 byte in a comment, first line or later: the import skips it undecoded.
    "f03_badbyte_comment": {ADAPTER: b"# bad \xff byte\n" + BASE.encode()},
    "f03b_badbyte_comment_line5": {ADAPTER: b"X = 1\n\n# bad \xff byte\n" + BASE.encode()},
    # A cycle Python completes: the name is bound above the line the adapter pauses at.
    "d17b_circular_ok": {
        OTHER: "from models.demo.tt.generator_vllm import X\n\n\nclass A:\n    pass\n",
        ADAPTER: "X = 1\nfrom models.demo.tt.other import A\n"
        + edit(BASE, ("class DemoForCausalLM:", "class DemoForCausalLM(A):")),
    },
    "g10_modlevel_try_import": {
        ADAPTER: "try:\n    from vllm_tt_plugin.whole_prompt_cache import"
        " X\nexcept ImportError:\n    X = None\n" + BASE
    },
    "h05_classname_call_ok": {
        ADAPTER: edit(BASE, (INIT_BODY, "        return DemoForCausalLM(1)"))
    },
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_red_team_tree_is_refused(tmp_path: Path, name: str) -> None:
    files, expected = REFUSED[name]
    found = run(tmp_path, files)
    got = {m: found[m].status if m in found else "(no finding)" for m in expected}
    assert got == expected, [found[m] for m in expected if m in found]
    assert failures(list(found.values()))


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_tree_python_serves_binds(tmp_path: Path, name: str) -> None:
    found = run(tmp_path, CONTROLS[name])
    assert failures(list(found.values())) == [], failures(list(found.values()))
    assert found["decode_forward"].status in ("ok", "drift"), found["decode_forward"]


def test_the_verdicts_name_what_was_not_evaluated(tmp_path: Path) -> None:
    files, _ = REFUSED["a10_if_classlevel"]
    detail = run(tmp_path / "a", files)["decode_forward"].detail
    assert "class-level `if`" in detail and "generator_vllm.py:" in detail, detail
    files, _ = REFUSED["a01_noclassmethod_init"]
    detail = run(tmp_path / "b", files)["initialize_vllm_model"].detail
    assert "not a classmethod/staticmethod" in detail, detail
    files, _ = REFUSED["b02_contract_set_in_init_vllm"]
    detail = run(tmp_path / "c", files)["decode_input_update_contract"].detail
    assert "set on an object in a method" in detail and "generator_vllm.py:" in detail, detail
    files, _ = REFUSED["d07_star_all"]
    detail = run(tmp_path / "d", files)["(source)"].detail
    assert "NameError" in detail and "does not export" in detail, detail
    files, _ = REFUSED["d17_circular"]
    assert "circular" in run(tmp_path / "e", files)["(source)"].detail


def test_a_contract_the_first_init_sets_unconditionally_is_read(tmp_path: Path) -> None:
    # `self.decode_input_update_contract = 1` first in the __init__ cls(...) runs: a fact.
    text = edit(
        BASE, (CONTRACT, ""), ("        self.generator = generator\n", (
            "        self.generator = generator\n        self.decode_input_update_contract = 1\n"
        ))
    )  # fmt: skip
    found = run(tmp_path / "tree", {ADAPTER: text})
    assert "decode_input_update_contract" not in found
    assert failures(list(found.values())) == []
    write_skeletons(tmp_path / "tree", tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    assert failures(list(run(tmp_path / "skel", {}).values())) == []


CASES = {**{n: files for n, (files, _) in REFUSED.items()}, **CONTROLS}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_skeleton_of_a_red_team_tree_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    tree = run(tmp_path / "tree", CASES[name])
    write_skeletons(tmp_path / "tree", tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    skeleton = run(tmp_path / "skel", {})
    assert {m: f.status for m, f in skeleton.items()} == {m: f.status for m, f in tree.items()}
