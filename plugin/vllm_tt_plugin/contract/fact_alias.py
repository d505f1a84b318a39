"""Whether the dict a class's ``model_capabilities`` holds may be changed through another name.

A dict is one object however many names refer to it: ``model_capabilities = _CAPS`` shares the
module's ``_CAPS``, a subclass body's ``model_capabilities = Base.model_capabilities`` shares the
base's, ``_caps = model_capabilities`` in the class body shares the class's. An edit through any
of them (``_caps["k"] = v``, a function handed the dict, ``Cls.__dict__[...]``) is an edit of the
value the plugin reads. ``fact_exposure`` follows every name the object is bound to in the
modules that bind it and returns the first use that may change it: anything but a read
(``d[k]``, ``d.get``, ``k in d``, ``{**d}``, ``dict(d)``, ``d | {...}``) or a plain rebinding to
another name (followed in turn). A ``setdefault`` of a key the dict literal holds is a read (it
changes nothing). Only code that runs at import is read (module-level statements and class
bodies, not function bodies: a function changes the dict where it is handed it); uses in other
modules (``from m import _CAPS``) are not followed (docs/CONTRACT_PARITY.md).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm_tt_plugin.contract.parsed_module import ParsedModule

# Methods of a dict that read it; `setdefault` is a read only for a key the literal holds.
_READERS = frozenset({"get", "keys", "values", "items", "copy", "__getitem__", "__contains__",
                      "__len__", "__iter__", "__or__"})  # fmt: skip
# Builtins that read their argument (or build a new object from it).
_READING_CALLS = frozenset({"dict", "len", "bool", "list", "tuple", "sorted", "set", "frozenset",
                            "repr", "str", "print", "iter", "any", "all", "isinstance", "id",
                            "MappingProxyType"})  # fmt: skip
_MAX_ROOTS = 32


@dataclass(frozen=True)
class _Root:
    """A name the object is bound to: a module-level name, a class body's local name, or a class
    attribute (``Cls.attr``)."""

    module: ParsedModule
    kind: str  # "name" | "local" | "attr"
    name: str
    owner: ast.ClassDef | None = None

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.module.name, self.kind, self.name, id(self.owner))


def fact_exposure(
    reader: Any,
    target: str,
    name: str = "model_capabilities",
    settled: frozenset[int] = frozenset(),
) -> str:
    """Why the object the class's ``name`` holds may be changed through another name, with
    where ("" when every use of it is a read; uses in ``settled``, by node id, are class-body
    steps ``class_caps`` evaluated)."""
    roots, keys = _roots(reader, target, name)
    seen: set[tuple[str, str, str, int]] = set()
    while roots and len(seen) < _MAX_ROOTS:
        root = roots.pop(0)
        if root.key in seen or root.module.tree is None:
            continue
        seen.add(root.key)
        if root.kind == "name":  # `from m import NAME` in another module the import runs
            roots += _importers(reader, root)
        for use, parents in _uses(root):
            if id(use) in settled:
                continue
            verdict = _judge(use, parents, keys)
            if isinstance(verdict, tuple):  # bound to another name: followed
                kind, new, owner = verdict
                roots.append(_Root(root.module, kind, new, owner))
                if kind == "local":
                    roots.append(_Root(root.module, "attr", new, owner))
            elif verdict:
                rel = getattr(reader, "root", None)
                path = root.module.path.relative_to(rel) if rel else root.module.path
                return (
                    f"the dict is shared with {_spelled(root)}, and {verdict} [{path}:{use.lineno}]"
                )
    return ""


def _importers(reader: Any, root: _Root) -> list[_Root]:
    """The same object under the name another module of the import (``touched_modules``: the
    target's modules and every module their imports run) binds it to with a from-import (a
    "tweaks" module editing the dict: rt45g FA12)."""
    touched = list(getattr(reader, "touched_modules", lambda: [])())
    for module in list(touched):  # `from pkg import sub` imports the submodule too
        for _, source, names in module.from_imports:
            touched += [m for n in names if (m := reader.module(f"{source}.{n}")) is not None]
    ref = f"{root.module.name}:{root.name}"
    return [
        _Root(module, "name", local)
        for module in touched
        for local, imported in module.imports.items()
        if imported == ref and module.name != root.module.name
    ]


def _spelled(root: _Root) -> str:
    if root.kind == "attr" and root.owner is not None:
        return f"{root.owner.name}.{root.name}"
    if root.kind == "local" and root.owner is not None:
        return f"{root.name} in the body of {root.owner.name}"
    return root.name


def _roots(
    reader: Any, target: str, name: str, depth: int = 0
) -> tuple[list[_Root], frozenset[Any]]:
    """The names the object is bound to along its declaration (the class body's binding, the
    module name or base attribute it copies), and the keys of the dict literal it comes from."""
    roots: list[_Root] = []
    keys: frozenset[Any] = frozenset()
    for entry in reader.mro(target):
        found = reader.resolve_class(entry)
        if found is None:
            continue
        module, node = found
        roots.append(_Root(module, "attr", name, node))  # `Sub.name` is the same object too
        binding = _class_binding(node, name)
        if binding is None:
            continue
        roots.append(_Root(module, "local", name, node))
        value: ast.expr | None = binding
        scope = module
        for _ in range(8):  # a chain of plain names: `_CAPS = _BASE_CAPS`
            value = _uncast(scope, value)
            if isinstance(value, ast.Dict):
                keys = frozenset(k.value for k in value.keys if isinstance(k, ast.Constant))
                break
            local = _class_binding(node, value.id) if isinstance(value, ast.Name) else None
            if isinstance(value, ast.Name) and local is not None and value.id != name:
                # a name the class body bound above: `_C = {...}; model_capabilities = _C`
                roots += [
                    _Root(module, "local", value.id, node),
                    _Root(module, "attr", value.id, node),
                ]
                value = local
                continue
            if isinstance(value, ast.Name) and value.id in scope.assigns:
                roots.append(_Root(scope, "name", value.id))
                value = scope.assigns[value.id]
                continue
            if isinstance(value, ast.Name) and ":" in scope.imports.get(value.id, ""):
                other_name, _, other_attr = scope.imports[value.id].partition(":")
                other = reader._module(other_name)
                if other is None or other_attr not in other.assigns:
                    break
                roots.append(_Root(other, "name", other_attr))
                scope, value = other, other.assigns[other_attr]
                continue
            if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
                ref = reader._class_ref(scope, value.value)
                if ref and depth < 4:  # `Base.model_capabilities`: the base's own object
                    more, more_keys = _roots(reader, ref, value.attr, depth + 1)
                    roots += more
                    keys = keys or more_keys
            break
        break
    return roots, keys


def _class_binding(node: ast.ClassDef, name: str) -> ast.expr | None:
    for item in reversed(node.body):  # the body's last binding is the attribute
        if isinstance(item, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in item.targets
        ):
            return item.value
        if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", "") == name:
            return item.value
    return None


def _uncast(module: ParsedModule, value: ast.expr | None) -> ast.expr | None:
    """``typing.cast(T, x)`` is ``x``."""
    if (
        isinstance(value, ast.Call) and len(value.args) == 2
        and _callee(module, value.func) in ("typing.cast", "typing_extensions.cast")
    ):  # fmt: skip
        return value.args[1]
    return value


def _callee(module: ParsedModule, func: ast.expr) -> str:
    """``module.attr`` of a call's function as imported (``cast`` -> ``typing.cast``)."""
    if isinstance(func, ast.Name):
        return module.imports.get(func.id, func.id).replace(":", ".")
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{module.imports.get(func.value.id, func.value.id)}.{func.attr}"
    return ""


