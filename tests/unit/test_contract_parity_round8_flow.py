"""The parity checker against the eighth red team's content-flow and warm-up attacks (rt45h
CK05, MM01, PF03, MM02, MM03, WU02, WU03): a value of the plugin's taken into a local mapping
whose key is then replaced, replaced by a choice on a setting of the model's, and a warm-up
whose guard flag lives outside the instance (the class, a module-level set, a ``global``).
Each attack read as binding on main (a false pass) and must now fail naming the offender; each
control (the form that keeps the plugin's value, or a guard the plugin resets) still binds;
the skeleton of every tree reads as the tree. The red team's Python 3.10 probes (probe2.py,
mmprobe.py, wu.py under /tmp/rt45h) showed the callee getting the replaced value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_holes import _decode, _findings, _tree
from tests.unit.test_contract_parity_redteam import ACTS, ADAPTER, BASE, DECODE, DECODE_V1, edit
from tests.unit.test_contract_parity_round7_names import (
    assert_binds,
    assert_refused,
    assert_round_trip,
)
from tests.unit.test_contract_parity_round7_returns import RIGHT, SENDS, _composed

PREFILL = "        return sampling_params, empty_slots\n\n    def decode_forward"


def _lines(body: str) -> str:
    return "".join(f"        {line}\n" for line in body.strip("\n").split("\n"))


def decode(body: str, extra: str = "") -> dict[str, str]:
    """BASE with ``body`` as its decode's body (``extra``: more methods after it)."""
    more = "".join(f"    {line}\n" for line in extra.strip("\n").split("\n")) if extra else ""
    new = f"    def decode_forward({DECODE_V1}):\n" + _lines(body) + more
    return {ADAPTER: edit(BASE, (DECODE, new))}


def prefill(body: str, head: str = "") -> dict[str, str]:
    """BASE with ``body`` run before its prefill returns (what it returns is the plugin's)."""
    text = edit(BASE, (PREFILL, _lines(body) + PREFILL))
    return {ADAPTER: head + text}


def warmup(body: str, head: str = "", attrs: str = "") -> dict[str, str]:
    """BASE plus a prefill warm-up with ``body`` (``attrs``: class-body lines)."""
    head_line = "    def warmup_model_prefill(self, kv_cache, enable_trace, **kwargs):\n"
    method = head_line + _lines(body)
    text = edit(BASE, (DECODE, DECODE + "\n" + method))
    if attrs:
        text = edit(text, ("    decode_input_update_contract = 1\n",
                           "    decode_input_update_contract = 1\n" + attrs))  # fmt: skip
    return {ADAPTER: head + text}


PENDING = ", ".join(f"{c}={c}" for c in ACTS.split(", "))
WARM = "self.generator.warmup(kv_cache, enable_trace)"
DEC, PRE, WUP = "decode_forward", "prefill_forward", "warmup_model_prefill"
FLAGS = ("flags = dict(sampling_params=sampling_params, reload_inputs=reload_inputs, "
         "reload_page_table=reload_page_table, reload_sampling_params=reload_sampling_params, "
         "reset_sampling_state=reset_sampling_state)")  # fmt: skip

