"""What a method body the plugin drives reaches that fails on the TT host's Python 3.10 (round
7, rt45g N01-N03, N10, N14, V04, V05, V07): the import-time rules (``source_py310``,
``source_names``, ``source_loadable``) applied to the statements a call runs.

- A 3.11+ standard-library name (``itertools.batched``, ``datetime.UTC``,
  ``asyncio.TaskGroup``, ``math.cbrt``; ``py310_absent.json``), reached through the module's
  or the body's own imports, or imported in the body (``from itertools import batched``).
- An import in the body of a ``models.*`` module the checkout lacks, or of a name a checkout
  module does not bind; ``m.X`` where ``m`` is a checkout module that binds no ``X``.
- A name nothing binds (not local, not module-level, not a builtin): NameError.

A failure in a statement every call runs (the body's top level, a ``with`` body, a ``try``
body whose handlers do not catch it; before any ``return`` / ``raise``) is ``broken``; under a
branch, a loop, a handler, or one side of ``and`` / ``or`` / ``x if c else y``, ``unresolved``.
A ``try`` whose handler catches the error (or anything) hides it. Nested ``def`` / ``lambda``
bodies are not run by the call. Only a checkout's file is read: a skeleton flattens bodies,
so the skeleton tool records each method's failures as a ``BODY_FAILS`` line read back here.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from vllm_tt_plugin.contract.source_hostbound import HostBinding, host_bindings, missing_module
from vllm_tt_plugin.contract.source_hosttest import host_test, skipped_locals, taken_branch
from vllm_tt_plugin.contract.source_module import absolute
from vllm_tt_plugin.contract.source_names import (
    binds,
    global_names,
    lacking_name,
    module_attribute,
)
from vllm_tt_plugin.contract.source_py310 import HostFailure, host_failure
from vllm_tt_plugin.contract.source_stdlib import newer_stdlib

BODY_FAILS = "# fails in a method on Python 3.10:"
_BUILTINS = frozenset(dir(builtins))
_IMPLICIT = {"__class__", "__name__", "__file__", "__doc__", "__package__", "__spec__",
             "__loader__", "__path__", "__builtins__", "__cached__", "__dict__"}  # fmt: skip
# An error class, and the handler names that catch it.
_CATCHES = {
    "ImportError": {"ImportError", "Exception", "BaseException"},
    "ModuleNotFoundError": {"ModuleNotFoundError", "ImportError", "Exception", "BaseException"},
    "AttributeError": {"AttributeError", "Exception", "BaseException"},
    "NameError": {"NameError", "Exception", "BaseException"},
}
Def = ast.FunctionDef | ast.AsyncFunctionDef


def _caught(handlers: list[ast.ExceptHandler]) -> set[str]:
    names: set[str] = set()
    for handler in handlers:
        if handler.type is None:
            return {"BaseException", "Exception"}
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        names |= {k.id if isinstance(k, ast.Name) else getattr(k, "attr", "") for k in kinds}
    return names


def _statements(
    stmts: list[ast.stmt], sure: bool, caught: frozenset[str], scope: Any
) -> Iterator[tuple[ast.stmt, bool, frozenset[str]]]:
    """(statement, every call runs it, handler names around it); nothing after a return, nor
    in the branch of an ``if`` 3.10 does not take (``source_hosttest``)."""
    for st in stmts:
        yield st, sure, caught
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        taken = taken_branch(scope, st) if isinstance(st, ast.If) else None
        if taken is not None:  # the test's value on 3.10: its branch runs whenever the if does
            yield from _statements(taken, sure, caught, scope)
            if taken and isinstance(taken[-1], (ast.Return, ast.Raise)):
                return
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            yield from _statements(st.body, sure, caught, scope)
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            inner = caught | _caught(st.handlers)  # type: ignore[attr-defined]
            body = st.body  # type: ignore[attr-defined]
            yield from _statements(body, sure, frozenset(inner), scope)
            for h in st.handlers:  # type: ignore[attr-defined]
                yield from _statements(h.body, False, caught, scope)
            yield from _statements(st.orelse, False, caught, scope)  # type: ignore[attr-defined]
            yield from _statements(st.finalbody, sure, caught, scope)  # type: ignore[attr-defined]
        elif isinstance(st, ast.Match):
            for case in st.cases:
                yield from _statements(case.body, False, caught, scope)
        else:
            for field in ("body", "orelse"):
                yield from _statements(getattr(st, field, []) or [], False, caught, scope)
        if isinstance(st, (ast.Return, ast.Raise)):
            return


def _own_expressions(st: ast.stmt, sure: bool, scope: Any) -> Iterator[tuple[ast.AST, bool]]:
    """The nodes ``st`` itself evaluates (not its nested statements, not lambda / def
    bodies), each with whether it runs whenever the statement does (``x if c else y``: the
    side 3.10 takes where ``c`` is evaluated, else either may)."""
    if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = st.args
        roots: list[ast.AST] = [*st.decorator_list, *a.defaults, *(d for d in a.kw_defaults if d)]
    elif isinstance(st, ast.ClassDef):
        roots = [*st.decorator_list, *st.bases]
    else:
        roots = [
            child for name, child in ast.iter_fields(st)
            if name not in ("body", "orelse", "finalbody", "handlers", "cases", "annotation")
            for child in (child if isinstance(child, list) else [child])
            if isinstance(child, ast.AST)
        ]  # fmt: skip
    stack = [(r, sure) for r in roots]
    while stack:
        node, here = stack.pop()
        yield node, here
        if isinstance(node, ast.Lambda):
            stack += [(d, here) for d in (*node.args.defaults, *node.args.kw_defaults) if d]
            continue
        if isinstance(node, ast.IfExp):
            truth = host_test(scope, node.test)
            sides = [(node.body, False), (node.orelse, False)]
            if truth is not None:
                sides = [(node.body if truth else node.orelse, here)]
            stack += [(node.test, here), *sides]
            continue
        if isinstance(node, ast.BoolOp):
            stack += [(node.values[0], here), *((v, False) for v in node.values[1:])]
            continue
        stack += [(c, here) for c in ast.iter_child_nodes(node)]


def comprehension_names(fn: Def) -> set[int]:
    """The ``Name`` nodes a comprehension's own targets bind and read (its scope: on Python 3
    the name is unbound after it, rt45h NA15)."""
    inside: set[int] = set()
    kinds = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
    for comp in (n for n in ast.walk(fn) if isinstance(n, kinds)):
        targets = {t.id for g in comp.generators
                   for t in ast.walk(g.target) if isinstance(t, ast.Name)}  # fmt: skip
        inside |= {id(x) for x in ast.walk(comp) if isinstance(x, ast.Name) and x.id in targets}
    return inside


def _locals(module: Any, fn: Def) -> tuple[set[str], dict[str, str]]:
    """Names the body binds (parameters, assignments, nested defs, ...; not a comprehension's
    targets), and its own imports (local name -> what ``module.imports`` would hold)."""
    bound: set[str] = set()
    imports: dict[str, str] = {}
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    scoped = comprehension_names(fn)
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            if id(n) not in scoped:
                bound.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not fn:
            bound.add(n.name)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            bound |= set(n.names)
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            bound.add(n.name)
        elif isinstance(n, ast.Import):
            for a in n.names:
                local = a.asname or a.name.split(".")[0]
                imports[local] = a.name if a.asname else local
        elif isinstance(n, ast.ImportFrom):
            source = absolute(package, n.module, n.level)
            for a in n.names:
                imports[a.asname or a.name] = f"{source}:{a.name}"
    return bound - set(imports), imports


def _scope(module: Any, fn: Def) -> Any:
    """A module-like view for ``source_py310``'s rules: the module's imports and bindings
    with the body's own on top (a local shadows a module import)."""
    bound, imports = _locals(module, fn)
    merged = {k: v for k, v in module.imports.items() if k not in bound}
    merged.update(imports)
    return SimpleNamespace(
        imports=merged, bound=(module.bound - set(imports)) | bound, stars=module.stars,
        functions=getattr(module, "functions", {}), rebound=getattr(module, "rebound", set()),
        assigns=getattr(module, "assigns", {}), name=module.name, is_package=module.is_package,
    )  # fmt: skip


