"""Methods a class inherits from a ``typing.Protocol`` it derives from explicitly.

A Protocol's methods are ordinary functions to a subclass: a ``...`` (or ``pass``, or
docstring-only) stub is callable, so the plugin plans with it (``callable(getattr(...))``: both
read-back hooks present, read-back planned) and then gets ``None`` back where it uses the
result. Such a stub is no implementation: ``broken`` for every method whose result the plugin
uses (the warm-ups and release hooks return nothing the plugin reads).
"""

from __future__ import annotations

import ast
from typing import Any

from vllm_tt_plugin.contract.parity_shapes import RESULT_USED

_PROTOCOLS = ("typing:Protocol", "typing_extensions:Protocol")


def stub_errors(reader: Any, method: str, ends: list[Any]) -> list[str]:
    """The errors of the methods a call ends in (``FoundMethod``s) that are Protocol stubs."""
    if method not in RESULT_USED:  # warm-ups and release hooks: nothing the plugin reads
        return []
    places = dict.fromkeys((m.owner, m.where) for m in ends)
    return [why for owner, where in places if (why := protocol_stub(reader, owner, method, where))]


def protocol_stub(reader: Any, owner: str, name: str, where: str) -> str:
    """Why ``owner.name`` is a Protocol's stub whose call returns None ("" when it is not)."""
    resolve = getattr(reader, "resolve_class", None)
    found = resolve(owner) if resolve is not None else None
    if found is None:
        return ""
    module, node = found
    refs = (reader._class_ref(module, b, before=node.lineno) for b in node.bases)
    if not any(ref in _PROTOCOLS for ref in refs):
        return ""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    defs = [d for d in node.body if isinstance(d, kinds) and d.name == name]
    if not defs or not all(_empty(stmt) for stmt in defs[-1].body):
        return ""
    return (
        f"{node.name}.{name} is a stub of the typing Protocol {node.name} (its body does "
        f"nothing): the plugin calls it and gets None where it uses the result [{where}]"
    )


def _empty(stmt: ast.stmt) -> bool:
    """``...``, ``pass`` or a docstring."""
    return isinstance(stmt, ast.Pass) or (
        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
    )


def skeleton_body(node: ast.ClassDef, fn: ast.stmt, lines: list[str]) -> list[str]:
    """A skeleton's lines for ``fn`` of ``node``: a Protocol's method with a real body that the
    skeleton elides to ``pass`` is written ``return ...`` (not a stub); the rest unchanged."""
    protocol = any(
        ast.unparse(b.value if isinstance(b, ast.Subscript) else b).rpartition(".")[2] == "Protocol"
        for b in node.bases
    )
    body = getattr(fn, "body", [])
    if protocol and lines[-1].strip() == "pass" and not all(map(_empty, body)):
        return [*lines[:-1], lines[-1].replace("pass", "return ...")]
    return lines
