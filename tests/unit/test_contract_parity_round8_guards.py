"""The parity checker against round 8's guard / return / compatibility red-team trees (rt45h):
which branch the TT host's Python 3.10 runs, what a driven method hands back, and a checkout
the size of a generated table.

- FP01 / FP02 / FP21 (false alarms): ``x if sys.version_info >= (3, 11) else y``,
  ``if hasattr(itertools, "batched"):`` in a body, ``if hasattr(enum, "StrEnum"):`` at module
  level: the branch 3.10 takes is judged, the other is not (``source_hosttest``).
- NA14 in a body: a local bound only under a branch 3.10 skips, read after it:
  UnboundLocalError.
- GD02: ``try: assert not reload_page_table`` under ``except ImportError`` (here on
  ``reload_inputs``, which this base sends True): the handler does
  not catch the AssertionError (``parity_compound.uncaught_prefix``): ``broken``.
- RT04: a retry loop whose returns are conditional, then the end of the body: ``unresolved``
  (the loop may have returned; loop bodies are not run), never ``ok``.
- BG04: ``get_max_tokens_all_users`` returns ``str(131072)``: the launch's own check
  (``budget.checked_budget``) refuses it: ``broken``.
- NA15: a comprehension's variable read after it (Python 3: its own scope): NameError.
- IM10: ``del X`` at module level after its import, ``X`` used at run time: NameError.

Each case is a one-class adapter tree (``test_contract_parity_redteam.BASE``) edited as the red
team's tree was; a refused case reports the status named with a reason naming the offender,
a control (what Python 3.10 runs) binds, and the skeleton reads as the tree. Python 3.10.13
(pyenv, rt45h harness) raised for each refused spelling and ran each control.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_redteam import ADAPTER, BASE, DECODE, edit
from tests.unit.test_contract_parity_round6_py310 import HELPER
from tests.unit.test_contract_parity_round7_names import (
    DEC,
    GMT_RETURN,
    HELPER_OK,
    SRC,
    assert_binds,
    assert_refused,
    assert_round_trip,
    decode,
    init,
)

DT = "import datetime, sys"
IT = "import itertools"
ENUM_HEAD = "import enum\n"
GMT = "get_max_tokens_all_users"
INIT = "initialize_vllm_model"
IMPORT_HELPER = "from models.demo.tt.helper import Helper\n"
RELOAD_GUARD = "    assert not reload_inputs, 'the inputs stay on the device'"


def guarded(*lines: str, handler: str = "ImportError") -> str:
    """BASE whose decode runs ``lines`` in a ``try`` with ``except <handler>: pass``."""
    return decode("try:", *lines, f"except {handler}:", "    pass")


def retried(test: str, loop: str = "for _attempt in range(2):", after: str = "") -> str:
    """BASE whose decode calls in a loop and returns the result only where ``test`` holds,
    then runs ``after`` (8-space indented)."""
    body = DECODE.replace("        return ", f"        {loop}\n            out = ", 1)
    assert body != DECODE
    tail = f"            if {test}:\n                return out\n" + (
        f"        {after}\n" * bool(after)
    )
    return edit(BASE, (DECODE, body + tail))


def budget(expr: str) -> str:
    edited = GMT_RETURN.replace("return 1", f"return {expr}")
    assert edited != GMT_RETURN
    return edit(BASE, (GMT_RETURN, edited))


# name -> (files, {column: status}, a fragment of that finding's reason)
REFUSED: dict[str, tuple[dict[str, str], dict[str, str], str]] = {
    # NA14 in a body: the local exists only where 3.10 does not run
    "na14_body_version_gated_local": (
        {ADAPTER: decode("import sys", "if sys.version_info >= (3, 11):", "    _fast = len",
                         "_n = _fast(tokens)")},
        {DEC: "broken"}, "_fast",
    ),
    "na14_body_else_of_older_version": (
        {ADAPTER: decode("import sys", "if sys.version_info[:2] < (3, 11):", "    pass", "else:",
                         "    _fast = len", "_n = _fast(tokens)")},
        {DEC: "broken"}, "UnboundLocalError",
    ),
    "na14_body_feature_gated_local": (
        {ADAPTER: decode(IT, "if hasattr(itertools, 'batched'):",
                         "    _chunks = itertools.batched", "_c = list(_chunks(tokens, 4))")},
        {DEC: "broken"}, "_chunks",
    ),
    # the branch 3.10 takes is judged whole: a 3.11 name there fails on every call
    "taken_version_branch_uses_311_name": (
        {ADAPTER: decode(DT, "if sys.version_info < (3, 12):", "    _u = datetime.UTC")},
        {DEC: "broken"}, "datetime.UTC",
    ),
    "inverted_feature_test": (
        {ADAPTER: decode(IT, "if not hasattr(itertools, 'batched'):",
                         "    _c = list(itertools.batched(tokens, 4))")},
        {DEC: "broken"}, "itertools.batched",
    ),
    "taken_side_of_conditional_expression": (
        {ADAPTER: decode(DT, "_u = datetime.timezone.utc if sys.version_info >= (3, 11) "
                         "else datetime.UTC")},
        {DEC: "broken"}, "datetime.UTC",
    ),
    "module_level_inverted_feature_test": (
        {ADAPTER: decode(head=ENUM_HEAD + "if not hasattr(enum, 'StrEnum'):\n"
                         "    _Base = enum.StrEnum\nelse:\n    _Base = str\n")},
        {SRC: "broken"}, "enum.StrEnum",
    ),
    "module_name_bound_only_under_feature_test": (
        {ADAPTER: decode("_c = list(batched(tokens, 4))", head=f"{IT}\nif hasattr(itertools, "
                         "'batched'):\n    from itertools import batched\n")},
        {DEC: "broken"}, "batched",
    ),
    # GD02: a handler that cannot catch what the guard raises
    "gd02_assert_under_import_error": (
        {ADAPTER: guarded(RELOAD_GUARD)}, {DEC: "broken"}, "reload_inputs",
    ),
    "gd02_raise_under_tuple_of_handlers": (
        {ADAPTER: guarded("    pass", "    if reload_inputs and sampling_params is not None:",
                          "        raise TypeError('static page table')",
                          handler="(ImportError, KeyError)")},
        {DEC: "broken"}, "TypeError",
    ),
    "gd02_assert_with_finally": (
        {ADAPTER: decode("try:", RELOAD_GUARD, "except ModuleNotFoundError:", "    pass",
                         "finally:", "    pass")},
        {DEC: "broken"}, "reload_inputs",
    ),
    # RT04: the loop returns only under a condition, then the body ends
    "rt04_retry_returns_none_only": (
        {ADAPTER: retried("out is None")}, {DEC: "unresolved"}, "after the loop",
    ),
    "rt04_retry_returns_value_only": (
        {ADAPTER: retried("out is not None")}, {DEC: "unresolved"}, "after the loop",
    ),
    "rt04_retry_then_return_none": (
        {ADAPTER: retried("out is not None", after="return None")},
        {DEC: "unresolved"}, "after the loop",
    ),
    "rt04_while_loop": (
        {ADAPTER: retried("out", loop="while tokens is not None:")},
        {DEC: "unresolved"}, "after the loop",
    ),
    # BG04: a budget the launch refuses
    "bg04_budget_as_str": ({ADAPTER: budget("str(131072)")}, {GMT: "broken"}, "positive integer"),
    "bg04_budget_as_float": ({ADAPTER: budget("131072 / 2")}, {GMT: "broken"}, "65536.0"),
    "bg04_budget_zero": ({ADAPTER: budget("max(0, -1)")}, {GMT: "broken"}, "returned 0"),
    # NA15: a comprehension's variable does not outlive it
    "na15_list_comprehension_variable_after": (
        {ADAPTER: decode("_ids = [slot for slot in range(4)]", "_last = slot")},
        {DEC: "broken"}, "slot",
    ),
    "na15_generator_expression_variable_after": (
        {ADAPTER: decode("_n = sum(k * 2 for k in range(4) if k)", "_k = k")},
        {DEC: "broken"}, "uses k,",
    ),
    # IM10: deleted after its import
    "im10_del_after_import": (
        {ADAPTER: init("self.helper = Helper()", head=IMPORT_HELPER + "del Helper\n"),
         HELPER: HELPER_OK},
        {INIT: "broken"}, "del Helper",
    ),
    "im10_del_module_alias": (
        {ADAPTER: decode("_h = helper.Helper", head="import models.demo.tt.helper as helper\n"
                         "del helper\n"), HELPER: HELPER_OK},
        {DEC: "broken"}, "del helper",
    ),
    # honest where the test is not evaluated: either branch may run
    "unevaluated_test_stays_unresolved": (
        {ADAPTER: decode(DT, "if hasattr(self, 'fast'):", "    _u = datetime.UTC")},
        {DEC: "unresolved"}, "datetime.UTC",
    ),
    "unlisted_feature_name_stays_unresolved": (
        {ADAPTER: decode(IT, "if hasattr(itertools, 'pairwise'):",
                         "    _c = list(itertools.batched(tokens, 4))")},
        {DEC: "unresolved"}, "itertools.batched",
    ),
}  # fmt: skip

CONTROLS: dict[str, dict[str, str]] = {
    # GD02: a handler that catches the guard's error (the decode goes on)
    "assert_caught_by_its_handler": {ADAPTER: guarded(RELOAD_GUARD, handler="AssertionError")},
    "assert_caught_by_exception": {ADAPTER: guarded(RELOAD_GUARD, handler="Exception")},
    # RT04: a loop whose first pass returns, or a return after the loop
    "loop_returning_on_its_first_pass": {
        ADAPTER: edit(BASE, (DECODE, DECODE.replace(
            "        return ", "        for _attempt in range(2):\n            return ", 1))),
    },
    "retry_loop_then_a_raise": {
        ADAPTER: retried("out is not None", after="raise RuntimeError('no output after 2 tries')"),
    },
    "retry_loop_then_a_return": {
        ADAPTER: retried("out is not None", after="return out"),
    },
    # a subscript test is not a version test (rt45h HG04 `a[-1] > 0` crashed the evaluation)
    "subscript_tests_in_body_and_module": {
        ADAPTER: decode("_a = (1, 2)", "if _a[-1] > 0:", "    _b = 1",
                        head="_T = (1, 2)\nif _T[-1] > 0:\n    _B = 1\n"),
    },
    # NA15 / IM10 controls: read inside the comprehension; a loop variable; bound again
    "comprehension_variable_read_inside": {
        ADAPTER: decode("_ids = {slot: [slot * j for j in range(slot)] for slot in range(4)}"),
    },
    "loop_variable_after_the_loop": {ADAPTER: decode("for slot in range(4):", "    pass",
                                                     "_last = slot")},
    "del_then_imported_again": {
        ADAPTER: init("self.helper = Helper()", head=IMPORT_HELPER + "del Helper\n"
                      + IMPORT_HELPER), HELPER: HELPER_OK,
    },
    # BG04: budgets the launch takes
    "budget_arithmetic": {ADAPTER: budget("128 * 1024")},
    "budget_converted": {ADAPTER: budget("int('131072')")},
    # FP01: the conditional expression picks the 3.10 spelling
    "fp01_conditional_expression": {
        ADAPTER: decode(DT, "_u = datetime.UTC if sys.version_info >= (3, 11) "
                        "else datetime.timezone.utc"),
    },
    "fp01_hexversion_spelling": {
        ADAPTER: decode(DT, "_u = datetime.timezone.utc if sys.hexversion < 0x30B0000 "
                        "else datetime.UTC"),
    },
    # FP02: the feature test guards the 3.11 call
    "fp02_hasattr_guard": {
        ADAPTER: decode(IT, "if hasattr(itertools, 'batched'):",
                        "    _c = list(itertools.batched(range(8), 4))"),
    },
    "fp02_getattr_default_is_not_none": {
        ADAPTER: decode(IT, "if getattr(itertools, 'batched', None) is not None:",
                        "    _c = list(itertools.batched(range(8), 4))", "else:", "    _c = []"),
    },
    "fp02_not_hasattr_else": {
        ADAPTER: decode(IT, "if not hasattr(itertools, 'batched') or tokens is None:",
                        "    _c = []", "else:", "    _c = list(itertools.batched(tokens, 4))"),
    },
    "version_gated_local_with_fallback": {
        ADAPTER: decode("import sys", "if sys.version_info >= (3, 11):", "    _fast = len",
                        "else:", "    _fast = list.__len__", "_n = _fast(tokens)"),
    },
    # FP21: a module-level base chosen by a feature test
    "fp21_module_level_hasattr": {
        ADAPTER: decode(head=ENUM_HEAD + "if hasattr(enum, 'StrEnum'):\n    _Base = enum.StrEnum"
                        "\nelse:\n    _Base = str\n"),
    },
    "fp21_module_level_class_under_feature_test": {
        ADAPTER: decode(head=ENUM_HEAD + "if hasattr(enum, 'StrEnum'):\n"
                        "    class _Mode(enum.StrEnum):\n        A = 'a'\nelse:\n"
                        "    class _Mode(str, enum.Enum):\n        A = 'a'\n"),
    },
    "module_import_under_feature_test_with_fallback": {
        ADAPTER: decode("_c = list(batched(tokens, 4))", head=f"{IT}\nif hasattr(itertools, "
                        "'batched'):\n    from itertools import batched\nelse:\n"
                        "    def batched(xs, n):\n        return [xs]\n"),
    },
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_python_310_runs_is_judged(tmp_path: Path, name: str) -> None:
    assert_refused(tmp_path, *REFUSED[name])


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_compatibility_idiom_binds(tmp_path: Path, name: str) -> None:
    assert_binds(tmp_path, CONTROLS[name])


CASES = {**{n: files for n, (files, _, _) in REFUSED.items()}, **CONTROLS}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_skeleton_reads_as_the_tree(tmp_path: Path, name: str) -> None:
    assert_round_trip(tmp_path, CASES[name])
