"""Red-team round 7 (rt45g), returns, guards, binding and round trips: each tree below once read
as "binds" (or a working tree read as failing); each refused tree must now fail naming the
offender, its control must still bind, and the skeleton of each tree must read as the tree
(``parity_compound``, ``parity_values``, ``skeleton_guards``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_holes import COMMIT, TARGET, _decode, _findings, _tree
from vllm_tt_plugin.contract.skeleton import write_skeletons

TORCH = "import torch\nimport contextlib\n"
# The reload commands go on with the call (rt45g C04-C07: a decode that only asserts on one, or
# never acts on it, drops it; these trees are about the statements around the call).
SENDS = (
    "self.generator.decode(tokens, sampling_params, reload_inputs, reload_page_table, "
    "reload_sampling_params, reset_sampling_state)"
)
# (name, adapter, words the decode_forward finding must name); every one `broken`.
REFUSED = [
    # R01: F13 inside `with torch.no_grad():` (the untraced decode falls off: None).
    ("r01_with_return_on_traced_branch", TORCH + _decode(
        "        with torch.no_grad():\n"
        f"            if enable_trace:\n                return {SENDS}\n"
        f"            out = {SENDS}\n            self._last = out"
    ), "enable_trace=False"),
    ("r01_async_with_nested", TORCH + _decode(
        "        with torch.no_grad(), torch.inference_mode():\n"
        "            with self.generator.lock as held:\n"
        f"                if not enable_trace:\n                    self._last = {SENDS}\n"
        f"                else:\n                    return {SENDS}"
    ), "enable_trace=False"),
    # R02: the same with `match`.
    ("r02_match_return_on_one_case", _decode(
        "        match enable_trace:\n"
        f"            case True:\n                return {SENDS}\n"
        f"            case _:\n                self._last = {SENDS}"
    ), "enable_trace=False"),
    ("r02_match_or_pattern_guard", _decode(
        "        match reload_page_table:\n"
        "            case False | None if enable_trace:\n"
        f"                return {SENDS}\n"
        "            case False:\n"
        f"                return {SENDS}\n"
        "            case True:\n"
        "                raise NotImplementedError('page-table-only reload')\n"
        f"        return {SENDS}"
    ), "raises NotImplementedError"),
    # R04: X4 inside a `with` (and inside try/finally).
    ("r04_with_assert", TORCH + _decode(
        "        with torch.no_grad():\n"
        "            assert not reload_page_table, 'page-table-only reload'\n"
        f"            return {SENDS}"
    ), "`assert not reload_page_table` fails"),
    ("r04_try_finally_assert", _decode(
        "        try:\n"
        "            assert not reload_page_table\n"
        f"            return {SENDS}\n"
        "        finally:\n            self._steps = 1"
    ), "`assert not reload_page_table` fails"),
    # R05: `return None` for the calls carrying slot_remap.
    ("r05_return_none_on_remap", _decode(
        "        if kwargs.get('slot_remap') is not None:\n"
        "            logger.warning('slot remap not supported; skipping step')\n"
        f"            return None\n        return {SENDS}"
    ).replace(" slot_remap=None,", ""), "reaches `return None`"),
    ("r05_bare_return_on_named_remap", _decode(
        f"        if slot_remap is not None:\n            return\n        return {SENDS}"
    ), "reaches `return None`"),
]  # fmt: skip
CONTROLS = [
    ("with_both_branches_return", TORCH + _decode(
        "        with torch.no_grad():\n"
        f"            if enable_trace:\n                return {SENDS}\n"
        f"            return {SENDS}"
    )),
    # contextlib.suppress may swallow the AssertionError: the body is not decided.
    ("suppress_not_decided", TORCH + _decode(
        "        with contextlib.suppress(AssertionError):\n"
        "            assert not reload_page_table\n"
        f"        return {SENDS}"
    )),
    ("match_every_case_returns", _decode(
        "        match enable_trace:\n"
        f"            case True:\n                return {SENDS}\n"
        f"            case _:\n                return {SENDS}"
    )),
    ("match_guard_never_fires", _decode(
        "        match reload_inputs:\n"
        "            case 7:\n                raise NotImplementedError\n"
        f"        return {SENDS}"
    )),
    # A `return None` no call of the plugin reaches (prefill-only key), and a method that
    # always returns None explicitly (parity_shapes takes that as meant).
    ("return_none_never_reached", _decode(
        f"        if kwargs.get('prefill_only'):\n            return None\n        return {SENDS}"
    )),
    ("try_with_handlers_not_decided", _decode(
        "        try:\n            assert not reload_page_table\n"
        "        except AssertionError:\n            pass\n"
        f"        return {SENDS}"
    )),
]  # fmt: skip


@pytest.mark.parametrize(("name", "adapter", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_return_or_guard_inside_a_compound_statement_is_reached(
    tmp_path: Path, name: str, adapter: str, words: str
) -> None:
    status, detail = _findings(_tree(tmp_path, adapter))["decode_forward"]
    assert status == "broken", detail
    assert words in detail, detail


@pytest.mark.parametrize(("name", "adapter"), CONTROLS, ids=[c[0] for c in CONTROLS])
def test_a_compound_statement_the_plugin_never_trips_still_binds(
    tmp_path: Path, name: str, adapter: str
) -> None:
    status, detail = _findings(_tree(tmp_path, adapter))["decode_forward"]
    assert status in ("ok", "drift"), detail


@pytest.mark.parametrize(
    ("name", "adapter"),
    [(n, a) for n, a, _ in REFUSED[:3] + REFUSED[4:5] + REFUSED[6:8]] + CONTROLS[:3],
    ids=[c[0] for c in REFUSED[:3] + REFUSED[4:5] + REFUSED[6:8]] + [c[0] for c in CONTROLS[:3]],
)
def test_the_skeleton_reads_as_the_tree(tmp_path: Path, name: str, adapter: str) -> None:
    src = _tree(tmp_path / "tree", adapter)
    write_skeletons(src, tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    tree = {m: s for m, (s, _) in _findings(src).items()}
    skel = {m: s for m, (s, _) in _findings(tmp_path / "skel").items()}
    assert skel == tree


# --- R07 / R08: where the callable attribute a decode calls is set (attr_setters) -----------
STEP = "        return self._step(tokens, sampling_params)"
INIT = "        self.generator = generator\n"
LOAD = "        return cls(None)\n"


def _step(init: str = "", load: str = "") -> str:
    adapter = _decode(STEP)
    if init:
        adapter = adapter.replace(INIT, INIT + init)
    return adapter.replace(LOAD, load) if load else adapter


ATTRIBUTE_REFUSED = [
    ("r07_set_under_if", _step(
        "        if generator is not None and generator.devices > 1:\n"
        "            self._step = generator.decode\n"
    ), "unresolved", "__init__ under a condition"),
    ("r07_set_in_loop", _step(
        "        for _ in getattr(generator, 'submeshes', ()):\n"
        "            self._step = generator.decode\n"
    ), "unresolved", "__init__ under a condition"),
    ("r07_early_return_first", _step(
        "        if generator is None:\n            return\n"
        "        self._step = generator.decode\n"
    ), "unresolved", "__init__ under a condition"),
    ("r08_loader_sets_on_some_paths", _step(load=(
        "        model = cls(None)\n"
        "        if mesh_device is not None:\n            model._step = model.generator.decode\n"
        "        return model\n"
    )), "unresolved", "initialize_vllm_model (not on every path"),
]  # fmt: skip
ATTRIBUTE_CONTROLS = [
    ("set_on_both_branches", _step(
        "        if generator is not None:\n            self._step = generator.decode\n"
        "        else:\n            self._step = self._fallback\n"
    )),
    ("set_in_try_and_handler", _step(
        "        try:\n            self._step = generator.decode\n"
        "        except AttributeError:\n            self._step = self._fallback\n"
    )),
    ("raise_else", _step(
        "        if generator is None:\n            raise ValueError('no generator')\n"
        "        self._step = generator.decode\n"
    )),
    # R08: the loader sets it on the instance it returns (works in Python: never `missing`).
    ("r08_loader_sets_it", _step(load=(
        "        gen = object()\n        model = cls(gen)\n"
        "        model._step = print\n        return model\n"
    ))),
    ("r08_loader_sets_it_under_with", _step(load=(
        "        model = cls(None)\n        with open('/dev/null'):\n"
        "            model._step = print\n        return model\n"
    ))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "adapter", "status", "words"), ATTRIBUTE_REFUSED, ids=[c[0] for c in ATTRIBUTE_REFUSED]
)
def test_a_callable_attribute_not_surely_set_is_not_trusted(
    tmp_path: Path, name: str, adapter: str, status: str, words: str
) -> None:
    found, detail = _findings(_tree(tmp_path, adapter))["decode_forward"]
    assert found == status, detail
    assert words in detail and "self._step" in detail, detail


@pytest.mark.parametrize(
    ("name", "adapter"), ATTRIBUTE_CONTROLS, ids=[c[0] for c in ATTRIBUTE_CONTROLS]
)
def test_a_callable_attribute_surely_set_binds(tmp_path: Path, name: str, adapter: str) -> None:
    status, detail = _findings(_tree(tmp_path, adapter))["decode_forward"]
    assert status in ("ok", "drift"), detail


@pytest.mark.parametrize(
    ("name", "adapter"),
    [(n, a) for n, a, _, _ in ATTRIBUTE_REFUSED] + ATTRIBUTE_CONTROLS,
    ids=[c[0] for c in ATTRIBUTE_REFUSED] + [c[0] for c in ATTRIBUTE_CONTROLS],
)
def test_the_attribute_skeleton_reads_as_the_tree(tmp_path: Path, name: str, adapter: str) -> None:
    test_the_skeleton_reads_as_the_tree(tmp_path, name, adapter)


# --- K4: a returned subclass WIDER than the registered class (returned_model) ----------------
ONE_CHIP = (
    "        if mesh_device is None:\n            return _Wide(None)\n        return cls(None)\n"
)
WIDER = _decode(SENDS.join(["        return ", ""])).replace(LOAD, ONE_CHIP) + (
    "\n\nclass _Wide(DemoForCausalLM):\n"
    "    model_capabilities = {**DemoForCausalLM.model_capabilities,\n"
    "                          'supports_device_penalties': True}\n"
)


def test_a_wider_returned_class_is_planned_from_the_registered_class(tmp_path: Path) -> None:
    """The plugin plans penalties from the registered class (False) and only narrows after load
    (served_model.per_request_capabilities): the histories are never sent to ``_Wide``."""
    found = _findings(_tree(tmp_path, WIDER))
    assert all(s in ("ok", "drift", "absent", "facts") for s, _ in found.values()), found


def test_a_returned_class_is_still_checked_for_what_the_plugin_sends(tmp_path: Path) -> None:
    allowed = WIDER.replace('"supports_device_penalties": False,', "")
    status, detail = _findings(_tree(tmp_path, allowed))["(returned model)"]
    assert status == "dropped" and "_Wide" in detail and "prompt_tokens" in detail, detail


# --- R11 / R12 / V01 / V08: calls handed to the composed generator (composed) ----------------
GENERATOR = (
    "\n\nclass DemoGenerator:\n"
    "    def decode(self, tokens, sampling_params, enable_trace, reload_inputs,\n"
    "               reload_page_table):\n"
    "        return tokens, sampling_params\n"  # its body is judged too (rt45h CK12)
)
RIGHT = "tokens, sampling_params, enable_trace, reload_inputs, reload_page_table"
TYPED = "        return cls(DemoGenerator())\n"


def _composed(body: str, load: str = TYPED, generator: str = GENERATOR) -> str:
    return _decode(body).replace(LOAD, load) + generator


COMPOSED_REFUSED = [
    ("r12_swap_into_generator", _composed(
        "        return self.generator.decode(tokens, enable_trace, sampling_params,\n"
        "                                     reload_inputs, reload_page_table)"
    ), "broken", "'sampling_params' lands on 'enable_trace'"),
    ("v01_reload_swap_local_in_loader", _composed(
        "        return self.generator.decode(tokens, sampling_params, enable_trace,\n"
        "                                     reload_page_table, reload_inputs)",
        load="        gen = DemoGenerator()\n        return cls(generator=gen)\n",
    ), "broken", "'reload_page_table' lands on 'reload_inputs'"),
    ("v08_renamed_method", _composed(
        f"        return self.generator.decode({RIGHT})",
        generator=GENERATOR.replace("def decode(", "def decode_step("),
    ), "missing", "DemoGenerator does not define"),
    ("generator_built_in_init", _composed(
        f"        return self.generator.decode({RIGHT}, None)", load=LOAD,
    ).replace(INIT, "        self.generator = DemoGenerator()\n"), "broken",
     "takes 5 positional argument(s), the call passes 6"),
    ("r11_swap_into_module_function", _composed(
        "        return _run(self.generator, tokens, enable_trace, sampling_params)",
    ) + "\n\ndef _run(gen, tokens, sampling_params, enable_trace):\n    return gen\n",
     "broken", "'enable_trace' lands on 'sampling_params'"),
    ("swap_on_one_branch_only", _composed(
        f"        if enable_trace:\n            return self.generator.decode({RIGHT})\n"
        "        return self.generator.decode(tokens, enable_trace, sampling_params,\n"
        "                                     reload_inputs, reload_page_table)"
    ), "unresolved", "'sampling_params' lands on 'enable_trace'"),
]  # fmt: skip
COMPOSED_CONTROLS = [
    ("right_order", _composed(f"        return self.generator.decode({RIGHT})")),
    ("by_keyword", _composed(
        "        return self.generator.decode(tokens, enable_trace=enable_trace,\n"
        "            sampling_params=sampling_params, reload_page_table=reload_page_table,\n"
        "            reload_inputs=reload_inputs)"
    )),
    # The class of self.generator is not said by the checkout: not judged here.
    ("untyped_generator", _composed(
        "        return self.generator.decode(tokens, enable_trace, sampling_params)",
        load=LOAD,
    )),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "adapter", "status", "words"), COMPOSED_REFUSED, ids=[c[0] for c in COMPOSED_REFUSED]
)
def test_a_call_into_the_composed_generator_binds_by_pythons_rules(
    tmp_path: Path, name: str, adapter: str, status: str, words: str
) -> None:
    found, detail = _findings(_tree(tmp_path, adapter))["decode_forward"]
    assert found == status, detail
    assert words in detail, detail


@pytest.mark.parametrize(
    ("name", "adapter"), COMPOSED_CONTROLS, ids=[c[0] for c in COMPOSED_CONTROLS]
)
def test_a_call_into_the_composed_generator_that_binds(
    tmp_path: Path, name: str, adapter: str
) -> None:
    status, detail = _findings(_tree(tmp_path, adapter))["decode_forward"]
    assert status in ("ok", "drift"), detail


# --- round trips: S05, FA11, FA6 (the skeleton gives the tree's verdict) ---------------------
CAPS_LITERAL = (
    "    model_capabilities = {\n"
    '        "supports_async_decode": True,\n'
    '        "supports_sample_on_device": True,\n'
    '        "supports_device_penalties": False,\n'
    "    }\n"
)
MODULE_CAPS = (
    "_CAPS = {'supports_async_decode': True, 'supports_sample_on_device': True,\n"
    "         'supports_device_penalties': False}\n"
)
IMPL = (
    "    def _impl(self, enable_trace, tokens, start_pos, page_table, kv_cache, **kwargs):\n"
    "        return self.generator.decode(tokens, kwargs.get('sampling_params'))\n\n"
)


def _bound_method(value: str) -> str:
    return _decode(SENDS.join(["        return ", ""])).replace(
        "    def decode_forward(", IMPL + f"    decode_forward = {value}\n\n    def _unused("
    )


def _caps_loop(loop: str) -> str:
    return (
        MODULE_CAPS
        + loop
        + _decode(SENDS.join(["        return ", ""])).replace(
            CAPS_LITERAL, "    model_capabilities = _CAPS\n"
        )
    )


ROUND_TRIPS = [
    ("s05_partialmethod", _bound_method("functools.partialmethod(_impl, True)"), "unresolved"),
    ("s05_partial", _bound_method("functools.partial(_impl, True)"), "unresolved"),
    ("s05_lambda", _bound_method("lambda self, *a, **k: self._impl(True, *a, **k)"), "unresolved"),
    ("fa11_loop_over_a_tuple", _caps_loop(
        "for _d in (_CAPS,):\n    _d['supports_device_penalties'] = True\n"
    ), "dropped"),
    ("fa11_loop_over_a_list", _caps_loop(
        "for _d in [_CAPS]:\n    _d.update(supports_device_penalties=True)\n"
    ), "dropped"),
    # FA6: the plugin reads model_capabilities from the class (from_model_class, and
    # instance_declared for the registered class): an instance attribute changes nothing.
    ("fa6_instance_narrower", _decode(SENDS.join(["        return ", ""])).replace(
        INIT, INIT + "        self.model_capabilities = {**type(self).model_capabilities,\n"
        "                                   'supports_async_decode': False}\n"
    ), "ok"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "adapter", "status"), ROUND_TRIPS, ids=[c[0] for c in ROUND_TRIPS]
)
def test_the_round_trip_gives_the_trees_verdict(
    tmp_path: Path, name: str, adapter: str, status: str
) -> None:
    src = _tree(tmp_path / "tree", adapter)
    write_skeletons(src, tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    tree = _findings(src)
    skel = _findings(tmp_path / "skel")
    assert tree["decode_forward"][0] in ((status, "drift") if status == "ok" else (status,)), tree
    assert {m: s for m, (s, _) in skel.items()} == {m: s for m, (s, _) in tree.items()}
