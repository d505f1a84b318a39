"""Python version tests as the TT host's Python 3.10 (docs/TT_HOST.md) evaluates them, and the
module-level refusals they guard (round 6 V1 / V2; round 7, rt45g N07-N09, VV2, VV3, VV5).

- Evaluated for 3.10: ``sys.version_info`` compared with a tuple (``[:2]``, ``[0:2]``,
  ``tuple(sys.version_info)``, ``[0]`` / ``[1]``, ``.major`` / ``.minor``), ``sys.hexversion``
  compared with an int whose major / minor bytes decide, ``not`` / ``and`` / ``or`` of those,
  and a module name bound once to such a test (``PY311 = sys.version_info >= (3, 11)``). A
  comparison the micro version decides is not evaluated.
- A module-level ``assert`` / ``if ...: raise`` on such a test that 3.10 runs is ``broken``;
  so is a module-level call of a module function whose body does that (``_require_py311()``).
- A version test the checker does not evaluate (``platform.python_version_tuple()``,
  ``sys.version`` strings, ...) guarding a module-level raise is ``unresolved``, never ignored.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

HOST_PYTHON = (3, 10)
# sys.hexversion's major and minor bytes on 3.10 (the rest: micro, release level, serial)
_HOST_HEX = (HOST_PYTHON[0] << 24) | (HOST_PYTHON[1] << 16)
_VERSION_CALLS = {"python_version", "python_version_tuple"}  # platform.*
_VERSION_ATTRS = {"version_info", "hexversion", "version"}  # sys.*
_PLATFORM_NAMES = {f"platform:{c}" for c in _VERSION_CALLS}


def _slice_to_two(index: ast.expr) -> bool:
    """``[:2]`` / ``[0:2]`` (any other index: ``a[-1]`` in a body, rt45h HG04, is not one)."""
    if not isinstance(index, ast.Slice):
        return False
    lower_ok = index.lower is None or (
        isinstance(index.lower, ast.Constant) and index.lower.value == 0
    )
    return (
        lower_ok and index.step is None
        and isinstance(index.upper, ast.Constant) and index.upper.value == 2
    )  # fmt: skip


def _version_value(module: Any, expr: ast.expr) -> tuple[int, ...] | int | None:
    """The host's value of a ``sys.version_info`` expression: the (3, 10) prefix (micro
    unknown), ``[:2]`` / ``[0:2]``, ``[0]`` / ``[1]``, ``.major`` / ``.minor``,
    ``tuple(sys.version_info)``; None for anything else."""
    picked: str | int | slice | None = None
    if isinstance(expr, ast.Attribute) and expr.attr in ("major", "minor"):
        picked, expr = expr.attr, expr.value
    elif isinstance(expr, ast.Subscript):
        index = expr.slice
        if isinstance(index, ast.Constant) and index.value in (0, 1):
            picked = 0 if index.value == 0 else 1
        elif _slice_to_two(index):
            picked = slice(None, 2)
        else:
            return None
        expr = expr.value
    elif (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
        and expr.func.id == "tuple" and "tuple" not in module.bound
        and len(expr.args) == 1 and not expr.keywords
    ):  # fmt: skip
        expr = expr.args[0]  # tuple(sys.version_info): the same prefix
    if not _is_sys(module, expr, "version_info"):
        return None
    if picked in ("major", 0):
        return HOST_PYTHON[0]
    if picked in ("minor", 1):
        return HOST_PYTHON[1]
    return HOST_PYTHON  # a prefix: (3, 10) exactly for [:2], (3, 10, micro, ...) otherwise


def _is_sys(module: Any, expr: ast.expr, attr: str) -> bool:
    imports: dict[str, str] = getattr(module, "imports", {})
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return expr.attr == attr and imports.get(expr.value.id) == "sys"
    return isinstance(expr, ast.Name) and imports.get(expr.id) == f"sys:{attr}"


def _flag(module: Any, test: ast.expr, depth: int) -> ast.expr | None:
    """The version test a module name is bound to once (``PY311 = sys.version_info >= ...``)."""
    if not isinstance(test, ast.Name) or depth > 4:
        return None
    value = getattr(module, "assigns", {}).get(test.id)
    if value is None or test.id in getattr(module, "rebound", set()):
        return None
    return value if isinstance(value, ast.expr) else None


def _hexversion(module: Any, left: ast.expr, op: ast.cmpop, right: ast.expr) -> bool | None:
    flipped = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
    if not _is_sys(module, left, "hexversion"):
        if not _is_sys(module, right, "hexversion"):
            return None
        left, right = right, left
        op = flipped.get(type(op), type(op))()
    if not (isinstance(right, ast.Constant) and type(right.value) is int):
        return None
    other = right.value
    if other >> 16 == _HOST_HEX >> 16:
        return None  # the micro version decides
    below = other > _HOST_HEX  # the host's whole 3.10.x range lies on one side
    verdict = {ast.Lt: below, ast.LtE: below, ast.Gt: not below, ast.GtE: not below,
               ast.Eq: False, ast.NotEq: True}  # fmt: skip
    return verdict.get(type(op))


def version_test(module: Any, test: ast.expr, depth: int = 0) -> bool | None:
    """``test`` on the host's Python 3.10, or None when it is not (only) a version test."""
    flag = _flag(module, test, depth)
    if flag is not None:
        return version_test(module, flag, depth + 1)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = version_test(module, test.operand, depth)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [version_test(module, v, depth) for v in test.values]
        if None in values:
            return None
        return all(values) if isinstance(test.op, ast.And) else any(values)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    hexed = _hexversion(module, left, op, right)
    if hexed is not None:
        return hexed
    flipped = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
    value = _version_value(module, left)
    if value is None:
        value, left, right = _version_value(module, right), right, left
        op = flipped.get(type(op), type(op))()
    try:
        other = ast.literal_eval(right)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if value is None:
        return None
    exact = isinstance(value, int) or (
        isinstance(left, ast.Subscript) and isinstance(left.slice, ast.Slice)
    )
    if isinstance(value, tuple) and isinstance(other, tuple) and not exact:
        if tuple(other[:2]) == value and len(other) > 2:
            return None  # decided by the micro version, which the host does not pin
        if tuple(other[:2]) == value:  # (3, 10, micro) against (3, 10)
            return isinstance(op, (ast.Gt, ast.GtE, ast.NotEq))
    compare: dict[type, Callable[[Any, Any], Any]] = {
        ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne,
    }  # fmt: skip
    how = compare.get(type(op))
    if how is None or type(value) is not type(other):
        return None
    return bool(how(value, other))


