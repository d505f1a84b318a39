"""The checker's side of ``parity_raises``: the driven method's def and the helpers it calls,
read from the checkout, run once per value combination (``plugin_values``) of every call the
plugin plans. A guard that fires is ``broken`` (an exception on a TT host for that call); a
method whose result the plugin uses and that falls off the end of its body for some values
(None) is ``broken`` too, and so is a token budget the launch refuses (``budget_value``); one
that may fall off after a loop whose returns are conditional is ``unresolved``."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from vllm_tt_plugin.contract.budget_value import refused_budget
from vllm_tt_plugin.contract.call_plan import PlannedCall
from vllm_tt_plugin.contract.parity_raises import Callee, Fn, Outcome, frame_nodes, run_call
from vllm_tt_plugin.contract.parity_shapes import RESULT_USED, result_kind
from vllm_tt_plugin.contract.plugin_values import scenarios
from vllm_tt_plugin.contract.source import FoundMethod, class_label, find_method
from vllm_tt_plugin.contract.source_ast import _elided
from vllm_tt_plugin.contract.source_loadable import skeleton_format

_SKIP = {"method": 1, "classmethod": 1, "staticmethod": 0, "function": 0}


def _located(source: Any, found: FoundMethod) -> tuple[Fn, Any, str] | None:
    """``found``'s def, its module and its file (relative to the checkout)."""
    resolve = getattr(source, "resolve_class", None)
    if resolve is None or found.body is None or found.unresolved:
        return None
    located = resolve(found.owner)
    if located is None:
        return None
    module, node = located
    path, _, line = found.where.rpartition(":")
    for item in ast.walk(node):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and str(item.lineno) == line:
            return item, module, path
    return None


def _callee(source: Any, target: str, owner: str, module: Any) -> Callee:
    """How a frame of ``owner`` (a method of ``module``) resolves the calls it makes."""

    def callee(how: str, name: str, expr: ast.expr | None) -> Any:
        if how == "function":
            held = _function(source, module, name, 0)
            if held is None:
                return None
            fn, mod = held
            return fn, _callee(source, target, "", mod), 0, (fn.name, _rel(source, mod))
        if not owner:  # a module function's frame: no instance
            return None
        found = find_method(source, target, name, after=owner if how == "super" else None)
        if found is None or found.kind not in _SKIP:
            return None
        located = _located(source, found)
        if located is None:
            return None
        fn, mod, path = located
        label = f"{class_label(found.owner)}.{name}"
        return fn, _callee(source, target, found.owner, mod), _SKIP[found.kind], (label, path)

    return callee


def _function(source: Any, module: Any, name: str, depth: int) -> tuple[Fn, Any] | None:
    """The module-level def ``name`` refers to in ``module`` (through from-imports) and the
    module defining it."""
    if module is None or depth > 8:
        return None
    if name in module.functions:
        return module.functions[name], module
    ref, _, original = module.imports.get(name, "").partition(":")
    other = source.module(ref) if original and hasattr(source, "module") else None
    return _function(source, other, original, depth + 1) if other is not None else None


def _rel(source: Any, module: Any) -> str:
    try:
        return str(module.path.relative_to(source.root))
    except (AttributeError, ValueError):
        return str(getattr(module, "path", ""))


class _Walk(Protocol):
    errors: list[str]
    unresolved: list[str]


def value_checks(
    source: Any,
    target: str,
    method: str,
    found: FoundMethod,
    calls: Sequence[PlannedCall],
    capabilities: Mapping[str, Any],
    walk: _Walk,
) -> None:
    """For each planned call, the first value combination whose run raises (or, for a method
    whose result the plugin uses, falls off the end or reaches ``return None``: None; or
    returns a budget the launch refuses) in ``walk.errors``; one that may fall off the end
    after a loop in ``walk.unresolved``."""
    located = _located(source, found)
    if located is None or found.kind not in _SKIP:
        return
    fn, module, path = located
    if _elided(fn):
        return
    # Only a body with some `return <value>` can fall off on one path (none: parity_shapes);
    # an older skeleton keeps no returns.
    older = not hasattr(source, "root") or skeleton_format(source.root / path) == 1
    older = older or result_kind(fn) != "value"
    # An explicit `return None` reached for some values counts as None only beside a return of
    # something else (a method that always returns None explicitly: parity_shapes).
    valued = not older and _returns_other_than_none(fn)
    # A skeleton writes a returned value as `return None  # a value (elided)`: there only a
    # bare `return` (how it keeps the tree's `return None` branch) is None.
    written = hasattr(source, "root") and skeleton_format(source.root / path) > 0
    callee = _callee(source, target, found.owner, module)
    async_decode = capabilities.get("supports_async_decode") is True
    label = f"{class_label(found.owner)}.{method}"
    for call in calls:
        for scenario in scenarios(call, async_decode):
            out = run_call(fn, _SKIP[found.kind], scenario, call.positional, callee)
            if out.kind == "none" and valued and (out.detail == "bare" or not written):
                out = Outcome("fall", line=out.line, detail="return None")
            why = _why(out, method, older, label, found.where) or refused_budget(
                fn, out, method, label, found.where, getattr(module, "bound", ())
            )
            sent = f"{call.variant} call" + (f" ({scenario.label})" if scenario.label else "")
            if why:
                walk.errors.append(f"{sent}: {why}")
                break
            if out.kind == "loop" and method in RESULT_USED and not older:
                doubt = (
                    f"{label} may end without `return <value>` after the loop at line {out.line} "
                    "(its returns are conditional; loop bodies are not run): the plugin uses its "
                    f"result [{found.where}]"
                )
                walk.unresolved += [doubt] if doubt not in walk.unresolved else []
                break


def _why(out: Outcome, method: str, older: bool, label: str, where: str) -> str:
    if out.kind == "raise":
        chain = [label, *(c for c, _ in out.chain)]
        at = out.chain[-1][1] if out.chain else where.rpartition(":")[0]
        return f"{' -> '.join(chain)} {out.detail} [{at}:{out.line}]"
    if out.kind == "fall" and method in RESULT_USED and not older:
        if out.detail:
            return (
                f"{label} reaches `return None` on this path (line {out.line}): the plugin uses "
                f"its result [{where}]"
            )
        return (
            f"{label} ends without `return <value>` on this path (None): the plugin uses its "
            f"result [{where}]"
        )
    return ""


def _returns_other_than_none(fn: Fn) -> bool:
    return any(
        isinstance(n, ast.Return) and n.value is not None
        and not (isinstance(n.value, ast.Constant) and n.value.value is None)
        for stmt in fn.body for n in frame_nodes(stmt)
    )  # fmt: skip
