"""The class of an object the adapter composes (``self.generator``), as far as the checkout says
it (``composed``: the calls a driven method hands it are bound to that class's methods).

``self.<attr>`` is typed from its one store along the MRO (``self.generator = value``, or an
``__init__`` parameter every ``cls(...)`` of ``initialize_vllm_model`` fills), or through a
``@property`` whose body returns another attribute (rt45h CK07). The value is typed where it is
built by checkout code the checker follows:

- ``Cls(...)``, ``Cls`` a class of the checkout;
- ``Cls.factory(...)``, a classmethod of ``Cls`` whose every ``return`` builds ``cls(...)`` (or
  a class typed by these rules, rt45h CK18);
- ``build(...)``, a checkout module function whose every ``return`` is typed by these rules
  (rt45h CK19; tt-metal builds its models through such functions).

A value built by checkout code these rules cannot follow (a factory returning something else,
a property with more than a ``return``) is a ``doubt``: calls into it are ``unresolved``, never
trusted. Anything else (``None``, an object from outside the checkout) is not judged here.
A skeleton flattens the bodies these rules read, so the skeleton tool records each class's
typed attributes as ``COMPOSED`` lines (``composed_lines``), read back here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

Fn = ast.FunctionDef | ast.AsyncFunctionDef
COMPOSED = "# composed attribute:"
_DEPTH = 4


@dataclass(frozen=True)
class Composed:
    """What ``self.<attr>`` holds: a checkout class, or why the checker cannot tell (doubt)."""

    cls: str | None
    doubt: str = ""


def _returns(fn: Fn) -> list[ast.Return]:
    """The ``return`` statements of ``fn`` itself (not of nested defs / lambdas / classes)."""
    out: list[ast.Return] = []
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _class(source: Any, module: Any, func: ast.expr, line: int) -> str | None:
    ref = source._class_ref(module, func, before=line if isinstance(func, ast.Name) else None)
    canonical = source.canonical(ref) if ref else None
    return canonical if isinstance(canonical, str) and source.has_class(canonical) else None


def _function(source: Any, module: Any, name: str, depth: int = 0) -> tuple[Any, Fn] | None:
    """The checkout module function ``name`` refers to in ``module`` and the module defining it."""
    if depth > _DEPTH:
        return None
    if name in module.functions:
        return module, module.functions[name]
    source_name, _, other = module.imports.get(name, "").partition(":")
    found = source.module(source_name) if other else None
    return _function(source, found, other, depth + 1) if found is not None else None


def _all_typed(
    source: Any, module: Any, fn: Fn, label: str, me: str | None, cls: str | None, depth: int
) -> Composed:
    """The one class every ``return`` of ``fn`` builds (``me(...)``: ``cls``)."""
    found: set[str] = set()
    returns = _returns(fn)
    for ret in returns:
        value = ret.value
        if (
            me is not None and cls is not None and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name) and value.func.id == me
        ):  # fmt: skip
            found.add(cls)
            continue
        typed = built(source, module, value, depth + 1) if value is not None else None
        if typed is None or typed.cls is None:
            return Composed(None, f"built by {label}, whose return the checker cannot type")
        found.add(typed.cls)
    if len(found) != 1 or not returns:
        return Composed(None, f"built by {label}, whose return the checker cannot type")
    return Composed(found.pop())


def built(source: Any, module: Any, expr: ast.expr, depth: int = 0) -> Composed | None:
    """What ``expr`` (read in ``module``) builds; None: not built by checkout code."""
    if depth > _DEPTH or not isinstance(expr, ast.Call):
        return None
    func, line = expr.func, expr.lineno
    cls = _class(source, module, func, line)
    if cls is not None:
        return Composed(cls)
    if isinstance(func, ast.Attribute):  # Cls.factory(...)
        owner = _class(source, module, func.value, line)
        if owner is None:
            return None
        fn = source._def_of(owner, func.attr)
        label = f"{ast.unparse(func)}(...)"
        decorators = {ast.unparse(d) for d in getattr(fn, "decorator_list", [])}
        if fn is None or decorators - {"classmethod", "staticmethod"}:
            return Composed(None, f"built by {label}, which the checker does not follow")
        params = [*fn.args.posonlyargs, *fn.args.args]
        me = params[0].arg if params and "classmethod" in decorators else None
        defined = source.resolve_class(owner)
        return _all_typed(source, defined[0] if defined else module, fn, label, me, owner, depth)
    if isinstance(func, ast.Name):
        found = _function(source, module, func.id)
        if found is None:
            return None
        return _all_typed(source, found[0], found[1], f"{func.id}(...)", None, None, depth)
    return None


def _self_stores(source: Any, target: str, attr: str) -> list[tuple[str, ast.expr]]:
    """(defining class, value) of every ``self.<attr> = value`` along the MRO."""
    out: list[tuple[str, ast.expr]] = []
    for cls in source.mro(target):
        found = source.resolve_class(cls)
        if found is None:
            continue
        for n in ast.walk(found[1]):
            if not isinstance(n, ast.Assign):
                continue
            for t in n.targets:
                if (
                    isinstance(t, ast.Attribute) and t.attr == attr
                    and isinstance(t.value, ast.Name) and t.value.id == "self"
                ):  # fmt: skip
                    out.append((cls, n.value))
    return out


def _loader_args(source: Any, target: str, param: str) -> list[tuple[str, ast.expr]]:
    """What every ``cls(...)`` of the loader hands ``__init__``'s ``param``."""
    from vllm_tt_plugin.contract.source import find_method

    init = find_method(source, target, "__init__")
    load = find_method(source, target, "initialize_vllm_model")
    fn = load.node if load is not None and not load.unresolved else None
    if fn is None or load is None or init is None or init.node is None:
        return []
    a = init.node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)][1:]
    bound: dict[str, list[ast.expr]] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    bound.setdefault(t.id, []).append(n.value)
    out: list[tuple[str, ast.expr]] = []
    for n in ast.walk(fn):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "cls"):
            continue
        given = {k.arg: k.value for k in n.keywords if k.arg}
        if param in names and names.index(param) < len(n.args):
            given[param] = n.args[names.index(param)]
        value = given.get(param)
        if isinstance(value, ast.Name) and len(bound.get(value.id, [])) == 1:
            value = bound[value.id][0]
        if value is None or any(isinstance(a, ast.Starred) for a in n.args):
            return []
        out.append((load.owner, value))
    return out


