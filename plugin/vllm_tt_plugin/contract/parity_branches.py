"""A served class the module binds where the checker does not follow the binding: inside a
module-level ``if`` / ``try`` / loop (which branch runs is not evaluated), or through an
expression (``importlib.import_module(...).Class``). Python still binds the name (so does a
module-level ``__getattr__``, PEP 562, for a name the module does not bind), so such a
target is never ``no_class`` ("not in this checkout"): it is ``unresolved``, and each branch's
class the checker can read is checked too (its failures are reported, named by branch)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from vllm_tt_plugin.contract.parity_rules import SEVERITY, SOURCE, Finding
from vllm_tt_plugin.contract.signatures import FamilyProfile
from vllm_tt_plugin.contract.source_module import absolute

_NESTING = (ast.If, ast.Try, ast.For, ast.While, ast.With, ast.Match)
Check = Callable[[Any, FamilyProfile, tuple[str, ...]], list[Finding]]


def unfollowed_binding(
    source: Any, profile: FamilyProfile, archs: tuple[str, ...], check: Check
) -> list[Finding]:
    """Findings for a target whose class the module binds in a way ``resolve_class`` does not
    follow ([] when the module does not bind the name at all: really not in the tree)."""
    target = profile.target
    module_name, _, cls = target.partition(":")
    module = source.module(module_name) if hasattr(source, "module") else None
    if module is None:
        return []
    rel = module.path.relative_to(source.root)
    if cls not in module.bound and cls not in module.timeline:
        if "__getattr__" not in module.bound:
            return []
        line = module.timeline.get("__getattr__", [(0, None)])[-1][0]
        why = (
            f"{rel}:{line}: the module defines __getattr__ (PEP 562), which may provide {cls} "
            "(a name it does not bind): what that returns is not evaluated"
        )
        return [Finding(target, archs, SOURCE, "unresolved", why)]
    if cls in module.timeline and module.timeline[cls][-1][1] is not None:
        line, value = module.timeline[cls][-1]
        text = (
            f"def {value.name}" if isinstance(value, (ast.FunctionDef, ast.AsyncFunctionDef))
            else ast.unparse(value) if isinstance(value, ast.AST) else str(value)
        )  # fmt: skip
        why = f"{rel}:{line}: {cls} is bound to `{text}`, which the checker does not follow"
        return [Finding(target, archs, SOURCE, "unresolved", why)]
    tree = module.tree
    if tree is None:
        return []
    package = module_name if module.is_package else module_name.rpartition(".")[0]
    branches: list[tuple[int, str | None]] = []  # (line, the class it binds, or None: unread)
    for stmt in tree.body:
        if not isinstance(stmt, _NESTING):
            continue
        for inner in ast.walk(stmt):
            if isinstance(inner, ast.ClassDef) and inner.name == cls:
                module.earlier.setdefault(f"{cls}@{inner.lineno}", inner)
                branches.append((inner.lineno, f"{module_name}:{cls}@{inner.lineno}"))
            elif isinstance(inner, ast.ImportFrom):
                for alias in inner.names:
                    if (alias.asname or alias.name) == cls:
                        source_module = absolute(package, inner.module, inner.level)
                        branches.append((inner.lineno, f"{source_module}:{alias.name}"))
            elif isinstance(inner, (ast.Assign, ast.AnnAssign, ast.Import)) and any(
                isinstance(n, ast.Name) and n.id == cls for n in ast.walk(inner)
            ):
                branches.append((inner.lineno, None))
    lines = ", ".join(str(line) for line, _ in branches) or "?"
    out = [
        Finding(target, archs, SOURCE, "unresolved", (
            f"{rel}: {cls} is bound inside a module-level `if` / `try` / loop (line(s) {lines}): "
            "which binding Python keeps is not evaluated; each branch's class is checked"
        ))
    ]  # fmt: skip
    per_branch: list[tuple[str, list[Finding]]] = []
    for line, ref in branches:
        if ref is None or not source.has_class(ref):
            why = f"{rel}:{line}: this branch binds {cls} to what the checker does not read"
            out.append(Finding(target, archs, SOURCE, "unresolved", why))
            continue
        found = check(source, dataclasses.replace(profile, target=ref), archs)
        per_branch.append((f"branch line {line}", found))
    return out + _merge(target, archs, per_branch)


def _merge(
    target: str, archs: tuple[str, ...], per_branch: Sequence[tuple[str, list[Finding]]]
) -> list[Finding]:
    """One finding per method: the worst over the branches, naming the branch."""
    by_method: dict[str, list[tuple[str, Finding]]] = {}
    for label, findings in per_branch:
        for f in findings:
            by_method.setdefault(f.method, []).append((label, f))
    merged: list[Finding] = []
    for method, entries in by_method.items():
        label, worst = min(entries, key=lambda e: SEVERITY.index(e[1].status))
        others = "; ".join(f"{f.status} [{lbl}]" for lbl, f in entries if f is not worst)
        detail = f"[{label}] {worst.detail}" + (f" (other branches: {others})" if others else "")
        merged.append(Finding(target, archs, method, worst.status, detail))
    return merged
