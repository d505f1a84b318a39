"""The parity checker against the seventh red team's content-flow and command attacks (rt45g,
items 5, 6, 10, 13): the plugin's content or command overwritten in a binding form the
overwrite rule missed, a reload command taken and not acted on, content kept for a reader
nothing calls, and a warm-up its own flag turns into a no-op on the plugin's traced call. Each
attack once read as binding (a false pass) and must now fail naming the offender; each control
(the correct form) still binds; the skeleton of every tree reads as the tree. Python's
behaviour for each case was checked by the red team's 3.10 probe (/tmp/rt45g/probe.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_redteam import ADAPTER, COMMIT, CONTRACT, TARGET, edit
from tests.unit.test_contract_parity_round4_flow import findings, write
from tests.unit.test_contract_parity_round6_flow import SENDS, adapter
from vllm_tt_plugin.contract.parity import Finding
from vllm_tt_plugin.contract.parity_rules import FAILING
from vllm_tt_plugin.contract.skeleton import write_skeletons

ACTS = "reload_inputs, reload_page_table, reload_sampling_params, reset_sampling_state"
# The decode's call without sampling_params / read_from_device (each case adds its own).
CALL = f"return self.generator.decode(tokens, {ACTS}, "
NEVER = "never uses"
V0 = (
    "self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False, "
    "read_from_device=True, sampling_params=None, reset_batch=False"
)


def v0(body: str, sig: str = V0) -> str:
    """A version-0 class (no contract declared) whose decode is ``body``."""
    return edit(adapter(f"def decode_forward({sig}):\n" + _indent(body)), (CONTRACT, ""))


def _indent(body: str) -> str:
    return "".join(f"    {line}\n" for line in body.strip("\n").split("\n"))


def warmup(body: str) -> str:
    """The good decode plus a prefill warm-up with ``body``."""
    return adapter(SENDS, "def warmup_model_prefill(self, kv_cache, enable_trace, **kwargs):\n"
                   + _indent(body))  # fmt: skip


WARM = "self.generator.warmup(kv_cache, enable_trace)"
READER = "def last_sampling_params(self):\n    return self._last_sampling"
STORED = f"self._last_sampling = sampling_params\n{CALL}read_from_device)"

# name -> (adapter, method, failing statuses accepted, a word of the reason)
ATTACKS: dict[str, tuple[str, str, set[str], str]] = {
    # Item 5: the plugin's value bound again before its use, in every binding form.
    "c02_tuple_unpacking": (adapter("tokens, sampling_params = tokens, None\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    "c02b_list_target": (adapter("[sampling_params, extra] = [None, tokens]\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    "c02c_starred_target": (adapter("*rest, sampling_params = (tokens, None)\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    "c02d_chained": (adapter("spare = sampling_params = None\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    "c08_tuple_command": (adapter(
        "enable_trace, read_from_device = enable_trace, True\n" + SENDS),
        "decode_forward", {"dropped"}, "'read_from_device'"),
    "c09_augmented": (adapter("read_from_device |= True\n" + SENDS),
        "decode_forward", {"dropped"}, "'read_from_device'"),
    "c09b_or_true": (adapter("read_from_device = read_from_device or True\n" + SENDS),
        "decode_forward", {"dropped"}, "'read_from_device'"),
    "c12_for_target": (adapter("for sampling_params in (None,):\n    pass\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    "c15_finally": (adapter("try:\n    pass\nfinally:\n    sampling_params = None\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    "walrus_statement": (adapter("(sampling_params := None)\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    "with_as": (adapter("with self.generator.lock() as sampling_params:\n    pass\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    "match_capture": (adapter(
        "match tokens:\n    case _:\n        sampling_params = None\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    "both_branches": (adapter("if enable_trace:\n    sampling_params = None\nelse:\n"
        "    sampling_params = self.generator.greedy\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    "del_then_rebind": (adapter("del sampling_params\nsampling_params = None\n" + SENDS),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    # M04's shape on **kwargs content: read in a tuple, then replaced before the call.
    "m04_read_in_a_tuple_then_replaced": (adapter(
        "def decode_forward(self, tokens, start_pos, page_table, kv_cache, **kwargs):\n"
        "    sp, rd = kwargs.get('sampling_params'), kwargs.get('read_from_device')\n"
        "    sp = None\n"
        "    return self.generator.decode(tokens, sp, rd, kwargs)"),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    # Item 6: the version's reload commands taken and not acted on.
    "c04_commands_deleted": (adapter(f"del {ACTS}\n{CALL}read_from_device, sampling_params)"),
        "decode_forward", {"dropped"}, "'reset_sampling_state'"),
    "c06_commands_only_logged": (adapter(
        f"print({ACTS})\n{CALL.replace(ACTS, 'True, True, True, False')}read_from_device, "
        "sampling_params)"), "decode_forward", {"dropped"}, "'reload_inputs'"),
    "c06b_commands_in_an_unread_local": (adapter(
        f"flags = ({ACTS})\n{CALL.replace(ACTS, 'True, True, True, False')}read_from_device, "
        "sampling_params)"), "decode_forward", {"dropped"}, "'reload_page_table'"),
    "c07_unused_kwargs": (adapter(
        "def decode_forward(self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False,"
        " read_from_device=True, sampling_params=None, **unused_kwargs):\n"
        "    return self.generator.decode(tokens, read_from_device, sampling_params, "
        "unused_kwargs.get('slot_remap'))"), "decode_forward", {"dropped"}, "'reload_inputs'"),
    "c07b_popped_and_discarded": (adapter(
        "def decode_forward(self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False,"
        " read_from_device=True, sampling_params=None, **kwargs):\n"
        "    kwargs.pop('reload_sampling_params', None)\n"
        "    return self.generator.decode(tokens, read_from_device, sampling_params, **kwargs)"),
        "decode_forward", {"dropped"}, "'reload_sampling_params'"),
    "t07_reset_batch_unused": (v0("return self.generator.decode(tokens, sampling_params)"),
        "decode_forward", {"dropped"}, "'reset_batch'"),
    "t07b_reset_batch_discarded": (v0(
        "return self.generator.decode(tokens, sampling_params)",
        V0.replace("reset_batch=False", "**_")), "decode_forward", {"dropped"}, "'reset_batch'"),
    "t07c_reset_batch_overwritten": (v0(
        "reset_batch = False\nreturn self.generator.decode(tokens, sampling_params, reset_batch)"),
        "decode_forward", {"dropped"}, "'reset_batch'"),
    # Item 10: content kept only for a reader nothing the plugin drives reaches.
    "r10_public_reader_nobody_calls": (adapter(STORED, READER),
        "decode_forward", {"dropped"}, "stored in self._last_sampling"),
    "r10b_property_nobody_reads": (adapter(STORED, "@property\n" + READER),
        "decode_forward", {"dropped"}, "stored in self._last_sampling"),
    "r10c_reader_called_by_an_unreached_method": (adapter(STORED, READER
        + "\n\ndef debug_dump(self):\n    return {'sp': self.last_sampling_params()}"),
        "decode_forward", {"dropped"}, "stored in self._last_sampling"),
    # Item 13: a warm-up guarded by its own flag, which its first (untraced) call sets.
    "r13_own_flag": (warmup(f"if self._prefill_warmed:\n    return None\n"
        f"self._prefill_warmed = True\n{WARM}"),
        "warmup_model_prefill", {"dropped"}, "self._prefill_warmed"),
    "r13b_getattr_setattr": (warmup(f"if getattr(self, '_warm', False):\n    return\n"
        f"setattr(self, '_warm', True)\n{WARM}"), "warmup_model_prefill", {"dropped"},
        "self._warm"),
    "r13c_decode_warmup": (adapter(SENDS, "def warmup_model_decode(self, kv_cache, enable_trace,"
        " **kwargs):\n    if self._decode_done is True:\n        return\n"
        f"    self._decode_done = True\n    {WARM}"),
        "warmup_model_decode", {"dropped"}, "self._decode_done"),
}  # fmt: skip

# The correct forms: each must bind.
CONTROLS: dict[str, str] = {
    "good": adapter(SENDS),
    # A rebinding on some paths only: the plugin's value may still arrive.
    "rebound_on_a_branch": adapter(
        "if sampling_params is None:\n    sampling_params = self.generator.greedy\n" + SENDS),
    "unpacked_from_itself": adapter("tokens, sampling_params = tokens, sampling_params\n" + SENDS),
    "except_as_on_the_error_path_only": adapter(
        "try:\n    self.generator.check(tokens)\nexcept ValueError as sampling_params:\n"
        "    raise\n" + SENDS),
    "augmented_with_its_own_value": adapter("read_from_device |= self.generator.force\n" + SENDS),
    "or_with_its_own_value": adapter(
        "read_from_device = read_from_device or self.generator.force\n" + SENDS),
    "comprehension_variable_of_that_name": adapter(
        "rows = [sampling_params for sampling_params in self.generator.rows]\n"
        + SENDS.replace("sampling_params, reload", "sampling_params, rows, reload")),
    # Commands acted on by a decision, or by a value that flows on.
    "commands_decided_on": adapter(
        "if reload_inputs or reload_page_table:\n    self.generator.reload(tokens)\n"
        "if reset_sampling_state:\n    self.generator.reset(sampling_params)\n"
        "changed = reload_sampling_params is True\n"
        "return self.generator.decode(tokens, read_from_device, sampling_params, changed)"),
    "command_through_bool": adapter(
        f"return self.generator.decode(tokens, read_from_device, sampling_params, {ACTS}, "
        "force=bool(reload_inputs))"),
    "reset_batch_decided_on": v0(
        "return self.generator.decode(tokens, sampling_params, force=bool(reset_batch))"),
    "reset_batch_in_a_branch": v0(
        "if reset_batch:\n    self.generator.reload(tokens)\n"
        "return self.generator.decode(tokens, sampling_params)"),
    # A reader the decode reaches (by name, or through a getattr).
    "r10_reader_called": adapter(
        f"self._last_sampling = sampling_params\n{CALL}read_from_device, "
        "self.last_sampling_params())", READER),
    "r10_reader_called_through_getattr": adapter(
        f"self._last_sampling = sampling_params\n{CALL}read_from_device, "
        "getattr(self, 'last_sampling_params')())", READER),
    # tt-metal's own guard (the plugin resets it before the traced round), and a flag set only
    # when the trace was captured.
    "warmup_on_the_plugins_flag": warmup(
        f"if self.already_warmed_up_prefill:\n    return\n"
        f"self.already_warmed_up_prefill = True\n{WARM}"),
    "warmup_flag_set_when_traced": warmup(
        f"if self._captured:\n    return\n{WARM}\nif enable_trace:\n    self._captured = True"),
}  # fmt: skip

# Documented limits (docs/CONTRACT_PARITY.md, "Content flow"): read as binding, on purpose.
LIMITS: dict[str, str] = {
    # F05b: a version-1 command the body never mentions (the corpus trees were written so).
    "c05_commands_never_mentioned": adapter(
        f"{CALL.replace(ACTS, 'True, True, True, False')}read_from_device, sampling_params)"),
    # A loop that may not run leaves the plugin's value in place on that path.
    "for_target_over_an_unknown_iterable": adapter(
        "for sampling_params in self.generator.extra:\n    pass\n" + SENDS),
}  # fmt: skip


def _failing(found: dict[str, list[Finding]]) -> list[tuple[str, str]]:
    return [(f.status, f.detail) for fs in found.values() for f in fs if f.status in FAILING]


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_attack_is_not_read_as_binding(tmp_path: Path, name: str) -> None:
    text, method, statuses, offender = ATTACKS[name]
    found = findings(write(tmp_path, {ADAPTER: text}))
    hit = [f for f in found.get(method, []) if f.status in statuses and offender in f.detail]
    assert hit, found.get(method)


@pytest.mark.parametrize("name", sorted([*CONTROLS, *LIMITS]))
def test_the_correct_form_binds(tmp_path: Path, name: str) -> None:
    found = findings(write(tmp_path, {ADAPTER: {**CONTROLS, **LIMITS}[name]}))
    assert not _failing(found), found


def _statuses(found: dict[str, list[Finding]]) -> dict[str, list[str]]:
    return {m: sorted(f.status for f in fs) for m, fs in found.items()}


@pytest.mark.parametrize("name", sorted([*ATTACKS, *CONTROLS, *LIMITS]))
def test_the_skeleton_of_a_tree_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    text = ATTACKS[name][0] if name in ATTACKS else {**CONTROLS, **LIMITS}[name]
    tree = write(tmp_path / "tree", {ADAPTER: text})
    write_skeletons(tree, tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    skeleton = (tmp_path / "skel" / ADAPTER).read_text()
    assert _statuses(findings(tmp_path / "skel")) == _statuses(findings(tree)), skeleton
