"""The parity checker against the sixth red team's content-flow attacks (rt45f, issue #45): an
input the plugin sends that carries content or a command must reach the code acting on it
unchanged. Each attack once read as binding (a false pass) and must now fail naming the
offender; each control (the correct form) still binds; the skeleton of every tree reads as the
tree. Python's behaviour for each case was checked by the red team's host harness (3.10).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.unit.test_contract_parity_redteam import ADAPTER, BASE, COMMIT, DECODE, TARGET, edit
from tests.unit.test_contract_parity_round4_flow import findings, write
from vllm_tt_plugin.contract.parity import Finding
from vllm_tt_plugin.contract.parity_rules import FAILING
from vllm_tt_plugin.contract.skeleton import write_skeletons

# The decode that hands every command on (the red team's good tree, shortened).
FULL = (
    "self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False, "
    "read_from_device=True, sampling_params=None, reload_inputs=True, reload_page_table=True, "
    "reload_sampling_params=True, reset_sampling_state=False, **kwargs"
)
SENDS = (
    "return self.generator.decode(tokens, start_pos, enable_trace, read_from_device, "
    "sampling_params, reload_inputs, reload_page_table, reload_sampling_params, "
    "reset_sampling_state, kwargs.get('slot_remap'))"
)
READ_BACK = """
    def read_decode_output(self, output, async_read=False):
        return self.generator.read(output, async_read)

    def process_decode_output_host(self, output, is_tokens=False):
        return self.generator.process(output, is_tokens)
"""


def adapter(decode: str, extra: str = "") -> str:
    """BASE with ``decode`` (a body, or a whole ``def``) as its decode, plus ``extra`` methods
    and the read-back hooks."""
    if not decode.lstrip().startswith("def "):
        decode = f"def decode_forward({FULL}):\n" + textwrap.indent(textwrap.dedent(decode), "    ")
    text = textwrap.indent(textwrap.dedent(decode).strip("\n"), "    ") + "\n"
    more = textwrap.indent(textwrap.dedent(extra).strip("\n"), "    ")
    return edit(BASE, (DECODE, text + ("\n" + more + "\n" if extra else "") + READ_BACK))


# `_decode` takes the plugin's keywords by name and uses sampling_params.
IMPL = f"""
def _decode({FULL}):
    {SENDS}
"""
STAR = "def decode_forward(self, *args, **kwargs):\n"
# An own helper taking the sampling parameters by name (a positional slot after kv_cache).
HELPER = """
def _decode(self, tokens, start_pos, page_table, kv_cache, enable_trace=False,
            sampling_params=None, **extra):
    return self.generator.decode(tokens, start_pos, enable_trace, sampling_params)
