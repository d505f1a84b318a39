"""The parity checker against round 5's import-time red-team trees (rt45e): what Python does when
it imports the adapter's modules (which binding of a name wins, ``__all__``, names used before
they are bound, submodules, relative imports, missing modules, Python 3.10), what the plugin
does with a method besides calling it (uses its result, writes an attribute), a served class
bound where the checker does not follow, and the guards of the command itself.

Each case is a one-class adapter tree (``test_contract_parity_redteam.BASE``) edited as the red
team's tree was; the checker must report the status named, with a reason naming the offender,
and the control (the correct version) must still bind. Python's behaviour for each was checked
by importing such a tree (CPython 3.11; the 3.10 cases from "What's New in Python 3.11").
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_contract_parity_redteam import (
    ADAPTER,
    BASE,
    COMMIT,
    DECODE,
    TARGET,
    edit,
    run,
)
from vllm_tt_plugin.contract import parity
from vllm_tt_plugin.contract.parity import failures
from vllm_tt_plugin.contract.skeleton import write_skeletons

IMPL = "models/demo/tt/impl.py"
IMPL2 = "models/demo/tt/impl_v2.py"
BASE_MOD = "models/demo/tt/base.py"
# The adapter's decode without the plugin's keywords: every decode call is a TypeError.
BAD = edit(BASE, (DECODE, "    def decode_forward(self, tokens, start_pos):\n        return 1\n"))
STAR = "from models.demo.tt.impl import *\n"
CLASS = "class DemoForCausalLM:"
NO_RETURN = (DECODE, DECODE.replace("return sampling_params", "self.x = sampling_params"))
BASE_CLASS = "class Base:\n    pass\n"
FUNCTION = DECODE.replace("    def decode_forward", "def _decode").replace("\n    ", "\n")

# name -> (files, {method: status}, a fragment of that finding's reason)
REFUSED: dict[str, tuple[dict[str, str], dict[str, str], str]] = {
    # A27: `from m import *` below an explicit import rebinds the name (the last binding wins).
    "a27_star_after_import": (
        {
            IMPL: BASE,
            IMPL2: '__all__ = ["DemoForCausalLM"]\n' + BAD,
            ADAPTER: "from models.demo.tt.impl import DemoForCausalLM\n"
            "from models.demo.tt.impl_v2 import *\n",
        },
        {"decode_forward": "broken"},
        "impl_v2:DemoForCausalLM",
    ),
    # A28 / A28b / A28c: __all__ extended after its assignment: the class is exported.
    "a28_all_plus_equals": (
        {
            IMPL: '__all__ = ["X"]\nX = 1\n' + BAD + '__all__ += ["DemoForCausalLM"]\n',
            ADAPTER: STAR,
        },
        {"decode_forward": "broken"},
        "impl:DemoForCausalLM",
    ),
    "a28b_all_append": (
        {
            IMPL: '__all__ = ["X"]\nX = 1\n' + BAD + '__all__.append("DemoForCausalLM")\n',
            ADAPTER: STAR,
        },
        {"decode_forward": "broken"},
        "impl:DemoForCausalLM",
    ),
    "a28c_all_extend": (
        {
            IMPL: '__all__ = ["X"]\nX = 1\n' + BAD + '__all__.extend(["DemoForCausalLM"])\n',
            ADAPTER: STAR,
        },
        {"decode_forward": "broken"},
        "impl:DemoForCausalLM",
    ),
    # __all__ changed by code the checker does not evaluate: which names `*` binds is unknown.
    "a28d_all_computed": (
        {
            IMPL: '__all__ = ["DemoForCausalLM"]\n' + BASE + "__all__ += sorted(globals())\n",
            ADAPTER: STAR,
        },
        {"(source)": "unresolved"},
        "not evaluate",
    ),
    # P05: __all__ lists a name the module no longer binds: AttributeError at `import *`.
    "p05_stale_all": (
        {IMPL: '__all__ = ["DemoForCausalLM", "DemoTraced"]\n' + BASE, ADAPTER: STAR},
        {"(source)": "broken"},
        "'DemoTraced'",
    ),
    # G06: a class-body alias of a module function defined below the class: NameError.
    # (source_import's rule, wt-45h: a name used where nothing has bound it yet.)
    "g06_alias_below": (
        {ADAPTER: edit(BASE, (DECODE, "    decode_forward = _decode\n")) + "\n\n" + FUNCTION},
        {"(source)": "broken"},
        "_decode is not defined there (a NameError on import)",
    ),
    # G07: the base imported below the class (a late import, E402 silenced): NameError.
    "g07_base_below": (
        {
            BASE_MOD: BASE_CLASS,
            ADAPTER: edit(BASE, (CLASS, "class DemoForCausalLM(Base):"))
            + "\nfrom models.demo.tt.base import Base  # a late import\n",
        },
        {"(source)": "broken"},
        "Base is not defined there (a NameError on import)",
    ),
    # Z7: a dotted base through a submodule nothing imported: AttributeError.
    "z7_dotted_unimported": (
        {
            "models/demo/tt/helpers.py": "X = 1\n",
            BASE_MOD: BASE_CLASS,
            ADAPTER: "import models.demo.tt.helpers\n"
            + edit(BASE, (CLASS, "class DemoForCausalLM(models.demo.tt.base.Base):")),
        },
        {"(source)": "broken"},
        "has no attribute 'base'",
    ),
    # A50: a relative import past the top-level package: ImportError.
    "a50_beyond_top": (
        {
            "common/base.py": BASE_CLASS,
            ADAPTER: "from .....common.base import Base\n"
            + edit(BASE, (CLASS, "class DemoForCausalLM(Base):")),
        },
        {"(source)": "broken"},
        "beyond the top-level package",
    ),
    # A38: 3.11+ standard library and syntax on tt-metal's Python 3.10.
    "a38_typing_self": (
        {ADAPTER: "from typing import Self\n" + BASE},
        {"(source)": "broken"},
        "imports Self from typing",
    ),
    "a38b_tomllib": (
        {ADAPTER: "import tomllib\n" + BASE},
        {"(source)": "broken"},
        "imports tomllib, new in Python 3.11",
    ),
    "a38c_except_star": (
        {ADAPTER: "try:\n    pass\nexcept* ValueError:\n    pass\n" + BASE},
        {"(source)": "broken"},
        "not Python 3.10 syntax",
    ),
    # P06: a module-level import of a tt-metal module the checkout lacks.
    "p06_missing_module": (
        {ADAPTER: "from models.demo.tt.generator import DemoGenerator\n" + BASE},
        {"(source)": "broken"},
        "imports models.demo.tt.generator, which is not in this checkout",
    ),
    # T02: a callable attribute that is None until a warm-up (optional) sets it.
    "t02_none_until_warmup": (
        {
            ADAPTER: edit(
                BASE,
                (
                    "        self.generator = generator\n",
                    "        self.generator = generator\n        self._step = None\n",
                ),
                (
                    "    def decode_forward(self, tokens, start_pos, page_table, kv_cache, *,",
                    "    def warmup_model_decode(self, kv_cache, enable_trace, **kwargs):\n"
                    "        self._step = self.generator\n\n"
                    "    def decode_forward(self, tokens, start_pos, page_table, kv_cache, *,",
                ),
                (DECODE.split("\n")[1] + "\n", "        return self._step(sampling_params)\n"),
            )
        },
        {"decode_forward": "unresolved"},
        "only set in __init__ (to None), warmup_model_decode",
    ),
    # T04: the plugin writes already_warmed_up_prefill: a read-only property fails.
    "t04_read_only_property": (
        {
            ADAPTER: BASE + "\n    @property\n    def already_warmed_up_prefill(self):\n"
            "        return False\n"
        },
        {"already_warmed_up_prefill": "broken"},
        "property without a setter",
    ),
    # T05: get_kv_cache_spec is called on the class: a plain def takes vllm_config as self.
    "t05_kv_spec_plain_def": (
        {
            ADAPTER: BASE + "\n    def get_kv_cache_spec(self, vllm_config):\n        return {}\n"
            "\n    def allocate_kv_cache_per_layer(self, per_layer_specs):\n        return {}\n"
        },
        {"get_kv_cache_spec": "broken"},
        "not a classmethod/staticmethod",
    ),
    # A34: `override` from a local shim (its 3.10 fallback changes the call): not trusted.
    "a34_local_override": (
        {
            "models/demo/tt/compat.py": "def override(fn):\n    return fn\n",
            ADAPTER: "from models.demo.tt.compat import override\n"
            + edit(BASE, (DECODE, "    @override\n" + DECODE)),
        },
        {"decode_forward": "unresolved"},
        "decorated with @override",
    ),
    # typing.override is 3.12+: a guarded import runs its handler on Python 3.10.
    "a34b_guarded_override": (
        {
            ADAPTER: "try:\n    from typing import override\nexcept ImportError:\n"
            "    def override(fn):\n        return fn\n"
            + edit(BASE, (DECODE, "    @override\n" + DECODE))
        },
        {"decode_forward": "unresolved"},
        "decorated with @override",
    ),
    "a35_local_no_grad": (
        {
            "models/demo/tt/compat.py": "def no_grad():\n    return lambda f: f\n",
            ADAPTER: "from models.demo.tt.compat import no_grad\n"
            + edit(BASE, (DECODE, "    @no_grad()\n" + DECODE)),
        },
        {"decode_forward": "unresolved"},
        "decorated with @no_grad()",
    ),
    # A36: decode computes but returns nothing; A37: decode yields (a generator function).
    "a36_no_return": (
        {ADAPTER: edit(BASE, NO_RETURN)},
        {"decode_forward": "broken"},
        "never returns a value",
    ),
    "a37_generator": (
        {ADAPTER: edit(BASE, (DECODE, DECODE.replace("return sampling_params", "yield 1")))},
        {"decode_forward": "broken"},
        "generator function",
    ),
    # H02: the served class only under a module-level if / else: each branch checked.
    "h02_class_under_if": (
        {
            IMPL2: BAD,
            ADAPTER: "import os\nif os.environ.get('X') == '1':\n"
            "    from models.demo.tt.impl_v2 import DemoForCausalLM\nelse:\n"
            + textwrap.indent(BASE, "    "),
        },
        {"(source)": "unresolved", "decode_forward": "broken"},
        "inside a module-level `if`",
    ),
    # H03: bound through importlib: a binding the checker does not follow, never "no_class".
    "h03_importlib": (
        {
            IMPL: BAD,
            ADAPTER: "import importlib\n"
            "DemoForCausalLM = importlib.import_module('models.demo.tt.impl').DemoForCausalLM\n",
        },
        {"(source)": "unresolved"},
        "which the checker does not follow",
    ),
}

CONTROLS: dict[str, dict[str, str]] = {
    "a27_star_without_it": {
        IMPL: BASE, IMPL2: '__all__ = ["Other"]\nOther = 1\n' + BAD,
        ADAPTER: "from models.demo.tt.impl import DemoForCausalLM\n"
        "from models.demo.tt.impl_v2 import *\n",
    },
    "a28_all_plus_equals_ok": {
        IMPL: '__all__ = ["X"]\nX = 1\n' + BASE + '__all__ += ["DemoForCausalLM"]\n', ADAPTER: STAR
    },
    "p05_all_current": {IMPL: '__all__ = ["DemoForCausalLM", "X"]\nX = 1\n' + BASE, ADAPTER: STAR},
    "g06_alias_above": {
        ADAPTER: FUNCTION + "\n\n" + edit(BASE, (DECODE, "    decode_forward = _decode\n"))
    },
    "g07_base_above": {
        BASE_MOD: BASE_CLASS,
        ADAPTER: "from models.demo.tt.base import Base\n"
        + edit(BASE, (CLASS, "class DemoForCausalLM(Base):")),
    },
    "z7_dotted_imported": {
        BASE_MOD: BASE_CLASS,
        ADAPTER: "import models.demo.tt.base\n"
        + edit(BASE, (CLASS, "class DemoForCausalLM(models.demo.tt.base.Base):")),
    },
    "a50_within_top": {
        "models/common/base.py": BASE_CLASS,
        ADAPTER: "from ...common.base import Base\n"
        + edit(BASE, (CLASS, "class DemoForCausalLM(Base):")),
    },
    "a38_typing_extensions_self": {ADAPTER: "from typing_extensions import Self\n" + BASE},
    "p06_module_present": {
        "models/demo/tt/generator.py": "class DemoGenerator:\n    pass\n",
        ADAPTER: "import models.demo.tt.generator\n" + BASE,
    },
    "t02_set_in_init": {
        ADAPTER: edit(
            BASE,
            ("        self.generator = generator\n",
             "        self.generator = generator\n        self._step = generator\n"),
            (DECODE.split("\n")[1] + "\n", "        return self._step(sampling_params)\n"),
        )
    },
    "t04_property_with_setter": {
        ADAPTER: BASE + "\n    @property\n    def already_warmed_up_prefill(self):\n"
        "        return False\n\n    @already_warmed_up_prefill.setter\n"
        "    def already_warmed_up_prefill(self, value):\n        self.x = value\n"
    },
    "a34_typing_extensions_override": {
        ADAPTER: "from typing_extensions import override\n"
        + edit(BASE, (DECODE, "    @override\n" + DECODE))
    },
    "a35_torch_no_grad": {
        ADAPTER: "import torch\n" + edit(BASE, (DECODE, "    @torch.no_grad()\n" + DECODE))
    },
    "a35b_torch_inference_mode": {
        ADAPTER: "from torch import inference_mode\n"
        + edit(BASE, (DECODE, "    @inference_mode()\n" + DECODE))
    },
    "a36_explicit_return_none": {
        ADAPTER: edit(BASE, (DECODE, DECODE.replace(
            "return sampling_params", "self.generator.sample(sampling_params)\n        return None"
        )))
    },
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_import_time_failure_is_refused(tmp_path: Path, name: str) -> None:
    files, expected, reason = REFUSED[name]
    found = run(tmp_path, files)
    got = {m: found[m].status if m in found else "(no finding)" for m in expected}
    assert got == expected, [found[m] for m in expected if m in found]
    assert reason in found[next(iter(expected))].detail, found[next(iter(expected))]
    assert failures(list(found.values()))
    assert all(f.status != "no_class" for f in found.values())


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_the_version_python_imports_binds(tmp_path: Path, name: str) -> None:
    found = run(tmp_path, CONTROLS[name])
    assert failures(list(found.values())) == [], failures(list(found.values()))
    assert found["decode_forward"].status in ("ok", "drift"), found["decode_forward"]


def test_a_kv_cache_spec_classmethod_binds(tmp_path: Path) -> None:
    files, _, _ = REFUSED["t05_kv_spec_plain_def"]
    text = edit(files[ADAPTER], ("    def get_kv_cache_spec(self,", (
        "    @classmethod\n    def get_kv_cache_spec(cls,"
    )))  # fmt: skip
    assert run(tmp_path, {ADAPTER: text})["get_kv_cache_spec"].status in ("ok", "drift")


CASES = {**{n: files for n, (files, _, _) in REFUSED.items()}, **CONTROLS}
# The skeleton keeps the branches of a module-level `if` as names bound to `...`: the served
# class's branches are not read there (unresolved either way, the status differs).
NOT_KEPT = {"h02_class_under_if"}


@pytest.mark.parametrize("name", sorted(set(CASES) - NOT_KEPT))
def test_the_skeleton_of_the_tree_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    tree = run(tmp_path / "tree", CASES[name])
    write_skeletons(tmp_path / "tree", tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    skeleton = run(tmp_path / "skel", {})
    assert {m: f.status for m, f in skeleton.items()} == {m: f.status for m, f in tree.items()}


def test_a_skeleton_keeps_imported_modules_it_did_not_read(tmp_path: Path) -> None:
    run(tmp_path / "tree", CONTROLS["p06_module_present"])
    write_skeletons(tmp_path / "tree", tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    # `import models.demo.tt.generator`: importing the adapter runs it, so the checker reads it
    # (round 6, P5-P7) and the skeleton keeps it (a placeholder only for a module not read).
    kept = (tmp_path / "skel/models/demo/tt/generator.py").read_text()
    assert "class DemoGenerator" in kept and "format 2" in kept
    assert failures(list(run(tmp_path / "skel", {}).values())) == []
    # A skeleton of an older tool (no marker) left unread modules out: not checked there.
    old = tmp_path / "old"
    header = f"# tenstorrent/tt-metal {ADAPTER} @ {COMMIT}\n"
    files, _, _ = REFUSED["p06_missing_module"]
    found = run(old, {ADAPTER: header + files[ADAPTER]})
    assert failures(list(found.values())) == [], failures(list(found.values()))


ODD_ALL = [
    "__all__ = ...\n",
    "__all__ = 5\n",
    "__all__ = None\n",
    "__all__ = [1, 2]\n",
    "__all__ = ['DemoForCausalLM']\n__all__ += 3\n",
    "__all__ = ['DemoForCausalLM']\n__all__.append(f())\n",
    "__all__ = ['DemoForCausalLM']\n__all__ |= {'x'}\n",
]


@pytest.mark.parametrize("head", ODD_ALL)
def test_the_checker_never_crashes_on_a_tree_or_its_skeleton(
    tmp_path: Path, head: str, capsys: Any
) -> None:
    # The skeleton of `__all__ += [...]` was once `__all__ = ...`, and the checker then raised.
    files = {IMPL: head + BASE, ADAPTER: STAR}
    for root in (tmp_path / "tree", tmp_path / "skel"):
        if root.name == "tree":
            run(root, files)
        else:
            write_skeletons(tmp_path / "tree", root, {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
        code = parity.main(["--tt-metal-home", str(root)])
        assert code in (0, 1), capsys.readouterr()
        assert "Traceback" not in capsys.readouterr().err


def test_an_internal_error_is_reported_without_a_traceback(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(tmp_path, {ADAPTER: BASE})

    def boom(*args: object) -> list[object]:
        raise TypeError("'ellipsis' object is not iterable")

    monkeypatch.setattr(parity, "check", boom)
    assert parity.main(["--tt-metal-home", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "internal error" in err and "ellipsis" in err and "Traceback" not in err


def test_a_checkout_where_no_target_resolves_fails(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "models").mkdir()
    assert parity.main(["--tt-metal-home", str(tmp_path)]) == 1
    assert "0 targets checked" in capsys.readouterr().out


def test_diff_fails_when_a_target_that_bound_leaves_the_tree(tmp_path: Path, capsys: Any) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    # The real registry's Llama 3.1 8B QB2 target, binding in OLD, renamed away in NEW.
    module = "models/demos/llama31_8b_qb2/tt/generator_vllm.py"
    shipped = Path(__file__).parents[2] / "fixtures/tt_metal/skeletons/llama31_8b_qb2-04d6e39e"
    for tree in (old, new):
        (tree / module).parent.mkdir(parents=True)
    (old / module).write_text((shipped / module).read_text())
    (new / module).write_text((shipped / module).read_text().replace("LlamaForCausalLM", "Llama"))
    assert parity.main(["--diff", str(old), str(old)]) == 0
    capsys.readouterr()
    assert parity.main(["--diff", str(old), str(new)]) == 1
    assert "binds -> not in the tree" in capsys.readouterr().out
