"""Reads of ``**kwargs`` by name that cannot raise ``KeyError`` (``ast``): under a test that
the key is there (``if "k" in kwargs:``, ``kwargs["k"] if "k" in kwargs else None``, ``"k" in
kwargs and kwargs["k"]``, after ``if "k" not in kwargs: return``), or inside a ``try`` whose
handler catches the ``KeyError``."""

from __future__ import annotations

import ast
from collections.abc import Callable

Fn = ast.FunctionDef | ast.AsyncFunctionDef
# Handlers that catch a KeyError (a bare `except:` too).
_CATCHES = {"KeyError", "LookupError", "Exception", "BaseException"}


def _present(test: ast.expr, names: set[str], positive: bool) -> set[str]:
    """Keys ``test`` proves in the mapping (``positive``: where it holds, else where it fails)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _present(test.operand, names, not positive)
    if isinstance(test, ast.BoolOp):
        both = isinstance(test.op, ast.And) == positive
        sets = [_present(v, names, positive) for v in test.values]
        return set().union(*sets) if both else set()
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.left, ast.Constant)
        and isinstance(test.left.value, str)
        and isinstance(test.comparators[0], ast.Name)
        and test.comparators[0].id in names
    ):
        holds = isinstance(test.ops[0], ast.In)
        if isinstance(test.ops[0], (ast.In, ast.NotIn)) and holds == positive:
            return {test.left.value}
    return set()


def _catches(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type
    if kinds is None:
        return True
    items = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    return any(
        (isinstance(i, ast.Name) and i.id in _CATCHES)
        or (isinstance(i, ast.Attribute) and i.attr in _CATCHES)
        for i in items
    )


def proven(
    fn: Fn, facts: Callable[[ast.expr, bool], set[str]], catching: bool
) -> dict[int, set[str]]:
    """For each node of ``fn``, the names the tests around it prove (``facts(test, holds)``):
    the branch a test holds (or fails) in, the statements after ``if <test>: return``, the
    operands after ``<test> and`` / ``<test> or``; with ``catching``, "*" inside a ``try``
    whose handler catches a ``KeyError``."""
    out: dict[int, set[str]] = {}

    def expr(node: ast.AST, keys: set[str]) -> None:
        if isinstance(node, ast.BoolOp):
            seen = set(keys)
            for v in node.values:
                expr(v, seen)
                seen |= facts(v, isinstance(node.op, ast.And))
            return
        if isinstance(node, ast.IfExp):
            expr(node.test, keys)
            expr(node.body, keys | facts(node.test, True))
            expr(node.orelse, keys | facts(node.test, False))
            return
        out[id(node)] = keys
        for child in ast.iter_child_nodes(node):
            expr(child, keys)

    def block(stmts: list[ast.stmt], keys: set[str]) -> None:
        keys = set(keys)
        for st in stmts:
            if isinstance(st, (ast.If, ast.While)):
                expr(st.test, keys)
                block(st.body, keys | facts(st.test, True))
                block(st.orelse, keys | facts(st.test, False))
                if st.body and isinstance(st.body[-1], (ast.Return, ast.Raise)):
                    keys |= facts(st.test, False)
                continue
            if catching and isinstance(st, ast.Try) and any(_catches(h) for h in st.handlers):
                block(st.body, keys | {"*"})
                for h in st.handlers:
                    block(h.body, keys)
                block(st.orelse, keys)
                block(st.finalbody, keys)
                continue
            for _field, value in ast.iter_fields(st):
                items = value if isinstance(value, list) else [value]
                if items and all(isinstance(x, ast.stmt) for x in items):
                    block(items, keys)
                else:
                    for x in items:
                        if isinstance(x, ast.AST):
                            expr(x, keys)
            out[id(st)] = keys

    block(fn.body, set())
    return out


def guarded_reads(fn: Fn, names: set[str]) -> dict[int, set[str]]:
    """For each node of ``fn``, the keys of the mappings ``names`` that cannot raise a
    ``KeyError`` there ("*": any key, inside a ``try`` that catches it)."""
    return proven(fn, lambda test, holds: _present(test, names, holds), catching=True)


def is_guarded(guards: dict[int, set[str]], node: ast.AST, key: str) -> bool:
    found = guards.get(id(node), set())
    return key in found or "*" in found
