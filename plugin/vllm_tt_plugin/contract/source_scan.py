"""What a method body does besides what ``source_body`` reads: plugin modules it imports by
other means (``importlib.import_module``, ``__import__``, inside a module function it calls)
and instances it builds other ways than ``cls(...)`` (the class by name, a local alias of
``cls``, a class made with ``type(name, bases, dict)``)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from vllm_tt_plugin.contract.source_module import PLUGIN_PACKAGE
from vllm_tt_plugin.contract.source_py310 import HostFailure

_MAX_DEPTH = 6
Def = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Built:
    """An instance built in the body: bound to ``target``'s ``__init__`` ("" for the served
    class), or not followed (``unresolved`` says why)."""

    target: str
    positional: int
    keywords: tuple[str, ...]
    starred: bool
    line: int
    unresolved: str = ""


@dataclass(frozen=True)
class Scan:
    plugin_imports: tuple[tuple[int, str, tuple[str, ...]], ...] = ()
    builds: tuple[Built, ...] = ()
    host: tuple[HostFailure, ...] = ()  # what the body reaches that fails on 3.10 (source_bodyhost)


def _guarded(fn: Def) -> set[int]:
    """ids of the nodes inside a ``try`` whose handlers catch ImportError (or everything)."""
    caught = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    inside: set[int] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Try):
            continue
        for handler in node.handlers:
            kinds = (
                [] if handler.type is None
                else handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            )  # fmt: skip
            if handler.type is None or any(isinstance(k, ast.Name) and k.id in caught
                                           for k in kinds):  # fmt: skip
                inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def imports_of(
    fn: Def, function: Callable[[ast.expr], Def | None], depth: int = 0
) -> list[tuple[int, str, tuple[str, ...]]]:
    """Plugin modules ``fn`` imports outside an ``except ImportError`` guard: by name through
    ``importlib.import_module`` / ``__import__``, and any import statement of the module
    functions it calls (``function`` finds a called name's def)."""
    found: list[tuple[int, str, tuple[str, ...]]] = []
    guarded = _guarded(fn)
    for node in ast.walk(fn):
        if id(node) in guarded or not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0] if node.args else None
        if name in ("import_module", "__import__") and isinstance(first, ast.Constant):
            module = str(first.value)
            if module.split(".")[0] == PLUGIN_PACKAGE:
                found.append((node.lineno, module, ()))
            continue
        called = function(func) if depth < _MAX_DEPTH and isinstance(func, ast.Name) else None
        if called is not None and called is not fn:
            inner = _guarded(called)
            for sub in ast.walk(called):
                if id(sub) in inner:
                    continue
                if isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module:
                    if sub.module.split(".")[0] == PLUGIN_PACKAGE:
                        found.append((node.lineno, sub.module, tuple(a.name for a in sub.names)))
                elif isinstance(sub, ast.Import):
                    found += [(node.lineno, a.name, ()) for a in sub.names
                              if a.name.split(".")[0] == PLUGIN_PACKAGE]  # fmt: skip
            found += [(node.lineno, m, n) for _, m, n in imports_of(called, function, depth + 1)]
    return found


def builds_of(
    fn: Def, me: str | None, kind: str, classes: Callable[[ast.expr], str | None]
) -> list[Built]:
    """Instances built in ``fn`` other than by ``cls(...)`` / ``type(self)(...)`` (which
    ``source_body`` reads): ``Name(...)`` where the name is a class of the tree (``classes``
    gives its ``module:Class``), a local bound to ``cls`` / ``type(self)`` / a class, and a
    call of ``type(name, bases, dict)``'s result (not followed)."""
    aliases: dict[str, str] = {}  # local name -> "" (the served class) or "module:Class"
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if not isinstance(target, ast.Name):
                continue
            if me is not None and _is_own_class(value, me, kind):
                aliases[target.id] = ""
            elif isinstance(value, ast.Name) and classes(value):
                aliases[target.id] = classes(value) or ""
    out: list[Built] = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        built: str | None = None
        why = ""
        if isinstance(func, ast.Name) and func.id in aliases:
            built = aliases[func.id]
        elif isinstance(func, ast.Name) and func.id != me:
            built = classes(func)
        elif (
            isinstance(func, ast.Call) and getattr(func.func, "id", "") == "type"
            and len(func.args) == 3
        ):  # fmt: skip
            built, why = "", "builds an instance of a class made with type(name, bases, dict)"
        if built is None:
            continue
        names = tuple(k.arg for k in node.keywords if k.arg is not None)
        starred = any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        )
        out.append(Built(built, len(node.args), names, starred, node.lineno, why))
    return out


def _is_own_class(value: ast.expr, me: str, kind: str) -> bool:
    """``cls`` (in a classmethod), ``type(self)``, ``self.__class__``."""
    if isinstance(value, ast.Name):
        return value.id == me and kind == "classmethod"
    if isinstance(value, ast.Attribute) and value.attr == "__class__":
        return isinstance(value.value, ast.Name) and value.value.id == me
    return (
        isinstance(value, ast.Call) and getattr(value.func, "id", "") == "type"
        and len(value.args) == 1 and isinstance(value.args[0], ast.Name)
        and value.args[0].id == me
    )  # fmt: skip
