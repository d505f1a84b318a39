"""Red-team round 5 (rt45e), kwargs flow and binding by position: each adapter edit below
once passed as "binds" (or failed for a reason Python never gives); each must now get the
status shown with a reason naming the offender, its control must still bind, and the skeleton
of each tree must read as the tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_holes import (
    BASE,
    DECODE,
    SIG,
    STAR,
    _decode,
    _findings,
    _tree,
    assert_skeleton_reads_as_tree,
)

NO_SP = SIG.replace(" sampling_params=None,", "")
LOAD = "cls, hf_config, mesh_device, max_batch_size, *"
ALLOC = "self, kv_cache_shape, dtype, num_layers"
PREFILL = "    def prefill_forward("
PREFILL_SIG = BASE.split(PREFILL)[1].split("):\n")[0]
IMPL = (
    "    def _impl(self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False,\n"
    "              read_from_device=True, sampling=None, reload_inputs=True,\n"
    "              reload_page_table=True, reload_sampling_params=True,\n"
    "              reset_sampling_state=False, slot_remap=None):\n"
    "        return self.generator.decode(tokens, sampling, slot_remap)\n"
)
# A base class in the same module whose decode takes the plugin's keywords in its own order.
BASE_CLASS = """
class _Base:
    def {name}(self, tokens, start_pos, page_table, kv_cache, enable_trace=True,
                       {order}, *, reload_inputs=True, reload_page_table=True,
                       reload_sampling_params=True, reset_sampling_state=False,
                       slot_remap=None{more}):
        return self.generator.decode(tokens, sampling_params, read_from_device, slot_remap{reads})
"""
SAME_ORDER = "read_from_device=True, sampling_params=None"


def _with_base(
    body: str, sig: str, order: str = SAME_ORDER, more: str = "", reads: str = "",
    name: str = "decode_forward",
) -> str:  # fmt: skip
    adapter = _decode(body, sig=sig).replace("DemoForCausalLM:", "DemoForCausalLM(_Base):")
    return BASE_CLASS.format(order=order, more=more, reads=reads, name=name) + adapter


def _aliased(alias: str, more: str = "") -> str:
    """``decode_forward = _Base.decode_text`` in place of the adapter's own def."""
    base = BASE_CLASS.format(order=SAME_ORDER, more=more, reads="", name="decode_text")
    adapter = BASE.replace(DECODE, f"    decode_forward = {alias}\n").replace(
        "DemoForCausalLM:", "DemoForCausalLM(_Base):"
    )
    return base + adapter


ALLOC_DEF = (
    "    def allocate_kv_cache(self, kv_cache_shape, dtype, num_layers):\n        return None\n"
)


def _allocates(function: str) -> str:
    """``allocate_kv_cache(*args, **kwargs)`` handing on to a module function, as every real
    adapter allocates (``function``: its def or import)."""
    forward = (
        "    def allocate_kv_cache(self, *args, **kwargs):\n"
        "        return allocate_vllm_kv_cache(*args, **kwargs, model=self.generator)\n"
    )
    return function + BASE.replace(ALLOC_DEF, forward)


VALIDATE = (
    "    def _validate(self, sp):\n        if sp is not None:\n"
    "            assert len(sp.temperature) > 0\n"
)
CONFIGURE = "    def _validate(self, sp):\n        return self.generator.configure(sp)\n"
HANDS_SP = (
    "        sp = kwargs.pop('sampling_params', None)\n        self._validate(sp)\n"
    "        return self.generator.decode(tokens, kwargs.get('slot_remap'))"
)
PICK = "    def _pick(self, kw):\n        return kw.get('{key}')\n"
PICK_FN = "def _pick(kw):\n    return kw.get('{key}')\n"
PICKS = "        return self.generator.decode(tokens, {call}(kwargs), kwargs.get('slot_remap'))"


def _picks(key: str, module_function: bool) -> str:
    """The **kwargs mapping handed whole to a helper that reads ``key`` from it."""
    if module_function:
        return PICK_FN.format(key=key) + _decode(PICKS.format(call="_pick"), sig=NO_SP)
    return _decode(PICKS.format(call="self._pick"), PICK.format(key=key), NO_SP)


