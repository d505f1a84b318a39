"""The parity checker's rules about importing the modules on a target's path
(``source_import``): an expression the import evaluates that raises is ``broken`` (or
``unresolved`` when it depends on the environment or a branch), and a base class bound under
a condition makes every verdict on the class ``unresolved`` (which object Python binds is not
evaluated; a base bound only under ``if TYPE_CHECKING:`` is a NameError: ``broken``)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any

from vllm_tt_plugin.contract.parity_rules import FAILING, SOURCE, Finding
from vllm_tt_plugin.contract.source import SignatureSource
from vllm_tt_plugin.contract.source_import import Severity, binding_doubt

_MAX_DEPTH = 8
_FIRM = FAILING - {"missing"}  # a verdict a doubtful base does not make more certain


def _rel(source: SignatureSource, module: Any) -> Any:
    root = getattr(source, "root", None)
    return module.path.relative_to(root) if root is not None else module.path


def import_raises(source: SignatureSource, target: str, archs: tuple[str, ...]) -> list[Finding]:
    """An expression a module on the target's path evaluates on import that raises."""
    touched: Callable[[], list[Any]] = getattr(source, "touched_modules", lambda: [])
    found: list[Finding] = []
    for module in touched():
        for r in getattr(module, "raises", []):
            what = "does not import" if r.status == "broken" else "may not import"
            found.append(Finding(target, archs, SOURCE, r.status,
                                 f"{_rel(source, module)}:{r.line}: {r.why}: the module {what} "
                                 "on a TT host"))  # fmt: skip
    return found


def _head(expr: ast.expr) -> str:
    """The name a base expression starts from (``Base``, ``m`` of ``m.Base``, ``G`` of
    ``G[T]``)."""
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else ""


def _doubt(
    source: SignatureSource, module: Any, name: str, line: int
) -> tuple[Severity, str] | None:
    """Why ``name`` in ``module`` at ``line`` may not be what the checker reads, following a
    from-import into the module it comes from (a re-export bound under a condition there)."""
    module_of: Callable[[str], Any] = getattr(source, "module", lambda m: None)
    for _ in range(_MAX_DEPTH):
        unconditional = [at for at, _ in module.timeline.get(name, [])]
        doubt = binding_doubt(module.conditional, unconditional, name, line)
        if doubt is not None:
            return doubt[0], f"{_rel(source, module)}: {doubt[1]}"
        prior = [v for at, v in module.timeline.get(name, []) if at < line]
        if prior and isinstance(prior[-1], ast.expr) and _head(prior[-1]) not in ("", name):
            name = _head(prior[-1])  # `Base = g.Base`: what g is bound to
            continue
        ref = module.imports.get(name, "")
        source_name, _, imported = ref.partition(":")
        other = module_of(source_name) if imported else None
        if other is None:
            return None
        module, name, line = other, imported, 10**9  # its binding at the end of that import
    return None


def base_doubts(source: SignatureSource, target: str) -> list[tuple[Severity, str]]:
    """(status, why) for each base along the MRO bound under a condition."""
    resolve: Callable[[str], Any] = getattr(source, "resolve_class", lambda t: None)
    out: list[tuple[Severity, str]] = []
    for cls in source.mro(target):
        found = resolve(cls)
        if found is None:
            continue
        module, node = found
        for expr in node.bases:
            name = _head(expr)
            doubt = _doubt(source, module, name, node.lineno) if name else None
            if doubt is not None:
                out.append((doubt[0], f"class {node.name}'s base {ast.unparse(expr)}: {doubt[1]}"))
    return list(dict.fromkeys(out))


def doubt_findings(
    source: SignatureSource, target: str, archs: tuple[str, ...], findings: Sequence[Finding]
) -> list[Finding]:
    """``findings`` with a doubtful base applied: a NameError base adds a ``broken`` finding;
    a conditional one makes every verdict not already failing for itself ``unresolved``."""
    doubts = base_doubts(source, target)
    if not doubts:
        return list(findings)
    out = [Finding(target, archs, SOURCE, s, f"{why} (the base is not resolved)")
           for s, why in doubts]  # fmt: skip
    reason = "; ".join(why for _, why in doubts)
    for f in findings:
        if f.status in _FIRM or f.method == SOURCE:
            out.append(f)
        else:
            out.append(Finding(f.target, f.archs, f.method, "unresolved",
                               f"{f.detail}; but {reason}"))  # fmt: skip
    return out