def _uses(root: _Root) -> Iterator[tuple[ast.expr, list[ast.AST]]]:
    """Each load of the root's name where it names the object, with its parents (innermost
    first)."""
    assert root.module.tree is not None
    top: list[ast.AST] = [root.module.tree]
    if root.kind == "local" and root.owner is not None:
        top = [s for s in root.owner.body if not isinstance(s, (ast.FunctionDef,
               ast.AsyncFunctionDef, ast.ClassDef))]  # fmt: skip
    holder: list[ast.AST] = [root.owner] if root.kind == "local" and root.owner else []
    for start in top:
        yield from _walk(root, start, holder)


def _walk(
    root: _Root, node: ast.AST, parents: list[ast.AST]
) -> Iterator[tuple[ast.expr, list[ast.AST]]]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return  # runs when called, after the launch read the class (not at import)
    if _names(root, node):
        yield node, parents  # type: ignore[misc]
        return
    inner = [node, *parents]
    target = node.target if isinstance(node, ast.AugAssign) else None
    if isinstance(target, ast.Name) and target.id == root.name and root.kind != "attr":
        yield target, inner  # `_caps |= {...}` changes the object in place
    for child in ast.iter_child_nodes(node):
        yield from _walk(root, child, inner)


def _names(root: _Root, node: ast.AST) -> bool:
    if root.kind in ("name", "local"):
        return (
            isinstance(node, ast.Name) and node.id == root.name and isinstance(node.ctx, ast.Load)
        )
    if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Name):
        return _dynamic(root, node)
    owner = root.owner.name if root.owner is not None else ""
    return node.value.id == owner and node.attr in (root.name, "__dict__")


