"""Small readings of a function's ``ast`` the parity checker and the skeleton tool share: a
``NotImplementedError`` stub, an elided (``...``) body, the keys of a literal mapping, the
imports of the plugin's own package."""

from __future__ import annotations

import ast


def _only_raises_not_implemented(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = [
        s
        for s in fn.body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))  # docstring
        and not isinstance(s, ast.Pass)
    ]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc
    if isinstance(exc, ast.Call):
        exc = exc.func
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


PLUGIN_PACKAGE = "vllm_tt_plugin"


def plugin_imports(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """The imports of the plugin's own package inside ``fn`` (a tt-metal adapter that imports
    ``vllm_tt_plugin.<module>`` binds to one plugin's internals)."""
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == PLUGIN_PACKAGE:
                found.append((node.lineno, node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PLUGIN_PACKAGE:
                    found.append((node.lineno, alias.name, ()))
    return tuple(found)


def _literal_keys(fn: ast.FunctionDef | ast.AsyncFunctionDef, expr: ast.expr) -> list[str] | None:
    """The keys of a ``**mapping`` argument: a ``{...}`` / ``dict(k=...)`` literal, or a local
    bound once to one (None: cannot tell)."""
    if isinstance(expr, ast.Name):
        binds = [
            n for n in ast.walk(fn)
            if isinstance(n, ast.Name) and n.id == expr.id and not isinstance(n.ctx, ast.Load)
        ]  # fmt: skip
        value = next(
            (
                n.value for n in ast.walk(fn)
                if isinstance(n, ast.Assign) and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name) and n.targets[0].id == expr.id
            ),
            None,
        )  # fmt: skip
        mutated = any(
            (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == expr.id and n.attr != "get")
            or (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
            and n.value.id == expr.id and not isinstance(n.ctx, ast.Load))
            for n in ast.walk(fn)
        )  # fmt: skip
        if len(binds) != 1 or value is None or mutated:
            return None
        expr = value
    if isinstance(expr, ast.Dict) and all(
        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in expr.keys
    ):
        return [str(k.value) for k in expr.keys if isinstance(k, ast.Constant)]
    if (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict"
        and not expr.args and all(k.arg is not None for k in expr.keywords)
    ):  # fmt: skip
        return [k.arg for k in expr.keywords if k.arg is not None]
    return None


def _elided(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The body is only ``...`` (after a docstring): elided, as in an interface skeleton."""
    body = [
        st
        for st in fn.body
        if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)
                and isinstance(st.value.value, str))
    ]  # fmt: skip
    return (
        len(body) == 1
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and body[0].value.value is Ellipsis
    )


def kwargs_key(expr: ast.expr, kwarg: str | None) -> str | None:
    """The key of ``<kwarg>.get("key", ...)``, else None."""
    if (
        kwarg and isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "get" and isinstance(expr.func.value, ast.Name)
        and expr.func.value.id == kwarg and expr.args and isinstance(expr.args[0], ast.Constant)
        and isinstance(expr.args[0].value, str)
    ):  # fmt: skip
        return expr.args[0].value
    return None