"""


def forward(*lines: str) -> str:
    return STAR + "".join(f"    {line}\n" for line in lines)


OVERWRITE = "set to a value of its own"
V1_DISCARD = (
    "self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False, "
    "read_from_device=True, sampling_params=None, slot_remap=None, **_"
)


READ = "kwargs.get('sampling_params')"


def dispatch(eager: str = "**kwargs") -> str:
    """decode_forward through ``self._decode_impl``, chosen in ``__init__`` between two own
    methods (``eager``: the eager one's parameters after kv_cache)."""
    sp = "sampling_params" if "=" in eager else READ
    impls = (
        f"def _decode_eager(self, tokens, start_pos, page_table, kv_cache, {eager}):\n"
        f"    return self.generator.decode(tokens, {sp})\n\n"
        + IMPL.replace("def _decode(", "def _decode_traced(")
    )
    text = adapter(forward("return self._decode_impl(*args, **kwargs)"), impls)
    own = "    def __init__(self, generator):\n        self.generator = generator\n"
    return edit(
        text,
        (
            own,
            own.replace("generator):", "generator, use_trace=True):")
            + "        self._decode_impl = (\n"
            "            self._decode_traced if use_trace else self._decode_eager)\n",
        ),
    )


def handle(init: str, dataclass: bool = False) -> str:
    """The served class on a base whose ``__init__`` sets the callable the decode calls, with
    ``init`` as its own ``__init__`` (or a ``@dataclass`` with a ``generator`` field)."""
    base = (
        "class _Handle:\n    def __init__(self, generator):\n        self.generator = generator\n"
        "        self._decode_step = generator.decode\n\n\n"
    )
    text = adapter("return self._decode_step(tokens, sampling_params)")
    text = edit(text, ("class DemoForCausalLM:", "class DemoForCausalLM(_Handle):"))
    own = "    def __init__(self, generator):\n        self.generator = generator\n"
    text = edit(text, (own, "    " + init if init else ""))
    if dataclass:
        text = edit(
            text,
            ("class DemoForCausalLM(", "@dataclass\nclass DemoForCausalLM("),
            (
                "decode_input_update_contract = 1\n",
                "decode_input_update_contract = 1\n    generator: object = None\n",
            ),
        )
        base = "from dataclasses import dataclass\n\n\n" + base
    return base + text


# name -> (adapter, method, failing statuses accepted, a word of the reason)
ATTACKS: dict[str, tuple[str, str, set[str], str]] = {
    # F17..F21: sampling_params replaced in the **kwargs handed on (device sampling lost).
    "f17_spread_then_key": (adapter(forward(
        "return self._decode(*args, **{**kwargs, 'sampling_params': None})"), IMPL),
        "decode_forward", {"dropped"}, OVERWRITE),
    "f18_update": (adapter(forward(
        "kwargs.update(sampling_params=None)", "return self._decode(*args, **kwargs)"), IMPL),
        "decode_forward", {"dropped"}, OVERWRITE),
    "f19_item_set": (adapter(forward(
        "kwargs['sampling_params'] = None", "return self._decode(*args, **kwargs)"), IMPL),
        "decode_forward", {"dropped"}, OVERWRITE),
    "f20_dict_call": (adapter(forward(
        "kwargs = dict(kwargs, sampling_params=None)", "return self._decode(*args, **kwargs)"),
        IMPL), "decode_forward", {"dropped"}, OVERWRITE),
    "f21_attribute_value": (adapter(forward(
        "kwargs = {**kwargs, 'sampling_params': self._greedy_params}",
        "return self._decode(*args, **kwargs)"), IMPL),
        "decode_forward", {"dropped"}, OVERWRITE),
    "f19b_on_a_branch": (adapter(forward(
        "if self.generator.greedy_only:", "    kwargs['sampling_params'] = None",
        "return self._decode(*args, **kwargs)"), IMPL),
        "decode_forward", {"unresolved"}, "on a path the checker does not evaluate"),
    # F44: decode sets the plugin's read_from_device itself (host tensors where the plugin
    # hands the result to read_decode_output(async_read=True)).
    "f29b_is_tokens_overwritten": (edit(adapter(SENDS), ("return self.generator.process(",
        "is_tokens = False\n        return self.generator.process(")),
        "process_decode_output_host", {"dropped"}, "'is_tokens'"),
    "f44_read_from_device_overwritten": (adapter("read_from_device = True\n" + SENDS),
        "decode_forward", {"dropped"}, "'read_from_device'"),
    # F27: prefill names empty_slots and hands the model None (rows land in other slots).
    "f27_empty_slots_ignored": (edit(BASE, ("return sampling_params, empty_slots\n",
        "return sampling_params, None\n")), "prefill_forward", {"dropped"}, "'empty_slots'"),
    # KW1: sampling_params handed to an own helper as `sampling=`, which lands in its unread
    # **extra while its own sampling_params stays None.
    "kw1_renamed_into_extra": (adapter(
        "return self._decode(tokens, start_pos, page_table, kv_cache, sampling=sampling_params)",
        HELPER), "decode_forward", {"dropped"}, "'sampling' (the plugin's 'sampling_params')"),
    # KW2: a positional swap into an own helper (sampling_params lands on enable_trace).
    "kw2_positional_swap": (adapter(
        "return self._decode(tokens, start_pos, page_table, kv_cache, sampling_params, "
        "enable_trace)", HELPER), "decode_forward", {"broken"},
        "'sampling_params' lands on 'enable_trace'"),
    # DC3b / DC3: the decode calls an attribute set only in a base __init__ that building the
    # model never runs (no super().__init__(), or a @dataclass subclass's generated __init__).
    "dc3b_base_init_not_called": (handle("def __init__(self, generator):\n"
        "        self.generator = generator\n"), "decode_forward", {"unresolved"},
        "_Handle.__init__, which building the model does not run"),
    "dc3_dataclass_subclass": (handle("", dataclass=True), "decode_forward", {"unresolved"},
        "_Handle.__init__, which building the model does not run"),
    # F06: decode hands on through self._decode_impl, which __init__ binds to one of two own
    # methods; the eager one cannot take the plugin's keywords (each candidate may serve).
    "f06_one_candidate_refuses": (dispatch("enable_trace=False, sampling_params=None"),
        "decode_forward", {"broken"}, "_decode_eager"),
    "f06c_bound_to_what_is_not_followed": (edit(dispatch(), (
        "self._decode_traced if use_trace else self._decode_eager",
        "getattr(self, '_decode_traced')")), "decode_forward", {"unresolved"},
        "self._decode_impl"),
    # F05: version 1 declared, the decode takes the reload commands into an unread `**_`.
    "f05_reload_commands_discarded": (adapter(f"def decode_forward({V1_DISCARD}):\n"
        "    return self.generator.decode(tokens, read_from_device, sampling_params, slot_remap)"),
        "decode_forward", {"dropped"}, "'reload_inputs'"),
    # H01: sampling_params stored in an attribute only a private method nothing calls reads.
    "h01_stored_for_an_uncalled_reader": (adapter(
        "self._pending = sampling_params\nreturn self.generator.decode(tokens, None)",
        "def _debug_state(self):\n    return {'sampling': self._pending}"),
        "decode_forward", {"dropped"}, "stored in self._pending"),
    # H03: appended to a local list nothing reads again.
    "h03_appended_to_an_unused_list": (adapter(
        "pending = []\npending.append(sampling_params)\n"
        "return self.generator.decode(tokens, None)"),
        "decode_forward", {"dropped"}, "'sampling_params'"),
    # Round trips. F35: every local handed on (`dict(locals())` holds `kwargs` too): the tree
    # is unresolved, and so must its skeleton be (it once dropped the binding and read the
    # parameters as unused). X1: device penalties allowed by default, the decode raises on
    # them: the first read in the `if` test runs on every call, as the skeleton must say.
    "f35_locals_handed_on": (adapter(
        "call = dict(locals())\ncall.pop('self')\nreturn self._decode(**call)", IMPL),
        "decode_forward", {"unresolved"}, "cannot count"),
    "x1_raises_on_the_histories": (edit(adapter(
        "if kwargs.get('prompt_tokens') is not None or kwargs.get('output_tokens') is not None:\n"
        "    raise NotImplementedError('no device penalties')\n" + SENDS),
        (', "supports_device_penalties": False', "")),
        # The penalised device call raises (round-6 guards: broken), which outranks the
        # histories' dropped finding it was written for.
        "decode_forward", {"dropped", "broken"}, "raises NotImplementedError"),
}  # fmt: skip

# The correct forms: each must bind.
CONTROLS: dict[str, str] = {
    "good": adapter(SENDS),
    "forward_untouched": adapter(forward("return self._decode(*args, **kwargs)"), IMPL),
    # A value taken from the key itself (converted) still carries the plugin's.
    "sampling_params_converted": adapter(forward(
        "kwargs['sampling_params'] = self._convert(kwargs.get('sampling_params'))",
        "return self._decode(*args, **kwargs)"),
        IMPL + "\ndef _convert(self, sp):\n    return sp\n"),
    "setdefault_keeps_the_plugins": adapter(forward(
        "kwargs.setdefault('sampling_params', None)", "return self._decode(*args, **kwargs)"),
        IMPL),
    # A key the plugin does not send (or does not carry content) may be set freely.
    "own_key_added": adapter(forward(
        "return self._decode(*args, **{**kwargs, 'trace_region': None})"),
        IMPL.replace("**kwargs", "trace_region=None, **kwargs")),
    "kw1_passed_by_its_name": adapter(
        "return self._decode(tokens, start_pos, page_table, kv_cache, "
        "sampling_params=sampling_params)", HELPER),
    "kw2_positional_in_order": adapter(
        "return self._decode(tokens, start_pos, page_table, kv_cache, enable_trace, "
        "sampling_params)", HELPER),
    "f06b_every_candidate_binds": dispatch(),
    "h01_stored_and_read_by_a_called_helper": adapter(
        "self._pending = sampling_params\nreturn self._step(tokens)",
        "def _step(self, tokens):\n    return self.generator.decode(tokens, self._pending)"),
    "h03_appended_list_handed_on": adapter(
        "pending = []\npending.append(sampling_params)\n"
        "return self.generator.decode(tokens, pending)"),
    "dc3_base_init_called": handle("def __init__(self, generator):\n"
        "        super().__init__(generator)\n"),
    "dc3_base_init_inherited": handle(""),
    # read_from_device used after a use-then-rebind: the plugin's value is read first.
    "read_from_device_used_then_rebound": adapter(
        "on_host = read_from_device\nread_from_device = True\n"
        + SENDS.replace("read_from_device, sampling", "on_host, sampling")),
}  # fmt: skip


# Documented limits (docs/CONTRACT_PARITY.md, "Content flow"): read as binding, on purpose.
# F26 / F29: read-back hooks that never mention async_read / is_tokens. The plugin always sends
# async_read=True, and a model may know what its output holds: whether the value handed back is
# right is not a question of the call. (A hook that sets either itself is reported.)
# F05b: version-1 reload commands a decode never reads, named or in a **kwargs not named `_...`.
LIMITS: dict[str, str] = {
    "f26_async_read_ignored": edit(adapter(SENDS), ("self.generator.read(output, async_read)",
        "self.generator.read(output, False)")),
    "f29_is_tokens_ignored": edit(adapter(SENDS), ("self.generator.process(output, is_tokens)",
        "self.generator.process(output, False)")),
    # F05b: the same commands in an ordinary **kwargs that is never read.
    "f05b_reload_commands_in_kwargs": adapter(
        f"def decode_forward({V1_DISCARD.replace('**_', '**kwargs')}):\n"
        "    return self.generator.decode(tokens, read_from_device, sampling_params, slot_remap)"),
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
