"""Red-team holes of the parity checker (issue 45): each adapter edit below once passed as
"binds" though Python would fail or drop content; each must now fail (or say unresolved),
the controls must still bind, and the skeleton of each tree must read as the tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_tt_plugin.contract.parity import CheckoutReader, check
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
        return self.generator.prefill(tokens, sampling_params)

    def decode_forward(self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False,
                       read_from_device=True, sampling_params=None, reload_inputs=True,
                       reload_page_table=True, reload_sampling_params=True,
                       reset_sampling_state=False, slot_remap=None, **kwargs):
        return self.generator.decode(tokens, sampling_params)
"""
SIG = BASE.split("    def decode_forward(")[1].split("):\n")[0]
SENDS = "        return self.generator.decode(tokens, sampling_params)\n"
DECODE = "    def decode_forward(" + SIG + "):\n" + SENDS
IMPL = (
    "    def _impl(self, tokens, start_pos, page_table, kv_cache, enable_trace=False,\n"
    "              read_from_device=True, sampling_params=None, reload_inputs=True,\n"
    "              reload_page_table=True, reload_sampling_params=True,\n"
    "              reset_sampling_state=False):\n"
    "        return self.generator.decode(tokens, sampling_params)\n"
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
    ("kwargs_update_unknown", _decode(
        "        kwargs.update(self.defaults)\n        kwargs.pop('slot_remap', None)\n"
        "        return self._impl(*args, **kwargs)", IMPL, STAR), "unresolved"),
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
    ("j02_nie_in_helper", _decode("        return self._unsupported()", NIE), "abstract"),
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
    ("attr_set_in_init", _decode(
        "        return self.special(tokens, sampling_params)").replace(
        "        self.generator = generator\n",
        "        self.generator = generator\n        self.special = generator.decode\n")),
]  # fmt: skip


def _tree(root: Path, adapter: str) -> Path:
    path = root / "models/demo/tt/generator_vllm.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("import logging\n\nlogger = logging.getLogger(__name__)\n" + adapter)
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
    src = _tree(tmp_path / "tree", adapter)
    write_skeletons(src, tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    tree_found = _findings(src)
    skel_found = _findings(tmp_path / "skel")
    assert {m: s for m, (s, _) in skel_found.items()} == {m: s for m, (s, _) in tree_found.items()}
