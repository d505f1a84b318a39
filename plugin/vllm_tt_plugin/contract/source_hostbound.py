"""Module names Python 3.10 leaves unbound, or bound to a fallback, at run time (round 8,
rt45h NA13, NA14, IM11): what the method bodies the plugin drives find there.

- A name bound at module level only under ``if TYPE_CHECKING:`` (``False`` at run time), or
  only under the branch of a version or feature test 3.10 does not take (``source_hosttest``),
  is unbound: a body that reads it raises NameError.
- ``try: from models.x import X`` / ``import models.x`` where the checkout lacks that module
  (or ``x`` binds no ``X``), with a handler catching ImportError: the import raises, so the
  names the ``try`` body binds are unbound unless the handler binds them; ``X = None`` in the
  handler makes ``X(...)`` a TypeError.

A name any other module-level statement may bind (another branch, a ``global`` in a module
function) is not reported. A module-level ``del X`` with nothing binding ``X`` after it leaves
``X`` unbound (IM10). Tests the checker does not evaluate bind nothing here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from vllm_tt_plugin.contract.source_hosttest import bound_by, host_test
from vllm_tt_plugin.contract.source_module import absolute
from vllm_tt_plugin.contract.source_names import binds

_CATCHING = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
# (reader, tree) -> the answer: every method body of a module asks, and each answer walks the
# whole module (rt45h CR05: 33 walks of a 200,000-statement module). Both kept alive, so an id
# is not reused while its entry stands.
_MEMO: dict[tuple[int, int], tuple[Any, ast.Module, dict[str, HostBinding]]] = {}


@dataclass(frozen=True)
class HostBinding:
    """How 3.10 leaves a module name: ``value`` "unbound" or "None"; ``why`` says where."""

    value: str
    why: str


def _type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _catches(node: ast.Try) -> bool:
    for h in node.handlers:
        if h.type is None:
            return True
        kinds = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        if any(isinstance(k, ast.Name) and k.id in _CATCHING for k in kinds):
            return True
    return False


def missing_module(reader: Any, name: str) -> bool:
    """``name`` is a ``models.*`` module the checkout does not hold."""
    if not name.startswith("models."):
        return False
    root = getattr(reader, "root", None)
    if root is None:
        return False
    base = root.joinpath(*name.split("."))
    return not (base.with_suffix(".py").is_file() or base.is_dir())


def _import_fails(reader: Any, module: Any, st: ast.stmt) -> str:
    """Why the checkout makes import statement ``st`` raise ImportError ("" if not)."""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    if isinstance(st, ast.Import):
        gone = [a.name for a in st.names if missing_module(reader, a.name)]
        return f"{gone[0]} is not in this checkout" if gone else ""
    if isinstance(st, ast.ImportFrom):
        source = absolute(package, st.module, st.level)
        if missing_module(reader, source):
            return f"{source} is not in this checkout"
        if source.startswith("models."):
            for a in st.names:
                if a.name != "*" and binds(reader, source, a.name) is False:
                    return f"{source} (in this checkout) binds no {a.name}"
    return ""


def _sets_none(st: ast.stmt) -> bool:
    value = getattr(st, "value", None)
    return isinstance(st, ast.Assign) and isinstance(value, ast.Constant) and value.value is None


def host_bindings(reader: Any, module: Any) -> dict[str, HostBinding]:
    """Module names Python 3.10 leaves unbound or ``None`` (see the module docstring)."""
    tree = getattr(module, "tree", None)
    if tree is None:
        return {}
    hit = _MEMO.get((id(reader), id(tree)))
    if hit is not None and hit[0] is reader and hit[1] is tree:
        return hit[2]
    if len(_MEMO) > 512:
        _MEMO.clear()
    found = _host_bindings(reader, module, tree)
    _MEMO[(id(reader), id(tree))] = (reader, tree, found)
    return found


def _host_bindings(reader: Any, module: Any, tree: ast.Module) -> dict[str, HostBinding]:
    skipped: dict[str, HostBinding] = {}
    taken: list[ast.stmt] = []
    for st in tree.body:
        if isinstance(st, ast.If):
            value = False if _type_checking(st.test) else host_test(module, st.test)
            if value is None:
                taken.append(st)
                continue
            test = ast.unparse(st.test)
            dead, live = (st.orelse, st.body) if value else (st.body, st.orelse)
            side = "the else of " if value else ""
            where = f"bound only under {side}`if {test}:`, which Python 3.10 does not run"
            for name in bound_by(dead):
                skipped.setdefault(name, HostBinding("unbound", where))
            taken += live
        elif isinstance(st, ast.Try) and _catches(st):
            failed = [(s, w) for s in st.body for w in [_import_fails(reader, module, s)] if w]
            if not failed:
                taken.append(st)
                continue
            first, why = failed[0]
            after = st.body[st.body.index(first) :]
            handlers = [s for h in st.handlers for s in h.body]
            fallback = bound_by([s for s in handlers if _sets_none(s)])
            handled = bound_by(handlers)
            none = f"None on Python 3.10: its import fails ({why}) and the handler sets None"
            for name in bound_by(after):
                if name in fallback:
                    skipped.setdefault(name, HostBinding("None", none))
                elif name not in handled:
                    unbound = f"unbound on Python 3.10: its import fails ({why})"
                    skipped.setdefault(name, HostBinding("unbound", unbound))
            taken += st.body[: st.body.index(first)]
            taken += [s for s in handlers if not _sets_none(s)]
            taken += st.finalbody
        else:
            taken.append(st)
    elsewhere = bound_by(taken)
    found = {k: v for k, v in skipped.items() if k not in elsewhere}
    return found | _deleted(tree)


def _deleted(tree: ast.Module) -> dict[str, HostBinding]:
    """Names a module-level ``del X`` leaves unbound (nothing after it binds X again; rt45h
    IM10). One pass from the end: linear in the module's statements."""
    out: dict[str, HostBinding] = {}
    after: set[str] = set()
    for st in reversed(tree.body):
        if isinstance(st, ast.Delete):
            for t in st.targets:
                if isinstance(t, ast.Name) and t.id not in after:
                    where = f"deleted at module level by `del {t.id}` (line {st.lineno})"
                    out[t.id] = HostBinding("unbound", where)
        after |= bound_by([st])
    return out