# name -> (files, {method: status}, a fragment of the reason)
REFUSED: dict[str, tuple[dict[str, str], dict[str, str], str]] = {
    # Item 1 (CK05): commands built into a local dict, then set by the model before `**d`.
    "ck05_dict_call_key_set": (decode(f"{FLAGS}\nflags['reload_inputs'] = True\n"
        "flags['reset_sampling_state'] = False\nreturn self.generator.decode(tokens, **flags)"),
        {DEC: "dropped"}, "'reload_inputs', 'reset_sampling_state'"),
    "ck05b_dict_update": (decode(f"{FLAGS}\nflags.update(reload_page_table=False)\n"
        "return self.generator.decode(tokens, **flags)"), {DEC: "dropped"}, "reload_page_table"),
    "ck05d_merge_operator": (decode(f"{FLAGS}\nflags |= {{'reset_sampling_state': False}}\n"
        "return self.generator.decode(tokens, **flags)"), {DEC: "dropped"},
        "reset_sampling_state"),
    "ck05c_display_pop": (decode("call = {'tokens': tokens, 'sampling_params': sampling_params,"
        f" 'reload_inputs': reload_inputs}}\ncall.pop('reload_inputs')\ndel call['tokens']\n"
        f"return self.generator.decode(**call), ({ACTS.replace('reload_inputs, ', '')})"),
        {DEC: "dropped"}, "reload_inputs"),
    # Item 4 (HC04): commands stored in an attribute nothing reads; fixed ones handed on.
    "hc04_commands_stored_in_a_dict": (decode(f"self._pending = dict({PENDING})\n"
        "return sampling_params, (True, True, True, False)"), {DEC: "dropped"},
        "reset_sampling_state (stored in self._pending"),
    "hc04b_commands_stored_in_a_tuple": (decode(
        "self._cmds = (reload_inputs, reset_sampling_state)\n"
        "return sampling_params, (True, reload_page_table, reload_sampling_params, False)"),
        {DEC: "dropped"}, "reload_inputs (stored in self._cmds"),
    "hc04c_display": (decode("self._pending = {'reload': reload_page_table}\n"
        "return sampling_params, (reload_inputs, True, reload_sampling_params, "
        "reset_sampling_state)"), {DEC: "dropped"}, "reload_page_table (stored in self._pending"),
    # MM01: content in a local dict whose key is replaced before the dict is read.
    "mm01_content_key_replaced": (prefill("mm = {'sampling': sampling_params}\n"
        "mm['sampling'] = None\nsampling_params = self.generator.prefill(tokens, mm['sampling'])"),
        {PRE: "dropped"}, "sampling_params"),
    # Item 2 (PF03, MM03): a choice between the plugin's value and the model's own.
    "pf03_choice_on_own_setting": (prefill(
        "sampling_params = None if self._host_sampling else sampling_params"),
        {PRE: "dropped"}, "sampling_params"),
    "mm03_choice_other_branch": (prefill(
        "sampling_params = sampling_params if self._device_sampling else None"),
        {PRE: "dropped"}, "sampling_params"),
    "pf03b_local_copy": (prefill(
        "sp = None if self.cfg.host_sampling else sampling_params\nsampling_params = sp"),
        {PRE: "dropped"}, "sampling_params"),
    # MM02: replaced under a test of the model's own setting.
    "mm02_replaced_under_if": (prefill("if not self._vision_enabled:\n    sampling_params = None"),
        {PRE: "dropped"}, "sampling_params"),
    "mm02b_command_under_if": (decode(f"if self._static_pages:\n    reload_page_table = False\n"
        f"return sampling_params, ({ACTS})"), {DEC: "dropped"}, "reload_page_table"),
    # Item 5 (WU02, WU03): the warm-up's flag outside the instance.
    "wu03_class_attribute": (warmup(f"if type(self)._warmed:\n    return None\n"
        f"type(self)._warmed = True\n{WARM}", attrs="    _warmed = False\n"),
        {WUP: "dropped"}, "type(self)._warmed"),
    "wu03b_dunder_class": (warmup(f"if self.__class__._warmed:\n    return\n"
        f"self.__class__._warmed = True\n{WARM}", attrs="    _warmed = False\n"),
        {WUP: "dropped"}, "self.__class__._warmed"),
    "wu03c_class_by_name": (warmup(f"if DemoForCausalLM.warm_done is True:\n    return\n"
        f"DemoForCausalLM.warm_done = True\n{WARM}", attrs="    warm_done = False\n"),
        {WUP: "dropped"}, "DemoForCausalLM.warm_done"),
    "wu02_module_set": (warmup(f"if id(self) in _WARMED:\n    return None\n"
        f"_WARMED.add(id(self))\n{WARM}", head="_WARMED = set()\n"),
        {WUP: "dropped"}, "id(self) in _WARMED"),
    "wu02b_module_dict": (warmup(f"if _DONE.get('prefill'):\n    return\n"
        f"_DONE['prefill'] = True\n{WARM}", head="_DONE = {}\n"),
        {WUP: "dropped"}, "'prefill' in _DONE"),
    "wu02c_global_bool": (warmup(f"global _WARMED_ONCE\nif _WARMED_ONCE:\n    return\n"
        f"_WARMED_ONCE = True\n{WARM}", head="_WARMED_ONCE = False\n"),
        {WUP: "dropped"}, "_WARMED_ONCE"),
    # The class's flag under the plugin's name: the plugin resets the instance's only.
    "wu03d_class_flag_named_as_the_plugins": (warmup(
        f"if type(self).already_warmed_up_prefill:\n    return\n"
        f"type(self).already_warmed_up_prefill = True\n{WARM}",
        attrs="    already_warmed_up_prefill = False\n"),
        {WUP: "dropped"}, "type(self).already_warmed_up_prefill"),
}  # fmt: skip

