"""What importing a module does before any method runs (``ast``, nothing imported): which
module-level names are bound only under a condition (``if``, ``with``, a loop, an ``except``
fallback: which object Python binds is not evaluated; only under ``if TYPE_CHECKING:`` /
``if False:``: never bound), and which expressions the import evaluates that raise (a default,
a decorator, a base, a class-body or module-level statement naming an undefined name, reading
``os.environ[...]``, converting a constant that does not convert, dividing by zero)."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Container
from dataclasses import dataclass
from typing import Literal

from vllm_tt_plugin.contract.source_live import constant_test

Severity = Literal["broken", "unresolved"]
NEVER = "never"  # the kind of a binding only in a branch that does not run
_MODULE_NAMES = {"__name__", "__file__", "__doc__", "__spec__", "__path__", "__package__",
                 "__loader__", "__builtins__", "__annotations__", "__dict__"}  # fmt: skip
_CLASS_NAMES = {"__module__", "__qualname__"}
_SKELETON_NAMES = {"unevaluated"}  # a skeleton's marker for a value it does not evaluate
_CONVERSIONS = {"int": int, "float": float, "complex": complex}
_COMPOUND = (ast.If, ast.Try, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While,
             ast.Match)  # fmt: skip


@dataclass(frozen=True)
class _Seen:
    """The names a statement sees: its own scope's so far, then the enclosing scope's. A view,
    not a union: copying the module's names for every statement made an import of a module
    with N top-level statements quadratic (rt45h CR05: 200,000 assignments, ~25 min)."""

    inner: set[str]
    outer: Container[str]

    def __contains__(self, name: object) -> bool:
        return name in self.inner or name in self.outer


@dataclass(frozen=True)
class ImportRaise:
    """An expression the import evaluates that raises (``broken``) or may (``unresolved``)."""

    line: int
    status: Severity
    why: str
    node: ast.AST  # the expression (a skeleton keeps it whole)


def bound_names(stmts: list[ast.stmt]) -> list[tuple[str, int]]:
    """(name, line) of every name the statements bind, inside compound statements too (not
    inside function or class bodies)."""
    out: list[tuple[str, int]] = []
    stack: list[ast.AST] = list(stmts)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((n.name, n.lineno))
            continue
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            out += [(a.asname or a.name.split(".")[0], n.lineno) for a in n.names if a.name != "*"]
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.append((n.id, n.lineno))
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.append((n.name, n.lineno))
        stack.extend(ast.iter_child_nodes(n))
    return out


def conditional_bindings(tree: ast.Module) -> dict[str, list[tuple[int, str]]]:
    """name -> [(line, why)] for module-level bindings made under a condition; ``why`` is
    ``NEVER`` for a branch that does not run (``if TYPE_CHECKING:``, ``if False:``)."""
    out: dict[str, list[tuple[int, str]]] = {}

    def add(stmts: list[ast.stmt], why: str) -> None:
        for name, line in bound_names(stmts):
            out.setdefault(name, []).append((line, why))

    for node in tree.body:
        if isinstance(node, ast.If):
            truth = constant_test(node.test)
            test = ast.unparse(node.test)
            if truth is None:
                add([*node.body, *node.orelse], f"bound under `if {test}:` (line {node.lineno})")
            else:
                live, dead = (node.body, node.orelse) if truth else (node.orelse, node.body)
                add(dead, NEVER)
                add(live, f"bound under `if {test}:` (line {node.lineno})")
        elif isinstance(node, ast.Try):
            fallback = [s for h in node.handlers for s in h.body]
            caught = {name for name, _ in bound_names(fallback)}
            add(fallback, f"bound again in an `except` fallback (line {node.lineno})")
            for name, line in bound_names([*node.body, *node.orelse]):
                if name in caught:
                    out.setdefault(name, []).append(
                        (line, f"bound in a `try` whose `except` binds it too (line {node.lineno})")
                    )
        elif isinstance(node, _COMPOUND):
            kind = type(node).__name__.lower().replace("async", "async ")
            add([node], f"bound inside a module-level `{kind}` (line {node.lineno})")
    return out


def binding_doubt(
    conditional: dict[str, list[tuple[int, str]]],
    unconditional: list[int],
    name: str,
    line: int,
) -> tuple[Severity, str] | None:
    """(status, why) when ``name`` used at ``line`` may not be the object the checker reads:
    bound only in a branch that does not run (``broken``: a NameError), or under a condition
    after its last unconditional binding (``unresolved``)."""
    last = max((at for at in unconditional if at < line), default=0)
    doubts = [(at, why) for at, why in conditional.get(name, []) if last < at < line]
    if not doubts:
        return None
    real = [why for _, why in doubts if why != NEVER]
    if real:
        return "unresolved", f"{name} is {real[0]}: which object Python binds is not evaluated"
    if last:
        return None  # a branch that never runs does not rebind it
    return "broken", (
        f"{name} is bound only under `if TYPE_CHECKING:` / a false constant test, which does "
        "not run: a NameError on import"
    )


def _raise_of(expr: ast.expr, visible: Container[str], stars: bool) -> tuple[Severity, str] | None:
    """Why evaluating ``expr`` raises (or may), else None; lambda bodies are not evaluated."""
    stack: list[tuple[ast.AST, bool]] = [(expr, True)]
    local: set[str] = set()
    for n in ast.walk(expr):
        if isinstance(n, ast.comprehension):
            local |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
        if isinstance(n, ast.Lambda):
            a = n.args
            local |= {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    while stack:
        n, sure = stack.pop()
        found: tuple[Severity, str] | None = None
        if isinstance(n, ast.Lambda):
            stack += [(d, sure) for d in (*n.args.defaults, *n.args.kw_defaults) if d]
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            known = n.id in visible or n.id in local or hasattr(builtins, n.id)
            if (
                not known and not stars and n.id not in (*_MODULE_NAMES, *_SKELETON_NAMES)
            ):  # a star may bind it
                found = "broken", f"{n.id} is not defined there (a NameError on import)"
        elif (
            isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load)
            and ast.unparse(n.value) in ("os.environ", "environ")
        ):  # fmt: skip
            found = "unresolved", f"{ast.unparse(n)} is read on import (a KeyError where unset)"
        elif (
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id in _CONVERSIONS and n.func.id not in visible and n.args
            and not n.keywords and all(isinstance(a, ast.Constant) for a in n.args)
        ):  # fmt: skip
            try:
                _CONVERSIONS[n.func.id](*(a.value for a in n.args if isinstance(a, ast.Constant)))
            except (TypeError, ValueError) as exc:
                found = "broken", f"{ast.unparse(n)} raises on import ({type(exc).__name__})"
        elif (
            isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv, ast.Mod))
            and isinstance(n.right, ast.Constant) and n.right.value == 0
        ):  # fmt: skip
            found = "broken", f"{ast.unparse(n)} raises on import (ZeroDivisionError)"
        if found is not None:
            return found if sure else ("unresolved", f"{found[1]} where that branch runs")
        for field, value in ast.iter_fields(n):
            children = value if isinstance(value, list) else [value]
            for i, child in enumerate(children):
                if not isinstance(child, ast.AST):
                    continue
                branch = (isinstance(n, ast.BoolOp) and i > 0) or (
                    isinstance(n, ast.IfExp) and field != "test"
                )
                stack.append((child, sure and not branch))
    return None


def import_time_raises(tree: ast.Module) -> list[ImportRaise]:
    """The expressions the import of ``tree`` evaluates unconditionally (module statements
    outside compound statements, class bodies, decorators, bases, defaults; not annotations)
    that raise, in order."""
    # Names bound where the checker does not see them (a star import, ``globals()[...] = v``):
    # an unknown name is not judged.
    stars = any(
        isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in tree.body
    ) or any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "globals"
        for n in ast.walk(tree)
    )
    out: list[ImportRaise] = []

    def check(expr: ast.expr | None, visible: Container[str]) -> None:
        if expr is None:
            return
        found = _raise_of(expr, visible, stars)
        if found is not None:
            out.append(ImportRaise(getattr(expr, "lineno", 0), found[0], found[1], expr))

    def run(stmts: list[ast.stmt], visible: set[str], outer: Container[str]) -> None:
        for st in stmts:
            seen = _Seen(visible, outer)
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in (*st.decorator_list, *st.args.defaults, *st.args.kw_defaults):
                    check(d, seen)
            elif isinstance(st, ast.ClassDef):
                for d in (*st.decorator_list, *st.bases, *(k.value for k in st.keywords)):
                    check(d, seen)
                run(st.body, set(_CLASS_NAMES), seen)  # a class body sees module names
            elif isinstance(st, (ast.Assign, ast.AugAssign, ast.Expr, ast.AnnAssign)):
                check(st.value, seen)
            visible |= {name for name, _ in bound_names([st])}

    run(tree.body, set(), set())
    return out