MOVE = "        kwargs['sampling'] = kwargs.pop('sampling_params', None)\n"
ALL_KEYS = (
    '_KEYS = ("tokens", "start_pos", "page_table", "kv_cache", "enable_trace", '
    '"read_from_device", "sampling_params", "reload_inputs", "reload_page_table", '
    '"reload_sampling_params", "reset_sampling_state", "slot_remap")\n'
)
NO_CONTENT_KEYS = ALL_KEYS.replace('"sampling_params", ', "")
FILTER = "        kwargs = {k: v for k, v in kwargs.items() if k %s}\n"
IMPL_KW = (
    "    def _impl(self, tokens, start_pos, page_table, kv_cache, **kwargs):\n"
    "        return self.generator.decode(tokens, kwargs.get('sampling_params'),\n"
    "                                     kwargs.get('slot_remap'))\n"
)
FORWARD_IMPL = "        return self._impl(*args, **kwargs)"


def _prefill(body: str, extra: str = "") -> str:
    head = PREFILL + PREFILL_SIG + "):\n"
    rest = BASE.split(head)[1].split("\n\n", 1)[1]
    return BASE.split(head)[0] + f"{PREFILL}self, *args, **kwargs):\n{body}\n\n{extra}\n" + rest


def _warmup(body: str) -> str:
    head = "\n    def warmup_model_decode(self, kv_cache, enable_trace, **kwargs):\n"
    return BASE + head + body + "\n"


