"""Where a method body binds a name again, in every binding form Python has (``ast``, no
evaluation beyond literals): which loads of a parameter still see the value the plugin sent.

A load is *shadowed* when a binding that surely ran on every path to it replaced the value:
an assignment in any target shape (``a, b = x, None``, ``[a, *b] = ...``, ``a = b = ...``),
an annotated assignment with a value, an augmented one (``a |= True``: its new value carries
the old one unless a constant decides it, ``value_fixed``), a walrus that surely evaluates, a
``for`` target over a non-empty literal, ``with ... as a``, ``import ... as a``, a nested
``def a`` / ``class a``, ``del a``, a ``try`` whose ``finally`` (or whose body, when every
handler binds or leaves) binds, an ``if`` / ``match`` binding on every branch; inside a block:
the ``for`` target, ``with`` targets, ``except ... as a``, a ``case`` capture, a comprehension
or lambda variable of that name. A binding on some paths only (under a test the checker does
not evaluate, a loop that may not run) shadows nothing: the plugin's value may still arrive.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from vllm_tt_plugin.contract.source_deadvalue import replaced_under_test

Fn = ast.FunctionDef | ast.AsyncFunctionDef
_LEAVE = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_COMPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _target_binds(target: ast.AST, name: str) -> bool:
    """``target`` (an assignment / loop / ``as`` target) stores ``name`` itself (not an
    attribute or item of it)."""
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, ast.Starred):
        return _target_binds(target.value, name)
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_target_binds(t, name) for t in target.elts)
    return False


def _sure_walrus(expr: ast.AST | None, name: str) -> bool:
    """A ``(name := ...)`` that runs whenever ``expr`` is evaluated (not after a short-circuit,
    in a branch of ``x if c else y``, a lambda or a comprehension)."""
    if expr is None:
        return False
    if isinstance(expr, ast.NamedExpr) and expr.target.id == name:
        return True
    if isinstance(expr, (ast.Lambda, *_COMPS)):
        return False
    if isinstance(expr, ast.BoolOp):
        return _sure_walrus(expr.values[0], name)
    if isinstance(expr, ast.IfExp):
        return _sure_walrus(expr.test, name)
    return any(_sure_walrus(c, name) for c in ast.iter_child_nodes(expr))


def _non_empty_literal(expr: ast.expr) -> bool:
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return bool(expr.elts) and not any(isinstance(e, ast.Starred) for e in expr.elts)
    if isinstance(expr, ast.Dict):
        return bool(expr.keys) and None not in expr.keys
    return (
        isinstance(expr, ast.Constant) and isinstance(expr.value, (str, bytes)) and bool(expr.value)
    )


def _irrefutable(case: ast.match_case) -> bool:
    p = case.pattern
    while isinstance(p, ast.MatchAs) and p.pattern is not None:
        p = p.pattern
    return case.guard is None and isinstance(p, ast.MatchAs) and p.pattern is None


def _pattern_binds(pattern: ast.AST, name: str) -> bool:
    return any(
        (isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name == name)
        or (isinstance(n, ast.MatchMapping) and n.rest == name)
        for n in ast.walk(pattern)
    )


def completes(st: ast.stmt) -> bool:
    """``st`` may let the next statement of its block run."""
    if isinstance(st, _LEAVE):
        return False
    if isinstance(st, ast.If):
        return all_complete(st.body) or all_complete(st.orelse)
    if isinstance(st, (ast.With, ast.AsyncWith)):
        return all_complete(st.body)
    if isinstance(st, ast.Try):
        if not all_complete(st.finalbody):
            return False
        return all_complete([*st.body, *st.orelse]) or any(
            all_complete(h.body) for h in st.handlers
        )
    return True


def all_complete(stmts: list[ast.stmt]) -> bool:
    return all(completes(s) for s in stmts)


def sure_list(stmts: list[ast.stmt], name: str) -> bool:
    """Running ``stmts`` to their end surely binds ``name`` (or never reaches the end)."""
    return any(binds(st, name) or not completes(st) for st in stmts)


def binds(st: ast.stmt, name: str) -> bool:
    """``st``, run to its end, surely bound ``name`` again."""
    if isinstance(st, ast.Assign):
        return any(_target_binds(t, name) for t in st.targets) or _sure_walrus(st.value, name)
    if isinstance(st, ast.AnnAssign):
        return st.value is not None and (
            _target_binds(st.target, name) or _sure_walrus(st.value, name)
        )
    if isinstance(st, ast.AugAssign):
        return _target_binds(st.target, name) or _sure_walrus(st.value, name)
    if isinstance(st, (ast.For, ast.AsyncFor)):
        return _sure_walrus(st.iter, name) or (
            _target_binds(st.target, name) and _non_empty_literal(st.iter)
        )
    if isinstance(st, (ast.With, ast.AsyncWith)):
        return any(
            _sure_walrus(i.context_expr, name)
            or (i.optional_vars is not None and _target_binds(i.optional_vars, name))
            for i in st.items
        ) or sure_list(st.body, name)
    if isinstance(st, ast.If):
        return _sure_walrus(st.test, name) or (
            sure_list(st.body, name) and bool(st.orelse) and sure_list(st.orelse, name)
        )
    if isinstance(st, ast.While):
        return _sure_walrus(st.test, name)
    if isinstance(st, ast.Try):
        handled = all(h.name == name or sure_list(h.body, name) for h in st.handlers)
        return sure_list(st.finalbody, name) or (
            handled and sure_list([*st.body, *st.orelse], name)
        )
    if isinstance(st, ast.Match):
        return _sure_walrus(st.subject, name) or (
            any(_irrefutable(c) for c in st.cases)
            and all(_pattern_binds(c.pattern, name) or sure_list(c.body, name) for c in st.cases)
        )
    if isinstance(st, ast.Delete):
        return any(_target_binds(t, name) for t in st.targets)
    if isinstance(st, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name.partition(".")[0]) == name for a in st.names)
    if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return st.name == name
    return any(_sure_walrus(c, name) for c in ast.iter_child_nodes(st) if isinstance(c, ast.expr))


def _blocks(node: ast.AST) -> Iterator[list[ast.stmt]]:
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    if isinstance(node, ast.Try):
        for h in node.handlers:
            yield h.body
    if isinstance(node, ast.Match):
        for c in node.cases:
            yield c.body


def _enters_bound(holder: ast.AST, child: ast.AST, name: str) -> bool:
    """Entering ``child`` (a block or an expression of ``holder``) has bound ``name`` first."""
    if isinstance(holder, (ast.For, ast.AsyncFor)):
        return (
            child is not holder.iter
            and child is not holder.target
            and (_target_binds(holder.target, name) and child in holder.body)
        )
    if isinstance(holder, (ast.With, ast.AsyncWith)) and child in holder.body:
        return any(
            i.optional_vars is not None and _target_binds(i.optional_vars, name)
            for i in holder.items
        )
    if isinstance(holder, (ast.If, ast.While)) and child is not holder.test:
        return _sure_walrus(holder.test, name)
    if isinstance(holder, ast.ExceptHandler) and child in holder.body:
        return holder.name == name
    if isinstance(holder, ast.match_case) and child is not holder.pattern:
        return _pattern_binds(holder.pattern, name)
    if isinstance(holder, ast.Lambda) and child is holder.body:
        a = holder.args
        return name in {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)} or name in {
            v.arg for v in (a.vararg, a.kwarg) if v is not None
        }
    if isinstance(holder, _COMPS):
        gens = holder.generators
        first_iter = gens[0].iter if gens else None
        return child is not first_iter and any(_target_binds(g.target, name) for g in gens)
    return False


def shadowed(use: ast.AST, name: str, after: int, parents: dict[int, ast.AST]) -> bool:
    """A binding of ``name`` made after line ``after`` surely ran on every path to ``use``."""
    child: ast.AST = use
    holder = parents.get(id(use))
    while holder is not None:
        if isinstance(holder, ast.comprehension):  # its iter / ifs: judged at the comprehension
            child, holder = holder, parents.get(id(holder))
            continue
        if _enters_bound(holder, _block_of(holder, child), name) and _line(holder) > after:
            return True
        for block in _blocks(holder):
            if child in block:
                for st in block[: block.index(child)]:
                    if st.lineno > after and (
                        binds(st, name) or not completes(st) or replaced_under_test(st, name)
                    ):
                        return True
        if (
            isinstance(holder, (ast.FunctionDef, ast.AsyncFunctionDef))
            and parents.get(id(holder)) is None
        ):
            return False  # the method itself
        child, holder = holder, parents.get(id(holder))
    return False


def _block_of(holder: ast.AST, child: ast.AST) -> ast.AST:
    """``child`` as ``_enters_bound`` compares it: the statement itself, or a comprehension's
    generator (its targets are the comprehension's variables)."""
    if isinstance(holder, _COMPS) and isinstance(child, ast.comprehension):
        return child.iter if holder.generators and child is holder.generators[0] else child
    return child


def _line(node: ast.AST) -> int:
    return int(getattr(node, "lineno", 0))


def rebinds(fn: Fn, name: str) -> bool:
    """The body binds ``name`` anywhere in its own scope, in any form (a nested function's,
    lambda's or comprehension's own variables excepted)."""
    return any(_own_store(n, name) for n in _own_nodes(fn))


def mentions(fn: Fn, name: str) -> bool:
    """The body names ``name`` anywhere (a nested function or lambda included: a closure)."""
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(fn))


