"""The skeleton tool against the class-shape corpus (``test_contract_parity_round4_shape``): the
skeleton of every tree there, refused or control, must read as the tree (the same verdict for
every method, and for a refused tree a reason naming the same offender). A TT engineer refreshes
the committed fixture trees with this tool: a form it dropped would turn an `unresolved` tree into
an `ok` skeleton (a false pass), or a dataclass into a false alarm.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest

from tests.unit import test_contract_parity_redteam as redteam
from tests.unit import test_contract_parity_round4_shape as shape
from tests.unit.test_contract_parity_redteam import ADAPTER, BASE, COMMIT, TARGET, edit
from tests.unit.test_contract_parity_round4_flow import findings, write
from tests.unit.test_contract_parity_round4_shape import BAD, CLASS, CONTROLS, INIT, REFUSED, body
from vllm_tt_plugin.contract.parity import Finding
from vllm_tt_plugin.contract.skeleton import write_skeletons

INSTALL = "def _install(cls):\n    return cls\n\n\n"
DATACLASS = (
    "from dataclasses import dataclass, field\nfrom typing import ClassVar\n\n\n@dataclass\n"
)
# Siblings of the corpus's forms the tool also dropped: name -> (adapter, the offender's name).
MORE: dict[str, tuple[str, str]] = {
    # Module code: a change of the class inside an `if`, the class handed on inside a value or
    # a `try`.
    "class_changed_under_an_if": (
        BAD + BASE + "\n\nimport os\nif os.environ.get('X'):\n"
        "    DemoForCausalLM.decode_forward = _bad\n",
        "DemoForCausalLM.decode_forward",
    ),
    "class_handed_on_in_a_value": (
        INSTALL + BASE + "\n\n_done = _install(DemoForCausalLM)\n", "_install",
    ),
    "class_handed_on_in_a_try": (
        INSTALL + BASE + "\n\ntry:\n    _install(DemoForCausalLM)\nexcept ImportError:\n"
        "    pass\n",
        "_install",
    ),
    # Class bodies: eval in a value, a match capture, a decorator called with arguments.
    "eval_in_a_class_value": (edit(BASE, body("_x = eval('1')")), "eval"),
    "match_capture_in_class_body": (
        "import os\n" + edit(BASE, body("match os.environ.get('V'):",
                                        "    case str() as decode_forward:", "        pass")),
        "decode_forward",
    ),
    "class_decorator_with_arguments": (
        edit(BASE, (CLASS, "def _reg(*a, **k):\n    return lambda c: c\n\n\n"
                           "@_reg(1, k=_reg)\n" + CLASS)),
        "@_reg",
    ),
    # Dataclass fields: a field form not modelled, a ClassVar (not a field).
    "dataclass_field_init_false": (
        edit(BASE, (CLASS, DATACLASS + CLASS),
             (INIT, "    generator: object = None\n    extra: list = field(init=False)\n")),
        "extra",
    ),
    "dataclass_classvar": (
        edit(BASE, (CLASS, DATACLASS + CLASS),
             (INIT, "    limit: ClassVar[int]\n    generator: object = None\n")),
        "",
    ),
    # Instance writes: in code that cannot run, a `del` through __dict__, setattr on the class.
    "dead_instance_write": (
        edit(BASE, (INIT, INIT + "        return\n        self.__dict__['decode_forward'] = 1\n")),
        "__dict__",
    ),
    "instance_dict_del": (
        edit(BASE, (INIT, INIT + "        del self.__dict__['decode_forward']\n")), "__dict__",
    ),
    "setattr_on_the_class": (
        edit(BASE, (INIT, INIT + "        setattr(type(self), 'decode_' + 'forward', print)\n")),
        "setattr",
    ),
}  # fmt: skip
TREES = {
    **{name: (adapter, word) for name, (adapter, _, word) in REFUSED.items()},
    **{name: (adapter, "") for name, adapter in CONTROLS.items()},
    **MORE,
}


@pytest.mark.parametrize("name", sorted(TREES))
def test_the_skeleton_of_a_shaped_tree_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    adapter, word = TREES[name]
    tree = write(tmp_path / "tree", {ADAPTER: textwrap.dedent(adapter)})
    write_skeletons(tree, tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    original, skeleton = findings(tree), findings(tmp_path / "skel")

    def statuses(found: dict[str, list[Finding]]) -> dict[str, list[str]]:
        return {m: sorted(f.status for f in fs) for m, fs in found.items()}

    assert statuses(skeleton) == statuses(original), (tmp_path / "skel" / ADAPTER).read_text()
    # The reason names the same offender (the skeleton keeps the form, not only a verdict).
    named = [m for m, fs in original.items() if any(word in f.detail for f in fs)]
    assert [m for m in named if any(word in f.detail for f in skeleton[m])] == named


# The corpus's other tests build their trees inside the test and read them with its `run`: run
# each with a `run` that also reads the tree's skeleton and requires the same verdicts.
INLINE = [
    name
    for name, fn in vars(shape).items()
    if name.startswith("test_") and list(inspect.signature(fn).parameters) == ["tmp_path"]
]


@pytest.mark.parametrize("name", INLINE)
def test_the_corpus_trees_built_inline_read_the_same_on_skeletons(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    compared: list[Path] = []

    def run_both(root: Path, files: dict[str, str | bytes]) -> dict[str, Finding]:
        found = redteam.run(root, files)
        skeleton = tmp_path_factory.mktemp("skeleton")
        write_skeletons(root, skeleton, {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
        again = redteam.run(skeleton, {})
        assert {m: f.status for m, f in again.items()} == {m: f.status for m, f in found.items()}
        compared.append(root)
        return found

    monkeypatch.setattr(shape, "run", run_both)
    getattr(shape, name)(tmp_path)
    assert compared
