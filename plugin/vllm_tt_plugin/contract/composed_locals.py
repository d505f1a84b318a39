"""A call into the composed generator as Python makes it, through the locals a method body sets
up first (rt45h CK03, CK15, PF01): ``composed`` binds the result instead of the call as
written, so the plugin's values are named where they really land.

- ``step = functools.partial(self.generator.decode, a, b)`` then ``step(c)``: the call is
  ``self.generator.decode(a, b, c)`` (CK15).
- ``call = {"start_pos": empty_slots, ...}`` / ``dict(k=v)`` then ``f(..., **call)``: the
  mapping's literal keys become keywords (PF01).
- ``enable_trace, read_from_device = read_from_device, enable_trace`` (or ``a = b``) before the
  call: a parameter rebound from others carries theirs (CK03).

Each local (and each rebound parameter) is followed only when the body binds it once, by a
statement of the method's own block that runs on every call before the call's statement, and
(a mapping, a partial) names it nowhere else: anything else is left as written, which
``composed`` does not judge (``*x`` / ``**x``) or reads by the name written.
"""

from __future__ import annotations

import ast
import copy

Fn = ast.FunctionDef | ast.AsyncFunctionDef


def _key(expr: ast.expr | None) -> str | None:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


def _params(fn: Fn) -> set[str]:
    a = fn.args
    return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}


def _stores(fn: Fn, name: str) -> list[ast.AST]:
    return [
        n for n in ast.walk(fn)
        if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
    ]  # fmt: skip


def _loads(fn: Fn, name: str) -> int:
    return sum(
        1 for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name
        and isinstance(n.ctx, ast.Load)
    )  # fmt: skip


def _single_binding(fn: Fn, name: str, before: ast.stmt) -> ast.Assign | None:
    """The one ``name = ...`` statement of ``fn.body`` ahead of ``before``, when it is the only
    binding of ``name`` in the body."""
    if len(_stores(fn, name)) != 1 or before not in fn.body:
        return None
    for st in fn.body[: fn.body.index(before)]:
        if isinstance(st, ast.Assign) and any(
            isinstance(n, ast.Name) and n.id == name for t in st.targets for n in ast.walk(t)
        ):
            return st
    return None


def _mapping(value: ast.expr) -> list[ast.keyword] | None:
    """A dict display / ``dict(k=v)`` with literal keys only, as keywords."""
    if isinstance(value, ast.Dict):
        keys = [_key(k) for k in value.keys]
        if any(k is None for k in keys):
            return None
        return [ast.keyword(arg=k, value=v) for k, v in zip(keys, value.values, strict=True)]
    if (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
        and value.func.id == "dict" and not value.args
        and all(k.arg is not None for k in value.keywords)
    ):  # fmt: skip
        return list(value.keywords)
    return None


def _partial(value: ast.expr) -> ast.Call | None:
    func = value.func if isinstance(value, ast.Call) else None
    named = ast.unparse(func) if func is not None else ""
    if isinstance(value, ast.Call) and named in ("functools.partial", "partial") and value.args:
        return value
    return None


def _rebound_from(fn: Fn, name: str, stmt: ast.stmt) -> str | None:
    """The parameter whose value parameter ``name`` holds at ``stmt``, when one statement ahead
    rebinds it from another parameter (``a, b = b, a``; ``a = b``)."""
    st = _single_binding(fn, name, stmt)
    if st is None or len(st.targets) != 1:
        return None
    target, value = st.targets[0], st.value
    pairs: list[tuple[ast.expr, ast.expr]] = [(target, value)]
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
        if len(target.elts) != len(value.elts):
            return None
        pairs = list(zip(target.elts, value.elts, strict=True))
    for t, v in pairs:
        if isinstance(t, ast.Name) and t.id == name:
            inside = {id(n) for n in ast.walk(st)}  # the source's value before `st` ran
            if (
                isinstance(v, ast.Name)
                and v.id in _params(fn)
                and all(id(n) in inside for n in _stores(fn, v.id))
            ):
                return v.id
    return None


def resolved_call(fn: Fn, call: ast.Call) -> ast.Call:
    """``call`` (made by a statement of ``fn.body``) as Python makes it, or ``call`` itself."""
    stmt = next((st for st in fn.body if any(n is call for n in ast.walk(st))), None)
    if stmt is None:
        return call
    func, args, keywords = call.func, list(call.args), list(call.keywords)
    changed = False
    if isinstance(func, ast.Name) and _loads(fn, func.id) == 1:
        st = _single_binding(fn, func.id, stmt)
        plain = st is not None and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
        made = _partial(st.value) if st is not None and plain else None
        if made is not None:
            func = made.args[0]
            args = [*made.args[1:], *args]
            keywords = [*made.keywords, *keywords]
            changed = True
    spread: list[ast.keyword] = []
    for kw in keywords:
        if kw.arg is None and isinstance(kw.value, ast.Name) and _loads(fn, kw.value.id) == 1:
            st = _single_binding(fn, kw.value.id, stmt)
            items = _mapping(st.value) if st is not None and len(st.targets) == 1 else None
            if items is not None:
                spread += items
                changed = True
                continue
        spread.append(kw)
    params = _params(fn)

    def rename(e: ast.expr) -> ast.expr:
        nonlocal changed
        if isinstance(e, ast.Name) and e.id in params:
            source = _rebound_from(fn, e.id, stmt)
            if source is not None:
                changed = True
                return ast.copy_location(ast.Name(id=source, ctx=ast.Load()), e)
        return e

    args = [rename(a) for a in args]
    spread = [ast.keyword(arg=k.arg, value=rename(k.value)) for k in spread]
    if not changed:
        return call
    out = ast.Call(func=func, args=args, keywords=spread)
    return ast.copy_location(out, copy.copy(call))
