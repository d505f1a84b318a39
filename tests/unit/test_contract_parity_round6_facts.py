"""The parity checker against round 6's class-fact attacks (rt45f): a capabilities dict changed
through another name, non-dict mappings, spellings of a literal the plugin reads as that
literal, and a load that returns a class with narrower capabilities.

Each case is one red-team tree reduced to a one-module adapter (the third red team's ``BASE``:
device sampling on, penalties off, a decode that takes the penalty histories into ``**kwargs``
and never reads them). Turning penalties on behind the checker's back makes that decode drop
them; the checker must see it (the facts unknown, every variant checked) or bind (the
controls: Python holds the literal's values). Python's and the plugin's behaviour for each was
checked on the red team's tree (``ModelCapabilities.from_model_class`` on the class Python
builds).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_redteam import ADAPTER, BASE, COMMIT, TARGET, edit, run
from vllm_tt_plugin.contract.parity import failures
from vllm_tt_plugin.contract.parity_rules import Finding
from vllm_tt_plugin.contract.skeleton import write_skeletons

CAPS = '{"supports_sample_on_device": True, "supports_device_penalties": False}'
CAPS_LINE = f"    model_capabilities = {CAPS}\n"
PENALTIES_ON = '"supports_device_penalties", True'
CLASS = "class DemoForCausalLM:"
INIT_BODY = "        return cls(None)"
SUB = "class _Sub(DemoForCausalLM):\n"


def caps_as(value: str, header: str = "") -> str:
    """The adapter with ``model_capabilities = value`` (``header`` above the class)."""
    return header + edit(BASE, (CAPS_LINE, f"    model_capabilities = {value}\n"))


def after(text: str) -> str:
    """The adapter with ``text`` at module level after the class."""
    return BASE + "\n\n" + text


# name -> (the tree's modules, {method: status}, (method whose reason is checked, text))
Case = tuple[dict[str, str | bytes], dict[str, str], tuple[str, str]]
DROPPED = {"decode_forward": "dropped"}
REFUSED: dict[str, Case] = {
    # F24: a module alias of the shared dict changes it.
    "f24_module_alias": (
        {
            ADAPTER: caps_as(
                "_CAPS",
                f"_CAPS = {CAPS}\n_caps = _CAPS\n_caps['supports_device_penalties'] = True\n",
            )
        },
        DROPPED,
        ("(class facts)", "_caps['supports_device_penalties'] changes it"),
    ),
    # F23: a function handed the shared dict (it sets penalties on).
    "f23_function_handed_the_dict": (
        {
            ADAPTER: caps_as(
                "_CAPS",
                f"_CAPS = {CAPS}\n\n\ndef _with_penalties(caps):\n"
                '    caps["supports_device_penalties"] = True\n\n\n_with_penalties(_CAPS)\n',
            )
        },
        DROPPED,
        ("(class facts)", "handed to _with_penalties(...)"),
    ),
    # F22: a subclass body binds the base's dict and changes it: the base's changes too.
    "f22_subclass_body_alias": (
        {
            ADAPTER: after(
                f"{SUB}    model_capabilities = DemoForCausalLM.model_capabilities\n"
                '    model_capabilities["supports_device_penalties"] = True\n'
            )
        },
        DROPPED,
        ("(class facts)", "model_capabilities in the body of _Sub"),
    ),
    # C2: the class body's own alias of its dict.
    "c2_class_body_alias": (
        {
            ADAPTER: edit(
                BASE,
                (
                    CAPS_LINE,
                    CAPS_LINE + "    _caps = model_capabilities\n"
                    '    _caps["supports_device_penalties"] = True\n',
                ),
            )
        },
        DROPPED,
        ("(class facts)", "_caps['supports_device_penalties'] changes it"),
    ),
    # G10: the class's __dict__ reaches the dict.
    "g10_class_dunder_dict": (
        {
            ADAPTER: after(
                'DemoForCausalLM.__dict__["model_capabilities"]["supports_device_penalties"] '
                "= True\n"
            )
        },
        DROPPED,
        ("(class facts)", "DemoForCausalLM.__dict__ reaches it"),
    ),
    # F45: a module-level del of a key (the default, penalties on, applies).
    "f45_module_del_key": (
        {ADAPTER: after('del DemoForCausalLM.model_capabilities["supports_device_penalties"]\n')},
        DROPPED,
        ("(class facts)", "cannot evaluate model_capabilities"),
    ),
    # A class-body name bound to the dict above the fact, changed after it.
    "class_local_changed": (
        {
            ADAPTER: edit(
                BASE,
                (
                    CAPS_LINE,
                    f"    _C = {CAPS}\n    model_capabilities = _C\n"
                    '    _C["supports_device_penalties"] = True\n',
                ),
            )
        },
        DROPPED,
        ("(class facts)", "_C['supports_device_penalties'] changes it"),
    ),
    # A module alias changed in place with |=.
    "alias_augmented": (
        {
            ADAPTER: caps_as(
                "_CAPS",
                f"_CAPS = {CAPS}\n_caps = _CAPS\n_caps |= {{'supports_device_penalties': True}}\n",
            )
        },
        DROPPED,
        ("(class facts)", "_caps |= ... changes it"),
    ),
    # F46c / F46d: mappings that are not dicts: the plugin's CapabilityError at launch.
    "f46c_chain_map": (
        {ADAPTER: caps_as(f"collections.ChainMap({CAPS})", "import collections\n")},
        {"model_capabilities": "broken"},
        ("model_capabilities", "must be a dict, got ChainMap"),
    ),
    "f46d_user_dict": (
        {ADAPTER: caps_as(f"UserDict({CAPS})", "from collections import UserDict\n")},
        {"model_capabilities": "broken"},
        ("model_capabilities", "must be a dict, got UserDict"),
    ),
    # K2: the load returns a class (not a subclass) declaring less: the worker refuses it.
    "k2_other_class_narrower": (
        {
            ADAPTER: edit(BASE, (INIT_BODY, "        return _SingleChip(None)"))
            + "\n\n"
            + edit(
                BASE, (CLASS, "class _SingleChip:"), (CAPS_LINE, "    model_capabilities = {}\n")
            )
        },
        {"(returned model)": "broken"},
        ("(returned model)", "supports_sample_on_device: class True, instance False"),
    ),
    # K2 as the red team wrote it: a subclass declaring less is refused at load too.
    "k2_subclass_narrower": (
        {
            ADAPTER: edit(BASE, (INIT_BODY, "        return _SingleChip(None)"))
            + "\n\nclass _SingleChip(DemoForCausalLM):\n    model_capabilities = {}\n"
        },
        {"(returned model)": "broken"},
        ("(returned model)", "the worker refuses it at load"),
    ),
}

CONTROLS: dict[str, dict[str, str | bytes]] = {
    # F10: a subclass extends its base's dict (penalties stay off).
    "f10_base_spread": {
        ADAPTER: edit(BASE, (CLASS, "class _Base:")) + "\n\nclass DemoForCausalLM(_Base):\n"
        '    model_capabilities = {**_Base.model_capabilities, "supports_async_decode": True}\n'
    },
    # TD1: a TypedDict called builds a plain dict.
    "td1_typed_dict": {
        ADAPTER: caps_as(
            "Caps(supports_sample_on_device=True, supports_device_penalties=False)",
            "from typing import TypedDict\n\n\nclass Caps(TypedDict, total=False):\n"
            "    supports_sample_on_device: bool\n    supports_device_penalties: bool\n",
        )
    },
    # TY1 / TY2: typing.cast returns its argument.
    "ty1_cast_caps": {
        ADAPTER: caps_as(f"cast(dict[str, Any], {CAPS})", "from typing import Any, cast\n")
    },
    "ty2_cast_contract": {
        ADAPTER: "import typing\n"
        + edit(
            BASE,
            (
                "    decode_input_update_contract = 1\n",
                "    decode_input_update_contract: typing.Final = typing.cast(int, 1)\n",
            ),
        )
    },
    # EN1: str-Enum keys compare and hash as their values: the plugin reads them.
    "en1_str_enum_keys": {
        ADAPTER: caps_as(
            "{Cap.SAMPLE: True, Cap.PENALTIES: False}",
            "import enum\n\n\nclass Cap(str, enum.Enum):\n"
            '    SAMPLE = "supports_sample_on_device"\n'
            '    PENALTIES = "supports_device_penalties"\n',
        )
    },
    # G08: setdefault of a key the dict holds changes nothing.
    "g08_setdefault_noop": {
        ADAPTER: after(f"DemoForCausalLM.model_capabilities.setdefault({PENALTIES_ON})\n")
    },
    # The shared dict only read through its aliases: nothing changes it.
    "alias_only_read": {
        ADAPTER: caps_as(
            "_CAPS",
            f"_CAPS = {CAPS}\n_caps = _CAPS\n_ON = _caps['supports_sample_on_device']\n"
            "_COPY = dict(_CAPS)\n_COPY['supports_device_penalties'] = True\n",
        )
        + f"\n\n{SUB}    model_capabilities = {{**DemoForCausalLM.model_capabilities}}\n"
        '    model_capabilities["supports_device_penalties"] = True\n'
    },
    # C2's shape, the alias only read.
    "class_body_alias_read": {
        ADAPTER: edit(
            BASE,
            (CAPS_LINE, CAPS_LINE + "    _caps = model_capabilities\n    _on = _caps.get('x')\n"),
        )
    },
    # An OrderedDict is a dict to the plugin.
    "ordered_dict": {ADAPTER: caps_as(f"collections.OrderedDict({CAPS})", "import collections\n")},
    # The load returns a class declaring as much: the worker serves it.
    "k2_other_class_same": {
        ADAPTER: edit(BASE, (INIT_BODY, "        return _SingleChip(None)"))
        + "\n\n"
        + edit(BASE, (CLASS, "class _SingleChip:"))
    },
}


def checked(root: Path, files: dict[str, str | bytes]) -> dict[str, Finding]:
    """The tree's findings, once its skeleton is seen to read the same (the round trip)."""
    tree = run(root / "tree", files)
    write_skeletons(root / "tree", root / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    skeleton = {m: f.status for m, f in run(root / "skel", {}).items()}
    assert skeleton == {m: f.status for m, f in tree.items()}, skeleton
    return tree


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_attack_is_refused_naming_the_offender_on_tree_and_skeleton(
    tmp_path: Path, name: str
) -> None:
    files, expected, (method, reason) = REFUSED[name]
    found = checked(tmp_path, files)
    got = {m: found[m].status if m in found else "(no finding)" for m in expected}
    assert got == expected, [found[m] for m in expected if m in found]
    assert reason in found[method].detail, found[method]
    assert failures(list(found.values()))


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_control_python_serves_binds_on_tree_and_skeleton(tmp_path: Path, name: str) -> None:
    found = checked(tmp_path, CONTROLS[name])
    assert failures(list(found.values())) == [], failures(list(found.values()))
    assert found["decode_forward"].status in ("ok", "drift"), found["decode_forward"]
    assert "(class facts)" not in found, found["(class facts)"]


def test_plain_enum_keys_are_not_the_plugins_keys(tmp_path: Path) -> None:
    # Without the str mix-in a member is no string key: the plugin reads no device sampling.
    files = CONTROLS["en1_str_enum_keys"][ADAPTER]
    assert isinstance(files, str)
    found = checked(tmp_path, {ADAPTER: files.replace("(str, enum.Enum)", "(enum.Enum)")})
    assert "supports_sample_on_device): fixture True, class False" in found["(class facts)"].detail
