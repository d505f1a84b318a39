"""A ``def`` line as a skeleton writes it (``skeleton``): the parameters with defaults as ``...``
(whole where they raise on import), no annotations; and the kind of method it is."""

from __future__ import annotations

import ast


def header(fn: ast.FunctionDef | ast.AsyncFunctionDef, keep: frozenset[int] = frozenset()) -> str:
    """``def name(params):`` with defaults as ``...`` (whole where ``keep`` holds them: they
    raise on import) and no annotations."""
    a = fn.args
    parts: list[str] = []
    positional = [*a.posonlyargs, *a.args]
    first_default = len(positional) - len(a.defaults)

    def default(expr: ast.expr | None) -> str:
        return "" if expr is None else "=" + (ast.unparse(expr) if id(expr) in keep else "...")

    for i, p in enumerate(positional):
        parts.append(p.arg + (default(a.defaults[i - first_default]) if i >= first_default else ""))
        if a.posonlyargs and i == len(a.posonlyargs) - 1:
            parts.append("/")
    if a.vararg is not None:
        parts.append(f"*{a.vararg.arg}")
    elif a.kwonlyargs:
        parts.append("*")
    for p, kw_default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        parts.append(p.arg + default(kw_default))
    if a.kwarg is not None:
        parts.append(f"**{a.kwarg.arg}")
    prefix = "async def" if isinstance(fn, ast.AsyncFunctionDef) else "def"
    return f"{prefix} {fn.name}({', '.join(parts)}):"


def kind(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    names = {d.id if isinstance(d, ast.Name) else getattr(d, "attr", "") for d in fn.decorator_list}
    return next((k for k in ("classmethod", "staticmethod") if k in names), "method")
