"""The parity checker against round 7's import / name / version red-team trees (rt45g): what
the TT host's Python 3.10 (docs/TT_HOST.md) does with names the adapter's modules take from
the checkout, version refusals spelled other ways, 3.11 names reached through ``getattr`` /
``__import__``, and what the bodies of the methods the plugin drives reach.

- A name a checkout module does not bind (V06, V06b-e, B01, B02, B05): ImportError /
  AttributeError / NameError at import, ``broken`` under ``(source)``.
- Version refusals (N07 ``[0:2]``, VV3 ``tuple(...)``, VV2 ``hexversion``, VV5 a flag, N09 a
  called module function): ``broken``; a test the checker does not evaluate (N08
  ``platform``): ``unresolved``.
- Obfuscated 3.11 names (N06 ``getattr(enum, "StrEnum")``, N13 ``__import__(...)``).
- Method bodies (N01-N03, N10, N14, V04, V05, V07): ``broken`` where every call runs it.

Each case is a one-class adapter tree (``test_contract_parity_redteam.BASE``) edited as the red
team's tree was; the status named must be reported with a reason naming the offender, the
control (what Python 3.10 runs) must bind, and the skeleton must read as the tree. Python
3.10.13 (pyenv) raised for each refused spelling and ran each control.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_redteam import ADAPTER, BASE, COMMIT, DECODE, edit
from tests.unit.test_contract_parity_round6_py310 import DEMO, HELPER, run, statuses
from vllm_tt_plugin.contract.parity import failures
from vllm_tt_plugin.contract.skeleton import write_skeletons

SRC = "(source)"
DEC = "decode_forward"
HELPER_OK = "class Helper:\n    pass\n\n\ndef check_inputs(tokens):\n    return tokens\n"
HELPER_BARE = "class Helper:\n    pass\n"
PREFILL_RETURN = "        return sampling_params, empty_slots\n"
INIT_BODY = "    def __init__(self, generator):\n        self.generator = generator\n"
GMT_RETURN = "    def get_max_tokens_all_users(cls, **kwargs):\n        return 1\n"


def decode(*lines: str, head: str = "") -> str:
    """BASE with ``lines`` (8-space indented) run first in decode_forward."""
    body = "".join(f"        {line}\n" for line in lines)
    # Before the shared base's return, whatever it returns (the base changes between rounds).
    edited = DECODE.replace("        return ", body + "        return ", 1)
    assert edited != DECODE or not lines
    return head + edit(BASE, (DECODE, edited))


def prefill(*lines: str, head: str = "") -> str:
    body = "".join(f"        {line}\n" for line in lines)
    return head + edit(BASE, (PREFILL_RETURN, body + PREFILL_RETURN))


def init(*lines: str, head: str = "") -> str:
    body = "".join(f"        {line}\n" for line in lines)
    return head + edit(BASE, (INIT_BODY, INIT_BODY + body))


def version(gate: str) -> str:
    return "import sys\n" + gate + BASE


# name -> (files, {column: status}, a fragment of that finding's reason)
REFUSED: dict[str, tuple[dict[str, str], dict[str, str], str]] = {
    # V06: a helper renamed / removed in a checkout module the adapter imports it from.
    "v06_from_import_missing_name": (
        {ADAPTER: "from models.demo.tt.helper import Helper, check_inputs\n" + BASE,
         HELPER: HELPER_BARE},
        {SRC: "broken"}, "binds no check_inputs",
    ),
    "v06c_relative_import": (
        {ADAPTER: "from .helper import Helper, check_inputs\n" + BASE, HELPER: HELPER_BARE},
        {SRC: "broken"}, "binds no check_inputs",
    ),
    "v06d_imported_as": (
        {ADAPTER: "from models.demo.tt.helper import Helper as _H, HelperV2 as Helper\n" + BASE,
         HELPER: HELPER_BARE},
        {SRC: "broken"}, "binds no HelperV2",
    ),
    "v06e_module_attribute_at_import": (
        {ADAPTER: "import models.demo.tt.helper as helper_mod\nHelper = helper_mod.HelperV2\n"
                  + BASE, HELPER: HELPER_BARE},
        {SRC: "broken"}, "helper_mod.HelperV2",
    ),
    # V06b / B05: the missing name is the served class's base.
    "v06b_missing_base": (
        {ADAPTER: "from models.demo.tt.helper import HelperMixin\n"
                  + edit(BASE, ("class DemoForCausalLM:", "class DemoForCausalLM(HelperMixin):")),
         HELPER: HELPER_BARE},
        {SRC: "broken"}, "binds no HelperMixin",
    ),
    # B01: a missing name raises ImportError, which `except ModuleNotFoundError` does not catch.
    "b01_handler_catches_module_not_found_only": (
        {ADAPTER: "try:\n    from models.demo.tt.helper import check_inputs\n"
                  "except ModuleNotFoundError:\n    check_inputs = None\n" + BASE,
         HELPER: HELPER_BARE},
        {SRC: "broken"}, "binds no check_inputs",
    ),
    # B02: a star import of a checkout module that binds no such name: NameError.
    "b02_star_import_never_binds": (
        {ADAPTER: "from models.demo.tt.helper import *\n_DEFAULT = HelperV2\n" + BASE,
         HELPER: HELPER_BARE},
        {SRC: "broken"}, "HelperV2",
    ),
    # N07 / VV3 / VV2 / VV5 / N09: version refusals the checker now evaluates for 3.10.
    "n07_version_slice_0_2": (
        {ADAPTER: version("if sys.version_info[0:2] < (3, 11):\n    raise RuntimeError('3.11')\n")},
        {SRC: "broken"}, "sys.version_info[0:2]",
    ),
    "vv3_tuple_of_version_info": (
        {ADAPTER: version("if tuple(sys.version_info) < (3, 11):\n    raise ImportError('x')\n")},
        {SRC: "broken"}, "tuple(sys.version_info)",
    ),
    "vv2_hexversion": (
        {ADAPTER: version("if sys.hexversion < 0x030B0000:\n    raise ImportError('3.11')\n")},
        {SRC: "broken"}, "sys.hexversion",
    ),
    "vv5_version_flag": (
        {ADAPTER: version("PY311 = sys.version_info >= (3, 11)\nif not PY311:\n"
                          "    raise ImportError('3.11')\n")},
        {SRC: "broken"}, "PY311",
    ),
    "n09_called_version_check": (
        {ADAPTER: version("def _require_py311():\n    if sys.version_info < (3, 11):\n"
                          "        raise ImportError('3.11')\n\n\n_require_py311()\n")},
        {SRC: "broken"}, "_require_py311()",
    ),
    "n09b_assert_in_called_function": (
        {ADAPTER: version("def _check():\n    assert sys.version_info.minor >= 11\n\n\n_check()")},
        {SRC: "broken"}, "_check()",
    ),
    # N08: a version read the checker does not evaluate still guards a raise: never ignored.
    "n08_platform_version_tuple": (
        {ADAPTER: "import platform\nif tuple(int(x) for x in platform.python_version_tuple()[:2])"
                  " < (3, 11):\n    raise ImportError('3.11')\n" + BASE},
        {SRC: "unresolved"}, "python_version_tuple",
    ),
    "n08b_sys_version_string": (
        {ADAPTER: version("if not sys.version.startswith('3.11'):\n    raise ImportError('x')\n")},
        {SRC: "unresolved"}, "sys.version",
    ),
    # N06 / N13: 3.11 names reached through getattr / __import__ / importlib.
    "n06_getattr_strenum": (
        {ADAPTER: "import enum\nMode = getattr(enum, 'StrEnum')('Mode', ['a'])\n" + BASE},
        {SRC: "broken"}, "enum.StrEnum",
    ),
    "n13_dunder_import_default": (
        {ADAPTER: edit(BASE, ("def allocate_kv_cache(self, kv_cache_shape, dtype, num_layers)",
                              "def allocate_kv_cache(self, kv_cache_shape, dtype, num_layers, "
                              "_h=__import__('hashlib').file_digest)"))},
        {SRC: "broken"}, "hashlib.file_digest",
    ),
    "n13b_import_module_tomllib": (
        {ADAPTER: "import importlib\n_loads = importlib.import_module('tomllib').loads\n" + BASE},
        {SRC: "broken"}, "tomllib",
    ),
    # N01 / N02 / N14 / N03 / N10: 3.11 names in the bodies the plugin drives.
    "n01_body_itertools_batched": (
        {ADAPTER: decode("import itertools", "list(itertools.batched(range(8), 4))")},
        {DEC: "broken"}, "itertools.batched",
    ),
    "n02_body_from_import_batched": (
        {ADAPTER: prefill("from itertools import batched")},
        {"prefill_forward": "broken"}, "batched",
    ),
    "n14_body_math_cbrt": (
        {ADAPTER: "import math\n" + edit(BASE, (GMT_RETURN, GMT_RETURN.replace(
            "return 1", "return int(math.cbrt(8))")))},
        {"get_max_tokens_all_users": "broken"}, "math.cbrt",
    ),
    "n03_init_datetime_utc": (
        {ADAPTER: init("self.t = datetime.datetime.now(datetime.UTC)", head="import datetime\n")},
        {"initialize_vllm_model": "broken"}, "datetime.UTC",
    ),
    "n10_init_getattr_taskgroup": (
        {ADAPTER: init("self.tg = getattr(asyncio, 'TaskGroup')", head="import asyncio\n")},
        {"initialize_vllm_model": "broken"}, "asyncio.TaskGroup",
    ),
    "n01b_body_branch_only": (
        {ADAPTER: decode("if enable_trace:", "    math.cbrt(8)", head="import math\n")},
        {DEC: "unresolved"}, "math.cbrt",
    ),
    # V04 / V05 / V07: lazily imported checkout module / attribute / undefined global.
    "v04_body_missing_checkout_module": (
        {ADAPTER: decode("from models.demo.tt.sampling import DeviceSampler")},
        {DEC: "broken"}, "models.demo.tt.sampling",
    ),
    "v04b_body_missing_checkout_name": (
        {ADAPTER: decode("from models.demo.tt.helper import check_inputs", "check_inputs(tokens)"),
         HELPER: HELPER_BARE},
        {DEC: "broken"}, "binds no check_inputs",
    ),
    "v05_body_module_attribute": (
        {ADAPTER: decode("helper_mod.check_inputs(tokens)",
                         head="from models.demo.tt import helper as helper_mod\n"),
         HELPER: HELPER_BARE},
        {DEC: "broken"}, "helper_mod.check_inputs",
    ),
    "v07_body_undefined_global_branch": (
        {ADAPTER: decode("sampling_params = sampling_params if sampling_params is not None "
                         "else _DEFAULT_SAMPLING")},
        {DEC: "unresolved"}, "_DEFAULT_SAMPLING",
    ),
    "v07b_body_undefined_global": (
        {ADAPTER: decode("sampling_params = _normalise(sampling_params)")},
        {DEC: "broken"}, "_normalise",
    ),
}  # fmt: skip

CONTROLS: dict[str, dict[str, str]] = {
    "v06_name_bound": {
        ADAPTER: "from models.demo.tt.helper import Helper, check_inputs\n" + BASE,
        HELPER: HELPER_OK,
    },
    "v06_relative_bound": {ADAPTER: "from .helper import check_inputs\n" + BASE, HELPER: HELPER_OK},
    "v06_module_getattr": {  # PEP 562: the module may provide any name
        ADAPTER: "from models.demo.tt.helper import HelperV2\n" + BASE,
        HELPER: HELPER_BARE + "\n\ndef __getattr__(name):\n    return Helper\n",
    },
    "v06_submodule": {
        ADAPTER: "from models.demo.tt import helper\n" + BASE, HELPER: HELPER_BARE,
    },
    "b01_handler_catches_import_error": {
        ADAPTER: "try:\n    from models.demo.tt.helper import check_inputs\n"
        "except ImportError:\n    check_inputs = None\n" + BASE,
        HELPER: HELPER_BARE,
    },
    "b02_star_binds": {
        ADAPTER: "from models.demo.tt.helper import *\n_DEFAULT = Helper\n" + BASE,
        HELPER: HELPER_BARE,
    },
    "b02_star_reexports": {
        ADAPTER: "from models.demo.tt.helper import *\n_DEFAULT = check_inputs\n" + BASE,
        HELPER: "from models.demo.tt.impl import *\n",
        "models/demo/tt/impl.py": HELPER_OK,
    },
    "version_39_refusal": {ADAPTER: version("if sys.hexversion < 0x03090000:\n    raise "
                                            "ImportError('3.9')\n")},
    "version_flag_branches": {ADAPTER: version("PY311 = sys.version_info[0:2] >= (3, 11)\nif PY311:"
                                              "\n    X = 1\nelse:\n    X = 2\n")},
    "version_function_not_called": {
        ADAPTER: version("def _require_py311():\n    if sys.version_info < (3, 11):\n"
                         "        raise ImportError('3.11')\n")
    },
    "getattr_with_default": {
        ADAPTER: "import enum\nStrEnum = getattr(enum, 'StrEnum', None)\n" + BASE,
    },
    "body_batched_caught": {
        ADAPTER: decode("try:", "    from itertools import batched", "except ImportError:",
                        "    batched = None")
    },
    "body_attribute_caught": {
        ADAPTER: decode("try:", "    math.cbrt(8)", "except AttributeError:", "    pass",
                        head="import math\n")
    },
    "body_310_names": {
        ADAPTER: decode("from itertools import pairwise", "list(pairwise([1, 2]))",
                        "datetime.datetime.now(datetime.timezone.utc)", head="import datetime\n")
    },
    "body_nested_def_not_called": {
        ADAPTER: decode("def _later():", "    return _NOT_YET_BOUND")
    },
    "body_module_names": {
        ADAPTER: decode("sampling_params = _DEFAULT if sampling_params is None else "
                        "sampling_params", "check_inputs(tokens)",
                        head="from models.demo.tt.helper import check_inputs\n_DEFAULT = None\n"),
        HELPER: HELPER_OK,
    },
    "body_local_annotation": {
        ADAPTER: decode("value: NotDefinedAnywhere = 1", "del value")
    },
}  # fmt: skip


def assert_refused(
    tmp_path: Path, files: dict[str, str], expected: dict[str, str], reason: str
) -> None:
    """The tree fails with ``expected`` statuses, the first column's detail naming ``reason``."""
    found = run(tmp_path, files)
    got = statuses(found)
    assert {m: got.get(m, "(no finding)") for m in expected} == expected, found
    column = next(iter(expected))
    assert any(reason in f.detail for f in found if f.method == column), found
    assert failures(found)


