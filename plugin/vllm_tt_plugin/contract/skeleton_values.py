"""How the skeleton tool writes a value it keeps: whole when it is what the checker evaluates
(``source_env``: literals, names, environment reads, conversions, string methods), a fact dict
entry by entry, anything else as a call the checker cannot evaluate (``...`` would read as a
known value)."""

from __future__ import annotations

import ast

# Node types an expression may hold and still be written whole (what the checker evaluates:
# literals, names, os.environ reads, comparisons, boolean logic, conversions).
_SIMPLE = (
    ast.Constant, ast.Name, ast.Attribute, ast.Call, ast.Compare, ast.BoolOp, ast.UnaryOp,
    ast.IfExp, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Subscript, ast.Load, ast.boolop,
    ast.cmpop, ast.unaryop, ast.keyword, ast.expr_context, ast.BinOp, ast.operator,
)  # fmt: skip


_CALLS = {"int", "bool", "str", "float", "get", "getenv", "lower", "upper", "strip", "lstrip",
          "rstrip", "casefold", "startswith", "endswith", "isdigit",
          "MappingProxyType"}  # fmt: skip


def _simple(expr: ast.expr) -> bool:
    """Only what the checker evaluates (``source_env``): a call must be a conversion, an
    environment read or a string method."""
    for n in ast.walk(expr):
        if not isinstance(n, _SIMPLE):
            return False
        if isinstance(n, ast.Call):
            name = n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
            if name not in _CALLS:
                return False
    return True


def _value(expr: ast.expr | None) -> str:
    return "..." if expr is None or not _simple(expr) else ast.unparse(expr)


def _constant(expr: ast.expr) -> str:
    """A module-level value: whole when simple, else a call the checker cannot evaluate (a
    fact built from it is unknown, as from the real call; ``...`` would read as a value)."""
    return ast.unparse(expr) if _simple(expr) else "unevaluated()"


def _fact(expr: ast.expr | None) -> str:
    """A fact attribute's value: whole when simple; a dict entry by entry; what the checker
    cannot evaluate as a call it cannot evaluate either (``...`` would read as a non-dict)."""
    if expr is None or _simple(expr):
        return _value(expr)
    if isinstance(expr, ast.Dict) and all(k is not None for k in expr.keys):
        items = [f"{ast.unparse(k)}: {_fact(v)}"
                 for k, v in zip(expr.keys, expr.values, strict=True) if k is not None]  # fmt: skip
        return "{" + ", ".join(items) + "}"
    if isinstance(expr, ast.Call) and _built(expr.func):
        # A mapping built by a call the checker evaluates (``fact_values``): kept around its
        # entries; a read-only view or a ChainMap the plugin refuses, a dict it accepts.
        args = [_fact(a) for a in expr.args]
        args += [f"{k.arg}={_fact(k.value)}" if k.arg else f"**{_fact(k.value)}"
                 for k in expr.keywords]  # fmt: skip
        return f"{ast.unparse(expr.func)}({', '.join(args)})"
    return "unevaluated()"


# Calls whose result the checker builds (``fact_values``); a class called by name (a
# ``TypedDict``, an unevaluated class) is kept too: the checker reads the class.
_BUILT = {"MappingProxyType", "cast", "dict", "OrderedDict", "ChainMap", "UserDict"}


def _built(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        name = func.attr
    elif isinstance(func, ast.Name):
        name = func.id
    else:
        return False
    return name in _BUILT or name[:1].isupper()


def _docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _simple_statement(stmt: ast.stmt) -> bool:
    if _docstring(stmt):
        return True
    if isinstance(stmt, ast.Assign):
        return all(isinstance(t, ast.Name) for t in stmt.targets) and _simple(stmt.value)
    if isinstance(stmt, ast.Return):
        return stmt.value is None or _simple(stmt.value)
    if isinstance(stmt, ast.If):
        return _simple(stmt.test) and all(map(_simple_statement, [*stmt.body, *stmt.orelse]))
    return False