def _dynamic(root: _Root, node: ast.AST) -> bool:
    """``vars(Cls)`` / ``getattr(Cls, name)``: the class's attribute by another spelling."""
    owner = root.owner.name if root.owner is not None else ""
    if not (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in ("vars", "getattr", "setattr", "delattr") and bool(node.args)
        and isinstance(node.args[0], ast.Name) and node.args[0].id == owner
    ):  # fmt: skip
        return False
    key = node.args[1] if len(node.args) > 1 else None
    return not (isinstance(key, ast.Constant) and key.value != root.name)


def _judge(
    use: ast.expr, parents: list[ast.AST], keys: frozenset[Any]
) -> str | tuple[str, str, ast.ClassDef | None]:
    """ "" for a read; (kind, name, class) for a plain binding to another name; else why the
    use may change the object."""
    if isinstance(use, ast.Call) and getattr(use.func, "id", "") != "getattr":
        return f"{ast.unparse(use)} reaches it"
    if isinstance(use, ast.Attribute) and use.attr == "__dict__":
        return f"{ast.unparse(use)} reaches it"
    if isinstance(use, ast.Attribute) and not isinstance(use.ctx, ast.Load):
        return f"{ast.unparse(use)} is rebound or deleted"
    parent = parents[0] if parents else None
    spelled = ast.unparse(use)
    if isinstance(parent, ast.Subscript) and parent.value is use:
        if isinstance(parent.ctx, ast.Load):
            return ""
        return f"{ast.unparse(parent)} changes it"
    if isinstance(parent, ast.Attribute) and parent.value is use:
        call = parents[1] if len(parents) > 1 else None
        if isinstance(call, ast.Call) and call.func is parent:
            if parent.attr in _READERS:
                return ""
            first = call.args[0] if call.args else None
            if (
                parent.attr == "setdefault"
                and isinstance(first, ast.Constant)
                and first.value in keys
            ):
                return ""  # the key is there: setdefault changes nothing
        return f"{spelled}.{parent.attr}(...) may change it"
    if isinstance(parent, ast.AugAssign) and parent.target is use:
        return f"{spelled} {ast.unparse(parent).split()[1]} ... changes it"
    if isinstance(parent, (ast.Compare, ast.Expr, ast.FormattedValue)):
        return ""
    if isinstance(parent, ast.Dict) and any(
        k is None and v is use for k, v in zip(parent.keys, parent.values, strict=True)
    ):
        return ""  # {**d}: a new dict
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.BitOr):
        return ""  # d | {...}: a new dict
    if isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is use:
        return ""
    if isinstance(parent, ast.Call) and use in parent.args:
        name = (
            parent.func.id
            if isinstance(parent.func, ast.Name)
            else getattr(parent.func, "attr", "")
        )
        if name in _READING_CALLS:
            return ""
        return f"it is handed to {ast.unparse(parent.func)}(...)"
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is use:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        holder = parents[1] if len(parents) > 1 else None
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            if isinstance(holder, ast.Module):
                return ("name", targets[0].id, None)
            if isinstance(holder, ast.ClassDef):
                return ("local", targets[0].id, holder)
        return f"it is bound to {ast.unparse(targets[0])}"
    return f"{spelled} is used as {type(parent).__name__.lower()}"
