"""The parity checker against round 8's composed-generator red-team trees (rt45h): the adapter
holds a generator object (``self.generator``) and forwards the plugin's calls to its methods.

- NA03 / CK12 / CK13: the generator's method body is judged as a driven method's is (a 3.11
  name, an import the checkout lacks, a name nothing binds: ``broken``; ``sampling_params``
  taken and never used, reload commands ``del``-ed or set by the body: ``dropped``).
- CK18 / CK19 / CK07 / CK08: the generator's class followed through a classmethod factory, a
  checkout module function, a property over another attribute, ``getattr(self.generator,
  "decode")``; a factory / function / property the checker cannot follow: ``unresolved``.
- WU01: the adapter's warm-up forwards to a generator method that returns early on a flag of
  its own (the plugin resets ``already_warmed_up_prefill`` on the adapter only): ``dropped``.

Each refused case names the offender; each control (what Python 3.10 runs as the plugin
expects) binds; the skeleton of every tree gives the tree's verdicts. The rt45h probes
(harness h.sh on Python 3.10.13, probe2.py, wu.py) showed the failure of each refused tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_holes import COMMIT, TARGET, _findings, _tree
from tests.unit.test_contract_parity_redteam import ACTS, ADAPTER, BASE, DECODE, INIT_BODY, edit
from tests.unit.test_contract_parity_round7_names import (
    assert_binds,
    assert_refused,
    assert_round_trip,
)
from tests.unit.test_contract_parity_round7_returns import COMPOSED_CONTROLS, COMPOSED_REFUSED
from vllm_tt_plugin.contract.skeleton import write_skeletons

GEN = "models/demo/tt/gen.py"
OTHER = "models/demo/tt/build.py"
DEC = "decode_forward"
WARM = "warmup_model_prefill"
ARGS = f"tokens, sampling_params, {ACTS}"
CALL = f"        return self.generator.decode({ARGS})\n"
GENERATOR = f"""
class DemoGenerator:
    def __init__(self, cfg):
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg)

    def decode(self, {ARGS}):
        return tokens, sampling_params, ({ACTS})

    def warmup(self, kv_cache, enable_trace):
        return enable_trace


def build(cfg):
    return DemoGenerator(cfg)
