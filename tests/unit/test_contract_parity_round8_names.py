"""The parity checker against round 8's name red-team trees (rt45h): module names Python 3.10
leaves unbound, or bound to a fallback, when the bodies the plugin drives run.

- NA13: bound only under ``if TYPE_CHECKING:`` (False at run time): NameError.
- NA14: bound only under ``if sys.version_info >= (3, 11):``: NameError on 3.10.
- IM11: ``try: from <missing checkout module> import X`` / ``except ImportError: X = None``,
  then ``X(...)``: TypeError.
- FP17 (false alarm): a module function binding the name through ``global``, run at import.
- IM02 / IM02b (false alarms): a class body building ``model_capabilities`` in steps (an item
  store, ``update``, a comprehension) is evaluated; penalties left False send no histories.
- GD03 / GD04: a callable attribute whose value may be None (``getattr(g, n, None)``,
  ``g.decode if c else None``, ``x or None``): ``unresolved``.

Each refused case is a one-class adapter tree (``test_contract_parity_redteam.BASE``); the
control (what Python 3.10 runs) binds and the skeleton reads as the tree. Python 3.10.13
(pyenv, rt45h harness) raised for each refused spelling and ran each control.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_redteam import ADAPTER, BASE, edit
from tests.unit.test_contract_parity_round6_py310 import HELPER
from tests.unit.test_contract_parity_round7_names import (
    DEC,
    HELPER_OK,
    assert_binds,
    assert_refused,
    assert_round_trip,
    decode,
    init,
)

INIT = "initialize_vllm_model"
TC = (
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
    "    from models.demo.tt.helper import Helper\n"
)
V311 = "import sys\nif sys.version_info >= (3, 11):\n    import tomllib\n"
MISSING = "models.demo.tt.sampling"
CAPS_LINE = (
    '    model_capabilities = {"supports_sample_on_device": True, '
    '"supports_device_penalties": False}\n'
)


def caps_steps(*lines: str) -> str:
    """BASE with its capabilities literal replaced by ``lines`` (class-body statements)."""
    return edit(BASE, (CAPS_LINE, "".join(f"    {line}\n" for line in lines)))


# name -> (files, {column: status}, a fragment of that finding's reason)
REFUSED: dict[str, tuple[dict[str, str], dict[str, str], str]] = {
    "na13_type_checking_import_called": (
        {ADAPTER: init("self.helper = Helper()", head=TC), HELPER: HELPER_OK},
        {INIT: "broken"}, "TYPE_CHECKING",
    ),
    "na13b_typing_attribute_in_decode": (
        {ADAPTER: decode("_h = Helper", head="import typing\nif typing.TYPE_CHECKING:\n"
                         "    from models.demo.tt.helper import Helper\n"), HELPER: HELPER_OK},
        {DEC: "broken"}, "Helper",
    ),
    "na14_version_gated_import": (
        {ADAPTER: decode("_cfg = tomllib.loads('')", head=V311)},
        {DEC: "broken"}, "tomllib",
    ),
    "na14b_else_of_older_version": (
        {ADAPTER: decode("_cfg = tomllib.loads('')", head="import sys\nif sys.version_info < "
                         "(3, 11):\n    pass\nelse:\n    import tomllib\n")},
        {DEC: "broken"}, "tomllib",
    ),
    "na14c_version_gated_def": (
        {ADAPTER: decode("_x = _fast()", head="import sys\nif sys.version_info[:2] >= (3, 12):\n"
                         "    def _fast():\n        return 1\n")},
        {DEC: "broken"}, "_fast",
    ),
    "im11_missing_module_fallback_none": (
        {ADAPTER: init("self.sampler = DeviceSampler(generator)", head=f"try:\n    from {MISSING} "
                       "import DeviceSampler\nexcept ImportError:\n    DeviceSampler = None\n")},
        {INIT: "broken"}, "DeviceSampler",
    ),
    "im11b_missing_name_fallback_none_in_decode": (
        {ADAPTER: decode("_s = Sampler(tokens)", head="try:\n    from models.demo.tt.helper import "
                         "Sampler\nexcept (ImportError, AttributeError):\n    Sampler = None\n"),
         HELPER: HELPER_OK},
        {DEC: "broken"}, "Sampler",
    ),
    "im11c_missing_module_no_fallback": (
        {ADAPTER: decode("_s = DeviceSampler", head=f"try:\n    from {MISSING} import "
                         "DeviceSampler\nexcept ImportError:\n    pass\n")},
        {DEC: "broken"}, "DeviceSampler",
    ),
    # GD03 / GD04: a callable attribute whose value may be None (TypeError where it is).
    "gd03_getattr_default_none": (
        {ADAPTER: init("self._step = getattr(generator, 'decode_traced', None)").replace(
            "        return sampling_params, (", "        self._step(tokens)\n"
            "        return sampling_params, (", 1)},
        {DEC: "unresolved"}, "_step",
    ),
    "gd04_conditional_expression_none": (
        {ADAPTER: init("self._step = generator.decode if generator.n > 1 else None").replace(
            "        return sampling_params, (", "        self._step(tokens)\n"
            "        return sampling_params, (", 1)},
        {DEC: "unresolved"}, "generator.n > 1",
    ),
    "gd04b_or_none": (
        {ADAPTER: init("self._step = generator.decode_traced or None").replace(
            "        return sampling_params, (", "        self._step(tokens)\n"
            "        return sampling_params, (", 1)},
        {DEC: "unresolved"}, "_step",
    ),
    # the steps are evaluated, not ignored: penalties turned on by an item store are checked
    "caps_item_store_turns_penalties_on": (
        {ADAPTER: caps_steps(CAPS_LINE.strip(),
                             'model_capabilities["supports_device_penalties"] = True')},
        {DEC: "dropped"}, "penalties",
    ),
}  # fmt: skip

CONTROLS: dict[str, dict[str, str]] = {
    # a TYPE_CHECKING import read only in annotations / strings
    "type_checking_annotation_only": {
        ADAPTER: decode("_h: Helper = None", head=TC), HELPER: HELPER_OK,
    },
    # the run-time import next to the typing-only one
    "type_checking_and_runtime_import": {
        ADAPTER: init("self.helper = Helper()", head=TC + "else:\n    from models.demo.tt.helper "
                      "import Helper\n"), HELPER: HELPER_OK,
    },
    # a version gate with a fallback 3.10 takes
    "version_gate_with_fallback": {
        ADAPTER: decode("_cfg = tomllib.loads('')",
                        head=V311 + "else:\n    import json as tomllib\n"),
    },
    # the optional module is there
    "optional_module_present": {
        ADAPTER: init("self.helper = Helper()", head="try:\n    from models.demo.tt.helper import "
                      "Helper\nexcept ImportError:\n    Helper = None\n"), HELPER: HELPER_OK,
    },
    # a None fallback the body checks before calling
    "none_fallback_guarded": {
        ADAPTER: init("if DeviceSampler is not None:",
                      "    self.sampler = DeviceSampler(generator)",
                      head=f"try:\n    from {MISSING} import DeviceSampler\nexcept ImportError:\n"
                      "    DeviceSampler = None\n"),
    },
    # FP17: lazy module state bound through `global` by an init function run at import
    "fp17_global_in_module_function": {
        ADAPTER: decode("_n = len(_TABLE)", head="def _init():\n    global _TABLE\n    _TABLE = {}"
                        "\n\n\n_init()\n"),
    },
    # a callable attribute surely set (getattr without a default raises instead)
    "getattr_without_default": {
        ADAPTER: init("self._step = getattr(generator, 'decode')").replace(
            "        return sampling_params, (", "        self._step(tokens)\n"
            "        return sampling_params, (", 1),
    },
    "conditional_expression_both_callables": {
        ADAPTER: init("self._step = generator.decode if generator.n > 1 else generator.step")
        .replace("        return sampling_params, (", "        self._step(tokens)\n"
                 "        return sampling_params, (", 1),
    },
    # IM02b: the literal, then an item store of a literal in the class body
    "im02b_caps_item_store": {
        ADAPTER: caps_steps(CAPS_LINE.strip(),
                            'model_capabilities["supports_prefix_caching"] = False'),
    },
    # IM02: a comprehension over a class-body tuple, then item stores
    "im02_caps_comprehension": {
        ADAPTER: caps_steps('_KEYS = ("supports_sample_on_device", "supports_async_decode")',
                            "model_capabilities = {k: True for k in _KEYS}",
                            'model_capabilities["supports_device_penalties"] = False'),
    },
    "caps_update_literal": {
        ADAPTER: caps_steps('model_capabilities = {"supports_sample_on_device": True}',
                            'model_capabilities.update({"supports_device_penalties": False})'),
    },
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_name_python_310_leaves_unbound_is_refused(tmp_path: Path, name: str) -> None:
    assert_refused(tmp_path, *REFUSED[name])


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_name_python_310_binds_is_ok(tmp_path: Path, name: str) -> None:
    assert_binds(tmp_path, CONTROLS[name])


CASES = {**{n: files for n, (files, _, _) in REFUSED.items()}, **CONTROLS}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_skeleton_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    assert_round_trip(tmp_path, CASES[name])