def _import_failure(reader: Any, module: Any, st: ast.stmt) -> tuple[str, str]:
    """(error class, why) an import statement in the body raises, or ("", "")."""
    newer = newer_stdlib()
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    if isinstance(st, ast.Import):
        for a in st.names:
            if a.name in newer and newer[a.name] is None:
                return "ModuleNotFoundError", f"imports {a.name}, new in Python 3.11"
            if missing_module(reader, a.name):
                return "ModuleNotFoundError", f"imports {a.name}, which is not in this checkout"
    if isinstance(st, ast.ImportFrom):
        source = absolute(package, st.module, st.level)
        lacking = newer.get(source, frozenset())
        names = [a.name for a in st.names]
        if lacking is None or any(n in lacking for n in names):
            shown = source if lacking is None else next(n for n in names if n in lacking)
            return "ImportError", f"imports {shown} from {source}, which Python 3.10 does not have"
        if missing_module(reader, source):
            return "ModuleNotFoundError", f"imports from {source}, which is not in this checkout"
        for n in names:
            why = lacking_name(reader, source, n) if n != "*" else ""
            if why:
                return "ImportError", f"imports {n}: {why}"
    return "", ""


def _name_failure(reader: Any, module: Any, scope: Any, node: ast.Name) -> str:
    name = node.id
    if name in scope.bound or name in scope.imports or name in _BUILTINS or name in _IMPLICIT:
        return ""
    if getattr(module, "dynamic", None) or name == "__getattr__":
        return ""
    if name in global_names(module):
        return ""  # a module function binds it through `global` (FP17)
    stars = [binds(reader, s, name) if not name.startswith("_") else False for s in module.stars]
    if any(s is not False for s in stars):
        return ""
    return f"uses {name}, which nothing binds (NameError)"


