"""The parity checker against class bodies and modules that are not plain (issue #45, fourth red
team): a name rebound other than by a plain assignment or ``def``, methods replaced or hidden
dynamically (``exec``, ``locals()``, a metaclass, a class decorator, attribute hooks, the
instance ``__dict__``), name mangling, unimplemented ``abc`` methods, ``__slots__``, a
classmethod reading what only instances hold, and a ``@dataclass``'s generated ``__init__``.

Each refused tree once read as binding (a false pass); each must now get the status named, with a
reason naming the offending construct. The controls are what Python serves (two were false
alarms). Python's behaviour for each case was checked by importing the tree and making the call.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_redteam import (
    ADAPTER,
    BASE,
    CAPS_ON,
    CONTRACT,
    DECODE,
    DECODE_V1,
    INIT_BODY,
    NO_SAMPLING,
    edit,
    run,
)
from vllm_tt_plugin.contract.parity import failures

# A version-1 decode without **kwargs: a version-0 call (reset_batch) does not bind to it.
STRICT_V1 = DECODE_V1.replace(", **kwargs", ", slot_remap=None")
STRICT = (DECODE, f"    def decode_forward({STRICT_V1}):\n        return sampling_params\n")
INIT = "    def __init__(self, generator):\n        self.generator = generator\n"
CLASS = "class DemoForCausalLM:"
CAPS = "    model_capabilities = {" + CAPS_ON + ', "supports_device_penalties": False}\n'
CAPS_OFF = CAPS.replace("True", "False")
BAD = "def _bad(self, tokens):\n    return tokens\n\n\n"


def body(*lines: str) -> tuple[str, str]:
    """Class-body lines added after the contract line."""
    return CONTRACT, CONTRACT + "".join(f"    {line}\n" for line in lines)


def base(text: str) -> tuple[str, str]:
    """A base class ``_B`` (``text``) the adapter derives from."""
    return CLASS, text + "\n\nclass DemoForCausalLM(_B):"


def contract(*lines: str) -> str:
    """The strict v1 decode with the contract declared by ``lines`` instead."""
    return edit(BASE, STRICT, (CONTRACT, "".join(f"    {line}\n" for line in lines)))


def caps_off_then(*lines: str) -> str:
    """Device sampling off in the dict, then ``lines``; the decode takes no sampling_params."""
    return edit(BASE, (CAPS, CAPS_OFF), body(*lines), NO_SAMPLING)


# name -> (adapter module, {method: status}, a word the first method's reason must contain)
REFUSED: dict[str, tuple[str, dict[str, str], str]] = {
    # 1. Class-level rebinding: the last plain binding is what Python keeps; others unresolved.
    "contract_rebound_to_0": (
        contract("decode_input_update_contract = 1", "decode_input_update_contract = 0"),
        {"decode_forward": "broken"}, "reset_batch",
    ),
    "contract_annotated_rebound": (
        contract("decode_input_update_contract = 1", "decode_input_update_contract: int = 0"),
        {"decode_forward": "broken"}, "reset_batch",
    ),
    "contract_tuple_unpacked": (
        contract("decode_input_update_contract = 1", "_a, decode_input_update_contract = 2, 0"),
        {"decode_input_update_contract": "unresolved"}, "decode_input_update_contract",
    ),
    "contract_deleted": (
        contract("decode_input_update_contract = 1", "del decode_input_update_contract"),
        {"decode_input_update_contract": "unresolved"}, "del",
    ),
    "contract_augmented": (
        contract("decode_input_update_contract = 1", "decode_input_update_contract -= 1"),
        {"decode_input_update_contract": "unresolved"}, "decode_input_update_contract",
    ),
    "contract_walrus": (
        contract("decode_input_update_contract = 1", "(decode_input_update_contract := 0)"),
        {"decode_input_update_contract": "unresolved"}, ":=",
    ),
    "caps_rebound_on": (
        caps_off_then("model_capabilities = {" + CAPS_ON + "}"),
        {"decode_forward": "broken"}, "sampling_params",
    ),
    "caps_tuple_unpacked": (
        caps_off_then("_a, model_capabilities = 0, {" + CAPS_ON + "}"),
        {"decode_forward": "broken"}, "sampling_params",
    ),
    # 2. Methods replaced or hidden dynamically.
    "exec_in_class_body": (
        BASE + "    exec('def decode_forward(self, tokens):\\n    return tokens')\n",
        {"decode_forward": "unresolved"}, "exec",
    ),
    "eval_in_class_body": (
        BASE + "    eval('0')\n", {"decode_forward": "unresolved"}, "eval",
    ),
    "exec_in_module": (
        BASE + "\n\nexec('DemoForCausalLM.decode_forward = lambda self, t: t')\n",
        {"decode_forward": "unresolved"}, "exec",
    ),
    "globals_in_module": (
        BASE + "\n\nclass _Other:\n    pass\n\n\nglobals()['DemoForCausalLM'] = _Other\n",
        {"decode_forward": "unresolved"}, "globals()",
    ),
    "locals_in_class_body": (
        BASE + "    locals()['decode_forward'] = lambda self, tokens: tokens\n",
        {"decode_forward": "unresolved"}, "locals()",
    ),
    "vars_in_class_body": (
        BASE + "    vars()['decode_forward'] = lambda self, tokens: tokens\n",
        {"decode_forward": "unresolved"}, "vars()",
    ),
    "walrus_method": (
        BAD + BASE + "    (decode_forward := _bad)\n", {"decode_forward": "unresolved"}, ":=",
    ),
    "tuple_unpacked_method": (
        BAD + BASE + "    decode_forward, _other = _bad, None\n",
        {"decode_forward": "unresolved"}, "decode_forward",
    ),
    "deleted_method": (
        BASE + "    del decode_forward\n", {"decode_forward": "unresolved"}, "del",
    ),
    "imported_in_class_body": (
        BASE + "    from os.path import join as decode_forward\n",
        {"decode_forward": "unresolved"}, "decode_forward",
    ),
    "metaclass": (
        edit(BASE, (CLASS, "class _Meta(type):\n    pass\n\n\nclass DemoForCausalLM("
                    "metaclass=_Meta):")),
        {"decode_forward": "unresolved"}, "metaclass",
    ),
    "metaclass_of_a_base": (
        edit(BASE, base("class _Meta(type):\n    pass\n\n\nclass _B(metaclass=_Meta):\n"
                        "    pass\n")),
        {"decode_forward": "unresolved"}, "metaclass",
    ),
    "class_decorator": (
        edit(BASE, (CLASS, "def _patch(cls):\n    return cls\n\n\n@_patch\n" + CLASS)),
        {"decode_forward": "unresolved"}, "@_patch",
    ),
    "class_keyword": (
        edit(BASE, base("class _B:\n    pass\n"), ("(_B):", "(_B, sod=True):")),
        {"decode_forward": "unresolved"}, "sod",
    ),
    "getattribute_in_base": (
        edit(BASE, base("class _B:\n    def __getattribute__(self, name):\n"
                        "        return object.__getattribute__(self, name)\n")),
        {"decode_forward": "unresolved"}, "__getattribute__",
    ),
    "setattr_hook_in_base": (
        edit(BASE, base("class _B:\n    def __setattr__(self, name, value):\n"
                        "        raise AttributeError(name)\n")),
        {"decode_forward": "unresolved"}, "__setattr__",
    ),
    "new_in_base": (
        edit(BASE, base("class _B:\n    def __new__(cls, *args):\n        return object()\n")),
        {"initialize_vllm_model": "unresolved"}, "__new__",
    ),
    "init_subclass_in_base": (
        edit(BASE, base("class _B:\n    def __init_subclass__(cls, **kw):\n"
                        "        setattr(cls, 'decode_' + 'forward', print)\n")),
        {"decode_forward": "unresolved"}, "__init_subclass__",
    ),
    "class_getitem_base": (
        edit(BASE, base("class _B:\n    def __class_getitem__(cls, item):\n"
                        "        return object\n"), ("(_B):", "(_B[int]):")),
        {"decode_forward": "unresolved"}, "__class_getitem__",
    ),
    "instance_dict_item": (
        edit(BASE, (INIT, INIT + "        self.__dict__['decode_forward'] = print\n")),
        {"decode_forward": "unresolved"}, "__dict__",
    ),
    "instance_dict_update": (
        edit(BASE, (INIT, INIT + "        self.__dict__.update(decode_forward=print)\n")),
        {"decode_forward": "unresolved"}, "__dict__",
    ),
    "object_setattr": (
        edit(BASE, (INIT, INIT + "        object.__setattr__(self, 'decode_forward', print)\n")),
        {"decode_forward": "unresolved"}, "__setattr__",
    ),
    "setattr_computed": (
        edit(BASE, (INIT, INIT + "        name = 'decode_' + 'forward'\n"
                          "        setattr(self, name, print)\n")),
        {"decode_forward": "unresolved"}, "setattr",
    ),
    "class_swapped": (
        "class _Other:\n    pass\n\n\n"
        + edit(BASE, (INIT, INIT + "        self.__class__ = _Other\n")),
        {"decode_forward": "unresolved"}, "__class__",
    ),
    # Siblings: the class reached through another name at module level, a loop target in
    # the body, a store on the instance's class from a method.
    "alias_patched_at_module_level": (
        BAD + BASE + "\n\n_C = DemoForCausalLM\n_C.decode_forward = _bad\n",
        {"decode_forward": "unresolved"}, "_C.decode_forward",
    ),
    "loop_patched_at_module_level": (
        BAD + BASE + "\n\nfor _c in (DemoForCausalLM,):\n    _c.decode_forward = _bad\n",
        {"decode_forward": "unresolved"}, "_c.decode_forward",
    ),
    "class_handed_to_a_module_call": (
        "def _install(cls):\n    cls.decode_forward = lambda self, t: t\n\n\n"
        + BASE + "\n\n_install(DemoForCausalLM)\n",
        {"decode_forward": "unresolved"}, "_install",
    ),
    "loop_target_in_class_body": (
        BASE + "    for decode_forward in (print,):\n        pass\n",
        {"decode_forward": "unresolved"}, "`for`",
    ),
    "except_as_in_class_body": (
        BASE + "    try:\n        pass\n    except Exception as decode_forward:\n        pass\n",
        {"decode_forward": "unresolved"}, "decode_forward",
    ),
    "type_self_patched": (
        edit(BASE, (INIT, INIT + "        type(self).decode_forward = print\n")),
        {"decode_forward": "unresolved"}, "type(self).decode_forward",
    ),
    # 3. `self.__helper` in class C is `_C__helper`: B's `__helper` is `_B__helper`.
    "mangled_helper_in_base": (
        edit(BASE, base("class _B:\n    def __helper(self, tokens):\n        return tokens\n"),
             (DECODE, DECODE.replace("return sampling_params",
                                     "return self.__helper(sampling_params)"))),
        {"decode_forward": "missing"}, "_DemoForCausalLM__helper",
    ),
    # 4. Abstract methods left unimplemented: cls(...) raises TypeError.
    "abstract_left": (
        "from abc import ABC, abstractmethod\n\n\n" + edit(BASE, base(
            "class _B(ABC):\n    @abstractmethod\n    def extra(self):\n        ...\n")),
        {"initialize_vllm_model": "broken"}, "extra",
    ),
    # 5. __slots__ on every class: an instance write outside them raises AttributeError.
    "slots": (
        edit(BASE, body("__slots__ = ('other',)")), {"decode_forward": "unresolved"}, "__slots__",
    ),
    # 6. A classmethod called on the instance reading what only instances hold.
    "classmethod_reads_instance_attr": (
        edit(BASE, (DECODE, "    @classmethod\n" + DECODE.replace("(self,", "(cls,").replace(
            "return sampling_params", "return cls.generator.decode(sampling_params)"))),
        {"decode_forward": "unresolved"}, "cls.generator",
    ),
    # A dataclass's generated __init__ is bound as written: a keyword it has no field for.
    "dataclass_bad_keyword": (
        "from dataclasses import dataclass\n\n\n" + edit(
            BASE, (CLASS, "@dataclass\n" + CLASS), (INIT, "    generator: object = None\n"),
            (INIT_BODY, "        return cls(None, bad_kw=1)")),
        {"initialize_vllm_model": "broken"}, "bad_kw",
    ),
    # What a subclass of a decorated class derives from is what the decorator returned.
    "decorated_base": (
        "def _patch(cls):\n    return cls\n\n\n"
        + edit(BASE, base("@_patch\nclass _B:\n    pass\n")),
        {"decode_forward": "unresolved"}, "@_patch",
    ),
    # An __init__ the checker cannot read (a decorator): the construction is not "ok".
    "decorated_init": (
        "def _wrap(f):\n    return f\n\n\n"
        + edit(BASE, (INIT, "    @_wrap\n" + INIT)),
        {"initialize_vllm_model": "unresolved"}, "_wrap",
    ),
}  # fmt: skip

CONTROLS: dict[str, str] = {
    "contract_rebound_to_1": contract(
        "decode_input_update_contract = 0", "decode_input_update_contract = 1"
    ),
    "contract_annotation_only": contract(
        "decode_input_update_contract = 1", "decode_input_update_contract: int"
    ),
    "caps_rebound_off": edit(  # no sampling_params parameter: the body must not read it
        BASE,
        body("model_capabilities = {}"),
        NO_SAMPLING,
        ("        return sampling_params, (", "        return tokens, ("),
    ),
    "own_mangled_helper": edit(
        BASE,
        (
            DECODE,
            DECODE.replace("return sampling_params", "return self.__helper(sampling_params)")
            + "\n    def __helper(self, value):\n        return value\n",
        ),
    ),
    "abstract_implemented": "from abc import ABC, abstractmethod\n\n\n"
    + edit(
        BASE,
        base("class _B(ABC):\n    @abstractmethod\n    def extra(self):\n        ...\n"),
        (INIT, INIT + "\n    def extra(self):\n        return 1\n"),
    ),
    "slots_with_a_dict_base": edit(
        BASE, base("class _B:\n    pass\n"), body("__slots__ = ('other',)")
    ),
    "dataclass": "from dataclasses import dataclass\n\n\n"
    + edit(BASE, (CLASS, "@dataclass\n" + CLASS), (INIT, "    generator: object = None\n")),
    "dataclass_field_default": "from dataclasses import dataclass, field\n\n\n"
    + edit(
        BASE,
        (CLASS, "@dataclass(eq=False)\n" + CLASS),
        (INIT, "    generator: object\n    extra: list = field(default_factory=list)\n"),
    ),
    "final_decorator": "from typing import final\n\n\n" + edit(BASE, (CLASS, "@final\n" + CLASS)),
    "abcmeta": "import abc\n\n\n" + edit(BASE, (CLASS, "class DemoForCausalLM(abc.ABC):")),
    "classmethod_reads_class_attr": edit(
        BASE,
        (
            DECODE,
            "    @classmethod\n"
            + DECODE.replace("(self,", "(cls,").replace(
                "return sampling_params", "return cls.model_capabilities, sampling_params"
            ),
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_class_body_python_would_not_serve_as_read_is_refused(tmp_path: Path, name: str) -> None:
    adapter, expected, word = REFUSED[name]
    found = run(tmp_path, {ADAPTER: adapter})
    got = {m: found[m].status if m in found else "(no finding)" for m in expected}
    assert got == expected, [found[m] for m in expected if m in found]
    assert word in found[next(iter(expected))].detail, found[next(iter(expected))]
    assert failures(list(found.values()))


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_plain_class_body_python_serves_binds(tmp_path: Path, name: str) -> None:
    found = run(tmp_path, {ADAPTER: CONTROLS[name]})
    assert failures(list(found.values())) == [], failures(list(found.values()))
    assert found["decode_forward"].status in ("ok", "drift"), found["decode_forward"]


def test_stores_on_other_objects_and_namespace_reads_bind(tmp_path: Path) -> None:
    # Only the instance's own namespace written is in doubt: `self.args` is another object,
    # and reading `self.__dict__` sets nothing.
    adapter = edit(
        BASE,
        (INIT, INIT + "        self.args = generator\n        for k in ('a', 'b'):\n"
                      "            setattr(self.args, k, 1)\n"
                      "        self.saved = dict(self.__dict__)\n"),
    )  # fmt: skip
    found = run(tmp_path, {ADAPTER: adapter})
    assert failures(list(found.values())) == [], failures(list(found.values()))


def test_a_class_in_doubt_does_not_claim_block_hooks(tmp_path: Path) -> None:
    # exec may define any name: the block-output hooks are not known to be there (not broken).
    found = run(tmp_path, {ADAPTER: REFUSED["exec_in_class_body"][0]})
    assert found["output_tokens_per_step"].status == "unresolved", found["output_tokens_per_step"]
    assert "exec" in found["output_tokens_per_step"].detail
