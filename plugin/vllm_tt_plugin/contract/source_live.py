"""Which parts of a method body can run (``ast``, no evaluation beyond constants): a read of
the plugin's content, or a forward of its arguments, counts only where Python may execute it.

Dead: the body of ``if False:`` / ``if 0:`` / ``if TYPE_CHECKING:`` / ``while False:`` (the
``else`` of a constant-true test, the dead branch of ``x if False else y``), statements after a
``while True:`` without a ``break``, statements after a ``return`` / ``raise`` / ``continue`` /
``break`` / ``assert False`` in the same block, statements after a ``try`` whose ``finally``
always leaves, and a nested ``def`` or ``lambda`` that nothing live calls or hands on (a name
never loaded where code runs, a bare ``lambda`` statement). Everything else counts as live (a
test the checker does not evaluate may hold)."""

from __future__ import annotations

import ast
from typing import Any

Fn = ast.FunctionDef | ast.AsyncFunctionDef
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
# Nested scopes a zero-argument super() cannot see the method's instance from (3.10 / 3.11
# run list / set / dict comprehensions as functions too; a generator expression always).
_OWN_FRAME = (*_SCOPES, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_CACHE: dict[int, tuple[Fn, frozenset[int]]] = {}
# Set by ``source_module`` on a module-level def: bound as a method by a class body
# (``decode_forward = _decode``), it has no ``__class__`` cell, so a zero-argument super() in
# it raises (RuntimeError: super(): __class__ cell not found).
NO_CLASS_CELL = "_contract_no_class_cell"


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def constant_test(test: ast.expr) -> bool | None:
    """The truth of a test that is a constant (``False``, ``0``, ``None``, ``""``, ``not 1``,
    ``TYPE_CHECKING``: false at run time), else None."""
    if _type_checking(test):
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = constant_test(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Constant) and test.value is not Ellipsis:
        return bool(test.value)
    if isinstance(test, ast.BoolOp):  # `False and x` is false, `True or x` true, whatever x is
        decided = isinstance(test.op, ast.Or)
        if any(constant_test(v) is decided for v in test.values):
            return decided
    return None


def _leaves(stmt: ast.stmt) -> bool:
    """``stmt`` never lets the next statement of its block run."""
    if isinstance(stmt, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        return True
    return isinstance(stmt, ast.Assert) and constant_test(stmt.test) is False


def _mark(node: ast.AST, out: set[int], scopes: list[ast.AST]) -> None:
    """``node`` and its sub-expressions run; a nested scope's body is decided later."""
    out.add(id(node))
    if isinstance(node, _SCOPES):
        scopes.append(node)
        if isinstance(node, ast.Lambda):
            for d in (*node.args.defaults, *node.args.kw_defaults):
                if d is not None:
                    _mark(d, out, scopes)
        else:
            for d in (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults):
                if d is not None:
                    _mark(d, out, scopes)
        return
    if isinstance(node, ast.ClassDef):
        return
    if isinstance(node, ast.IfExp) and constant_test(node.test) is not None:
        _mark(node.test, out, scopes)  # `x if False else y`: only y runs
        _mark(node.body if constant_test(node.test) else node.orelse, out, scopes)
        return
    for child in ast.iter_child_nodes(node):
        _mark(child, out, scopes)


def _block(stmts: list[ast.stmt], out: set[int], scopes: list[ast.AST]) -> bool:
    """Mark the statements of a block that can run; True when control may fall off its end."""
    for st in stmts:
        out.add(id(st))
        if isinstance(st, ast.If):
            _mark(st.test, out, scopes)
            truth = constant_test(st.test)
            body = _block(st.body, out, scopes) if truth is not False else False
            other = _block(st.orelse, out, scopes) if truth is not True else False
            if not (body or other):
                return False
        elif isinstance(st, ast.While):
            _mark(st.test, out, scopes)
            if constant_test(st.test) is False:
                _block(st.orelse, out, scopes)
            else:
                _block(st.body, out, scopes)
                _block(st.orelse, out, scopes)
                if constant_test(st.test) and not _breaks(st.body):
                    return False  # `while True:` without a break never falls through
        elif isinstance(st, (ast.For, ast.AsyncFor)):
            _mark(st.target, out, scopes)
            _mark(st.iter, out, scopes)
            _block(st.body, out, scopes)
            _block(st.orelse, out, scopes)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            for item in st.items:
                _mark(item, out, scopes)
            _block(st.body, out, scopes)  # a context manager may swallow what leaves it
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":  # try / try-except*
            tried: Any = st
            body = _block(tried.body, out, scopes) and _block(tried.orelse, out, scopes)
            for handler in tried.handlers:
                if handler.type is not None:
                    _mark(handler.type, out, scopes)
                out.add(id(handler))
                body = _block(handler.body, out, scopes) or body
            final = _block(tried.finalbody, out, scopes) if tried.finalbody else True
            if not (final and body):
                return False  # `finally: return` leaves whatever the try did
        elif isinstance(st, ast.Match):
            _mark(st.subject, out, scopes)
            for case in st.cases:
                out.add(id(case))
                _mark(case.pattern, out, scopes)
                if case.guard is not None:
                    _mark(case.guard, out, scopes)
                _block(case.body, out, scopes)
        else:
            _mark(st, out, scopes)
            if _leaves(st):
                return False
    return True


def _breaks(stmts: list[ast.stmt]) -> bool:
    """A ``break`` of this loop (not of a loop nested in it) is in ``stmts``."""
    stack: list[ast.AST] = list(stmts)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Break):
            return True
        if not isinstance(n, (ast.For, ast.AsyncFor, ast.While, *_SCOPES, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.While)):
            stack.extend(n.orelse)  # a loop's else belongs to the enclosing loop
    return False


def _scope_name(scope: ast.AST, parents: dict[int, ast.AST]) -> str | None:
    """The local a nested scope is bound to (``def f`` / ``f = lambda: ...``), else None (a
    lambda used where it stands: an argument, a return value, called at once)."""
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return scope.name
    parent = parents.get(id(scope))
    if (
        isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
    ):
        return parent.targets[0].id
    return None


def skeleton_form(fn: Fn, parents: dict[int, ast.AST]) -> bool:
    """The body is an interface skeleton's, flattened (``f(...)``, ``x = ...``, ``if ...:``):
    its lines stand for code in branches, so a line after a ``return`` still counts. Not a
    subscript (``t[..., 0]``), which real code writes."""
    return any(
        isinstance(n, ast.Constant) and n.value is Ellipsis
        and isinstance(parents.get(id(n)), (ast.Call, ast.keyword, ast.Assign, ast.If))
        for n in ast.walk(fn)
    )  # fmt: skip


def live_nodes(fn: Fn) -> frozenset[int]:
    """Ids of the nodes of ``fn``'s body that may run when it is called."""
    cached = _CACHE.get(id(fn))
    if cached is not None and cached[0] is fn:
        return cached[1]
    parents = {id(c): n for n in ast.walk(fn) for c in ast.iter_child_nodes(n)}
    if skeleton_form(fn, parents):
        every = frozenset(id(n) for n in ast.walk(fn))
        _CACHE[id(fn)] = (fn, every)
        return every
    out: set[int] = set()
    pending: list[ast.AST] = []
    _block(fn.body, out, pending)
    waiting: list[ast.AST] = []
    while pending or waiting:
        progressed = False
        for scope in [*pending, *waiting]:
            name = _scope_name(scope, parents)
            parent = parents.get(id(scope))
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                called = bool(scope.decorator_list) or _loaded(fn, name, out, scope)
            elif name is not None:
                called = _loaded(fn, name, out, scope)
            else:
                called = not isinstance(parent, ast.Expr)  # a bare `lambda: ...` is dropped
            if not called:
                if scope not in waiting:
                    waiting.append(scope)
                continue
            if scope in waiting:
                waiting.remove(scope)
            progressed = True
            inner: list[ast.AST] = []
            if isinstance(scope, ast.Lambda):
                _mark(scope.body, out, inner)
            else:
                _block(scope.body, out, inner)  # type: ignore[attr-defined]
            waiting += [s for s in inner if s not in waiting]
        pending = []
        if not progressed:
            break
    result = frozenset(out)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[id(fn)] = (fn, result)
    return result


def _loaded(fn: Fn, name: str | None, out: set[int], scope: ast.AST) -> bool:
    """A live load of ``name`` outside ``scope`` itself (a call, or the function handed on)."""
    if name is None:
        return False
    inside = {id(n) for n in ast.walk(scope)}
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
        and id(n) in out and id(n) not in inside
        for n in ast.walk(fn)
    )  # fmt: skip


def own_frame_nodes(fn: Fn) -> set[int]:
    """Ids of the nodes of ``fn`` inside a nested function, lambda or comprehension (where a
    zero-argument ``super()`` does not see the method's instance); every node of a
    ``@staticmethod`` or a module-level def, which have no instance or class for it."""
    names = {getattr(d, "id", getattr(d, "attr", "")) for d in fn.decorator_list}
    if "staticmethod" in names or getattr(fn, NO_CLASS_CELL, False):
        return {id(n) for n in ast.walk(fn) if n is not fn}
    out: set[int] = set()
    for node in ast.walk(fn):
        if node is fn or not isinstance(node, _OWN_FRAME):
            continue
        inside = {id(n) for n in ast.walk(node) if n is not node}
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            # The first iterable is evaluated in the enclosing frame.
            inside -= {id(n) for n in ast.walk(node.generators[0].iter)}
        out |= inside
    return out
