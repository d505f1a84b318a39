"""A class body that builds its ``model_capabilities`` in steps, evaluated as Python runs it
(round 8, rt45h IM02 / IM02b): a dict literal or a dict comprehension over a literal, then
``model_capabilities["k"] = <literal>`` / ``model_capabilities.update({...})`` statements in the
body. Without this the dict read as unknown, the plugin's default (penalties True where the key
is missing) was checked, and every penalised call read ``dropped`` on a class that sets them
False.

Only the target's own class body is evaluated, and only where every other statement of the
body that names the dict is such a step, nothing else reaches the object (``fact_exposure``
with those steps settled), and the class binding itself is plain (``class_binding_doubt``).
A comprehension's element may name only its loop variable and literals: a class-scope name
there is a NameError at class creation (rt45h IM01), left to the rules that find it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from vllm_tt_plugin.contract.fact_alias import fact_exposure
from vllm_tt_plugin.contract.source_module import class_binding_doubt

_NAME = "model_capabilities"


@dataclass(frozen=True)
class BodyCaps:
    """The evaluated dict and the uses of the name its steps account for (by node id)."""

    caps: dict[str, Any]
    settled: frozenset[int]


class _Opaque(Exception):
    """A step this module does not evaluate."""


def _value(expr: ast.expr, local: dict[str, Any], loop: dict[str, Any] | None = None) -> Any:
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.Name):
        scope = loop if loop is not None else local
        if expr.id in scope:
            return scope[expr.id]
        raise _Opaque
    if isinstance(expr, (ast.Tuple, ast.List)):
        return [_value(e, local, loop) for e in expr.elts]
    if isinstance(expr, ast.Dict):
        if any(k is None for k in expr.keys):
            raise _Opaque
        keys = [_value(k, local, loop) for k in expr.keys if k is not None]
        return dict(zip(keys, (_value(v, local, loop) for v in expr.values), strict=True))
    if isinstance(expr, ast.DictComp) and len(expr.generators) == 1:
        gen = expr.generators[0]
        if gen.ifs or gen.is_async or not isinstance(gen.target, ast.Name):
            raise _Opaque
        items = _value(gen.iter, local, loop)  # the outermost iterable: class scope
        if not isinstance(items, list):
            raise _Opaque
        out = {}
        for item in items:
            inner = {gen.target.id: item}  # the element sees the loop, not the class scope
            out[_value(expr.key, local, inner)] = _value(expr.value, local, inner)
        return out
    raise _Opaque


def _step(stmt: ast.stmt, caps: dict[str, Any], local: dict[str, Any]) -> ast.Name | None:
    """Apply ``stmt`` to ``caps`` when it is a step (the name's node returned)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        t = stmt.targets[0]
        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == _NAME:
            caps[_value(t.slice, local)] = _value(stmt.value, local)
            return t.value
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        func = call.func
        if (
            isinstance(func, ast.Attribute) and func.attr == "update"
            and isinstance(func.value, ast.Name) and func.value.id == _NAME
            and len(call.args) <= 1 and all(k.arg for k in call.keywords)
        ):  # fmt: skip
            added = _value(call.args[0], local) if call.args else {}
            if not isinstance(added, dict):
                raise _Opaque
            caps.update(added)
            caps.update({str(k.arg): _value(k.value, local) for k in call.keywords})
            return func.value
    return None


def body_caps(reader: Any, target: str) -> BodyCaps | None:
    """The target's own ``model_capabilities`` as its class body builds it, or None."""
    found = reader.resolve_class(target) if hasattr(reader, "resolve_class") else None
    if found is None:
        return None
    module, node = found
    if class_binding_doubt(module, node, _NAME) or (node.name, _NAME) in module.touched:
        return None
    local: dict[str, Any] = {}
    caps: dict[str, Any] | None = None
    settled: set[int] = set()
    try:
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            named = any(isinstance(n, ast.Name) and n.id == _NAME for n in ast.walk(stmt))
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                t = stmt.targets[0]
                if isinstance(t, ast.Name) and t.id == _NAME:
                    built = _value(stmt.value, local)
                    if not isinstance(built, dict):
                        return None
                    caps = built
                    continue
                if isinstance(t, ast.Name) and not named:
                    try:
                        local[t.id] = _value(stmt.value, local)
                    except _Opaque:
                        local.pop(t.id, None)
                    continue
            if not named:
                continue
            use = _step(stmt, caps, local) if caps is not None else None
            if use is None:
                return None  # the dict named by anything but a step
            settled.add(id(use))
    except _Opaque:
        return None
    if caps is None or not all(isinstance(k, str) for k in caps):
        return None
    if fact_exposure(reader, target, _NAME, frozenset(settled)):
        return None
    return BodyCaps(caps, frozenset(settled))


def _literal(expr: ast.expr, loop: str = "") -> bool:
    """Constants (and the loop variable ``loop``) only."""
    return all(
        isinstance(n, (ast.Constant, ast.Tuple, ast.List, ast.Dict, ast.Load))
        or (isinstance(n, ast.Name) and n.id == loop and loop != "")
        for n in ast.walk(expr)
    )


def kept_step(item: ast.stmt) -> str:
    """A class-body statement the skeleton keeps whole so ``body_caps`` reads the skeleton as
    the tree: a comprehension building the dict, a literal item store, a literal ``update``."""
    if isinstance(item, ast.Assign) and len(item.targets) == 1:
        t, v = item.targets[0], item.value
        if isinstance(t, ast.Name) and t.id == _NAME and isinstance(v, ast.DictComp):
            gen = v.generators[0]
            loop = gen.target.id if isinstance(gen.target, ast.Name) else ""
            simple_iter = isinstance(gen.iter, ast.Name) or _literal(gen.iter)
            if simple_iter and _literal(v.key, loop) and _literal(v.value, loop):
                return ast.unparse(item)
        if (
            isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == _NAME
            and _literal(t.slice) and _literal(v)
        ):  # fmt: skip
            return ast.unparse(item)
    if isinstance(item, ast.Expr) and isinstance(item.value, ast.Call):
        func = item.value.func
        if (
            isinstance(func, ast.Attribute) and func.attr == "update"
            and isinstance(func.value, ast.Name) and func.value.id == _NAME
            and all(_literal(a) for a in item.value.args)
            and all(k.arg and _literal(k.value) for k in item.value.keywords)
        ):  # fmt: skip
            return ast.unparse(item)
    return ""