def _tested_names(fn: Def) -> set[str]:
    """Names a test of the body reads (a ``None`` fallback checked before it is called)."""
    tests: list[ast.AST] = []
    for n in ast.walk(fn):
        if isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Assert)):
            tests.append(n.test)
        elif isinstance(n, ast.BoolOp):
            tests += n.values[:-1]
    return {x.id for t in tests for x in ast.walk(t) if isinstance(x, ast.Name)}


def _none_call(binding: HostBinding | None, name: str) -> str:
    if binding is None or binding.value != "None":
        return ""
    return f"calls {name}, {binding.why} (TypeError: 'NoneType' object is not callable)"


def method_failures(reader: Any, module: Any, owner: str, fn: Def) -> list[HostFailure]:
    """What running ``fn`` (``owner`` its class name, "" for a module function) reaches that
    fails on Python 3.10: read from the file, or from a skeleton's ``BODY_FAILS`` lines."""
    if getattr(module, "tree", None) is None:
        return []
    if _recorded_skeleton(module):
        return _recorded(module, f"{owner}.{fn.name}" if owner else fn.name)
    scope = _scope(module, fn)
    own, own_imports = _locals(module, fn)
    host = {k: v for k, v in host_bindings(reader, module).items()
            if k not in own and k not in own_imports}  # fmt: skip
    checked = _tested_names(fn)
    skipped = skipped_locals(fn, scope)
    scoped = comprehension_names(fn)
    out: list[HostFailure] = []
    for st, sure, caught in _statements(fn.body, True, frozenset(), scope):
        kind, why = _import_failure(reader, module, st)
        found: list[tuple[str, str, int, bool]] = [(kind, why, st.lineno, sure)] if why else []
        for node, here in _own_expressions(st, sure, scope):
            kind, why = "", host_failure(scope, node)
            if why:
                kind = "NameError" if why.startswith("uses the builtin") else "AttributeError"
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                why = module_attribute(reader, scope, node)
                kind, why = "AttributeError", (f"uses {ast.unparse(node)}: {why}" if why else "")
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if id(node) in scoped:
                    continue  # the comprehension's own variable, read inside it
                kind, why = "NameError", _name_failure(reader, module, scope, node)
                if node.id in skipped:
                    why = (f"uses {node.id}, bound in the body only under {skipped[node.id]}, "
                           "which Python 3.10 does not run (UnboundLocalError)")  # fmt: skip
                if not why and node.id in host and host[node.id].value == "unbound":
                    why = f"uses {node.id}, {host[node.id].why} (NameError)"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                tested = not here and node.func.id in checked  # `if X is not None:` around it
                kind, why = "TypeError", "" if tested else _none_call(host.get(node.func.id),
                                                                      node.func.id)  # fmt: skip
            if why:
                found.append((kind, why, getattr(node, "lineno", st.lineno), here))
        for kind, why, line, here in found:
            if caught & _CATCHES.get(kind, {"Exception", "BaseException"}):
                continue  # a handler around it catches that error
            status = "broken" if here else "unresolved"
            out.append(HostFailure(line, status, why if here else f"{why} where that branch runs"))
    return list(dict.fromkeys(out))


def _recorded_skeleton(module: Any) -> bool:
    try:
        head = module.path.read_text(encoding="utf-8", errors="replace")[:2000]
    except OSError:
        return False
    return "# tenstorrent/tt-metal " in head


def _recorded(module: Any, qualified: str) -> list[HostFailure]:
    out: list[HostFailure] = []
    try:
        text = module.path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if not line.startswith(BODY_FAILS):
            continue
        where, _, rest = line[len(BODY_FAILS) :].strip().partition(" ")
        status, _, rest = rest.partition(" line ")
        number, _, why = rest.partition(": ")
        if where == qualified and status in ("broken", "unresolved") and number.isdigit():
            out.append(HostFailure(int(number), status, why))
    return out


def body_lines(reader: Any, module: Any) -> list[str]:
    """The ``BODY_FAILS`` lines a skeleton of ``module`` records (every method and module
    function: which the plugin drives is the checker's business)."""
    tree = getattr(module, "tree", None)
    lines: list[str] = []
    for node in tree.body if tree is not None else []:
        defs: list[tuple[str, Def]] = []
        if isinstance(node, ast.ClassDef):
            kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
            defs = [(node.name, d) for d in node.body if isinstance(d, kinds)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs = [("", node)]
        for owner, fn in defs:
            where = f"{owner}.{fn.name}" if owner else fn.name
            lines += [f"{BODY_FAILS} {where} {f.status} line {f.line}: {f.why}"
                      for f in method_failures(reader, module, owner, fn)]  # fmt: skip
    return lines
