"""The parity checker against the fourth red team's flow attacks (issue #45): content read only
in code that cannot run, call chains past the hop limit, a zero-argument ``super()`` in a nested
frame, a base bound under a condition, modules that raise on import, and constructs the skeleton
tool dropped. Each attack once read as binding (a false pass); each must now fail naming the
offender, its live control must not fail, and the skeleton of every tree must read as the tree.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.unit import test_contract_parity_checker as corpus
from tests.unit.test_contract_parity_holes import BASE
from vllm_tt_plugin.contract.parity import CheckoutReader, Finding, check
from vllm_tt_plugin.contract.parity_rules import FAILING
from vllm_tt_plugin.contract.signatures import FixtureError, profiles_from_mapping
from vllm_tt_plugin.contract.skeleton import write_skeletons

TARGET = "models.demo.tt.generator_vllm:DemoForCausalLM"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
ADAPTER = "models/demo/tt/generator_vllm.py"
GEN = "models/demo/tt/generator.py"
# The holes corpus's one-class adapter (contract 1, device sampling, no device penalties).
CAPS = BASE[
    BASE.index("    model_capabilities = {") : BASE.index("    decode_input_update_contract")
]
DECODE = BASE[BASE.index("    def decode_forward(") :]
GENERATOR = """
class Generator:
    def decode_forward(self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False,
                       read_from_device=True, sampling_params=None, reload_inputs=True,
                       reload_page_table=True, reload_sampling_params=True,
                       reset_sampling_state=False, slot_remap=None, **kwargs):
        return [tokens, sampling_params]
"""
# sampling_params reaches the decode's **kwargs: it must be read where code runs.
KW = "self, tokens, start_pos, page_table, kv_cache, **kwargs"
READ = "kwargs.get('sampling_params')"


def decode(body: str, sig: str = KW, extra: str = "") -> str:
    lines = textwrap.indent(textwrap.dedent(body).strip("\n"), "        ")
    return BASE.replace(DECODE, f"    def decode_forward({sig}):\n{lines}\n{extra}")


def derived(head: str, adapter: str = BASE) -> dict[str, str]:
    """The adapter derives from the generator module's ``Generator``, imported by ``head``."""
    return {
        ADAPTER: head
        + adapter.replace("class DemoForCausalLM:", "class DemoForCausalLM(Generator):"),
        GEN: GENERATOR,
    }


def class_line(text: str, adapter: str = BASE, prelude: str = "import os\n") -> str:
    """``text`` added to the class body before ``__init__``."""
    at = "    def __init__(self, generator):"
    return prelude + adapter.replace(at, textwrap.indent(textwrap.dedent(text), "    ") + at)


def chain(n: int) -> str:
    hops = "".join(
        f"    def hop{i}(self, *args, **kwargs):\n"
        f"        return self.hop{i + 1}(*args, **kwargs)\n\n"
        for i in range(n)
    )
    hops += (
        f"    def hop{n}(self, tokens, start_pos, page_table, kv_cache, **kwargs):\n"
        f"        return self.generator.decode(tokens, {READ})\n"
    )
    return decode("return self.hop0(*args, **kwargs)", "self, *args, **kwargs", "\n" + hops)


SUPER = "super().decode_forward(*args, **kwargs)"
STAR = "self, *args, **kwargs"
HEAD = "from models.demo.tt.generator import Generator\n"

