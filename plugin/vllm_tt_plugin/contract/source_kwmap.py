"""What one mapping a method hands on as ``**name`` holds (``ast``): ``**kwargs`` or a copy of
it, with the edits made to that mapping (and to the one it was copied from before the copy),
the keys a key filter keeps (``kw = {k: v for k, v in kw.items() if k in ALLOWED}``) and the
keys a value was moved to (``kw["sampling"] = kw.pop("sampling_params", None)``)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_tt_plugin.contract.source_kwargs import _is_copy, edits

Fn = ast.FunctionDef | ast.AsyncFunctionDef
Constant = Callable[[ast.expr], Any]


@dataclass(frozen=True)
class Held:
    """What ``**name`` carries of the method's ``**kwargs`` at the hand-off."""

    dropped: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    keep: tuple[str, ...] | None = None  # a key filter: only these keys pass
    renamed: tuple[tuple[str, str], ...] = ()  # (new key, the key whose value it holds)
    unknown: str = ""  # an edit or filter the checker cannot follow


def _key(expr: ast.expr | None) -> str | None:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    return None


def _sources(fn: Fn, names: set[str]) -> dict[str, tuple[str, int]]:
    """Each copy's source mapping and the line it was copied at."""
    out: dict[str, tuple[str, int]] = {}
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in names
            and _is_copy(node.value, names)
        ):
            value = node.value
            src = next(n.id for n in ast.walk(value) if isinstance(n, ast.Name) and n.id in names)
            if src != node.targets[0].id:
                out[node.targets[0].id] = (src, node.lineno)
    return out


def _moved(fn: Fn, name: str, names: set[str]) -> list[tuple[str, str]]:
    """``name["new"] = <mapping>.pop("old", ...)`` / ``.get("old")`` / ``<mapping>["old"]``."""
    out = []
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        t, v = node.targets[0], node.value
        if not (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                and t.value.id == name and _key(t.slice)):  # fmt: skip
            continue
        old = None
        if (
            isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute)
            and v.func.attr in ("pop", "get") and isinstance(v.func.value, ast.Name)
            and v.func.value.id in names and v.args
        ):  # fmt: skip
            old = _key(v.args[0])
        elif isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name):
            old = _key(v.slice) if v.value.id in names else None
        if old is not None and old != _key(t.slice):
            out.append((str(_key(t.slice)), old))
    return out


def _filter(fn: Fn, name: str, names: set[str], constant: Constant | None) -> Held | None:
    """``name = {k: v for k, v in <mapping>.items() if k [not] in X}``: the keys it keeps."""
    for node in ast.walk(fn):
        if not (
            isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name
            and isinstance(node.value, ast.DictComp)
        ):  # fmt: skip
            continue
        comp = node.value
        what = ast.unparse(comp)
        gen = comp.generators[0]
        it = gen.iter
        over = (
            isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute)
            and it.func.attr == "items" and isinstance(it.func.value, ast.Name)
            and it.func.value.id in names
        )  # fmt: skip
        target = gen.target
        first = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else None
        key = first.id if isinstance(first, ast.Name) else None
        test = gen.ifs[0] if len(gen.ifs) == 1 and len(comp.generators) == 1 else None
        if not (over and key and isinstance(test, ast.Compare) and len(test.ops) == 1
                and isinstance(test.left, ast.Name) and test.left.id == key
                and isinstance(test.ops[0], (ast.In, ast.NotIn))):  # fmt: skip
            return Held(unknown=f"it rebuilds **{name} in a way the checker cannot follow ({what})")
        value = _literal(test.comparators[0], constant)
        if value is None:
            return Held(
                unknown=f"it filters **{name} by `{ast.unparse(test.comparators[0])}`, which "
                f"the checker does not evaluate ({what})"
            )
        if isinstance(test.ops[0], ast.NotIn):
            return Held(dropped=value)
        return Held(keep=value)
    return None


def _literal(expr: ast.expr, constant: Constant | None) -> tuple[str, ...] | None:
    """A tuple / list / set / frozenset of strings, literal or a module constant."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and len(expr.args) == 1:
        if expr.func.id in ("frozenset", "set", "tuple", "list") and not expr.keywords:
            return _literal(expr.args[0], constant)
        return None
    try:
        value = ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError):
        value = constant(expr) if constant is not None else None
    if isinstance(value, (tuple, list, set, frozenset)) and all(isinstance(v, str) for v in value):
        return tuple(sorted(value))
    return None


def held(fn: Fn, name: str, names: set[str], constant: Constant | None = None) -> Held:
    """What ``**name`` carries (``names``: ``**kwargs`` and its copies)."""
    dropped: list[str] = []
    added: list[str] = []
    unknown: list[str] = []
    before: int | None = None
    current = name
    chain = _sources(fn, names)
    seen: set[str] = set()
    while current not in seen:
        seen.add(current)
        e = edits(fn, {current}, before)
        dropped += e.dropped
        added += e.added
        unknown += e.unknown
        if current not in chain:
            break
        current, before = chain[current][0], chain[current][1]
    moved = _moved(fn, name, names)
    found = _filter(fn, name, names, constant) or Held()
    why = found.unknown or (
        f"it edits **{name} in a way the checker cannot follow ({unknown[0]})" if unknown else ""
    )
    return Held(
        (*dropped, *found.dropped),
        tuple(added),
        found.keep,
        tuple(moved),
        why,
    )


def merged_holds(holds: list[Held]) -> Held:
    """What a forward handing on several mappings carries (``{**a, **b}``): their edits
    together; a key filter on one of them is not modelled (``unknown``)."""
    if len(holds) == 1:
        return holds[0]
    filtered = any(h.keep is not None for h in holds)
    return Held(
        tuple(k for h in holds for k in h.dropped),
        tuple(k for h in holds for k in h.added),
        None,
        tuple(r for h in holds for r in h.renamed),
        next((h.unknown for h in holds if h.unknown), "")
        or ("it merges a key-filtered **mapping with another" if filtered else ""),
    )