def _property_of(source: Any, target: str, attr: str) -> Fn | None:
    for cls in source.mro(target):
        found = source.resolve_class(cls)
        if found is None:
            continue
        for item in found[1].body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == attr:
                decorators = {ast.unparse(d) for d in item.decorator_list}
                return item if "property" in decorators else None
    return None


def _returned_attr(fn: Fn) -> str | None:
    """``return self.<other>``, the property's whole body (a docstring aside)."""
    body = [
        s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    params = [*fn.args.posonlyargs, *fn.args.args]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not params:
        return None
    value = body[0].value
    if (
        isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
        and value.value.id == params[0].arg
    ):  # fmt: skip
        return value.attr
    return None


def composed_type(source: Any, target: str, attr: str, depth: int = 0) -> Composed | None:
    """The checkout class of ``self.<attr>`` (None: not judged; ``doubt``: unresolved)."""
    if depth > _DEPTH:
        return None
    recorded = _recorded(source, target, attr)
    if recorded is not None:
        return recorded
    stores = _self_stores(source, target, attr)
    if not stores:
        prop = _property_of(source, target, attr)
        if prop is None:
            return None
        inner = _returned_attr(prop)
        typed = composed_type(source, target, inner, depth + 1) if inner else None
        if typed is None:
            return Composed(None, f"self.{attr} is a property the checker does not follow")
        return typed
    if len(stores) != 1:
        return None
    owner, value = stores[0]
    if isinstance(value, ast.Name):
        given = _loader_args(source, target, value.id)
        kinds = {_typed_in(source, o, v) for o, v in given}
        if not given or None in kinds:
            return None
        doubts = [k for k in kinds if k is not None and k.doubt]
        if doubts:
            return doubts[0]
        return kinds.pop() if len(kinds) == 1 else None
    return _typed_in(source, owner, value)


def _typed_in(source: Any, owner: str, expr: ast.expr) -> Composed | None:
    found = source.resolve_class(owner)
    return built(source, found[0], expr) if found is not None else None


def _recorded(source: Any, target: str, attr: str) -> Composed | None:
    """A skeleton's ``COMPOSED`` line for ``attr`` in a class along the MRO."""
    for cls in source.mro(target):
        found = source.resolve_class(cls)
        tree = getattr(found[0], "tree", None) if found is not None else None
        if tree is None or not _is_skeleton(found[0]):
            continue
        for line in _composed_comments(found[0]):
            owner, _, rest = line.partition(" ")
            name, _, value = rest.partition(" ")
            if owner == found[1].name and name == attr:
                if value.startswith("?"):
                    return Composed(None, value[1:].strip())
                return Composed(value.strip())
    return None


def _is_skeleton(module: Any) -> bool:
    from vllm_tt_plugin.contract.source_bodyhost import _recorded_skeleton

    return _recorded_skeleton(module)


def _composed_comments(module: Any) -> list[str]:
    try:
        text = module.path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [
        line[len(COMPOSED) :].strip() for line in text.splitlines() if line.startswith(COMPOSED)
    ]


def composed_lines(source: Any, module: Any) -> list[str]:
    """The ``COMPOSED`` lines a skeleton of ``module`` records: every class's attributes a
    method calls methods on (``self.<attr>.m(...)``) whose type these rules tell."""
    tree = getattr(module, "tree", None)
    lines: list[str] = []
    for node in tree.body if tree is not None else []:
        if not isinstance(node, ast.ClassDef):
            continue
        target = f"{module.name}:{node.name}"
        attrs = sorted({
            n.func.value.attr for n in ast.walk(node)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Attribute)
            and isinstance(n.func.value.value, ast.Name) and n.func.value.value.id == "self"
        } | {
            n.args[0].attr for n in ast.walk(node)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr"
            and n.args and isinstance(n.args[0], ast.Attribute)
            and isinstance(n.args[0].value, ast.Name) and n.args[0].value.id == "self"
        })  # fmt: skip
        for attr in attrs:
            typed = composed_type(source, target, attr)
            if typed is None:
                continue
            what = typed.cls if typed.cls else f"? {typed.doubt}"
            lines.append(f"{COMPOSED} {node.name} {attr} {what}")
    return lines
