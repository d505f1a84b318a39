"""Where an attribute the driven methods call (``self._decode_step(...)``) is set on the
instance the plugin drives, and whether it surely is (rt45f DC3, rt45g R07 / R08):

- a class-body binding, or a store in an ``__init__`` that building the model runs, on every
  path through that ``__init__`` (not only under an ``if``, in a loop, after an early
  ``return``): set. Under a condition (``if mesh.get_num_devices() > 1: self._step = ...``
  with no ``else``): not surely, ``unresolved`` naming the condition's line;
- a store on the instance ``initialize_vllm_model`` builds and returns (``model = cls(gen);
  model._step = gen.decode; return model``): the plugin always loads through it, so set where
  every path that returns that instance stores it first; else ``unresolved``;
- a store in any other method (which may not have run), or a ``None`` placeholder: as before;
- a value that may be ``None`` (``getattr(gen, "decode_traced", None)``, ``gen.decode if n > 1
  else None``, ``x or None``; rt45h GD03 / GD04): not surely a callable, ``unresolved``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any

from vllm_tt_plugin.contract.init_chain import inits_run
from vllm_tt_plugin.contract.source import find_method

_SET, _NO, _RET = "set", "no", "ret"  # every path stores it / some path does not / returns first
Store = Callable[[ast.stmt], bool]


def _block(body: Sequence[ast.stmt], stores: Store, returned: Callable[[ast.Return], bool]) -> str:
    for stmt in body:
        got = _stmt(stmt, stores, returned)
        if got != _NO:
            return got
    return _NO


def _worst(parts: Sequence[str]) -> str:
    if _RET in parts:
        return _RET
    return _SET if parts and all(p == _SET for p in parts) else _NO


def _stmt(stmt: ast.stmt, stores: Store, returned: Callable[[ast.Return], bool]) -> str:
    if stores(stmt):
        return _SET
    if isinstance(stmt, ast.Raise):
        return _SET  # no instance on this path
    if isinstance(stmt, ast.Return):
        return _SET if returned(stmt) else _RET

    def block(b: Sequence[ast.stmt]) -> str:
        return _block(b, stores, returned)

    if isinstance(stmt, ast.If):
        return _worst([block(stmt.body), block(stmt.orelse)])
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return block(stmt.body)
    if isinstance(stmt, ast.Try):
        if block(stmt.finalbody) == _SET:
            return _SET
        paths = [block([*stmt.body, *stmt.orelse]), *(block(h.body) for h in stmt.handlers)]
        return _worst(paths)
    if isinstance(stmt, ast.Match):
        parts = [block(c.body) for c in stmt.cases]
        last = stmt.cases[-1] if stmt.cases else None
        total = last is not None and last.guard is None and _irrefutable(last.pattern)
        return _worst(parts) if total or _RET in parts else _NO
    if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
        return _RET if _RET in (block(stmt.body), block(stmt.orelse)) else _NO
    return _NO


def _irrefutable(pattern: ast.pattern) -> bool:
    return isinstance(pattern, ast.MatchAs) and pattern.pattern is None


def _stores_on(holders: set[str], name: str) -> Store:
    def stores(stmt: ast.stmt) -> bool:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = list(stmt.targets)
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets = [stmt.target]
        return any(
            isinstance(sub, ast.Attribute) and sub.attr == name
            and isinstance(sub.value, ast.Name) and sub.value.id in holders
            for t in targets for sub in ast.walk(t)
        )  # fmt: skip

    return stores


def surely_set(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    """``__init__`` ``fn`` stores ``self.<name>`` on every path that builds the instance."""
    return _block(fn.body, _stores_on({"self", "cls"}, name), lambda r: False) == _SET


def _built_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Locals bound to ``cls(...)`` in a loader."""
    return {
        t.id
        for n in ast.walk(fn) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name) and n.value.func.id == "cls"
        for t in n.targets if isinstance(t, ast.Name)
    }  # fmt: skip


def loader_sets(source: Any, target: str, name: str) -> str | None:
    """How ``initialize_vllm_model`` sets ``name`` on the instance it returns: "" on every
    path returning it, a place when only on some; None when it does not."""
    found = find_method(source, target, "initialize_vllm_model")
    fn = found.node if found is not None and not found.unresolved else None
    if fn is None:
        return None
    held = _built_locals(fn)
    stores = _stores_on(held, name)
    if not held or not any(isinstance(n, ast.stmt) and stores(n) for n in ast.walk(fn)):
        return None
    if _block(fn.body, stores, lambda ret: False) == _SET:  # a return first: never stored
        return ""
    return "initialize_vllm_model (not on every path that returns the instance)"


