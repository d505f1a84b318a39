"""The form of what ``prefill_forward`` returns to an mRoPE model's adapter.

``ModelAdapter.prefill`` (adapter/model_adapter.py, ``_split_mrope``) unpacks an mRoPE model's
prefill result as ``(out, rope_deltas)`` and raises ``ModelContractError`` for anything that is
not a 2-tuple. The checker counts a prefill as returning that pair only where it sees one: a
``return a, b`` (or a local bound to such a tuple) in the method, or in an own method whose
result it returns (``return self.m(...)`` / ``super().m(...)``, followed). Where no pair is
visible (a bare ``return logits``, a helper whose body the tree elides) it cannot say the
plugin gets its deltas: ``unresolved``. An elided prefill body (``...``) and an older skeleton
that keeps no returns say nothing and are not judged.
"""

from __future__ import annotations

import ast
from typing import Any

from vllm_tt_plugin.contract.parity_raises import frame_nodes
from vllm_tt_plugin.contract.source import FoundMethod, class_label, find_method
from vllm_tt_plugin.contract.source_ast import _elided
from vllm_tt_plugin.contract.source_loadable import skeleton_format

Fn = ast.FunctionDef | ast.AsyncFunctionDef


def _own(fn: Fn) -> list[ast.AST]:
    return [n for stmt in fn.body for n in frame_nodes(stmt)]


def _pair(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Tuple) and len(expr.elts) == 2


def returns_pair(fn: Fn, follow: Any, depth: int = 0) -> bool | None:
    """Whether some ``return`` of ``fn`` gives a 2-tuple: True, False (no return does, as far
    as the checker sees), None (a return hands on what an own method returns, and that method
    is not in the tree, elided, or keeps no returns: the tree says nothing). ``follow(func)``:
    the def an own-method call reaches, or None."""
    nodes = _own(fn)
    pairs = {
        t.id
        for n in nodes if isinstance(n, ast.Assign) and _pair(n.value)
        for t in n.targets if isinstance(t, ast.Name)
    }  # fmt: skip
    unknown = False
    for node in nodes:
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        value = node.value
        if _pair(value) or (isinstance(value, ast.Name) and value.id in pairs):
            return True
        if isinstance(value, ast.Call) and own_call(value.func):
            callee = follow(value.func) if depth < 4 else None
            says = callee is not None and not _elided(callee) and any(
                isinstance(n, ast.Return) and n.value is not None for n in _own(callee)
            )  # fmt: skip
            inner = returns_pair(callee, follow, depth + 1) if says and callee else None
            if inner:
                return True
            unknown = unknown or inner is None
    return None if unknown else False


def own_call(func: ast.expr) -> bool:
    """``self.m`` / ``super().m``: a method of the instance."""
    if not isinstance(func, ast.Attribute):
        return False
    holder = func.value
    return (isinstance(holder, ast.Name) and holder.id == "self") or (
        isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name)
        and holder.func.id == "super"
    )  # fmt: skip


def missing_pair(
    source: Any, target: str, method: str, found: FoundMethod, mrope: bool
) -> list[str]:
    """Why the plugin may not get ``(out, rope_deltas)`` from an mRoPE model's prefill
    ``found`` (empty: it does, the tree says nothing of it, or the model is not mRoPE)."""
    if not mrope or method != "prefill_forward":
        return []
    why = _missing(source, target, found)
    return [why] if why else []


def _missing(source: Any, target: str, found: FoundMethod) -> str:
    resolve = getattr(source, "resolve_class", None)
    located = resolve(found.owner) if resolve is not None and found.body is not None else None
    if located is None or found.unresolved:
        return ""
    module, node = located
    line = found.where.rpartition(":")[2]
    fn = next(
        (d for d in ast.walk(node)
         if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and str(d.lineno) == line),
        None,
    )  # fmt: skip
    if fn is None or _elided(fn):
        return ""
    if skeleton_format(module.path):
        return ""  # a skeleton writes returns as `None` / `(None, None)`: only a checkout says

    def follow(func: ast.expr, owner: str = found.owner) -> Fn | None:
        if not isinstance(func, ast.Attribute):
            return None
        holder = func.value
        if isinstance(holder, ast.Name) and holder.id == "self":
            nxt = find_method(source, target, func.attr)
        elif (
            isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name)
            and holder.func.id == "super" and not holder.args
        ):  # fmt: skip
            nxt = find_method(source, target, func.attr, after=owner)
        else:
            return None
        if nxt is None or nxt.body is None or nxt.unresolved or resolve is None:
            return None
        where = resolve(nxt.owner)
        at = nxt.where.rpartition(":")[2]
        return next(
            (d for d in ast.walk(where[1]) if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))
             and str(d.lineno) == at),
            None,
        ) if where is not None else None  # fmt: skip

    if returns_pair(fn, follow) is not False:
        return ""  # a pair, or a method the tree says nothing of
    return (
        f"{class_label(found.owner)}.prefill_forward returns no `(out, rope_deltas)` pair the "
        "checker can see: the plugin unpacks an mRoPE model's prefill result as that pair "
        f"(ModelContractError otherwise) [{found.where}]"
    )