def assert_binds(tmp_path: Path, files: dict[str, str]) -> None:
    found = run(tmp_path, files)
    assert failures(found) == [], failures(found)
    assert {f.method: f.status for f in found}[DEC] in ("ok", "drift")


def assert_round_trip(tmp_path: Path, files: dict[str, str]) -> None:
    """The skeleton of the tree gives the tree's verdicts."""
    tree = statuses(run(tmp_path / "tree", files))
    write_skeletons(tmp_path / "tree", tmp_path / "skel", DEMO, COMMIT)
    assert statuses(run(tmp_path / "skel", {})) == tree


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_python_310_fails_on_is_refused(tmp_path: Path, name: str) -> None:
    assert_refused(tmp_path, *REFUSED[name])


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_what_python_310_runs_binds(tmp_path: Path, name: str) -> None:
    assert_binds(tmp_path, CONTROLS[name])


CASES = {**{n: files for n, (files, _, _) in REFUSED.items()}, **CONTROLS}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_skeleton_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    assert_round_trip(tmp_path, CASES[name])


def test_a_name_missing_from_a_placeholder_module_is_recorded(tmp_path: Path) -> None:
    """The module the name comes from is not read by the checker: the skeleton writes it as
    a placeholder (which binds nothing), so the tool records the failure it found."""
    files = {
        ADAPTER: "from models.demo.tt.helper import helper_x\n" + BASE,
        HELPER: "def other():\n    return 1\n",
    }
    tree = statuses(run(tmp_path / "tree", files))
    assert tree[SRC] == "broken"
    write_skeletons(tmp_path / "tree", tmp_path / "skel", DEMO, COMMIT)
    assert "binds no helper_x" in (tmp_path / "skel" / ADAPTER).read_text()
    assert statuses(run(tmp_path / "skel", {})) == tree


