"""The parity checker against round 6's Python 3.10 and compile-time red-team trees (rt45f):
what the TT host's Python 3.10 (docs/TT_HOST.md) does on importing the adapter's modules,
whichever interpreter runs the checker. 3.11+ standard-library names in every spelling the
import evaluates (F07, F41, ST1, F08, J4, J6, J1), ``sys.version_info`` gates (V1, V2), PEP 646
syntax (F40), the compiler's own SyntaxErrors (SY1-SY8), parent packages and imported modules
that fail (P1-P7), a class a PEP 562 ``__getattr__`` provides (F03), decorator orders that fail
(O03), the ``typing`` / ``typing_extensions`` override shim (F09) and a deep expression (CR3c).

Each case is a one-class adapter tree (``test_contract_parity_redteam.BASE``) edited as the red
team's tree was; the checker must report the status named with a reason naming the offender,
and the control (the correct version) must still bind. Python 3.10.13's behaviour for each was
checked by importing such a tree (pyenv).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
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
    profiles,
)
from vllm_tt_plugin.contract.parity import Finding, check, failures
from vllm_tt_plugin.contract.signatures import FixtureError
from vllm_tt_plugin.contract.skeleton import write_skeletons
from vllm_tt_plugin.contract.source import CheckoutReader

ROOT = Path(__file__).parents[2]
SRC = "(source)"
DEMO = {TARGET: ("TTDemoForCausalLM",)}
HELPER = "models/demo/tt/helper.py"
IMPL = "models/demo/tt/impl.py"
INIT = "    @classmethod\n    def initialize_vllm_model("
GMT = "    @classmethod\n    def get_max_tokens_all_users("
SIGNATURE_END = "        optimizations=None,\n    ):"
USES_HELPER = "from models.demo.tt.helper import Helper\n"
BAD = edit(BASE, (DECODE, "    def decode_forward(self, tokens, start_pos):\n        return 1\n"))
PAD = "    def allocate_kv_cache("
SHIM = (
    "try:\n    from typing import override\n"
    "except ImportError:\n    from typing_extensions import override\n"
)


def method(text: str, new: str) -> str:
    """``new`` (a def, indented for the class) inserted before allocate_kv_cache."""
    return edit(text, (PAD, new + PAD))


def returns(annotation: str) -> str:
    """``initialize_vllm_model`` annotated ``-> annotation``."""
    return edit(BASE, (SIGNATURE_END, f"{SIGNATURE_END[:-1]} -> {annotation}:"))


def decorated(decorator: str, text: str = BASE) -> str:
    return edit(text, (DECODE, f"    {decorator}\n{DECODE}"))


def nested(depth: int) -> str:
    value = "not (not " * depth + "False" + ")" * depth  # 2 * depth `not`s: False
    return edit(
        BASE, ('"supports_device_penalties": False', f'"supports_device_penalties": {value}')
    )


# name -> (files, {method: status}, a fragment of that finding's reason)
REFUSED: dict[str, tuple[dict[str, str], dict[str, str], str]] = {
    # F07: the attribute spelling of a 3.11 name, as a base (the class body runs on import).
    "f07_enum_strenum_base": (
        {ADAPTER: "import enum\nclass Mode(enum.StrEnum):\n    NONE = 'none'\n" + BASE},
        {SRC: "broken"}, "enum.StrEnum",
    ),
    # F41: a module constant built with datetime.UTC (3.11).
    "f41_datetime_utc": (
        {ADAPTER: "import datetime\nLOADED_AT = datetime.datetime.now(datetime.UTC)\n" + BASE},
        {SRC: "broken"}, "datetime.UTC",
    ),
    # ST1: `from enum import *` binds no StrEnum on 3.10: NameError.
    "st1_star_import_strenum": (
        {ADAPTER: "from enum import *\nclass Mode(StrEnum):\n    NONE = 'none'\n" + BASE},
        {SRC: "broken"}, "StrEnum",
    ),
    # F08: a return annotation is evaluated at def time (no `from __future__ import annotations`).
    "f08_typing_self_annotation": (
        {ADAPTER: "import typing\n" + returns("typing.Self")},
        {SRC: "broken"}, "typing.Self",
    ),
    # J4: @typing.override (3.12): the decorator is evaluated while the class body runs.
    "j4_typing_override_attribute": (
        {ADAPTER: "import typing\n" + decorated("@typing.override")},
        {SRC: "broken"}, "typing.override",
    ),
    # J6: the 3.11 builtin ExceptionGroup at module level.
    "j6_exception_group_builtin": (
        {ADAPTER: "DEVICE_ERRORS = (RuntimeError, ExceptionGroup)\n" + BASE},
        {SRC: "broken"}, "ExceptionGroup",
    ),
    # J1: a dataclass parameter 3.11 added (TypeError on 3.10).
    "j1_dataclass_weakref_slot": (
        {ADAPTER: "from dataclasses import dataclass\n"
                  "@dataclass(frozen=True, slots=True, weakref_slot=True)\n"
                  "class Cfg:\n    x: int = 1\n" + BASE},
        {SRC: "broken"}, "weakref_slot",
    ),
    # V1 / V2: the module refuses Python < 3.11.
    "v1_assert_version": (
        {ADAPTER: "import sys\nassert sys.version_info >= (3, 11), 'needs 3.11'\n" + BASE},
        {SRC: "broken"}, "AssertionError",
    ),
    "v2_raise_on_version": (
        {ADAPTER: "import sys\nif sys.version_info < (3, 11):\n    raise ImportError('3.11')\n"
                  + BASE},
        {SRC: "broken"}, "sys.version_info < (3, 11)",
    ),
    # F40: PEP 646 stars, which ast.parse(feature_version=(3, 10)) accepts on 3.11+.
    "f40_pep646_star_subscript": (
        {ADAPTER: "from typing_extensions import TypeVarTuple\nShape = TypeVarTuple('Shape')\n"
                  + method(BASE, "    def pad(self, x: tuple[*Shape]) -> tuple[int, *Shape]:\n"
                                 "        return x\n\n")},
        {SRC: "broken"}, "PEP 646",
    ),
    "f40_pep646_star_args": (
        {ADAPTER: "from typing_extensions import TypeVarTuple\nTs = TypeVarTuple('Ts')\n"
                  + method(BASE, "    def pad(self, *xs: *Ts):\n        return xs\n\n")},
        {SRC: "broken"}, "PEP 646",
    ),
    # SY1-SY8: SyntaxErrors the compiler raises after ast.parse accepted the module.
    "sy1_duplicate_parameter": (
        {ADAPTER: edit(BASE, ("reset_sampling_state=False, **kwargs",
                              "reset_sampling_state=False, enable_trace=False, **kwargs"))},
        {SRC: "unreadable"}, "duplicate argument 'enable_trace'",
    ),
    "sy2_break_outside_loop": (
        {ADAPTER: method(BASE, "    def warm(self):\n        break\n\n")},
        {SRC: "unreadable"}, "'break' outside loop",
    ),
    "sy3_walrus_in_class_comprehension": (
        {ADAPTER: edit(BASE, ("    decode_input_update_contract = 1\n",
                              "    decode_input_update_contract = 1\n"
                              "    keys = [k for k in model_capabilities "
                              "if (v := model_capabilities[k])]\n"))},
        {SRC: "unreadable"}, "assignment expression",
    ),
    "sy4_nonlocal_without_binding": (
        {ADAPTER: method(BASE, "    def warm(self):\n        nonlocal n\n        n = 1\n\n")},
        {SRC: "unreadable"}, "nonlocal",
    ),
    "sy5_global_after_use": (
        {ADAPTER: "WARM = 0\n" + method(BASE, "    def warm(self):\n        print(WARM)\n"
                                              "        global WARM\n        WARM = 1\n\n")},
        {SRC: "unreadable"}, "global",
    ),
    "sy6_await_in_plain_def": (
        {ADAPTER: method(BASE, "    def warm(self):\n        await self.x()\n\n")},
        {SRC: "unreadable"}, "'await' outside async function",
    ),
    "sy7_bare_except_not_last": (
        {ADAPTER: "try:\n    import ttnn\nexcept:\n    ttnn = None\nexcept ImportError:\n"
                  "    ttnn = None\n" + BASE},
        {SRC: "unreadable"}, "default 'except:' must be last",
    ),
    "sy8_two_starred_targets": (
        {ADAPTER: method(BASE, "    def warm(self, xs):\n        a, *b, *c = xs\n\n")},
        {SRC: "unreadable"}, "multiple starred expressions",
    ),
    # P1-P4: importing the adapter runs every parent package's __init__ first.
    "p1_parent_init_tomllib": (
        {ADAPTER: BASE, "models/demo/__init__.py": "import tomllib\n"},
        {SRC: "broken"}, "models/demo/__init__.py:1 imports tomllib",
    ),
    "p2_parent_init_missing_module": (
        {ADAPTER: BASE, "models/demo/tt/__init__.py": "from models.demo.tt.fabric import X\n"},
        {SRC: "broken"}, "models.demo.tt.fabric",
    ),
    "p3_top_init_missing_relative": (
        {ADAPTER: BASE, "models/__init__.py": "from .registry import DEMOS\n"},
        {SRC: "broken"}, "models.registry",
    ),
    "p4_parent_init_strenum": (
        {ADAPTER: BASE,
         "models/demo/tt/__init__.py": "import enum\nclass Mode(enum.StrEnum):\n    A = 'a'\n"},
        {SRC: "broken"}, "enum.StrEnum",
    ),
    # P5-P7: a module the adapter imports (not a base, nothing looked up there) fails.
    "p5_imported_module_tomllib": (
        {ADAPTER: USES_HELPER + BASE, HELPER: "import tomllib\nclass Helper:\n    pass\n"},
        {SRC: "broken"}, "helper.py:1 imports tomllib",
    ),
    "p6_imported_module_name_error": (
        {ADAPTER: USES_HELPER + BASE,
         HELPER: "class Helper:\n    pass\nDEFAULT = HelperConfig()\n"},
        {SRC: "broken"}, "HelperConfig is not defined",
    ),
    "p7_imported_module_missing_import": (
        {ADAPTER: USES_HELPER + BASE,
         HELPER: "from models.demo.tt.kernels import fused\nclass Helper:\n    pass\n"},
        {SRC: "broken"}, "models.demo.tt.kernels",
    ),
    # CR3: nested too deeply for any Python to parse (was an internal error, exit 2).
    "cr3_too_deep_to_parse": ({ADAPTER: nested(400)}, {SRC: "unreadable"}, "does not parse"),
    # F03: a module __getattr__ (PEP 562) provides the served class: not "not in this checkout".
    "f03_module_getattr_provides_class": (
        {ADAPTER: "import importlib\n_LAZY = {'DemoForCausalLM': '.impl'}\n"
                  "def __getattr__(name):\n    if name in _LAZY:\n"
                  "        module = importlib.import_module(_LAZY[name], __package__)\n"
                  "        return getattr(module, name)\n"
                  "    raise AttributeError(name)\n",
         IMPL: BAD},
        {SRC: "unresolved"}, "__getattr__ (PEP 562)",
    ),
    # O03: torch's wrapper calls the classmethod object it wraps: TypeError on every load.
    "o03_no_grad_above_classmethod": (
        {ADAPTER: "import torch\n" + edit(BASE, (INIT, "    @torch.no_grad()\n" + INIT))},
        {"initialize_vllm_model": "broken"}, "'classmethod' object is not callable",
    ),
    # abc.abstractmethod cannot mark a classmethod object (AttributeError in the class body).
    "abstractmethod_above_classmethod": (
        {ADAPTER: "import abc\n" + edit(BASE, (GMT, "    @abc.abstractmethod\n" + GMT))},
        {"get_max_tokens_all_users": "broken"}, "@abc.abstractmethod is stacked above",
    ),
}  # fmt: skip

CONTROLS: dict[str, dict[str, str]] = {
    "f07_str_enum_mixin": {ADAPTER: "import enum\nclass M(str, enum.Enum):\n    A = 'a'\n" + BASE},
    "f41_timezone_utc": {
        ADAPTER: "import datetime\nLOADED = datetime.datetime.now(datetime.timezone.utc)\n" + BASE
    },
    "st1_star_import_enum": {ADAPTER: "from enum import *\nclass M(str, Enum): ...\n" + BASE},
    "f08_lazy_annotations": {
        ADAPTER: "from __future__ import annotations\nimport typing\n"
        + edit(BASE, (SIGNATURE_END, SIGNATURE_END[:-1] + " -> typing.Self:"))
    },
    "f08_string_annotation": {
        ADAPTER: "import typing\n" + returns('"typing.Self"')
    },
    # F09: both objects the shim may bind are the library's no-op override.
    "f09_override_shim": {ADAPTER: SHIM + decorated("@override")},
    "j6_own_exception_group": {
        ADAPTER: "class ExceptionGroup(Exception):\n    pass\n"
        "ERRORS = (RuntimeError, ExceptionGroup)\n"
        + BASE
    },
    "j6_guarded_exception_group": {
        ADAPTER: "try:\n    ERRORS = (RuntimeError, ExceptionGroup)\nexcept NameError:\n"
        "    ERRORS = (RuntimeError,)\n" + BASE
    },
    "j1_dataclass_slots": {
        ADAPTER: "from dataclasses import dataclass\n@dataclass(frozen=True, slots=True)\n"
        "class Cfg:\n    x: int = 1\n" + BASE
    },
    "v1_assert_310": {ADAPTER: "import sys\nassert sys.version_info >= (3, 10), '3.10'\n" + BASE},
    "v2_raise_below_310": {
        ADAPTER: "import sys\nif sys.version_info < (3, 10):\n    raise ImportError\n" + BASE
    },
    # The branch 3.10 does not run is not judged; the one it runs is (Enum exists on 3.10).
    "version_gated_strenum": {
        ADAPTER: "import enum\nimport sys\nif sys.version_info >= (3, 11):\n"
        "    Base = enum.StrEnum\n"
        "else:\n    Base = enum.Enum\nclass Mode(str, Base):\n    A = 'a'\n" + BASE
    },
    "version_minor_gate": {
        ADAPTER: "import enum\nimport sys\nif sys.version_info.minor >= 11:\n"
        "    Base = enum.StrEnum\nelse:\n    Base = enum.Enum\n" + BASE
    },
    "strenum_under_type_checking": {
        ADAPTER: "import enum\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    Mode = enum.StrEnum\n" + BASE
    },
    "strenum_in_a_method_body": {
        ADAPTER: "import enum\n"
        + method(BASE, "    def mode(self):\n        return enum.StrEnum\n\n")
    },
    "f40_unpack": {
        ADAPTER: "from typing_extensions import TypeVarTuple, Unpack\n"
        "Shape = TypeVarTuple('Shape')\n"
        + method(BASE, "    def pad(self, x: tuple[Unpack[Shape]]):\n        return x\n\n")
    },
    "sy_global_before_use": {
        ADAPTER: "WARM = 0\n"
        + method(BASE, "    def warm(self):\n        global WARM\n        WARM += 1\n\n")
    },
    "sy_nonlocal_with_binding": {
        ADAPTER: method(
            BASE,
            "    def warm(self):\n        count = 0\n        def step():\n"
            "            nonlocal count\n            count += 1\n        step()\n\n",
        )
    },
    "p2_parent_init_module_present": {
        ADAPTER: BASE,
        "models/demo/tt/__init__.py": "from models.demo.tt.fabric import X\n",
        "models/demo/tt/fabric.py": "X = 1\n",
    },
    "p5_imported_module_imports": {ADAPTER: USES_HELPER + BASE, HELPER: "class Helper: ...\n"},
    "o03_no_grad_below_classmethod": {
        ADAPTER: "import torch\n"
        + edit(BASE, (INIT, INIT.replace("@classmethod\n", "@classmethod\n    @torch.no_grad()\n")))
    },
    "cr3c_deep_expression": {ADAPTER: nested(90)},
}  # fmt: skip


def run(root: Path, files: dict[str, str]) -> list[Finding]:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content))
    return check(CheckoutReader(root), profiles(), {TARGET: ("TTDemoForCausalLM",)})


def statuses(found: list[Finding]) -> dict[str, str]:
    """The worst status of each method column (several findings may name "(source)")."""
    order = ["unreadable", "broken", "missing", "dropped", "unresolved", "absent", "drift", "ok"]
    out: dict[str, str] = {}
    for f in found:
        rank = order.index(f.status) if f.status in order else len(order)
        if f.method not in out or rank < order.index(out[f.method]):
            out[f.method] = f.status
    return out


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_module_python_310_cannot_import_is_refused(tmp_path: Path, name: str) -> None:
    files, expected, reason = REFUSED[name]
    found = run(tmp_path, files)
    got = statuses(found)
    assert {m: got.get(m, "(no finding)") for m in expected} == expected, found
    column = next(iter(expected))
    assert any(reason in f.detail for f in found if f.method == column), found
    assert failures(found)
    assert all(f.status != "no_class" for f in found)


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_the_version_python_310_imports_binds(tmp_path: Path, name: str) -> None:
    found = run(tmp_path, CONTROLS[name])
    if name == "cr3c_deep_expression":  # a constant the checker does not evaluate this deep
        assert all(f.status != "unreadable" for f in found), found
        return
    assert failures(found) == [], failures(found)
    assert {f.method: f.status for f in found}["decode_forward"] in ("ok", "drift")


CASES = {**{n: files for n, (files, _, _) in REFUSED.items()}, **CONTROLS}
# A module the compiler refuses: the skeleton tool refuses it too (one line, exit 2).
UNREADABLE = {n for n, (_, expected, _) in REFUSED.items() if expected.get(SRC) == "unreadable"}


@pytest.mark.parametrize("name", sorted(set(CASES) - UNREADABLE))
def test_the_skeleton_of_the_tree_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    tree = statuses(run(tmp_path / "tree", CASES[name]))
    write_skeletons(tmp_path / "tree", tmp_path / "skel", DEMO, COMMIT)
    assert statuses(run(tmp_path / "skel", {})) == tree


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_the_skeleton_tool_refuses_a_module_that_does_not_compile(
    tmp_path: Path, name: str
) -> None:
    files, _, reason = REFUSED[name]
    run(tmp_path, files)
    with pytest.raises(FixtureError) as refused:  # the CLI prints it in one line, exit 2
        write_skeletons(tmp_path, tmp_path / "skel", DEMO, COMMIT)
    assert reason in str(refused.value) and f"{ADAPTER}:" in str(refused.value)


def test_a_deep_expression_python_310_imports_is_written(tmp_path: Path) -> None:
    run(tmp_path / "tree", {ADAPTER: nested(90)})  # Python 3.10 imports this (CR3c)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(600)  # the tool must not depend on the caller's limit
    try:
        write_skeletons(tmp_path / "tree", tmp_path / "skel", DEMO, COMMIT)
    finally:
        sys.setrecursionlimit(limit)
    assert statuses(run(tmp_path / "skel", {})) == statuses(run(tmp_path / "tree", {}))


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_py310", ROOT / "tools/gen_py310_absent.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_the_absent_name_table_is_current() -> None:
    """py310_absent.json is what tools/gen_py310_absent.py derives from pyenv's interpreters."""
    gen = _generator()
    if shutil.which("pyenv") is None or gen.interpreter("3.10") is None:
        pytest.skip("no pyenv Python 3.10 to derive the table from")
    text = gen.generate()
    if text is None:
        pytest.skip("pyenv lacks one of the newer interpreters")
    assert (ROOT / "plugin/vllm_tt_plugin/contract/py310_absent.json").read_text() == text


def test_a_checker_on_python_312_judges_syntax_for_310() -> None:
    """Run on 3.12, ``ast.parse(feature_version=(3, 10))`` accepts PEP 646 stars and PEP 701
    f-strings (an f-string reusing its quote inside), which 3.10 refuses: still reported."""
    gen = _generator()
    python = gen.interpreter("3.12")
    if python is None:
        pytest.skip("no pyenv Python 3.12")
    probe = (
        "from vllm_tt_plugin.contract.source_loadable import newer_syntax\n"
        "for text in ('x = f\"{d[\"a\"]}\"\\n', 'def f(*a: *Ts): pass\\n', "
        "'x = f\"{d[\\'a\\']}\"\\n', 'x = f\\'\\'\\'{d[\\'a\\']}\\'\\'\\'\\n'):\n"
        "    print(repr(newer_syntax(text)))\n"
    )
    done = subprocess.run(
        [str(python), "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT / 'plugin')!r})\n"
         + probe],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    pep701, pep646, valid, triple = done.stdout.splitlines()
    assert "PEP 701" in pep701 and "PEP 646" in pep646
    assert valid == triple == "''"  # the quote 3.10 allows inside: not flagged