def attribute_setters(source: Any, target: str, name: str) -> list[str]:
    """Where ``self.<name> = ...`` is assigned along the MRO: "" for a class body, an
    ``__init__`` that runs and sets it on every path, or the loader's instance; else the
    place ("<place> (to None)" for a ``None`` placeholder, the ``__init__`` condition, the
    method's name)."""
    where: list[str] = []
    run = inits_run(source, target)
    for cls in source.mro(target):
        found = source.resolve_class(cls) if hasattr(source, "resolve_class") else None
        if found is None:
            continue
        for item in found[1].body:
            targets: list[ast.expr] = []
            if isinstance(item, ast.Assign):
                targets = list(item.targets)
            elif isinstance(item, ast.AnnAssign):
                targets = [item.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                where.append(_none_or(item, "the class body"))
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            where += _method_setters(item, cls, name, run)
    loaded = loader_sets(source, target, name)
    if loaded is not None:
        where.append(loaded)
    return list(dict.fromkeys(where))


def _method_setters(
    item: ast.FunctionDef | ast.AsyncFunctionDef, cls: str, name: str, run: set[str] | None
) -> list[str]:
    where: list[str] = []
    stores = _stores_on({"self", "cls"}, name)
    init = item.name == "__init__"
    surely = init and surely_set(item, name)
    for node in ast.walk(item):
        if not (isinstance(node, ast.stmt) and stores(node)):
            continue
        if init and run is not None and cls not in run:  # never runs (DC3)
            label = cls.rpartition(":")[2]
            where.append(f"{label}.__init__, which building the model does not run")
        elif init and not surely:
            where.append(f"__init__ under a condition (line {node.lineno})")
        else:
            where.append(_none_or(node, "__init__") if init else item.name)
    return where


def _none_or(store: ast.AST, place: str) -> str:
    """ "" for a store that sets the attribute whenever the instance exists; a `None`
    placeholder there is not a callable (set later, in a method that may not run), nor a value
    that may be None (rt45h GD03 / GD04): calling it is a TypeError where it is."""
    value = getattr(store, "value", None)
    if isinstance(value, ast.Constant) and value.value is None:
        return f"{place} (to None)"
    maybe = maybe_none(value)
    return f"{place} (None {maybe})" if maybe else ""


def _is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def maybe_none(value: ast.AST | None) -> str:
    """Where ``value`` may be ``None`` ("" where it is not seen to): ``getattr(o, n, None)``,
    ``a if c else None``, ``a or None``."""
    if (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
        and value.func.id == "getattr" and len(value.args) == 3 and _is_none(value.args[2])
    ):  # fmt: skip
        return f"where {ast.unparse(value.args[0])} has no {ast.unparse(value.args[1])}"
    if isinstance(value, ast.IfExp):
        if _is_none(value.body) or maybe_none(value.body):
            return f"where `{ast.unparse(value.test)}` holds"
        if _is_none(value.orelse) or maybe_none(value.orelse):
            return f"where `{ast.unparse(value.test)}` does not hold"
    if isinstance(value, ast.BoolOp) and (
        _is_none(value.values[-1]) or maybe_none(value.values[-1])
    ):
        return f"where `{ast.unparse(value)}` ends at its last operand"
    return ""


def instance_attribute(source: Any) -> Callable[[str, str], bool]:
    """``name`` may be set on the instance the plugin drives: on the class or its instances
    along the MRO (``source.has_attribute``), or by the loader on the instance it returns."""
    has: Callable[[str, str], bool] = getattr(source, "has_attribute", lambda t, n: False)
    return lambda target, name: has(target, name) or loader_sets(source, target, name) is not None


def skeleton_keeps(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
) -> tuple[dict[int, str], list[tuple[int, str]], set[str]]:
    """What the skeleton tool keeps for these rules: in a loader, ``x = `` before each
    ``cls(...)`` whose instance it stores on (by call id) and those stores (``if ...:`` where
    not on every path); in an ``__init__``, the attributes not set on every path."""
    unsure: set[str] = set()
    if fn.name == "__init__":
        unsure = {
            t.attr for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Attribute) and not surely_set(fn, t.attr)
        }  # fmt: skip
    if fn.name != "initialize_vllm_model":
        return {}, [], unsure
    held = _built_locals(fn)
    prefix: dict[int, str] = {}
    lines: list[tuple[int, str]] = []
    for n in ast.walk(fn):
        if not isinstance(n, ast.Assign):
            continue
        for t in n.targets:
            if isinstance(t, ast.Name) and t.id in held:
                prefix[id(n.value)] = f"{t.id} = "
            elif (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id in held
            ):
                sure = _block(fn.body, _stores_on(held, t.attr), lambda r: False) == _SET
                lines.append((n.lineno, f"{'' if sure else 'if ...: '}{ast.unparse(t)} = ..."))
    return prefix, lines, unsure