CONTROLS: dict[str, dict[str, str]] = {
    # Stored commands a method the decode calls reads back.
    "stored_commands_read_back": decode(f"self._pending = dict({PENDING})\n"
        "return sampling_params, self.pending()", "def pending(self):\n    return self._pending"),
    # The dict keeps the plugin's commands; a key the plugin did not send is added.
    "dict_call_keeps_commands": decode(f"{FLAGS}\nflags['slot_remap'] = None\n"
        "return self.generator.decode(tokens, **flags)"),
    # Read before the key is replaced: the plugin's value reached the callee.
    "dict_read_before_replace": decode(f"{FLAGS}\nout = self.generator.decode(tokens, **flags)\n"
        "flags['reload_inputs'] = False\nreturn out"),
    # Replaced only on some calls (under a test): not followed, the value may arrive.
    "dict_replaced_under_test": decode(f"{FLAGS}\nif tokens is None:\n"
        "    flags['reload_inputs'] = True\nreturn self.generator.decode(tokens, **flags)"),
    # A default for a value the plugin did not send (the test reads the value itself).
    "choice_on_the_value_itself": prefill(
        "sampling_params = self._default if sampling_params is None else sampling_params"),
    "if_on_the_value_itself": prefill("if sampling_params is None:\n"
        "    sampling_params = self._default"),
    # Both branches carry something of the plugin's.
    "choice_between_plugin_values": prefill(
        "sampling_params = sampling_params if self._flat else [sampling_params]"),
    # The plugin resets this instance flag before its traced round.
    "warmup_on_the_plugins_instance_flag": warmup(f"if self.already_warmed_up_prefill:\n"
        f"    return\nself.already_warmed_up_prefill = True\n{WARM}"),
    # A module-level set keyed on the trace mode: the traced round runs.
    "warmup_keyed_on_trace": warmup(f"if (id(self), enable_trace) in _WARMED:\n    return\n"
        f"{WARM}\n_WARMED.add((id(self), enable_trace))", head="_WARMED = set()\n"),
    # A local flag dies with the call.
    "warmup_local_flag": warmup(f"done = False\nif done:\n    return\ndone = True\n{WARM}"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_replaced_value_is_refused(tmp_path: Path, name: str) -> None:
    files, expected, reason = REFUSED[name]
    assert_refused(tmp_path, files, expected, reason)


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_the_plugins_value_kept_binds(tmp_path: Path, name: str) -> None:
    assert_binds(tmp_path, CONTROLS[name])


CASES = {**{n: files for n, (files, _, _) in REFUSED.items()}, **CONTROLS}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_skeleton_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    assert_round_trip(tmp_path, CASES[name])


# --- Item 3 (CK15, CK03, PF01): the composed generator's call made through locals ------------
# (composed_locals). The skeleton keeps the adapter's composed calls elided: the documented
# round-trip limit of the composed-generator rule (docs/CONTRACT_PARITY.md), as CK01/CK04.
def _gen(body: str) -> str:
    return _composed("".join(f"        {line}\n" for line in body.strip("\n").split("\n")))


COMPOSED_REFUSED: dict[str, tuple[str, str]] = {
    "ck15_partial_then_call": (_gen("step = functools.partial(self.generator.decode, tokens)\n"
        "return step(enable_trace, sampling_params, reload_inputs, reload_page_table)"),
        "'sampling_params' lands on 'enable_trace'"),
    "ck15b_partial_keywords": (_gen("from functools import partial\n"
        "step = partial(self.generator.decode, tokens, reload_inputs=reload_page_table)\n"
        "return step(sampling_params, enable_trace, reload_page_table=reload_inputs)"),
        "'reload_page_table' lands on 'reload_inputs'"),
    "ck03_tuple_swap": (_gen("sampling_params, enable_trace = enable_trace, sampling_params\n"
        f"return self.generator.decode({RIGHT})"), "'enable_trace' lands on 'sampling_params'"),
    "ck03b_plain_rebind": (_gen(f"reload_inputs = reload_page_table\n"
        f"return self.generator.decode({RIGHT})"), "'reload_page_table' lands on 'reload_inputs'"),
    "pf01_dict_display_swap": (_gen(
        "call = {'sampling_params': enable_trace, 'enable_trace': sampling_params}\n"
        "return self.generator.decode(tokens, reload_inputs=reload_inputs, "
        "reload_page_table=reload_page_table, **call)"),
        "'enable_trace' lands on 'sampling_params'"),
    "pf01b_dict_call_swap": (_gen(
        "call = dict(reload_inputs=reload_page_table, reload_page_table=reload_inputs)\n"
        "return self.generator.decode(tokens, sampling_params, enable_trace, **call)"),
        "'reload_page_table' lands on 'reload_inputs'"),
}  # fmt: skip
COMPOSED_CONTROLS: dict[str, str] = {
    "partial_in_order": _gen("step = functools.partial(self.generator.decode, tokens, "
        "sampling_params)\nreturn step(enable_trace, reload_inputs, reload_page_table)"),
    "dict_in_order": _gen("call = dict(reload_inputs=reload_inputs, "
        "reload_page_table=reload_page_table)\n"
        "return self.generator.decode(tokens, sampling_params, enable_trace, **call)"),
    "rebound_from_a_call": _gen("enable_trace = bool(enable_trace)\n"
        f"return self.generator.decode({RIGHT})"),
    # Bound twice: not followed (the call as written is bound, and binds).
    "mapping_bound_twice": _gen("call = dict(reload_inputs=reload_inputs)\n"
        "call = dict(reload_inputs=reload_inputs, reload_page_table=reload_page_table)\n"
        "return self.generator.decode(tokens, sampling_params, enable_trace, **call)"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(COMPOSED_REFUSED))
def test_a_composed_call_through_locals_binds_as_python_does(tmp_path: Path, name: str) -> None:
    adapter, words = COMPOSED_REFUSED[name]
    status, detail = _findings(_tree(tmp_path, adapter))[DEC]
    assert status == "broken" and words in detail, detail


@pytest.mark.parametrize("name", sorted(COMPOSED_CONTROLS))
def test_a_composed_call_through_locals_in_order_binds(tmp_path: Path, name: str) -> None:
    status, detail = _findings(_tree(tmp_path, COMPOSED_CONTROLS[name]))[DEC]
    assert status in ("ok", "drift"), detail


# --- Item 6 (RT02): the decode's result returned by a nested function it does not return -----
RETURNS: dict[str, tuple[str, str]] = {
    "rt02_nested_def_result_dropped": (_decode(
        f"        def _run():\n            return {SENDS}\n        _run()"), "broken"),
    "rt02b_result_kept_in_a_local": (_decode(
        f"        def _run():\n            return {SENDS}\n        self._out = _run()"), "broken"),
    # Held before round 8 (a nested class's methods were already skipped): kept as a spelling.
    "rt02c_nested_class": (_decode(
        f"        class _Step:\n            def run(inner):\n                return {SENDS}\n"
        "        self._out = _Step().run()"), "broken"),
    "nested_def_result_returned": (_decode(
        f"        def _run():\n            return {SENDS}\n        return _run()"), "ok"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(RETURNS))
def test_a_nested_functions_return_is_not_the_decodes(tmp_path: Path, name: str) -> None:
    adapter, expected = RETURNS[name]
    status, detail = _findings(_tree(tmp_path, adapter))[DEC]
    assert status == expected or (expected == "ok" and status == "drift"), detail
    if expected == "broken":
        assert "never returns a value" in detail, detail
