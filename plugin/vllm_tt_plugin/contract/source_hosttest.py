"""Which branch of a test the TT host's Python 3.10 runs (round 8, rt45h FP01 / FP02 / FP21:
compatibility idioms read as failing on working code), in method bodies and at module level.

- A ``sys.version_info`` / ``sys.hexversion`` test (``source_pyversion.version_test``) and a
  constant test (``TYPE_CHECKING``, ``False``: ``source_live.constant_test``).
- A feature test of a standard-library name ``py310_absent.json`` lists: ``hasattr(m, "n")``,
  ``getattr(m, "n", None)`` (a falsy default), ``getattr(...) is None`` / ``is not None``, with
  ``m`` the module as imported (``import itertools``, ``import datetime as dt``): False on 3.10.
  A name the list does not hold is not decided (the test may go either way on a checkout).
- ``not`` / ``and`` / ``or`` of those, three-valued: ``x and <false>`` is false whatever ``x``.

None: the checker does not evaluate the test (both branches stay possible: ``unresolved``).
"""

from __future__ import annotations

import ast
from typing import Any

from vllm_tt_plugin.contract.source_live import constant_test
from vllm_tt_plugin.contract.source_pyversion import version_test
from vllm_tt_plugin.contract.source_stdlib import absent, dotted

Def = ast.FunctionDef | ast.AsyncFunctionDef


def _absent_name(module: Any, owner: ast.expr, name: ast.expr) -> bool:
    """``owner`` is a standard-library module and ``name`` a name its 3.10 lacks."""
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return False
    where = dotted(module, owner)
    return bool(where) and name.value in absent().names.get(where, ())


def _lookup(module: Any, expr: ast.expr, falsy_default: bool) -> bool:
    """``hasattr(m, "n")`` (``falsy_default`` False) / ``getattr(m, "n", <falsy>)`` of a name
    3.10's ``m`` lacks."""
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and not expr.keywords):
        return False
    func, args = expr.func.id, expr.args
    if func in getattr(module, "bound", ()):
        return False  # a local hasattr / getattr is not the builtin
    if func == "hasattr" and len(args) == 2 and not falsy_default:
        return _absent_name(module, args[0], args[1])
    if func == "getattr" and len(args) == 3 and falsy_default:
        default = args[2]
        falsy = isinstance(default, ast.Constant) and not default.value
        return falsy and _absent_name(module, args[0], args[1])
    return False


def _feature_test(module: Any, test: ast.expr) -> bool | None:
    if _lookup(module, test, False) or _lookup(module, test, True):
        return False
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        is_none = isinstance(right, ast.Constant) and right.value is None
        if is_none and isinstance(op, (ast.Is, ast.IsNot)) and _lookup(module, test.left, True):
            return isinstance(op, ast.Is)  # the default (None) is what 3.10 gets
    return None


def host_test(module: Any, test: ast.expr) -> bool | None:
    """The truth of ``test`` on the host's Python 3.10, or None when not evaluated."""
    for decided in (version_test(module, test), constant_test(test), _feature_test(module, test)):
        if decided is not None:
            return decided
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = host_test(module, test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [host_test(module, v) for v in test.values]
        decides = isinstance(test.op, ast.Or)  # the value that settles an `or` / an `and`
        if decides in values:
            return decides
        return None if None in values else not decides
    return None


def taken_branch(module: Any, st: ast.If) -> list[ast.stmt] | None:
    """The statements of ``st`` that 3.10 runs, or None when the test is not evaluated."""
    truth = host_test(module, st.test)
    return None if truth is None else (st.body if truth else st.orelse)


def bound_by(stmts: list[ast.stmt]) -> set[str]:
    """Module names ``stmts`` bind (a def's or class's own locals are not; its ``global``s are)."""
    out: set[str] = set()
    stack: list[ast.AST] = list(stmts)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
            out |= {x for g in ast.walk(n) if isinstance(g, ast.Global) for x in g.names}
            continue
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, ast.Import):
            out |= {a.asname or a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            out |= {a.asname or a.name for a in n.names}
        stack += ast.iter_child_nodes(n)
    return out


def _live_names(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, scope: Any
) -> tuple[set[str], dict[str, str]]:
    """Names ``fn``'s code 3.10 runs may bind (parameters, nested scopes too: more is safer),
    and name -> the test of a branch 3.10 skips that binds it."""
    live: set[str] = set()
    skipped: dict[str, str] = {}
    stack: list[ast.AST] = [fn.args, *fn.body]
    while stack:
        n = stack.pop()
        taken = taken_branch(scope, n) if isinstance(n, ast.If) else None
        if isinstance(n, ast.If) and taken is not None:
            side = "" if taken is n.orelse else "the else of "  # the side skipped
            where = f"{side}`if {ast.unparse(n.test)}:`"
            for name in bound_by(n.body if taken is n.orelse else n.orelse):
                skipped.setdefault(name, where)
            stack += [n.test, *taken]
            continue
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            live.add(n.id)
        elif isinstance(n, ast.arg):
            live.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            live.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            live |= {a.asname or a.name.split(".")[0] for a in n.names}
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            live |= set(n.names)
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            live.add(n.name)
        stack.extend(ast.iter_child_nodes(n))
    return live, skipped


def skipped_locals(fn: Def, scope: Any) -> dict[str, str]:
    """Local names of ``fn`` bound only in branches 3.10 skips (a read raises
    UnboundLocalError): name -> where (the test of the branch)."""
    live, skipped = _live_names(fn, scope)
    return {name: where for name, where in skipped.items() if name not in live}
