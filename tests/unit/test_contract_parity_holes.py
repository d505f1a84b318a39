"""Red-team holes of the parity checker (issue 45): each adapter edit below once passed as
"binds" though Python would fail or drop content; each must now fail (or say unresolved),
the controls must still bind, and the skeleton of each tree must read as the tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vllm_tt_plugin.contract.parity import CheckoutReader, check, main
from vllm_tt_plugin.contract.signatures import profiles_from_mapping
from vllm_tt_plugin.contract.skeleton import write_skeletons

TARGET = "models.demo.tt.generator_vllm:DemoForCausalLM"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
BASE = """
class DemoForCausalLM:
    model_capabilities = {
        "supports_async_decode": True,
        "supports_sample_on_device": True,
        "supports_device_penalties": False,
    }
    decode_input_update_contract = 1

    def __init__(self, generator):
        self.generator = generator

    @classmethod
    def initialize_vllm_model(cls, hf_config, mesh_device, max_batch_size, *, max_seq_len=None,
                              tt_data_parallel=1, optimizations=None):
        return cls(None)

    def allocate_kv_cache(self, kv_cache_shape, dtype, num_layers):
        return None

    def prefill_forward(self, tokens, page_table, kv_cache, prompt_lens, *, sampling_params=None,
                        start_pos=None, enable_trace=False, empty_slots=None, **kwargs):
        return self.generator.prefill(tokens, sampling_params, empty_slots)

    def decode_forward(self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False,
                       read_from_device=True, sampling_params=None, reload_inputs=True,
                       reload_page_table=True, reload_sampling_params=True,
                       reset_sampling_state=False, slot_remap=None, **kwargs):
        return self.generator.decode(tokens, sampling_params, reload_inputs,
                                     reload_page_table, reload_sampling_params,
                                     reset_sampling_state)
