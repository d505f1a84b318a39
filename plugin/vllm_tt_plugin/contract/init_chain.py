"""Which ``__init__`` bodies run when the served class is built (``cls(...)``): the one the
MRO finds, then each one an ``__init__`` that runs hands on to (``super().__init__(...)``,
``Base.__init__(self, ...)``). An attribute set only in another class's ``__init__`` (a base
whose ``__init__`` a subclass replaces without calling it, a ``@dataclass`` subclass's generated
``__init__``) is never set on the instance (rt45f DC3 / DC3b)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from typing import Any

from vllm_tt_plugin.contract.source import find_method, lookup

_MAX = 20


def inits_run(source: Any, target: str) -> set[str] | None:
    """Owners of the ``__init__`` bodies building ``target`` runs; None when one of them is not
    read (a base outside the checkout, a decorated or aliased ``__init__``): any may run."""
    out: set[str] = set()
    found = find_method(source, target, "__init__")
    while found is not None and len(out) < _MAX:
        if found.unresolved or found.body is None:
            return None
        out.add(found.owner)
        calls = [c for c in found.body.calls if c.method == "__init__" and c.how != "self"]
        if not calls:
            return out
        c = calls[0]
        found = lookup(source, target, c.how, "__init__", c.after, found.owner)
        if found is not None and found.owner in out:
            return out
    return out


def _picks(expr: ast.expr) -> list[str] | None:
    """``self.a`` / ``self.a if c else self.b`` (nested): the own methods it may name."""
    if isinstance(expr, ast.IfExp):
        body, orelse = _picks(expr.body), _picks(expr.orelse)
        return None if body is None or orelse is None else [*body, *orelse]
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return [expr.attr] if expr.value.id == "self" else None
    return None


def dispatched(source: Any, target: str, name: str) -> list[str] | str:
    """The own methods ``self.<name>`` may be bound to, when only an ``__init__`` that runs
    sets it, each time to one of them (``self._impl = self._a if c else self._b``): every one
    may serve the call. A str: why the checker cannot follow it ("" : not set on the instance)."""
    run = inits_run(source, target)
    picks: list[str] = []
    for cls in source.mro(target):
        found = source.resolve_class(cls) if hasattr(source, "resolve_class") else None
        if found is None:
            continue
        for item in found[1].body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(item):
                if not isinstance(node, ast.Assign) or not any(
                    isinstance(t, ast.Attribute) and t.attr == name
                    and isinstance(t.value, ast.Name) and t.value.id == "self"
                    for t in node.targets
                ):  # fmt: skip
                    continue
                where = f"{cls.rpartition(':')[2]}.{item.name}"
                if item.name != "__init__" or (run is not None and cls not in run):
                    return (
                        f"an instance attribute set in {where}, which the checker does not follow"
                    )
                found_picks = _picks(node.value)
                if found_picks is None:
                    return (
                        f"an instance attribute {where} binds to `{ast.unparse(node.value)}`, "
                        "which the checker does not follow"
                    )
                picks += found_picks
    if picks and all(find_method(source, target, p) is not None for p in picks):
        return list(dict.fromkeys(picks))
    return f"an instance attribute bound to {', '.join(picks)}, not all methods" if picks else ""


def expand_dispatch(source: Any, target: str, forwards: Sequence[Any]) -> tuple[Any, ...]:
    """``forwards`` with each hand-off through an instance attribute an ``__init__`` binds to
    own methods replaced by one per method (each may serve: not certain), or marked
    unresolved where the checker cannot follow what it holds (rt45f F06 / F06b)."""
    out: list[Any] = []
    for fwd in forwards:
        if fwd.how != "self" or fwd.unresolved or find_method(source, target, fwd.method):
            out.append(fwd)
            continue
        picks = dispatched(source, target, fwd.method)
        if isinstance(picks, str):
            out.append(dataclasses.replace(fwd, unresolved=picks) if picks else fwd)
            continue
        out += [dataclasses.replace(fwd, method=p, certain=False) for p in picks]
    return tuple(out)


def dispatch_text(value: ast.expr | None) -> str:
    """How a skeleton keeps ``self.x = self._a if c else self._b`` (the tests elided unless a
    plain name): the checker follows each method it names; "" for any other value."""
    if value is None or _picks(value) is None:
        return ""

    def text(e: ast.expr) -> str:
        if isinstance(e, ast.IfExp):
            test = e.test.id if isinstance(e.test, ast.Name) else "..."
            return f"{text(e.body)} if {test} else {text(e.orelse)}"
        return ast.unparse(e)

    return text(value)