def test_an_older_skeleton_says_nothing_of_names(tmp_path: Path) -> None:
    """A hand-written skeleton (provenance line, no format-2 marker) may leave names out: a
    name it does not bind is not a failure there (the shipped trees)."""
    provenance = f"# tenstorrent/tt-metal {HELPER} @ {COMMIT}\n"
    files = {
        ADAPTER: provenance.replace(HELPER, ADAPTER)
        + "from models.demo.tt.helper import Helper, check_inputs\n"
        + BASE,
        HELPER: provenance + HELPER_BARE,
    }
    assert failures(run(tmp_path, files)) == []


# FA12: a module the adapter's import runs edits the capabilities dict the class holds.
CAPS_MODULE = "models/demo/tt/caps.py"
TWEAKS = "models/demo/tt/tweaks.py"
CAPS_LITERAL = '{"supports_sample_on_device": True, "supports_device_penalties": False}'
SHARED = (
    "from models.demo.tt.caps import CAPS\nfrom models.demo.tt import tweaks  # noqa: F401\n"
    + edit(BASE, (f"model_capabilities = {CAPS_LITERAL}", "model_capabilities = CAPS"))
)
TWEAKED = {
    "fa12_item_set_by_another_module": "from models.demo.tt.caps import CAPS\n"
    'CAPS["supports_device_penalties"] = True\n',
    "fa12_update_through_an_alias": "from models.demo.tt.caps import CAPS as _C\n"
    "_C.update(supports_device_penalties=True)\n",
}


@pytest.mark.parametrize("name", sorted(TWEAKED))
def test_capabilities_edited_by_another_module_are_not_read_as_the_literal(
    tmp_path: Path, name: str
) -> None:
    files = {ADAPTER: SHARED, CAPS_MODULE: f"CAPS = {CAPS_LITERAL}\n", TWEAKS: TWEAKED[name]}
    found = run(tmp_path / "tree", files)
    # decode_forward's **kwargs never reads the penalty histories the tweak turns on
    assert statuses(found)[DEC] == "dropped", found
    assert any("tweaks.py" in f.detail for f in found), found
    write_skeletons(tmp_path / "tree", tmp_path / "skel", DEMO, COMMIT)
    assert statuses(run(tmp_path / "skel", {})) == statuses(found)


def test_capabilities_another_module_only_reads_bind(tmp_path: Path) -> None:
    files = {
        ADAPTER: SHARED,
        CAPS_MODULE: f"CAPS = {CAPS_LITERAL}\n",
        TWEAKS: "from models.demo.tt.caps import CAPS\nPENALTIES = CAPS.get('x', False)\n",
    }
    assert failures(run(tmp_path, files)) == []