def mentions_version(module: Any, expr: ast.expr, depth: int = 0) -> bool:
    """``expr`` reads the running Python's version in a form the checker may not evaluate:
    ``sys.version_info`` / ``hexversion`` / ``version``, ``platform.python_version*()``, or
    a module name bound to such an expression."""
    imports: dict[str, str] = getattr(module, "imports", {})
    for n in ast.walk(expr):
        if any(_is_sys(module, n, a) for a in _VERSION_ATTRS):  # type: ignore[arg-type]
            return True
        head = n.value if isinstance(n, ast.Attribute) else None
        if isinstance(head, ast.Name) and imports.get(head.id) == "platform":  # noqa: SIM102
            if getattr(n, "attr", "") in _VERSION_CALLS:
                return True
        if isinstance(n, ast.Name) and imports.get(n.id) in {
            f"platform:{c}" for c in _VERSION_CALLS
        }:
            return True
        flag = _flag(module, n, depth) if isinstance(n, ast.Name) else None
        if flag is not None and mentions_version(module, flag, depth + 1):
            return True
    return False


def _raise_text(st: ast.Raise) -> str:
    return ast.unparse(st.exc) if st.exc is not None else "raise"


def version_gate(module: Any, st: ast.stmt, depth: int = 0) -> tuple[str, str]:
    """(status, why) of a module-level ``assert`` / ``if ...: raise`` on the Python version
    that stops 3.10 (``broken``) or may (``unresolved``: a test not evaluated), and of a
    module-level call of a module function doing that; ("", "") otherwise."""
    if isinstance(st, ast.Assert):
        truth = version_test(module, st.test)
        if truth is False:
            return (
                "broken",
                f"`assert {ast.unparse(st.test)}` fails on Python 3.10 (AssertionError)",
            )
        if truth is None and mentions_version(module, st.test):
            return "unresolved", (
                f"`assert {ast.unparse(st.test)}`: a Python version test the checker does not "
                "evaluate (AssertionError where it fails on 3.10)"
            )  # fmt: skip
    if isinstance(st, ast.If):
        truth = version_test(module, st.test)
        live = st.body if truth else st.orelse if truth is False else []
        raising = next((s for s in live if isinstance(s, ast.Raise)), None)
        if raising is not None:
            what = _raise_text(raising)
            return "broken", f"`if {ast.unparse(st.test)}:` runs on Python 3.10 and raises {what}"
        if truth is None and mentions_version(module, st.test):
            either = [s for s in [*st.body, *st.orelse] if isinstance(s, ast.Raise)]
            if either:
                return "unresolved", (
                    f"`if {ast.unparse(st.test)}:` raises {_raise_text(either[0])} in a branch: a "
                    "Python version test the checker does not evaluate"
                )  # fmt: skip
    if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and depth < 4:
        called = st.value.func.id if isinstance(st.value.func, ast.Name) else ""
        fn = getattr(module, "functions", {}).get(called)
        if fn is not None and called not in getattr(module, "rebound", set()):
            for inner in fn.body:
                status, why = version_gate(module, inner, depth + 1)
                if status:
                    return status, f"calls {called}() at import, which {why[0].lower()}{why[1:]}"
    return "", ""