def _own_nodes(fn: Fn) -> Iterator[ast.AST]:
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _SCOPES):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _own_store(node: ast.AST, name: str) -> bool:
    if isinstance(node, ast.Name):
        return node.id == name and isinstance(node.ctx, (ast.Store, ast.Del))
    if isinstance(node, ast.ExceptHandler):
        return node.name == name
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return node.name == name
    if isinstance(node, ast.MatchMapping):
        return node.rest == name
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name.partition(".")[0]) == name for a in node.names)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    return False


def value_fixed(holder: ast.AST, operand: ast.AST, decides: bool) -> bool:
    """A constant in ``holder`` decides its value whatever ``operand`` is: ``x | True`` /
    ``x & False`` (also as ``x |= True``); for a command (``decides``, a bool) also
    ``x or True`` / ``x and False``."""
    if isinstance(holder, ast.AugAssign):
        return _bit_fixed(holder.op, holder.value)
    if isinstance(holder, ast.BinOp):
        other = holder.right if operand is holder.left else holder.left
        return _bit_fixed(holder.op, other)
    if isinstance(holder, ast.BoolOp) and decides:
        wins = isinstance(holder.op, ast.Or)
        return any(
            v is not operand and isinstance(v, ast.Constant) and bool(v.value) is wins
            for v in holder.values
        )
    return False


def _bit_fixed(op: ast.operator, other: ast.AST) -> bool:
    if not isinstance(other, ast.Constant) or not isinstance(other.value, bool):
        return False
    return (isinstance(op, ast.BitOr) and other.value) or (
        isinstance(op, ast.BitAnd) and not other.value
    )
