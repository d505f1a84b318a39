"""The standard library Python 3.10 (the TT host's, docs/TT_HOST.md) lacks, and the dotted name
an expression reaches (``itertools.batched``, ``dt.UTC`` after ``import datetime as dt``,
``getattr(enum, "StrEnum")``, ``importlib.import_module("tomllib").loads``).

``py310_absent.json`` is written by ``tools/gen_py310_absent.py`` from pyenv's interpreters, not
by hand.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

_DATA = Path(__file__).with_name("py310_absent.json")


@dataclass(frozen=True)
class Absent:
    """``py310_absent.json`` read: what Python 3.10 lacks."""

    modules: frozenset[str]  # whole modules (``tomllib``)
    names: dict[str, frozenset[str]]  # module -> attributes (``builtins`` for builtins)
    params: dict[str, frozenset[str]]  # "module.callable" -> keyword parameters


@cache
def absent() -> Absent:
    data = json.loads(_DATA.read_text(encoding="utf-8"))
    return Absent(
        frozenset(data["modules"]),
        {m: frozenset(v) for m, v in data["names"].items()},
        {c: frozenset(v) for c, v in data["params"].items()},
    )


def newer_stdlib() -> dict[str, frozenset[str] | None]:
    """module -> the names 3.10 lacks (None: the whole module is new)."""
    out: dict[str, frozenset[str] | None] = {m: None for m in absent().modules}
    out.update(absent().names)
    return out


def getattr_name(module: Any, expr: ast.expr) -> str:
    """``getattr(x, "name")`` (no default: a missing name raises): "name", else ""."""
    if not (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
        and expr.func.id == "getattr" and "getattr" not in module.bound
        and len(expr.args) == 2 and not expr.keywords
        and isinstance(expr.args[1], ast.Constant) and isinstance(expr.args[1].value, str)
    ):  # fmt: skip
        return ""
    return expr.args[1].value


def _imported_by_call(module: Any, expr: ast.expr) -> str:
    """The module ``__import__("m")`` / ``importlib.import_module("m")`` returns, or ""."""
    if not (isinstance(expr, ast.Call) and expr.args and not expr.keywords):
        return ""
    first = expr.args[0]
    name = first.value if isinstance(first, ast.Constant) else None
    if not isinstance(name, str):
        return ""
    if isinstance(expr.func, ast.Name) and expr.func.id == "__import__":
        return "" if "__import__" in module.bound else name.split(".")[0]  # the top package
    callee = dotted(module, expr.func)
    return name if callee == "importlib.import_module" and len(expr.args) == 1 else ""


def dotted(module: Any, expr: ast.expr) -> str:
    """``a.b.c`` with its head resolved through the module's imports ("" when not one); a
    ``getattr(x, "name")`` link and an ``__import__("m")`` / ``importlib.import_module("m")``
    head are read as the attribute and the module they are."""
    parts: list[str] = []
    while True:
        if isinstance(expr, ast.Attribute):
            parts.insert(0, expr.attr)
            expr = expr.value
        elif getattr_name(module, expr):
            parts.insert(0, getattr_name(module, expr))
            expr = expr.args[0]  # type: ignore[attr-defined]
        else:
            break
    imported = _imported_by_call(module, expr)
    if imported:
        return ".".join([imported, *parts])
    if not isinstance(expr, ast.Name):
        return ""
    ref: str = module.imports.get(expr.id, "")
    if not ref:
        return ".".join(["builtins", expr.id, *parts]) if expr.id not in module.bound else ""
    return ".".join([ref.replace(":", "."), *parts])


def lacking(full: str) -> str:
    """The 3.10-absent ``module.name`` that the dotted path ``full`` reaches, or ""."""
    table = absent()
    bits = full.split(".")
    for cut in range(len(bits) - 1, 0, -1):
        head, name = ".".join(bits[:cut]), bits[cut]
        if head in table.modules:
            return head
        if name in table.names.get(head, ()):
            return f"{head}.{name}"
    return ""
