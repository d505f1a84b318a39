"""What a method does to its ``**kwargs`` before handing it on (``ast``): the keys it removes
and adds (``pop``, ``del``, ``setdefault``, ``update``, ``kw[k] = v``, also on a copy), and the
edits the checker cannot follow (a computed key, ``update(other)``, ``clear()``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

Fn = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class Edits:
    dropped: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # "line N: what" the checker cannot follow


def _key(expr: ast.expr | None) -> str | None:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    return None


def _is_copy(value: ast.expr, names: set[str]) -> bool:
    """``dict(kw)`` / ``dict(**kw)`` / ``kw.copy()`` / ``{**kw}`` of one of ``names``."""
    if isinstance(value, ast.Call):
        f = value.func
        if isinstance(f, ast.Attribute) and f.attr == "copy" and not value.args:
            return isinstance(f.value, ast.Name) and f.value.id in names
        if isinstance(f, ast.Name) and f.id == "dict":
            sources = [*value.args, *(k.value for k in value.keywords if k.arg is None)]
            return (
                len(sources) == 1
                and not [k for k in value.keywords if k.arg is not None]
                and isinstance(sources[0], ast.Name)
                and sources[0].id in names
            )
    if isinstance(value, ast.Dict):  # {**kw} / {**kw, "key": v}: a copy with keys added
        spread = [v for k, v in zip(value.keys, value.values, strict=True) if k is None]
        return (
            len(spread) == 1
            and isinstance(spread[0], ast.Name)
            and spread[0].id in names
            and all(k is None or _key(k) for k in value.keys)
        )
    return False


def copies(fn: Fn, kwarg: str) -> set[str]:
    """``kwarg`` and the locals bound (once) to a copy of it."""
    names = {kwarg}
    stores: dict[str, int] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
    for _ in range(3):
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and stores.get(node.targets[0].id) == 1
                and _is_copy(node.value, names)
            ):
                names.add(node.targets[0].id)
    return names


def edits(fn: Fn, names: set[str], before: int | None = None) -> Edits:
    """The edits of the mappings ``names`` (``**kwargs`` and its copies), flow-insensitive
    (``before``: only those on earlier lines, for a copy taken there)."""
    out = Edits()
    for node in ast.walk(fn):
        if before is not None and getattr(node, "lineno", 0) >= before:
            continue
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(isinstance(t, ast.Name) and t.id in names for t in node.targets)
        ):
            out.added += [str(_key(k)) for k in node.value.keys if k is not None]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, attr = node.func.value, node.func.attr
            if not (isinstance(owner, ast.Name) and owner.id in names):
                continue
            key = _key(node.args[0]) if node.args else None
            if attr == "pop":
                (out.dropped.append(key) if key else out.unknown.append(
                    f"line {node.lineno}: {ast.unparse(node)}"))  # fmt: skip
            elif attr == "setdefault":
                (out.added.append(key) if key else out.unknown.append(
                    f"line {node.lineno}: {ast.unparse(node)}"))  # fmt: skip
            elif attr == "update":
                out.added += [k.arg for k in node.keywords if k.arg is not None]
                for arg in [*node.args, *(k.value for k in node.keywords if k.arg is None)]:
                    keys = [_key(k) for k in arg.keys] if isinstance(arg, ast.Dict) else [None]
                    if all(keys):
                        out.added += [k for k in keys if k]
                    else:
                        out.unknown.append(f"line {node.lineno}: {ast.unparse(node)}")
            elif attr in ("clear", "popitem", "__setitem__", "__delitem__"):
                out.unknown.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id in names
        ):
            out.unknown.append(f"line {node.lineno}: {ast.unparse(node)}")
        targets = node.targets if isinstance(node, (ast.Delete, ast.Assign)) else []
        for t in targets:
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                if t.value.id not in names:
                    continue
                key = _key(t.slice)
                if key is None:
                    out.unknown.append(f"line {t.lineno}: {ast.unparse(t)}")
                else:
                    (out.dropped if isinstance(node, ast.Delete) else out.added).append(key)
    return out


def mapping_of(
    fn: Fn, expr: ast.expr, names: set[str], literal_keys: list[str] | None
) -> tuple[bool, list[str]] | None:
    """A ``**expr`` argument: (carries **kwargs, the keys it adds), None when unknown. ``names``:
    **kwargs and its copies; ``literal_keys``: the keys of a literal mapping bound once."""
    if isinstance(expr, ast.Name) and expr.id in names:
        return True, []
    if isinstance(expr, ast.Dict):
        carries, added = False, list[str]()
        for k, v in zip(expr.keys, expr.values, strict=True):
            if k is None:
                inner = mapping_of(fn, v, names, None)
                if inner is None:
                    return None
                carries, added = carries or inner[0], [*added, *inner[1]]
            elif _key(k) is None:
                return None
            else:
                added.append(str(_key(k)))
        return carries, added
    if literal_keys is not None:
        return False, literal_keys
    return None
