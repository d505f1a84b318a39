"""The token budget a checkout's ``get_max_tokens_all_users`` returns, judged by the launch's own
check (``budget.checked_budget``; rt45h BG04: ``return str(131072)`` passes every binding rule
and fails every launch).

Only a value the checker can compute is judged: the ``return`` the abstract run
(``parity_raises``) reaches for the plugin's values, whose expression is a literal, arithmetic
on literals, or a call of a builtin conversion (``str`` / ``int`` / ``float`` / ``bool`` /
``abs`` / ``round`` / ``min`` / ``max``) of those. Anything else (``cls.BUDGET``, a computation on
the sizing keywords) is left to the launch, as before.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from vllm_tt_plugin.contract.budget import checked_budget

_BUILTINS: dict[str, Callable[..., Any]] = {
    "str": str, "int": int, "float": float, "bool": bool, "abs": abs, "round": round,
    "min": min, "max": max,
}  # fmt: skip
_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv,
}  # fmt: skip
_UNSET = object()
_LIMIT = 1 << 64  # no arithmetic on values past this (a checkout cannot make the checker hang)


def _computed(expr: ast.expr, shadowed: set[str]) -> Any:
    """The value of ``expr``, or ``_UNSET`` when not computed."""
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = _computed(expr.operand, shadowed)
        return -inner if isinstance(inner, (int, float)) else _UNSET
    if isinstance(expr, ast.BinOp) and type(expr.op) in _OPS:
        left, right = _computed(expr.left, shadowed), _computed(expr.right, shadowed)
        numbers = all(isinstance(v, (int, float)) and abs(v) < _LIMIT for v in (left, right))
        if not numbers:
            return _UNSET
        try:
            return _OPS[type(expr.op)](left, right)
        except ArithmeticError:
            return _UNSET
    if (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
        and expr.func.id in _BUILTINS and expr.func.id not in shadowed and not expr.keywords
    ):  # fmt: skip
        args = [_computed(a, shadowed) for a in expr.args]
        if _UNSET in args or any(isinstance(a, int) and abs(a) >= _LIMIT for a in args):
            return _UNSET
        try:
            return _BUILTINS[expr.func.id](*args)
        except (TypeError, ValueError, OverflowError):
            return _UNSET
    return _UNSET


def refused_budget(fn: Any, out: Any, method: str, label: str, where: str, bound: Any) -> str:
    """Why the launch refuses the budget run outcome ``out`` returns ("" when it does not, or
    the value is not computed); ``bound``: the module's names (a shadowed builtin is not run)."""
    if method != "get_max_tokens_all_users" or out.kind != "return":
        return ""
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.lineno == out.line]
    if len(returns) != 1 or returns[0].value is None:
        return ""
    params = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    value = _computed(returns[0].value, set(bound) | params)
    if value is _UNSET:
        return ""
    try:
        checked_budget(label.rpartition(".")[0], value)
    except ValueError as exc:
        written = ast.unparse(returns[0].value)[:80]
        return (
            f"{label} returns `{written}` (line {out.line}): the launch refuses it: {exc} [{where}]"
        )
    return ""


def refused_return(fn: Any) -> str:
    """``return <expr>`` as written where ``fn`` is a ``get_max_tokens_all_users`` whose only
    return (its last statement) computes a budget the launch refuses, else ""."""
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    last = fn.body[-1] if fn.body else None
    if fn.name != "get_max_tokens_all_users" or not isinstance(last, ast.Return):
        return ""
    if returns != [last] or last.value is None:
        return ""
    value = _computed(last.value, {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)})
    if value is _UNSET:
        return ""
    try:
        checked_budget(fn.name, value)
    except ValueError:
        return f"return {ast.unparse(last.value)}"
    return ""
