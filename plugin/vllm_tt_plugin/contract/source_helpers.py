"""A plugin value (or the whole ``**kwargs`` mapping) handed to a helper the checker can read
(an own method ``self._h(x)`` or a module function ``_h(x)``): what the helper does with the
parameter it lands on decides whether the value is used. A helper that only tests it
(``assert``, ``is None``, ``len``) does not use it; a helper reading other keys of the mapping
(``"images"`` while the plugin sends ``pixel_values``) reads those keys, not all of them."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_tt_plugin.contract.source_flow import _name_used, elided, parents_of, value_used

Fn = ast.FunctionDef | ast.AsyncFunctionDef
# function(expr) -> (the helper's def, parameters before the call's first argument) | None
Resolver = Callable[[ast.expr], "tuple[Fn, int] | None"]
_READS = ("get", "pop", "setdefault")


@dataclass(frozen=True)
class MappingUse:
    """What a helper does with a mapping handed to it."""

    keys: tuple[str, ...]  # keys it reads by name with the value used
    opaque: bool  # used whole (passed on, iterated, stored): every key counts as read


def _param(call: ast.Call, arg: ast.AST, helper: Fn, offset: int) -> str | None:
    """The parameter of ``helper`` that ``arg`` (an argument of ``call``) binds to."""
    a = helper.args
    positional = [*a.posonlyargs, *a.args]
    for i, x in enumerate(call.args):
        if x is arg:
            if any(isinstance(y, ast.Starred) for y in call.args[:i]):
                return None
            at = i + offset
            return positional[at].arg if at < len(positional) else None
    for k in call.keywords:
        if k.value is arg and k.arg is not None:
            names = {p.arg for p in (*positional, *a.kwonlyargs)}
            return k.arg if k.arg in names else None
    return None


def _helper(call: ast.Call, arg: ast.AST, function: Resolver | None) -> tuple[Fn, str] | None:
    if function is None or call.func is arg:
        return None
    found = function(call.func)
    if found is None:
        return None
    helper, offset = found
    if _trivial(helper):
        return None  # `pass` / `...`: an interface skeleton's body, nothing known of it
    name = _param(call, arg, helper, offset)
    return (helper, name) if name else None


def _trivial(fn: Fn) -> bool:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                       and isinstance(s.value.value, str))]  # fmt: skip
    return elided(fn) or all(isinstance(s, ast.Pass) for s in body)


def value_reaches(
    call: ast.Call, arg: ast.AST, function: Resolver | None, hops: int, decides: bool = False
) -> bool | None:
    """Whether the helper ``call`` hands ``arg`` to uses it (None: not a helper it can read)."""
    found = _helper(call, arg, function)
    if found is None:
        return None
    helper, name = found
    first = helper.body[0].lineno - 1 if helper.body else helper.lineno
    return _name_used(helper, name, first, parents_of(helper), hops + 1, decides=decides)


def mapping_use(call: ast.Call, arg: ast.AST, function: Resolver | None) -> MappingUse | None:
    """The keys a helper reads from the mapping ``call`` hands it as ``arg`` (None: not a
    helper the checker can read)."""
    found = _helper(call, arg, function)
    if found is None:
        return None
    helper, name = found
    parents = parents_of(helper)
    keys: list[str] = []
    handled: set[int] = set()
    for node in ast.walk(helper):
        key: ast.expr | None = None
        if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in _READS and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name and node.args
        ):  # fmt: skip
            key, owner = node.args[0], node.func.value
        elif (
            isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and node.value.id == name and isinstance(node.ctx, ast.Load)
        ):  # fmt: skip
            key, owner = node.slice, node.value
        if key is None:
            continue
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return MappingUse((), True)  # a computed key: any key may be read
        handled.add(id(owner))
        if value_used(helper, node, parents):
            keys.append(key.value)
    opaque = any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
        and id(n) not in handled and _whole(helper, n, parents)
        for n in ast.walk(helper)
    )  # fmt: skip
    return MappingUse(tuple(dict.fromkeys(keys)), opaque)


def _whole(fn: Fn, node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """A use of the mapping itself that may read any key (not ``"k" in m``, not ``len(m)``)."""
    parent: Any = parents.get(id(node))
    if isinstance(parent, ast.Attribute) and parent.attr in ("keys", "__len__"):
        return False
    return value_used(fn, node, parents)