POSITIONAL_FORWARD = (
    "        return super().decode_forward(tokens, start_pos, page_table, kv_cache, enable_trace,\n"
    "                                      read_from_device, sampling_params, **kwargs)"
)
POSITIONAL_SIG = (
    "self, tokens, start_pos, page_table, kv_cache, enable_trace=False, read_from_device=True, "
    "sampling_params=None, **kwargs"
)
CONSUMES = "self, *args, read_from_device=True, **kwargs"
# (name, adapter, method, status, text the reason must hold)
REFUSED = [
    # B06: a used pop without a default is a required read (a KeyError on host-sampled decodes)
    ("b06_used_pop", _decode(
        "        sp = kwargs.pop('sampling_params')\n"
        "        return self.generator.decode(tokens, sp)", sig=NO_SP),
     "decode_forward", "broken", "kwargs['sampling_params']"),
    # B02: the pop inside the forward's own arguments
    ("b02_pop_in_call", _decode(
        "        return self._impl(*args, sampling=kwargs.pop('sampling_params'), **kwargs)",
        IMPL, STAR), "decode_forward", "broken", "kwargs['sampling_params']"),
    # B01: the pop's value stored under another key
    ("b01_pop_renamed", _decode(
        "        kwargs['sampling'] = kwargs.pop('sampling_params')\n"
        "        return self._impl(*args, **kwargs)", IMPL, STAR),
     "decode_forward", "broken", "kwargs['sampling_params']"),
    # I01: the warm-up's translated name
    ("i01_warmup_pop", _warmup(
        "        blocks = kwargs.pop('num_gpu_blocks')\n"
        "        return self.generator.warm(kv_cache, blocks)"),
     "warmup_model_decode", "broken", "kwargs['num_gpu_blocks']"),
    # R02's honest half: a handler that does not catch the KeyError guards nothing
    ("r02_wrong_handler", _decode(
        "        try:\n            sp = kwargs['sampling_params']\n"
        "        except ValueError:\n            sp = None\n"
        "        return self.generator.decode(tokens, sp)", sig=NO_SP),
     "decode_forward", "unresolved", "kwargs['sampling_params']"),
    # A15b / A15: *args read by position in a method the plugin calls all by keyword
    ("a15b_args_index", _prefill(
        "        batch = args[0].shape[0]\n        return self._prefill(batch, **kwargs)",
        "    def _prefill(self, batch, tokens, page_table, kv_cache, prompt_lens, **kwargs):\n"
        "        return self.generator.prefill(batch, tokens, kwargs.get('sampling_params'))\n"),
     "prefill_forward", "broken", "args[0]"),
    ("a15_args_unpack", _prefill(
        "        tokens, page_table, kv_cache = args[:3]\n"
        "        return self.generator.prefill(tokens, page_table, kv_cache, **kwargs)"),
     "prefill_forward", "broken", "args[:3]"),
    # J01 / J02: the positionally called methods with two parameters swapped
    ("j01_load_swap", BASE.replace(LOAD, "cls, hf_config, max_batch_size, mesh_device, *"),
     "initialize_vllm_model", "broken", "'mesh_device' lands on 'max_batch_size'"),
    ("j02_alloc_swap", BASE.replace(ALLOC, "self, kv_cache_shape, num_layers, dtype"),
     "allocate_kv_cache", "broken", "'dtype' lands on 'num_layers'"),
    # U03: a positional forward into a base that orders the two keywords the other way
    ("u03_positional_forward", _with_base(
        POSITIONAL_FORWARD, POSITIONAL_SIG, "sampling_params=None, read_from_device=True"),
     "decode_forward", "broken", "'sampling_params' lands on 'read_from_device'"),
    # E02: read_from_device consumed, the base runs with its own default
    # B08: content moved to a key the base takes into an unread **kwargs
    ("b08_moved_key", _with_base(MOVE + "        return super().decode_forward(*args, **kwargs)",
                                 STAR, more=", **kwargs"),
     "decode_forward", "dropped", "'sampling' (the plugin's 'sampling_params')"),
    # A22: an allow-list (a module constant) that leaves sampling_params out
    ("a22_allow_list", NO_CONTENT_KEYS + _decode(FILTER % "in _KEYS" + FORWARD_IMPL, IMPL_KW, STAR),
     "decode_forward", "dropped", "a key filter"),
    ("a22_deny_list", _decode(FILTER % "not in ('sampling_params',)" + FORWARD_IMPL, IMPL_KW,
                              STAR), "decode_forward", "dropped", "'sampling_params'"),
    # A21: a filter the checker cannot evaluate (not the TypeError Python never raises)
    ("a21_signature_filter", "import inspect\n" + _decode(
        "        accepted = inspect.signature(self._impl).parameters\n"
        + FILTER % "in accepted" + FORWARD_IMPL, IMPL, STAR),
     "decode_forward", "unresolved", "filters **kwargs by `accepted`"),
    # T06's honest half: the alias binds like the base's function, so its break shows
    ("t06_alias_breaks", _aliased("_Base.decode_text").replace("slot_remap=None):", "x=0):"),
     "decode_forward", "broken", "slot_remap"),
    # W01 / W03: the module function the allocation hands on to changed its signature
    ("w01_function_changed", _allocates(
        "def allocate_vllm_kv_cache(kv_cache_shape, dtype, num_layers, mesh_device, model):\n"
        "    return None\n"), "allocate_kv_cache", "broken", "'mesh_device'"),
    ("w03_function_twice", _allocates(
        "def allocate_vllm_kv_cache(kv_cache_shape, dtype, model, tt_cache_path=None):\n"
        "    return None\n"), "allocate_kv_cache", "broken", "'model'"),
    ("w_function_unreadable", _allocates("from tt_lib.kv import allocate_vllm_kv_cache\n"),
     "allocate_kv_cache", "unresolved", "allocate_vllm_kv_cache(...), which the checker cannot"),
    # A23: the popped value handed only to an own helper that only tests it
    ("a23_validation_helper", _decode(HANDS_SP, VALIDATE, NO_SP),
     "decode_forward", "dropped", "'sampling_params'"),
    # Z5 / Z4: the mapping handed to a helper (own method / module function) reading another key
    ("z5_helper_reads_other_key", _picks("sampling", False),
     "decode_forward", "dropped", "'sampling', which the plugin does not send"),
    ("z4_function_reads_other_key", _picks("sampling", True),
     "decode_forward", "dropped", "'sampling', which the plugin does not send"),
    ("e02_consumed_control", _with_base(
        "        out = super().decode_forward(*args, **kwargs)\n"
        "        return out if read_from_device else out", CONSUMES),
     "decode_forward", "dropped", "'read_from_device'"),
]  # fmt: skip
# (name, adapter, method): correct Python that must still bind
CONTROLS = [
    ("pop_with_default", _decode(
        "        sp = kwargs.pop('sampling_params', None)\n"
        "        return self.generator.decode(tokens, sp)", sig=NO_SP), "decode_forward"),
    # R02 / R03: reads that cannot raise
    ("r02_try_keyerror", _decode(
        "        try:\n            sp = kwargs['sampling_params']\n"
        "        except KeyError:\n            sp = None\n"
        "        return self.generator.decode(tokens, sp)", sig=NO_SP), "decode_forward"),
    ("r03_in_guard", _decode(
        "        sp = kwargs['sampling_params'] if 'sampling_params' in kwargs else None\n"
        "        return self.generator.decode(tokens, sp)", sig=NO_SP), "decode_forward"),
    ("r03_guard_return", _decode(
        "        if 'sampling_params' not in kwargs:\n"
        "            return self.generator.decode(tokens, None)\n"
        "        return self.generator.decode(tokens, kwargs.pop('sampling_params'))", sig=NO_SP),
     "decode_forward"),
    ("args_passed_on", _prefill(
        "        return self._prefill(*args, **kwargs)",
        "    def _prefill(self, tokens, page_table, kv_cache, prompt_lens, **kwargs):\n"
        "        return self.generator.prefill(tokens, kwargs.get('sampling_params'))\n"),
     "prefill_forward"),
    ("u03_same_order", _with_base(POSITIONAL_FORWARD, POSITIONAL_SIG), "decode_forward"),
    ("e02_forwarded", _with_base(
        "        return super().decode_forward(*args, read_from_device=read_from_device, **kwargs)",
        CONSUMES), "decode_forward"),
    ("b08_moved_key_read", _with_base(
        MOVE + "        return super().decode_forward(*args, **kwargs)", STAR, more=", **kwargs",
        reads=", kwargs.get('sampling')"), "decode_forward"),
    ("a22_allow_list_keeps_all", ALL_KEYS + _decode(FILTER % "in _KEYS" + FORWARD_IMPL, IMPL_KW,
                                                     STAR), "decode_forward"),
    # R05: a copy taken before the pop still holds the key; R06, the mirror
    ("r05_copy_before_pop", _decode(
        "        forwarded = dict(kwargs)\n        kwargs.pop('sampling_params', None)\n"
        "        logger.debug(sorted(kwargs))\n        return self._impl(*args, **forwarded)",
        IMPL_KW, STAR), "decode_forward"),
    ("r06_pop_on_copy", _decode(
        "        shown = dict(kwargs)\n        shown.pop('sampling_params', None)\n"
        "        logger.debug(sorted(shown))\n        return self._impl(*args, **kwargs)",
        IMPL_KW, STAR), "decode_forward"),
    # T06: a class-level alias to a base's function binds like that function
    ("t06_base_alias", _aliased("_Base.decode_text"), "decode_forward"),
    ("w_function_binds", _allocates(
        "def allocate_vllm_kv_cache(kv_cache_shape, dtype, num_layers, model):\n"
        "    return None\n"), "allocate_kv_cache"),
    ("a23_helper_uses_it", _decode(HANDS_SP, CONFIGURE, NO_SP), "decode_forward"),
    ("z5_helper_reads_it", _picks("sampling_params", False), "decode_forward"),
    ("z4_function_reads_it", _picks("sampling_params", True), "decode_forward"),
    ("base", BASE, "initialize_vllm_model"),
    ("base_alloc", BASE, "allocate_kv_cache"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "adapter", "method", "status", "why"), REFUSED, ids=[c[0] for c in REFUSED]
)
def test_a_red_team_edit_is_refused(
    tmp_path: Path, name: str, adapter: str, method: str, status: str, why: str
) -> None:
    found = _findings(_tree(tmp_path, adapter))
    assert found[method][0] == status, found[method]
    assert why in found[method][1], found[method]


@pytest.mark.parametrize(("name", "adapter", "method"), CONTROLS, ids=[c[0] for c in CONTROLS])
def test_a_control_still_binds(tmp_path: Path, name: str, adapter: str, method: str) -> None:
    found = _findings(_tree(tmp_path, adapter))
    assert found[method][0] in ("ok", "drift"), found[method]


CASES = [(n, a) for n, a, *_ in REFUSED] + [(n, a) for n, a, _ in CONTROLS]


@pytest.mark.parametrize(("name", "adapter"), CASES, ids=[c[0] for c in CASES])
def test_the_skeleton_of_a_tree_reads_as_the_tree(tmp_path: Path, name: str, adapter: str) -> None:
    assert_skeleton_reads_as_tree(tmp_path, adapter)