"""
SIG = BASE.split("    def decode_forward(")[1].split("):\n")[0]
# The decode hands the version's reload commands on (one it takes and never uses is dropped).
SENDS = (
    "        return self.generator.decode(tokens, sampling_params, reload_inputs,\n"
    "                                     reload_page_table, reload_sampling_params,\n"
    "                                     reset_sampling_state)\n"
)
DECODE = "    def decode_forward(" + SIG + "):\n" + SENDS
IMPL = (
    "    def _impl(self, tokens, start_pos, page_table, kv_cache, enable_trace=False,\n"
    "              read_from_device=True, sampling_params=None, reload_inputs=True,\n"
    "              reload_page_table=True, reload_sampling_params=True,\n"
    "              reset_sampling_state=False):\n"
    "        return self.generator.decode(tokens, sampling_params, reload_inputs,\n"
    "                                     reload_page_table, reload_sampling_params,\n"
    "                                     reset_sampling_state)\n"
)
NIE = "    def _unsupported(self):\n        raise NotImplementedError\n"


def _decode(body: str, extra: str = "", sig: str = SIG) -> str:
    return BASE.replace(DECODE, f"    def decode_forward({sig}):\n{body}\n\n{extra}")


STAR = "self, *args, **kwargs"
NO_SP = SIG.replace(" sampling_params=None,", "")
NO_PENALTIES = ('"supports_device_penalties": False,', "")
# (name, adapter, the status decode_forward must get)
REFUSED = [
    ("a05_static_helper", _decode(
        "        return self._impl(tokens=tokens, sampling_params=sampling_params)",
        "    @staticmethod\n    def _impl(self, tokens, sampling_params):\n        return tokens\n",
    ), "broken"),
    ("a06_helper_arity", _decode(
        "        return self._impl(tokens, sampling_params, start_pos)",
        "    def _impl(self, tokens, sampling_params):\n        return tokens\n",
    ), "broken"),
    ("c04_kwargs_update", _decode(
        "        kwargs.update(extra=1)\n        kwargs.pop('slot_remap', None)\n"
        "        return self._impl(*args, **kwargs)", IMPL, STAR), "broken"),
    ("partial_helper_arity", _decode(
        "        return functools.partial(self._impl, tokens)(sampling_params, start_pos)",
        "    def _impl(self, tokens, sampling_params):\n        return tokens\n",
    ), "broken"),
    ("kwargs_update_unknown", _decode(
        "        kwargs.update(self.defaults)\n        kwargs.pop('slot_remap', None)\n"
        "        return self._impl(*args, **kwargs)", IMPL, STAR), "unresolved"),
    ("c03_kwargs_merge_inline", _decode(
        "        return self._impl(*args, **{**kwargs, 'extra': 1})", IMPL, STAR), "broken"),
    ("kwargs_copy_merge_extra", _decode(
        "        kw = {**kwargs, 'extra': 1}\n        kw.pop('slot_remap', None)\n"
        "        return self._impl(*args, **kw)", IMPL, STAR), "broken"),
    ("c07_alias_executor", _decode(
        "        ex = self.executor\n        return ex.decode_forward(*args, **kwargs)", "", STAR
    ), "unresolved"),
    ("c08_getattr_executor", _decode(
        "        return getattr(self.executor, 'decode_forward')(*args, **kwargs)", "", STAR
    ), "unresolved"),
    ("c09_inverted_hasattr", _decode(
        "        if not hasattr(self, 'special'):\n            return self.special(tokens)\n"
        "        return self.generator.decode(tokens, sampling_params)"), "missing"),
    ("c11_attr_set_elsewhere", _decode(
        "        return self.special(tokens, sampling_params)",
        "    def _never_called(self):\n        self.special = self.generator.decode\n",
    ), "unresolved"),
    ("c12_sp_membership_only", _decode(
        "        if 'sampling_params' in kwargs:\n            pass\n"
        "        return self.generator.decode(tokens, None)", sig=NO_SP), "dropped"),
    ("c13_sp_get_discarded", _decode(
        "        kwargs.get('sampling_params')\n        return self.generator.decode(tokens, None)",
        sig=NO_SP), "dropped"),
    ("c14_sp_logged_only", _decode(
        "        logger.debug('decode kwargs %s', kwargs)\n"
        "        return self.generator.decode(tokens, None)", sig=NO_SP), "dropped"),
    ("c15_sp_read_overwritten", _decode(
        "        sp = kwargs.get('sampling_params')\n        sp = None\n"
        "        return self.generator.decode(tokens, sp)", sig=NO_SP), "dropped"),
    ("sp_named_overwritten", _decode(
        "        sampling_params = None\n"
        "        return self.generator.decode(tokens, sampling_params)"), "dropped"),
    ("c16_sp_named_unused", _decode("        return self.generator.decode(tokens, None)"),
     "dropped"),
    ("c18_lambda_fwd", _decode(
        "        f = lambda *a, **k: self._impl(*a, **k)\n        return f(*args, **kwargs)",
        IMPL, STAR), "unresolved"),
    ("c20_typeself_fwd", _decode(
        "        return type(self)._impl(self, *args, **kwargs)", IMPL, STAR), "unresolved"),
    ("c23_getattr_dynamic", _decode(
        "        name = '_impl'\n        return getattr(self, name)(*args, **kwargs)", IMPL, STAR
    ), "unresolved"),
    ("c24_getattr_fstring", _decode(
        "        return getattr(self, f'_{\"impl\"}')(*args, **kwargs)", IMPL, STAR), "unresolved"),
    ("i02_stored_only", _decode(
        "        self._last = kwargs\n        return self.generator.decode(tokens, sampling_params)"
    ).replace(*NO_PENALTIES), "dropped"),
    ("i04_len_only", _decode(
        "        n = len(kwargs)\n        return self.generator.decode(tokens, sampling_params)"
    ).replace(*NO_PENALTIES), "dropped"),
    ("i06_keys_loop", _decode(
        "        for k in kwargs:\n            pass\n"
        "        return self.generator.decode(tokens, sampling_params)"
    ).replace(*NO_PENALTIES), "dropped"),
    ("j01_runtimeerror_stub", _decode("        raise RuntimeError('not supported')"), "broken"),
    ("assert_false_stub", _decode("        assert False, 'not supported'"), "broken"),
    ("j02_nie_in_helper", _decode("        return self._unsupported()", NIE), "abstract"),
    # A key the plugin does not send, read on every call: a KeyError; read on one path only
    # (Qwen2.5-VL's image_grid_thw after images were sent): not evaluated, never "ok".
    ("kwargs_key_read_always", _decode(
        "        extra = kwargs['extra_thing']\n"
        "        return self.generator.decode(tokens, sampling_params, extra)"), "broken"),
    ("kwargs_key_read_on_a_branch", _decode(
        "        if tokens is None:\n            return kwargs['extra_thing']\n"
        "        return self.generator.decode(tokens, sampling_params)"), "unresolved"),
]  # fmt: skip
CONTROLS = [
    ("base", BASE),
    ("hasattr_guard", _decode(
        "        if hasattr(self, 'special'):\n            return self.special(tokens)\n"
        "        return self.generator.decode(tokens, sampling_params)")),
    ("hasattr_early_return", _decode(
        "        if not hasattr(self, 'special'):\n"
        "            return self.generator.decode(tokens, sampling_params)\n"
        "        return self.special(tokens, sampling_params)")),
    ("helper_binds", _decode(
        "        return self._impl(tokens, start_pos, page_table, kv_cache,"
        " sampling_params=sampling_params)", IMPL)),
    ("sp_read_and_used", _decode(
        "        sp = kwargs.get('sampling_params')\n"
        "        return self.generator.decode(tokens, sp)", sig=NO_SP)),
    ("sp_read_or_default", _decode(
        "        sp = kwargs.get('sampling_params') or self.default\n"
        "        return self.generator.decode(tokens, sp)", sig=NO_SP)),
    ("sp_named_rebound_from_itself", _decode(
        "        sampling_params = sampling_params or self.default\n"
        "        return self.generator.decode(tokens, sampling_params)")),
    ("penalties_stored_and_read", _decode(
        "        self._last = kwargs\n"
        "        return self.generator.decode(tokens, sampling_params, self._last)"
    ).replace(*NO_PENALTIES)),
    ("conditional_nie_helper", _decode(
        "        if tokens is None:\n            return self._unsupported()\n"
        "        return self.generator.decode(tokens, sampling_params)", NIE)),
    ("kwargs_setdefault_binds", _decode(
        "        kwargs.pop('slot_remap', None)\n        kwargs.setdefault('enable_trace', False)\n"
        "        return self._impl(*args, **kwargs)", IMPL, STAR)),
    # A value taken from **kwargs and iterated hands its items on (only the mapping itself
    # iterates keys): Qwen2.5-VL's [pv for pv in kwargs.get("pixel_values", [])].
    ("sp_iterated_in_a_comprehension", _decode(
        "        sps = [p for p in kwargs.get('sampling_params', ())]\n"
        "        return self.generator.decode(tokens, sps)", sig=NO_SP)),
    ("sp_iterated_in_a_loop", _decode(
        "        out = []\n        for p in kwargs.get('sampling_params', ()):\n"
        "            out.append(p)\n        return self.generator.decode(tokens, out)", sig=NO_SP)),
    ("attr_set_in_init", _decode(
        "        return self.special(tokens, sampling_params)").replace(
        "        self.generator = generator\n",
        "        self.generator = generator\n        self.special = generator.decode\n")),
]  # fmt: skip


def _tree(root: Path, adapter: str) -> Path:
    path = root / "models/demo/tt/generator_vllm.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "import functools\nimport logging\n\nlogger = logging.getLogger(__name__)\n"
    path.write_text(header + adapter)
    return root


def _findings(root: Path) -> dict[str, tuple[str, str]]:
    profiles = profiles_from_mapping({"profiles": {TARGET: {"family": "demo", "facts": {}}}})
    found = check(CheckoutReader(root), profiles, {TARGET: ("TTDemoForCausalLM",)})
    return {f.method: (f.status, f.detail) for f in found}


@pytest.mark.parametrize(("name", "adapter", "status"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_red_team_edit_is_refused(tmp_path: Path, name: str, adapter: str, status: str) -> None:
    found = _findings(_tree(tmp_path, adapter))
    assert found["decode_forward"][0] == status, found["decode_forward"]


@pytest.mark.parametrize(("name", "adapter"), CONTROLS, ids=[c[0] for c in CONTROLS])
def test_a_control_still_binds(tmp_path: Path, name: str, adapter: str) -> None:
    found = _findings(_tree(tmp_path, adapter))
    assert found["decode_forward"][0] in ("ok", "drift"), found["decode_forward"]


CASES = [(n, a) for n, a, _ in REFUSED] + CONTROLS


@pytest.mark.parametrize(("name", "adapter"), CASES, ids=[c[0] for c in CASES])
def test_the_skeleton_of_a_tree_reads_as_the_tree(tmp_path: Path, name: str, adapter: str) -> None:
    assert_skeleton_reads_as_tree(tmp_path, adapter)


def assert_skeleton_reads_as_tree(tmp_path: Path, adapter: str) -> None:
    src = _tree(tmp_path / "tree", adapter)
    write_skeletons(src, tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    tree_found = _findings(src)
    skel_found = _findings(tmp_path / "skel")
    assert {m: s for m, (s, _) in skel_found.items()} == {m: s for m, (s, _) in tree_found.items()}


ENV_ON = (
    BASE.replace(
        '"supports_sample_on_device": True,',
        '"supports_sample_on_device": os.environ.get("TT_DS") == "on",',
    )
    .replace(SIG, NO_SP)
    .replace(SENDS, "        return tokens\n")
)
ENV_OFF = ENV_ON.replace('== "on"', '!= "on"')
MORE = [
    ("h06_partial_cls", BASE.replace("        return cls(None)",
                                     "        return functools.partial(cls, bad_kw=1)(None)")),
    ("b12_caps_dict_call", BASE.replace(
        '    model_capabilities = {\n        "supports_async_decode": True,\n'
        '        "supports_sample_on_device": True,\n'
        '        "supports_device_penalties": False,\n    }',
        "    model_capabilities = dict(supports_sample_on_device=True)",
    ).replace(SIG, NO_SP).replace(SENDS, "        return tokens\n")),
    ("b10d_env_len", ENV_ON.replace('os.environ.get("TT_DS") == "on"',
                                    'len(os.environ.get("TT_DS", "")) > 3')),
    ("b06_env_int_ge2", ENV_ON.replace('os.environ.get("TT_DS") == "on"',
                                       'int(os.environ.get("TT_DS", "0")) >= 2')),
    ("e_env_on", ENV_ON),
    ("e_no_process", BASE + "\n    def read_decode_output(self, output, async_read=False):\n"
                            "        return output, []\n"),
]  # fmt: skip


def _module(adapter: str) -> str:
    return "import os\n" + adapter


@pytest.mark.parametrize(("name", "adapter"), MORE, ids=[c[0] for c in MORE])
def test_the_skeleton_keeps_facts_and_constructions(
    tmp_path: Path, name: str, adapter: str
) -> None:
    src = _tree(tmp_path / "tree", _module(adapter))
    write_skeletons(src, tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    tree_found = _findings(src)
    skel_found = _findings(tmp_path / "skel")
    assert {m: s for m, (s, _) in skel_found.items()} == {m: s for m, (s, _) in tree_found.items()}
    # Not read as a non-dict (an elided `...` value), nor a construction lost.
    assert "not a dict" not in " ".join(d for _, d in skel_found.values())


def test_a_construction_through_partial_is_not_ok(tmp_path: Path) -> None:
    found = _findings(_tree(tmp_path, _module(dict(MORE)["h06_partial_cls"])))
    assert found["initialize_vllm_model"][0] == "unresolved", found["initialize_vllm_model"]


def test_an_env_variant_is_labelled_with_the_value_tried(tmp_path: Path) -> None:
    found = _findings(_tree(tmp_path, _module(dict(MORE)["b06_env_int_ge2"])))
    facts = found["(class facts)"][1]
    assert "[TT_DS=2]" in facts and "supports_async_decode" not in facts, facts
    assert found["decode_forward"][0] == "dropped"  # sampling_params sent only for TT_DS=2
    assert found["decode_forward"][1].startswith("[TT_DS=2]")


def test_one_read_back_hook_reports_the_other_absent(tmp_path: Path) -> None:
    found = _findings(_tree(tmp_path, _module(dict(MORE)["e_no_process"])))
    status, detail = found["process_decode_output_host"]
    assert status == "absent" and "read_decode_output is" in detail
    assert "read_decode_output" not in found  # the plugin does not call it alone


def test_diff_sees_the_default_deployment_break_and_exits_nonzero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A registry target's path: --diff checks the built-in registry.
    rel = "models/demos/llama31_8b_qb2/tt/generator_vllm.py"
    on, off = tmp_path / "on", tmp_path / "off"
    for root, text in ((on, ENV_ON), (off, ENV_OFF)):
        (root / rel).parent.mkdir(parents=True)
        (root / rel).write_text(_module(text.replace("DemoForCausalLM", "LlamaForCausalLM")))
    assert main(["--diff", str(on), str(off)]) == 1
    out = capsys.readouterr().out
    # The same status in both trees, but another variant: the default deployment now fails.
    assert re.search(r"decode_forward: (\w+) \[TT_DS=on\] -> \1 \[TT_DS unset\]", out), out
    assert main(["--diff", str(on), str(on)]) == 0
    assert "diff: 0 target(s)" in capsys.readouterr().out