# name -> (tree, method, the statuses it may get, text its detail must hold)
ATTACKS: dict[str, tuple[dict[str, str], str, tuple[str, ...], str]] = {
    # 1. Content read only in code that cannot run.
    "dead_if_false": ({ADAPTER: decode(f"""
        sp = {READ}
        if False:
            return self.generator.decode(tokens, sp)
        return self.generator.decode(tokens)
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_if_zero": ({ADAPTER: decode("""
        if 0:
            self.generator.decode(tokens, kwargs['sampling_params'])
        return self.generator.decode(tokens)
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_if_false_and": ({ADAPTER: decode(f"""
        if False and tokens is not None:
            return self.generator.decode(tokens, {READ})
        return self.generator.decode(tokens)
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_while_false": ({ADAPTER: decode(f"""
        while False:
            self.generator.decode(tokens, {READ})
        return self.generator.decode(tokens)
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_type_checking": ({ADAPTER: "from typing import TYPE_CHECKING\n" + decode(f"""
        if TYPE_CHECKING:
            self.generator.decode(tokens, {READ})
        return self.generator.decode(tokens)
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_after_return": ({ADAPTER: decode("""
        return self.generator.decode(tokens)
        self.generator.decode(tokens, kwargs['sampling_params'])
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_after_raise_in_branch": ({ADAPTER: decode(f"""
        if tokens is None:
            raise ValueError("no tokens")
            self.generator.decode(tokens, {READ})
        return self.generator.decode(tokens)
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_after_finally_return": ({ADAPTER: decode(f"""
        try:
            pass
        finally:
            return self.generator.decode(tokens)
        return self.generator.decode(tokens, {READ})
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_after_endless_loop": ({ADAPTER: decode(f"""
        while True:
            return self.generator.decode(tokens)
        self.generator.decode(tokens, {READ})
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_uncalled_lambda": ({ADAPTER: decode(f"""
        later = lambda: self.generator.decode(tokens, {READ})
        return self.generator.decode(tokens)
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_uncalled_def": ({ADAPTER: decode(f"""
        def later():
            return self.generator.decode(tokens, {READ})
        return self.generator.decode(tokens)
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_use_of_live_read": ({ADAPTER: decode(f"""
        sp = {READ}
        later = lambda: self.generator.decode(tokens, sp)
        return self.generator.decode(tokens)
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_ifexp_branch": ({ADAPTER: decode(f"""
        return self.generator.decode(tokens, {READ} if False else None)
    """)}, "decode_forward", ("dropped",), "sampling_params"),
    "dead_forward": (derived(HEAD, decode(f"""
        if False:
            return {SUPER}
        return self.generator.decode(args)
    """, STAR)), "decode_forward", ("dropped",), "sampling_params"),
    # 2. A chain of hand-offs deeper than the checker follows.
    "deep_chain": ({ADAPTER: chain(12)}, "decode_forward", ("unresolved",), "depth of 8"),
    # ... the flow's own hop limit: a value copied through many locals, or nested deep in a
    # discarded expression, once counted as used.
    "unused_after_many_copies": ({ADAPTER: decode(
        f"v0 = {READ}\n" + "".join(f"v{i + 1} = v{i}\n" for i in range(8))
        + "return self.generator.decode(tokens)"
    )}, "decode_forward", ("dropped",), "sampling_params"),
    "unused_deep_in_a_discarded_expression": ({ADAPTER: decode(
        f"[[[[[[{READ}]]]]]]\nreturn self.generator.decode(tokens)"
    )}, "decode_forward", ("dropped",), "sampling_params"),
    # 3. super() without arguments in a nested frame.
    "super_in_lambda": (derived(HEAD, decode(f"f = lambda: {SUPER}\nreturn f()", STAR)),
                        "decode_forward", ("unresolved", "broken"), "super() without arguments"),
    "super_in_nested_def": (
        derived(HEAD, decode(f"def inner(x):\n    return {SUPER}\nreturn inner(1)", STAR)),
        "decode_forward", ("unresolved", "broken"), "super() without arguments"),
    "super_in_genexp": (
        derived(HEAD, decode(f"return list({SUPER} for _ in range(1))[0]", STAR)),
        "decode_forward", ("unresolved", "broken"), "super() without arguments"),
    "super_in_staticmethod": (derived(HEAD, BASE.replace(DECODE, (
        f"    @staticmethod\n    def decode_forward(*args, **kwargs):\n        return {SUPER}\n"
    ))), "decode_forward", ("unresolved", "broken"), "staticmethod"),
    "super_in_a_module_function_bound_as_method": (derived(
        HEAD + f"\n\ndef _decode(self, *args, **kwargs):\n    return {SUPER}\n\n",
        BASE.replace(DECODE, "    decode_forward = _decode\n"),
    ), "decode_forward", ("unresolved", "broken"), "module-level def"),
    # 4. A base bound under a condition.
    "base_under_if": (derived(
        "import os\nif os.environ.get('X'):\n    " + HEAD + "else:\n    Generator = object\n"
    ), "decode_forward", ("unresolved",), "bound under `if"),
    "base_under_suppress": (derived(
        "import contextlib\nwith contextlib.suppress(ImportError):\n    " + HEAD
    ), "decode_forward", ("unresolved",), "`with`"),
    "base_try_fallback": (derived(
        "try:\n    " + HEAD + "except ImportError:\n    Generator = object\n"
    ), "decode_forward", ("unresolved",), "`except`"),
    "base_module_under_if": (derived(
        "import os\nif os.environ.get('X'):\n    import models.demo.tt.generator as g\n"
        "else:\n    import models.demo.tt.other as g\nGenerator = g.Generator\n"
    ), "decode_forward", ("unresolved",), "g is bound under"),
    "base_type_checking_only": (derived(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    " + HEAD
    ), "(source)", ("broken",), "TYPE_CHECKING"),
    # 5. The module raises on import.
    "default_reads_environ": ({ADAPTER: class_line(
        "def helper(self, x=os.environ['TT_X']):\n    return x\n"
    )}, "(source)", ("unresolved", "broken"), "os.environ['TT_X']"),
    "default_undefined_name": ({ADAPTER: class_line(
        "def helper(self, x=UNDEFINED_DEFAULT):\n    return x\n"
    )}, "(source)", ("broken",), "UNDEFINED_DEFAULT"),
    "class_body_undefined_name": ({ADAPTER: class_line("flag = UNDEFINED_FLAG\n")},
                                  "(source)", ("broken",), "UNDEFINED_FLAG"),
    "class_body_bad_int": ({ADAPTER: class_line("size = int('x')\n")},
                           "(source)", ("broken",), "int('x')"),
    "module_division_by_zero": ({ADAPTER: "RATIO = 1 / 0\n" + BASE},
                                "(source)", ("broken",), "1 / 0"),
    "class_body_raise_in_a_branch": ({ADAPTER: class_line(
        "size = int('x') if os.environ.get('A') else 1\n"
    )}, "(source)", ("unresolved",), "int('x')"),
}  # fmt: skip

# name -> (tree, method): the live form of an attack, which must not fail.
CONTROLS: dict[str, tuple[dict[str, str], str]] = {
    "live_read": ({ADAPTER: decode(f"sp = {READ}\nreturn self.generator.decode(tokens, sp)")},
                  "decode_forward"),
    "live_branch": ({ADAPTER: decode(f"""
        if tokens is None:
            return self.generator.decode(tokens, {READ})
        return self.generator.decode(tokens, kwargs.get('sampling_params', None))
    """)}, "decode_forward"),
    "loop_with_break": ({ADAPTER: decode(f"""
        while True:
            if tokens is None:
                continue
            break
        return self.generator.decode(tokens, {READ})
    """)}, "decode_forward"),
    "used_after_many_copies": ({ADAPTER: decode(
        f"v0 = {READ}\n" + "".join(f"v{i + 1} = v{i}\n" for i in range(8))
        + "return self.generator.decode(tokens, v8)"
    )}, "decode_forward"),
    "called_lambda": ({ADAPTER: decode(f"""
        later = lambda: self.generator.decode(tokens, {READ})
        return later()
    """)}, "decode_forward"),
    "called_def": ({ADAPTER: decode(f"""
        def later():
            return self.generator.decode(tokens, {READ})
        return later()
    """)}, "decode_forward"),
    "lambda_handed_on": ({ADAPTER: decode(f"""
        return self.generator.run(lambda: self.generator.decode(tokens, {READ}))
    """)}, "decode_forward"),
    "live_ifexp_branch": ({ADAPTER: decode(f"""
        return self.generator.decode(tokens, {READ} if True else None)
    """)}, "decode_forward"),
    "live_forward": (derived(HEAD, decode(f"return {SUPER}", STAR)), "decode_forward"),
    "short_chain": ({ADAPTER: chain(3)}, "decode_forward"),
    "super_with_arguments_in_lambda": (derived(HEAD, decode(
        "f = lambda: super(DemoForCausalLM, self).decode_forward(*args, **kwargs)\nreturn f()",
        STAR,
    )), "decode_forward"),
    "super_with_arguments_in_a_module_function": (derived(
        HEAD + "\n\ndef _decode(self, *args, **kwargs):\n"
        "    return super(DemoForCausalLM, self).decode_forward(*args, **kwargs)\n\n",
        BASE.replace(DECODE, "    decode_forward = _decode\n"),
    ), "decode_forward"),
    "base_imported_plainly": (derived(HEAD), "decode_forward"),
    "base_try_without_fallback": (derived(
        "try:\n    " + HEAD + "except ImportError:\n    pass\n"
    ), "decode_forward"),
    "class_body_good_int": ({ADAPTER: class_line("size = int('3')\n")}, "(source)"),
    "default_reads_environ_get": ({ADAPTER: class_line(
        "def helper(self, x=os.environ.get('TT_X')):\n    return x\n"
    )}, "(source)"),
}  # fmt: skip

# Trees whose skeleton once read differently from the tree (the tool dropped what decides).
SKELETON_ONLY: dict[str, dict[str, str]] = {
    "caps_changed_with_or": {ADAPTER: BASE.replace(
        CAPS, CAPS + '    model_capabilities |= {"supports_sample_on_device": False}\n'
    )},
    "contract_bound_in_match": {ADAPTER: "import os\n" + BASE.replace(
        "    decode_input_update_contract = 1\n",
        "    match os.environ.get('V'):\n        case '0':\n"
        "            decode_input_update_contract = 0\n        case _:\n"
        "            decode_input_update_contract = 1\n",
    )},
    "contract_set_with_setattr": {ADAPTER: BASE.replace(
        "        self.generator = generator\n",
        "        self.generator = generator\n"
        "        if generator is None:\n"
        "            setattr(self, 'decode_input_update_contract', 0)\n",
    )},
}  # fmt: skip


def profiles() -> object:
    facts = {"decode_contract": 1, "device_sampling": True}
    return profiles_from_mapping({"profiles": {TARGET: {"family": "demo", "facts": facts}}})


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def findings(root: Path) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in check(CheckoutReader(root), profiles(), {TARGET: ("TTDemoForCausalLM",)}):  # type: ignore[arg-type]
        out.setdefault(f.method, []).append(f)
    return out


@pytest.mark.parametrize("name", list(ATTACKS))
def test_an_attack_is_not_read_as_binding(tmp_path: Path, name: str) -> None:
    files, method, statuses, offender = ATTACKS[name]
    found = findings(write(tmp_path, files))[method]
    hit = [f for f in found if f.status in statuses and offender in f.detail]
    assert hit, [(f.status, f.detail) for f in found]


@pytest.mark.parametrize("name", list(CONTROLS))
def test_the_live_form_does_not_fail(tmp_path: Path, name: str) -> None:
    files, method = CONTROLS[name]
    every = findings(write(tmp_path, files))
    assert not [f for f in every.get(method, []) if f.status in FAILING], every.get(method)
    assert not [f for fs in every.values() for f in fs if f.status in FAILING], every


def test_names_bound_through_globals_are_no_name_error_but_in_doubt(tmp_path: Path) -> None:
    """`globals()['X'] = 1` binds X (no NameError: not `broken`), but module code writing through
    globals() may bind any name, the class's included: the class is `unresolved`, never ok."""
    files = {ADAPTER: class_line(
        "flag = MADE_BY_GLOBALS\n", prelude="globals()['MADE_BY_GLOBALS'] = 1\n"
    )}  # fmt: skip
    every = findings(write(tmp_path, files))
    statuses = {f.status for fs in every.values() for f in fs}
    assert "broken" not in statuses, every
    assert statuses & {"unresolved"} and not statuses & {"ok", "drift"}, every


def test_a_deep_chain_names_the_link_it_stopped_at(tmp_path: Path) -> None:
    found = findings(write(tmp_path, {ADAPTER: chain(12)}))["decode_forward"][0]
    assert "DemoForCausalLM.hop6 hands the call on (self.hop7(...))" in found.detail


def test_a_conditional_base_makes_every_call_unresolved(tmp_path: Path) -> None:
    files = ATTACKS["base_try_fallback"][0]
    every = findings(write(tmp_path, files))
    statuses = {m: {f.status for f in fs} for m, fs in every.items()}
    assert statuses["decode_forward"] == statuses["prefill_forward"] == {"unresolved"}
    assert not [m for m, s in statuses.items() if s & {"ok", "drift"}], statuses


ROUND_TRIP = {
    **{n: t[0] for n, t in ATTACKS.items()},
    **{n: t[0] for n, t in CONTROLS.items()},
    **SKELETON_ONLY,
}


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_the_skeleton_of_a_tree_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    tree = write(tmp_path / "tree", ROUND_TRIP[name])
    write_skeletons(tree, tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)

    def statuses(root: Path) -> dict[str, list[str]]:
        return {m: sorted(f.status for f in fs) for m, fs in findings(root).items()}

    assert statuses(tmp_path / "skel") == statuses(tree)


# The checker corpus builds its trees inside each test and reads them with its `run`: run every
# such test with a `run` that also writes the tree's skeleton and requires the same verdicts.
CORPUS_TESTS = [
    name
    for name, fn in vars(corpus).items()
    if name.startswith("test_") and list(inspect.signature(fn).parameters) == ["tmp_path"]
]


@pytest.mark.parametrize("name", CORPUS_TESTS)
def test_the_checker_corpus_reads_the_same_on_skeletons(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    original = corpus.run
    compared: list[Path] = []

    def run_both(root: Path, **facts: Any) -> dict[str, Finding]:
        found = original(root, **facts)
        skeleton = tmp_path_factory.mktemp("skeleton")
        try:
            write_skeletons(root, skeleton, {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
        except FixtureError:
            return found  # an unreadable module: the tool refuses to write a tree
        again = original(skeleton, **facts)
        assert {m: f.status for m, f in again.items()} == {m: f.status for m, f in found.items()}
        compared.append(root)
        return found

    monkeypatch.setattr(corpus, "run", run_both)
    getattr(corpus, name)(tmp_path)
    if not compared:
        pytest.skip("the test reads no tree through run()")