"""
GEN_DECODE = f"    def decode(self, {ARGS}):\n"
GEN_RETURN = f"        return tokens, sampling_params, ({ACTS})\n"
GEN_WARM = "    def warmup(self, kv_cache, enable_trace):\n        return enable_trace\n"
IMPORT = "from models.demo.tt.gen import DemoGenerator, build\n"
ADAPTER_WARM = (
    "\n    def warmup_model_prefill(self, kv_cache, enable_trace, **kwargs):\n"
    "        self.generator.warmup(kv_cache, enable_trace)\n"
)


def adapter(load: str = "DemoGenerator(hf_config)", call: str = CALL, extra: str = "") -> str:
    """BASE whose loader builds the generator by ``load`` and whose decode hands the plugin's
    values to it by ``call``; ``extra`` ends the class."""
    decode = DECODE.split("        return ")[0] + call
    text = edit(BASE, (INIT_BODY, f"        return cls({load})"), (DECODE, decode))
    return IMPORT + text + ADAPTER_WARM + extra


def generator(*changes: tuple[str, str], body: str = "") -> str:
    """GENERATOR edited; ``body`` lines (8-space indented) run first in its decode."""
    text = edit(GENERATOR, *changes) if changes else GENERATOR
    if body:
        text = edit(
            text, (GEN_RETURN, "".join(f"        {b}\n" for b in body.split("\n")) + GEN_RETURN)
        )
    return text


def tree(gen: str = GENERATOR, adapter_text: str | None = None, **more: str) -> dict[str, str]:
    files = {ADAPTER: adapter_text if adapter_text is not None else adapter(), GEN: gen}
    files.update({OTHER if k == "other" else k: v for k, v in more.items()})
    return files


DEL_ACTS = f"        del {ACTS}\n        return tokens, sampling_params\n"
RENAMED = (GEN_DECODE, GEN_DECODE.replace("def decode(", "def decode_step("))
PROPERTY = "\n    @property\n    def generator(self):\n        return self._gen\n"
UNTYPED_FACTORY = (
    "\n\ndef make(cfg):\n    return registry()[cfg]\n\n\ndef registry():\n    return {}\n"
)

# name -> (files, {column: status}, a fragment of that finding's reason)
REFUSED: dict[str, tuple[dict[str, str], dict[str, str], str]] = {
    # NA03: what the generator's decode runs fails on Python 3.10.
    "na03_311_name_in_generator_body": (
        tree(generator(body="import itertools\n_c = list(itertools.batched(tokens, 2))")),
        {DEC: "broken"}, "itertools.batched",
    ),
    "na03_from_import_311_name": (
        tree(generator(body="from itertools import batched\n_c = batched")),
        {DEC: "broken"}, "batched",
    ),
    "na03_name_nothing_binds": (
        tree(generator(body="_c = undefined_helper(tokens)")),
        {DEC: "broken"}, "undefined_helper",
    ),
    "na03_missing_checkout_module": (
        tree(generator(body="from models.demo.tt.absent import Thing\n_c = Thing")),
        {DEC: "broken"}, "models.demo.tt.absent",
    ),
    "na03_on_a_branch": (
        tree(generator(body="if tokens:\n    _c = undefined_helper(tokens)")),
        {DEC: "unresolved"}, "undefined_helper",
    ),
    # CK12: the generator takes the plugin's sampling parameters and ignores them.
    "ck12_sampling_params_ignored": (
        tree(generator((GEN_RETURN, f"        return tokens, None, ({ACTS})\n"))),
        {DEC: "dropped"}, "'sampling_params'",
    ),
    "ck12_parameter_renamed_and_ignored": (
        tree(generator(
            (GEN_DECODE, GEN_DECODE.replace(", sampling_params,", ", sp,")),
            (GEN_RETURN, f"        return tokens, None, ({ACTS})\n"),
        )),
        {DEC: "dropped"}, "'sampling_params' (as 'sp')",
    ),
    # CK13: C04 one call deeper (the commands mentioned, never acted on), or set by the body.
    "ck13_del_reload_commands": (
        tree(generator((GEN_RETURN, DEL_ACTS))),
        {DEC: "dropped"}, "'reload_inputs'",
    ),
    "ck13_command_set_by_the_body": (
        tree(generator(body="reset_sampling_state = False")),
        {DEC: "dropped"}, "'reset_sampling_state'",
    ),
    # CK18: a classmethod factory returning cls(...); decode renamed.
    "ck18_classmethod_factory_renamed_decode": (
        tree(generator(RENAMED), adapter("DemoGenerator.from_config(hf_config)")),
        {DEC: "missing"}, "DemoGenerator does not define",
    ),
    "ck18_factory_through_a_local": (
        tree(generator(RENAMED), adapter("gen").replace(
            "        return cls(gen)", "        gen = DemoGenerator.from_config(hf_config)\n"
            "        return cls(gen)")),
        {DEC: "missing"}, "DemoGenerator does not define",
    ),
    "ck18_factory_the_checker_cannot_type": (
        tree(generator(("        return cls(cfg)\n", "        return make(cfg)\n"))
             + UNTYPED_FACTORY, adapter("DemoGenerator.from_config(hf_config)")),
        {DEC: "unresolved"}, "DemoGenerator.from_config(...)",
    ),
    # CK19: a checkout module function building the generator (here or in another module).
    "ck19_module_function_renamed_decode": (
        tree(generator(RENAMED), adapter("build(hf_config)")),
        {DEC: "missing"}, "DemoGenerator does not define",
    ),
    "ck19_function_in_another_module": (
        tree(generator(RENAMED),
             "from models.demo.tt.build import make_generator\n"
             + adapter("make_generator(hf_config)"),
             other="from models.demo.tt.gen import build\n\n\n"
                   "def make_generator(cfg):\n    return build(cfg)\n"),
        {DEC: "missing"}, "DemoGenerator does not define",
    ),
    "ck19_function_the_checker_cannot_type": (
        tree(GENERATOR + UNTYPED_FACTORY,
             adapter("make(hf_config)").replace(
                 IMPORT, IMPORT + "from models.demo.tt.gen import make\n")),
        {DEC: "unresolved"}, "make(...)",
    ),
    # CK07: self.generator a property over self._gen.
    "ck07_property_over_an_attribute": (
        tree(generator(RENAMED), adapter(extra=PROPERTY).replace(
            "self.generator = generator", "self._gen = generator")),
        {DEC: "missing"}, "DemoGenerator does not define",
    ),
    "ck07_property_the_checker_does_not_follow": (
        tree(GENERATOR, adapter(extra=PROPERTY.replace(
            "return self._gen", "return self._gens[0]")).replace(
            "self.generator = generator", "self._gens = [generator]")),
        {DEC: "unresolved"}, "property the checker does not follow",
    ),
    # CK08: the method looked up by getattr.
    "ck08_getattr_of_the_method": (
        tree(generator(RENAMED), adapter(call=CALL.replace(
            "self.generator.decode(", 'getattr(self.generator, "decode")('))),
        {DEC: "missing"}, "DemoGenerator does not define",
    ),
    # WU01: the generator's warm-up returns early on its own flag.
    "wu01_generator_warmup_own_flag": (
        tree(generator((GEN_WARM, GEN_WARM.replace(
            "        return enable_trace\n",
            "        if self.already_warmed_up_prefill:\n            return None\n"
            "        self.already_warmed_up_prefill = True\n        return enable_trace\n")))),
        {WARM: "dropped"}, "already_warmed_up_prefill on the adapter",
    ),
    "wu01_generator_warmup_getattr_flag": (
        tree(generator((GEN_WARM, GEN_WARM.replace(
            "        return enable_trace\n",
            "        if getattr(self, '_done', False):\n            return\n"
            "        setattr(self, '_done', True)\n        return enable_trace\n")))),
        {WARM: "dropped"}, "self._done",
    ),
}  # fmt: skip

CONTROLS: dict[str, dict[str, str]] = {
    "direct_construction": tree(),
    "classmethod_factory": tree(adapter_text=adapter("DemoGenerator.from_config(hf_config)")),
    "module_function": tree(adapter_text=adapter("build(hf_config)")),
    "property_over_an_attribute": tree(adapter_text=adapter(extra=PROPERTY).replace(
        "self.generator = generator", "self._gen = generator")),
    "getattr_of_the_method": tree(adapter_text=adapter(call=CALL.replace(
        "self.generator.decode(", 'getattr(self.generator, "decode")('))),
    # A 3.11 name behind `except AttributeError`: Python 3.10 runs the fallback.
    "guarded_311_name": tree(generator(
        body="try:\n    import itertools\n    _c = itertools.batched\nexcept AttributeError:\n"
             "    _c = None")),
    # The plugin's sampling parameters used under another name.
    "renamed_parameter_used": tree(generator(
        (GEN_DECODE, GEN_DECODE.replace(", sampling_params,", ", sp,")),
        (GEN_RETURN, f"        return tokens, sp, ({ACTS})\n"))),
    # A warm-up keyed on enable_trace (each round runs): the plugin's sequence reaches it.
    "warmup_keyed_on_enable_trace": tree(generator((GEN_WARM, GEN_WARM.replace(
        "        return enable_trace\n",
        "        if enable_trace in self.cfg:\n            return None\n"
        "        return enable_trace\n"
    )))),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_composed_generator_that_fails_the_plugin_is_refused(tmp_path: Path, name: str) -> None:
    assert_refused(tmp_path, *REFUSED[name])


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_composed_generator_that_serves_the_plugin_binds(tmp_path: Path, name: str) -> None:
    assert_binds(tmp_path, CONTROLS[name])


def test_the_edits_change_the_shared_base() -> None:
    """The shared base's text edits must take (a no-op edit would test the base itself)."""
    assert adapter() != IMPORT + BASE + ADAPTER_WARM
    assert "DemoGenerator(hf_config)" in adapter() and "self.generator.decode(" in adapter()
    assert generator(RENAMED) != GENERATOR


CASES = {**{n: files for n, (files, _, _) in REFUSED.items()}, **CONTROLS}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_skeleton_of_a_composed_generator_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    assert_round_trip(tmp_path, CASES[name])


# Round 7's composed-generator trees (R11, R12, V01, V08 and their controls): documented as a
# round-trip limit until the skeleton kept the composed calls.
ROUND7 = {name: adapter for name, adapter, *_ in (*COMPOSED_REFUSED, *COMPOSED_CONTROLS)}


@pytest.mark.parametrize("name", sorted(ROUND7))
def test_the_skeleton_of_a_round7_composed_tree_reads_as_the_tree(
    tmp_path: Path, name: str
) -> None:
    tree_findings = _findings(_tree(tmp_path / "tree", ROUND7[name]))
    write_skeletons(tmp_path / "tree", tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    skel_findings = _findings(tmp_path / "skel")
    assert {m: s for m, (s, _) in skel_findings.items()} == {
        m: s for m, (s, _) in tree_findings.items()
    }
