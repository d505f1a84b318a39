"""Names a class body binds, as the expressions of that body see them.

A class-level ``decode_input_update_contract = _RELOAD`` looks ``_RELOAD`` up in the class body
first (bound above that line), then in the module: ``_RELOAD = 1`` in the class wins over a
module constant of the same name. ``class_scope`` returns the module as such an expression sees
it; a name the body binds other than by one plain assignment (a def, an import, a loop, twice)
cannot be evaluated.
"""

from __future__ import annotations

import ast
import dataclasses

from vllm_tt_plugin.contract.parsed_module import ParsedModule


def class_scope(module: ParsedModule, node: ast.ClassDef, line: int) -> ParsedModule:
    """``module`` with the names ``node``'s body binds before ``line`` in front of its own."""
    plain: dict[str, ast.expr] = {}
    other: set[str] = set()

    def bind(name: str, value: ast.expr) -> None:
        if name in plain:
            other.add(name)  # assigned twice: which value an expression sees is not followed
        plain[name] = value

    for stmt in node.body:
        if stmt.lineno >= line:
            break
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            for t in stmt.targets:
                assert isinstance(t, ast.Name)
                bind(t.id, stmt.value)
            continue
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.value is not None:
                bind(stmt.target.id, stmt.value)
            continue
        if isinstance(stmt, ast.Expr):
            continue
        for sub in ast.walk(stmt):  # any other binding: def, class, import, loop, aug-assign
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                other.add(sub.name)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                other.add(sub.id)
            elif isinstance(sub, ast.alias):
                other.add((sub.asname or sub.name).partition(".")[0])
            elif (
                isinstance(sub, ast.Subscript)
                and isinstance(sub.ctx, ast.Store)
                and isinstance(sub.value, ast.Name)
            ):
                other.add(sub.value.id)  # `_CAPS["k"] = v`: changed in place
    if not plain and not other:
        return module
    unknown = ast.Constant(None)  # never read: `rebound` makes the name not a constant
    assigns = {**module.assigns, **plain, **dict.fromkeys(other, unknown)}
    local = set(plain) | other
    return dataclasses.replace(
        module,
        assigns=assigns,
        rebound=(module.rebound - local) | other,
        mutated={k: v for k, v in module.mutated.items() if k not in local},
    )
