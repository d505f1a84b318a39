"""How an interface skeleton writes what a method does with its ``**kwargs`` (``skeleton``'s
body writer delegates here): a copy or edit of the mapping with its keys kept, a value moved
to another key, a key filter as written, and a mapping handed to a helper whose reads the
checker follows (``source_helpers``), resolved as the checker resolves the helper."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from vllm_tt_plugin.contract.source_body import _callee
from vllm_tt_plugin.contract.source_deadvalue import own_value
from vllm_tt_plugin.contract.source_helpers import mapping_use


def unhanded(node: ast.Call, kwarg: str | None, function: Any) -> ast.Call:
    """``self._h(kwargs)`` where the checker reads what ``_h`` does with the mapping: the
    skeleton keeps the keys it reads as the method's own reads, and the call without it."""
    if not any(
        isinstance(a, ast.Name) and a.id == kwarg and mapping_use(node, a, function) is not None
        for a in node.args
    ):
        return node
    args = [
        ast.Constant(None) if isinstance(a, ast.Name) and a.id == kwarg else a for a in node.args
    ]
    return ast.Call(node.func, args, node.keywords)


def moved_text(assign: ast.AST | None, names: set[str]) -> str:
    """``kw["new"] = kw.pop("old", ...)`` / ``kw.get("old")`` / ``kw["old"]`` as the skeleton
    keeps it (the checker follows the value to the new key); anything else ``...``."""
    v = assign.value if isinstance(assign, ast.Assign) else None
    if (
        isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute)
        and v.func.attr in ("pop", "get") and isinstance(v.func.value, ast.Name)
        and v.func.value.id in names and v.args and isinstance(v.args[0], ast.Constant)
    ):  # fmt: skip
        rest = ", ..." if len(v.args) > 1 else ""
        return f"{v.func.value.id}.{v.func.attr}({v.args[0].value!r}{rest})"
    if (
        isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id in names
        and isinstance(v.slice, ast.Constant)
    ):  # fmt: skip
        return f"{v.value.id}[{v.slice.value!r}]"
    return _value(v)


def _value(v: ast.expr | None) -> str:
    """A value set in **kwargs: ``None`` for one of the model's own (a constant, ``self.x``:
    the checker reads it as replacing the plugin's), else ``...`` (it may carry the plugin's)."""
    return "None" if v is not None and own_value(v) else "..."


def copy_text(expr: ast.expr) -> str:
    """A copy / edit of ``**kwargs`` with its keys and mapping names kept, other values ``...``
    (``{**kwargs, "k": ...}``, ``kwargs.update(k=...)``, ``dict(kwargs)``)."""

    def keep(x: ast.expr) -> str:
        return x.id if isinstance(x, ast.Name) else "..."

    if isinstance(expr, ast.Dict):
        items = [f"**{keep(v)}" if k is None else f"{ast.unparse(k)}: {_value(v)}"
                 for k, v in zip(expr.keys, expr.values, strict=True)]  # fmt: skip
        return "{" + ", ".join(items) + "}"
    if isinstance(expr, ast.DictComp):  # a key filter: source_kwmap reads it as written
        return ast.unparse(expr)
    if isinstance(expr, ast.Call):
        args = [copy_text(a) if isinstance(a, ast.Dict) else keep(a) for a in expr.args]
        args += [f"**{keep(k.value)}" if k.arg is None else f"{k.arg}={_value(k.value)}"
                 for k in expr.keywords]  # fmt: skip
        return f"{ast.unparse(expr.func)}({', '.join(args)})"
    return "..."


def resolver(
    node: ast.ClassDef, functions: Mapping[str, ast.FunctionDef | ast.AsyncFunctionDef]
) -> Any:
    """The helpers a method's body can hand a plugin value to, as the checker resolves them
    (``self._h`` in this class body, ``_h`` a function of this module): what they do with it
    decides whether the skeleton keeps the value as used (``source_helpers``)."""
    own = {i.name: i for i in node.body if isinstance(i, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def function(expr: ast.expr) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, int] | None:
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            found = own.get(expr.attr) if expr.value.id == "self" else None
            return (found, 1) if found is not None else None
        found = functions.get(expr.id) if isinstance(expr, ast.Name) else None
        return (found, 0) if found is not None else None

    return function


def call_text(node: ast.Call, keep: set[str]) -> str:
    """A kept call with the checker's view of its arguments: names of ``keep`` (the method's
    parameters, ``self``/``cls``) and bound methods stay, starred pass-throughs stay, every
    other argument is ``...``."""

    def arg(x: ast.expr) -> str:
        if isinstance(x, ast.Starred):
            inner = x.value
            return f"*{inner.id}" if isinstance(inner, ast.Name) else "*..."
        if isinstance(x, ast.Name) and x.id in keep:
            return x.id
        if _callee(x) is not None:  # a bound method handed on
            return ast.unparse(x)
        return "..."

    args = [arg(x) for x in node.args]
    if args == ["..."] and not node.keywords:
        # One argument: `(...)` would read as elided (a hand-written skeleton), not counted.
        elided = isinstance(node.args[0], ast.Constant) and node.args[0].value is Ellipsis
        args = ["..."] if elided else ["None"]
    for k in node.keywords:
        if k.arg is None:
            value = k.value
            merge = copy_text(value) if isinstance(value, ast.Dict) else "..."  # {**kwargs, ...}
            args.append(f"**{value.id}" if isinstance(value, ast.Name) else f"**{merge}")
        else:
            v = k.value
            args.append(f"{k.arg}={v.id if isinstance(v, ast.Name) and v.id in keep else '...'}")
    return f"{ast.unparse(node.func)}({', '.join(args)})"
