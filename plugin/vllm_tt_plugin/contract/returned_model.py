"""The object ``initialize_vllm_model`` returns: the plugin drives that instance.

``return cls(...)`` (or a local bound once to it, or the base's ``super().initialize_vllm_model``)
is the served class. ``return Other(...)`` is an instance of ``Other``: every call the plugin
makes must bind to that class too (a multi-device subclass whose decode drops the reload
commands). Anything else (a generator object, a helper's result, a class outside the checkout)
cannot be followed: unresolved. The skeleton tool writes these returns in the same reduced form
(``return Other(...)`` / ``return unevaluated()``; the served class's returns are left out).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from typing import Any

from vllm_tt_plugin.contract.parity_rules import FAILING, SEVERITY, Finding, Status
from vllm_tt_plugin.contract.signatures import FamilyProfile
from vllm_tt_plugin.contract.source import class_label
from vllm_tt_plugin.launch.capabilities import (
    CapabilityError,
    ModelCapabilities,
    capability_conflicts,
)

# check_target(source, profile, archs, depth): the findings of one class
Checker = Callable[[Any, FamilyProfile, tuple[str, ...], int], list[Finding]]

LOAD = "initialize_vllm_model"
RETURNED = "(returned model)"  # the findings' method name
UNFOLLOWED = "unevaluated"  # the skeleton's callee for a return the checker cannot follow


def return_forms(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[int, str | None]]:
    """(line, callee) of each ``return`` of ``fn`` other than the served class: ``callee`` is
    the name called (``Other`` of ``Other(...)``), None where it cannot be followed."""
    args = [*fn.args.posonlyargs, *fn.args.args]
    me = args[0].arg if args else "cls"
    stores: dict[str, list[ast.expr]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    stores.setdefault(t.id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr)):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    stores.setdefault(sub.id, []).extend([ast.Constant(None)] * 2)

    def form(value: ast.expr, depth: int = 0) -> tuple[bool, str | None]:
        """(served, callee)"""
        if isinstance(value, ast.Name) and value.id != me and depth < 4:
            bound = stores.get(value.id, [])
            return form(bound[0], depth + 1) if len(bound) == 1 else (False, None)
        if isinstance(value, ast.Name) or not isinstance(value, ast.Call):
            return False, None
        func = value.func
        if isinstance(func, ast.Name):
            bound = stores.get(func.id, [])
            if func.id == me or (len(bound) == 1 and _is(bound[0], me)):
                return True, None
            return (False, func.id) if not bound else (False, None)
        if isinstance(func, ast.Attribute) and func.attr == LOAD and _is_super(func.value):
            return True, None  # the base's load: it builds cls, the served class
        return False, None

    out: list[tuple[int, str | None]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Constant) and node.value.value is None:
                continue
            served, callee = form(node.value)
            if not served:
                out.append((node.lineno, callee))
    return out


def _is(expr: ast.expr, name: str) -> bool:
    return isinstance(expr, ast.Name) and expr.id == name


def _is_super(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Call) and _is(expr.func, "super")


def returned_classes(reader: Any, target: str) -> list[tuple[str, str | None]]:
    """(where, the class ``module:Class``) of each instance the load returns other than the
    served class; None for one the checker cannot follow."""
    served = reader.canonical(target)
    for entry in reader.mro(target):
        found = reader.resolve_class(entry)
        if found is None:
            continue
        module, node = found
        defs = [d for d in node.body if isinstance(d, ast.FunctionDef) and d.name == LOAD]
        if not defs:
            continue
        rel = module.path.relative_to(reader.root)
        out: list[tuple[str, str | None]] = []
        for line, callee in return_forms(defs[-1]):
            ref = reader._class_ref(module, ast.Name(callee, ast.Load())) if callee else None
            cls = reader.canonical(ref) if ref and callee != UNFOLLOWED else None
            if cls != served:
                out.append((f"{rel}:{line}", cls))
        return out
    return []


def returned_findings(
    source: Any, profile: FamilyProfile, archs: tuple[str, ...], depth: int, check: Checker
) -> list[Finding]:
    """The plugin drives the instance ``initialize_vllm_model`` returns: another class's must
    take every call too; one the checker cannot follow is unresolved."""
    if not hasattr(source, "resolve_class") or depth > 2:  # a checkout (not the fixture)
        return []
    out: list[Finding] = []
    for where, cls in returned_classes(source, profile.target):
        if cls is None:
            out.append(Finding(profile.target, archs, RETURNED, "unresolved",
                               "initialize_vllm_model returns an object the checker does not "
                               f"follow, and the plugin drives that object [{where}]"))  # fmt: skip
            continue
        narrower = narrowing_finding(source, profile.target, cls, archs, where)
        if narrower is not None:
            out.append(narrower)
        planned_from = _PlannedFromServed(source, profile.target, cls)
        sub = check(planned_from, dataclasses.replace(profile, target=cls), archs, depth + 1)
        bad = [f for f in sub if f.status in FAILING]
        if bad:
            worst = min(bad, key=lambda f: SEVERITY.index(f.status))
            calls = "; ".join(f"{f.method}: {f.status}: {f.detail}" for f in bad)
            out.append(Finding(profile.target, archs, RETURNED, worst.status,
                               f"initialize_vllm_model returns a {class_label(cls)} [{where}], "
                               f"and the plugin's calls on it fail: {calls}"))  # fmt: skip
    return out


def narrowing_finding(
    source: Any, served: str, cls: str, archs: tuple[str, ...], where: str
) -> Finding | None:
    """The worker's check of a returned instance's own ``model_capabilities`` against the
    registered class's the launch planned from (``capability_conflicts``, worker.py): an
    instance of any other class, a subclass included, is refused at load where narrower
    (``instance_declared``, adapter/instance_capabilities.py)."""
    conflicts: list[str] = []
    unknown = False
    for planned in source.class_fact_variants(served):
        for own in source.class_fact_variants(cls):
            try:
                found = capability_conflicts(_parsed(served, planned), _parsed(cls, own))
            except CapabilityError:
                continue  # refused at launch: reported with the facts
            unknown = unknown or bool(found and (planned.unknown or own.unknown))
            conflicts += [c for c in found if c not in conflicts]
    if not conflicts:
        return None
    label = (
        f"initialize_vllm_model returns a {class_label(cls)} [{where}] whose own "
        f"model_capabilities are narrower than the class's: {'; '.join(conflicts)}"
    )
    status: Status = "unresolved" if unknown else "broken"
    why = f"{label}: the worker refuses it at load (ModelContractError, adapter/served_model.py)"
    return Finding(served, archs, RETURNED, status, why)


_PENALTIES = "supports_device_penalties"
_TOP_K = "max_device_top_k"


class _PlannedFromServed:
    """``source`` as the plugin sees the returned instance (rt45g K4): it plans every call from
    the registered class's capabilities, narrowed per request by the instance's own
    (adapter/served_model.py ``per_request_capabilities``: device penalties only where both
    allow them); a wider instance gains nothing. The decode contract is the instance's."""

    def __init__(self, source: Any, served: str, returned: str) -> None:
        self._source, self._served, self._returned = source, served, returned

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def class_fact_variants(self, target: str) -> list[Any]:
        own = self._source.class_fact_variants(target)
        if target != self._returned:
            return list(own)
        out = []
        for planned in self._source.class_fact_variants(self._served):
            for mine in own:
                caps = dict(planned.capabilities)
                try:  # the runner's own rule (ModelCapabilities.narrowed_by)
                    narrowed = _parsed(self._served, planned).narrowed_by(_parsed(target, mine))
                except CapabilityError:
                    narrowed = None  # refused at launch: reported with the facts
                if narrowed is not None:
                    caps[_PENALTIES] = narrowed.supports_device_penalties
                    caps.pop(_TOP_K, None)
                    if narrowed.max_device_top_k is not None:
                        caps[_TOP_K] = narrowed.max_device_top_k
                out.append(dataclasses.replace(mine, capabilities=caps))
        return out


def _parsed(owner: str, facts: Any) -> ModelCapabilities:
    declared = {"model_capabilities": dict(facts.capabilities)}
    return ModelCapabilities.from_model_class(type(owner.rpartition(":")[2], (), declared))


def skeleton_returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The skeleton's lines for the returns of a load: ``return Other(...)``, or
    ``return unevaluated()`` for one the checker cannot follow."""
    if fn.name != LOAD:
        return []
    return [f"return {callee or UNFOLLOWED}(...)" for _, callee in return_forms(fn)]


def with_returns(fn: ast.stmt, lines: list[str]) -> list[str]:
    """A skeleton method's lines (``def`` header first) with the load's returns appended."""
    extra = skeleton_returns(fn) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
    if not extra:
        return lines
    indent = lines[-1][: len(lines[-1]) - len(lines[-1].lstrip())]
    body = lines[:-1] if lines[-1].strip() == "pass" else lines
    return body + [indent + line for line in extra]
