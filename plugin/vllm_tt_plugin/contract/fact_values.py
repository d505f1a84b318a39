"""Fact values spelled other than as a literal, evaluated to the object Python would hold.

The plugin's own rules (``fact_rules``) then judge that object, so each spelling is built as
the real thing, not re-decided here:

* ``typing.cast(T, x)`` is ``x``; a ``TypedDict`` class called, ``dict(...)`` and
  ``collections.OrderedDict(...)`` build a dict (``OrderedDict`` a dict subclass);
* ``collections.ChainMap(...)`` / ``collections.UserDict(...)`` build that mapping, which is not a
  dict: the plugin refuses it (``CapabilityError``), as it refuses a ``MappingProxyType``;
* ``Cap.MEMBER`` of an ``Enum`` class of the checkout is a member of a real enum built from the
  class's literal members (a ``str`` mix-in compares and hashes as its value, so the plugin reads
  a ``{Cap.X: True}`` key as ``"x"``; a plain ``Enum`` member is not a string key);
* ``Base.model_capabilities`` (``{**Base.model_capabilities, ...}`` in a subclass) is the base's
  evaluated fact, when nothing after its class body may change it.
"""

from __future__ import annotations

import ast
import collections
import enum
from collections.abc import Callable
from typing import Any

from vllm_tt_plugin.contract.fact_alias import fact_exposure
from vllm_tt_plugin.contract.mro_bases import hidden_fact

NOT_HANDLED: Any = object()
_DICTS: dict[str, Callable[..., Any]] = {
    "builtins.dict": dict,
    "collections.OrderedDict": collections.OrderedDict,
    "collections.ChainMap": collections.ChainMap,
    "collections.UserDict": collections.UserDict,
}
_CASTS = ("typing.cast", "typing_extensions.cast")
_TYPED_DICTS = ("typing.TypedDict", "typing_extensions.TypedDict")
_ENUMS = {"enum.Enum": (), "enum.StrEnum": (str,)}
# One enum per checkout class: members of two evaluations compare equal.
_ENUM_CACHE: dict[tuple[Any, ...], Any] = {}


def callee(module: Any, func: ast.expr) -> str:
    """The dotted name a call's function refers to as the module imports it (``dict`` ->
    ``builtins.dict`` unless the module binds ``dict`` itself)."""
    if isinstance(func, ast.Name):
        name = func.id
        if name in module.imports:
            return str(module.imports[name]).replace(":", ".")
        bound = name in module.assigns or name in module.classes or name in module.functions
        return "" if bound else f"builtins.{name}"
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        head = module.imports.get(func.value.id)
        return f"{str(head).replace(':', '.')}.{func.attr}" if head else ""
    return ""


def special_value(
    reader: Any, module: Any, expr: ast.expr, ev: Callable[[ast.expr], Any], env: Any, depth: int
) -> Any:
    """``expr`` evaluated when it is one of the spellings above (``ev`` evaluates a
    sub-expression, raising where it cannot; ``env`` stands for ``os.environ``);
    ``NOT_HANDLED`` otherwise."""
    if isinstance(expr, ast.Call):
        name = callee(module, expr.func)
        if name in _CASTS and len(expr.args) == 2 and not expr.keywords:
            return ev(expr.args[1])
        build = _DICTS.get(name)
        if build is None and _is_typed_dict(reader, module, expr.func):
            build = dict
        if build is not None:
            args = [ev(a) for a in expr.args]
            keywords: dict[str, Any] = {}
            for kw in expr.keywords:
                value = ev(kw.value)
                if kw.arg is not None:
                    keywords[kw.arg] = value
                elif isinstance(value, dict):
                    keywords.update(value)
                else:
                    return NOT_HANDLED
            try:
                return build(*args, **keywords)
            except (TypeError, ValueError):
                return NOT_HANDLED
        return NOT_HANDLED
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        ref = reader._class_ref(module, expr.value)
        found = reader.resolve_class(ref) if ref else None
        if found is None:
            return NOT_HANDLED
        member = _enum_member(reader, found, expr.attr)
        if member is not NOT_HANDLED:
            return member
        return _class_fact(reader, ref, expr.attr, env, depth)
    return NOT_HANDLED


def _is_typed_dict(reader: Any, module: Any, func: ast.expr) -> bool:
    ref = reader._class_ref(module, func) if isinstance(func, (ast.Name, ast.Attribute)) else None
    found = reader.resolve_class(ref) if ref else None
    if found is None:
        return False
    owner, node = found
    return any(callee(owner, b) in _TYPED_DICTS for b in node.bases)


def _enum_member(reader: Any, found: tuple[Any, ast.ClassDef], name: str) -> Any:
    """``Cls.name`` of an enum class whose members are literals, as a member of a real enum
    with the same bases (``str`` mix-in or not); ``NOT_HANDLED`` for any other class."""
    owner, node = found
    kinds = [callee(owner, b) for b in node.bases]
    mixins: tuple[type, ...] = ()
    base = [k for k in kinds if k in _ENUMS]
    if len(base) != 1 or len(kinds) > 2:
        return NOT_HANDLED
    mixins = _ENUMS[base[0]]
    if len(kinds) == 2:
        if "builtins.str" not in kinds or kinds[1] != base[0]:
            return NOT_HANDLED
        mixins = (str,)
    members: list[tuple[str, Any]] = []
    for stmt in node.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if not (
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.Constant)
        ):  # fmt: skip
            return NOT_HANDLED  # methods, auto(), computed values: not evaluated
        members.append((stmt.targets[0].id, stmt.value.value))
    key = (owner.name, node.name, mixins, tuple(members))  # another checkout: another enum
    if key not in _ENUM_CACHE:
        try:
            _ENUM_CACHE[key] = enum.Enum(node.name, members, type=mixins[0] if mixins else None)
        except (TypeError, ValueError):
            return NOT_HANDLED
    made = _ENUM_CACHE[key]
    return made[name] if name in made.__members__ else NOT_HANDLED


def _class_fact(reader: Any, ref: str, name: str, env: Any, depth: int) -> Any:
    """``Base.name`` as the base's own class-level value, when nothing may change it after its
    class body (``NOT_HANDLED`` otherwise: the caller reports it unknown)."""
    if (
        reader.attribute_shape(ref, name) or reader.attribute_doubt(ref, name)
        or hidden_fact(reader, ref, name) or fact_exposure(reader, ref, name)
    ):  # fmt: skip
        return NOT_HANDLED
    found = reader.attribute_expr(ref, name)
    if found is None:
        return NOT_HANDLED  # an AttributeError where Python reads it
    scope, value = found
    return reader._env_eval(scope, value, env, depth + 1)
