"""What the plugin does with a method besides calling it: it uses the result, and it writes an
attribute of the instance. A method the plugin reads the result of must return one (a generator
function never runs its body; one with no ``return <value>`` gives None), and an attribute the
plugin assigns must not be a read-only property (AttributeError)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

from vllm_tt_plugin.contract.parity_rules import FAILING, SEVERITY, Finding, Status
from vllm_tt_plugin.contract.source import FoundMethod
from vllm_tt_plugin.contract.source_ast import _elided
from vllm_tt_plugin.contract.source_loadable import skeleton_format

# Methods whose return value the plugin uses (adapter/model_adapter.py: the model instance, the
# KV cache, the logits / tokens, the read-back output, the KV-cache spec, the token budget).
RESULT_USED = frozenset({
    "initialize_vllm_model", "get_max_tokens_all_users", "allocate_kv_cache",
    "allocate_kv_cache_per_layer", "prefill_forward", "decode_forward", "read_decode_output",
    "process_decode_output_host", "get_kv_cache_spec",
})  # fmt: skip
# Attributes the plugin assigns on the loaded model: ``model.already_warmed_up_prefill = False``
# before the traced warm-up (model_adapter.py, when the instance has it).
WRITTEN = ("already_warmed_up_prefill",)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _own_nodes(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of ``fn``'s own body (not of nested functions, lambdas or classes)."""
    out: list[ast.AST] = []
    # A nested `def` / `class` statement of the body is a scope too (rt45h RT02: `def _run():
    # return ...` then `_run()` returns nothing).
    stack: list[ast.AST] = [st for st in fn.body if not isinstance(st, _SCOPES)]
    while stack:
        node = stack.pop()
        out.append(node)
        stack += [c for c in ast.iter_child_nodes(node) if not isinstance(c, _SCOPES)]
    return out


def result_kind(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """ "generator" (it yields), "value" (some `return <value>`), else "" (falls off the end
    or returns bare: None)."""
    nodes = _own_nodes(fn)
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in nodes):
        return "generator"
    if any(isinstance(n, ast.Return) and n.value is not None for n in nodes):
        return "value"  # (an explicit `return None` is the author's value, not an omission)
    return ""


def _def_at(source: Any, found: FoundMethod) -> tuple[Path, ast.FunctionDef] | None:
    resolve = getattr(source, "resolve_class", None)
    located = resolve(found.owner) if resolve is not None and found.body is not None else None
    if located is None:
        return None
    line = int(found.where.rpartition(":")[2] or 0)
    for node in ast.walk(located[1]):
        if isinstance(node, ast.FunctionDef) and node.lineno == line and node.name:
            return located[0].path, node
    return None


def result_shape(source: Any, method: str, found: FoundMethod) -> str:
    """Why the plugin cannot use what ``found`` returns ("": it can): a generator function, or
    a body that never returns a value and does not always raise."""
    if method not in RESULT_USED or found.unresolved or found.abstract:
        return ""
    located = _def_at(source, found)
    if located is None:
        return ""
    path, fn = located
    kind = result_kind(fn)
    if kind == "generator":
        return (
            f"{method} is a generator function (it yields): calling it returns a generator "
            f"object and its body never runs, so the plugin gets no result [{found.where}]"
        )
    if skeleton_format(path) == 1 or _elided(fn):  # an older skeleton keeps no returns
        return ""
    if kind == "value" or (fn.body and isinstance(fn.body[-1], ast.Raise)):
        return ""
    return (
        f"{method} never returns a value (no `return <value>` in its body): the plugin uses its "
        f"result and would get None [{found.where}]"
    )


def with_result(finding: Finding, why: str) -> Finding:
    """``finding`` made ``broken`` by ``why`` (the result the plugin cannot use); a failure
    at least as severe keeps its status, with ``why`` added."""
    if not why:
        return finding
    worse = SEVERITY.index(finding.status) <= SEVERITY.index("broken")
    detail = f"{finding.detail}; {why}" if finding.status in FAILING else why
    return dataclasses.replace(finding, status=finding.status if worse else "broken", detail=detail)


def read_only_writes(source: Any, target: str) -> list[tuple[Status, str]]:
    """Attributes the plugin assigns that the first class along the MRO to bind them makes a
    property without a setter (``broken``: AttributeError when the plugin sets it), or one
    whose setter may not keep the value (``unresolved``: ``setter_doubt``)."""
    out: list[tuple[Status, str]] = []
    resolve = getattr(source, "resolve_class", None)
    if resolve is None:
        return out
    for name in WRITTEN:
        for cls in source.mro(target):
            found = resolve(cls)
            if found is None:
                continue
            module, node = found
            kind = _binding(node, name)
            if kind is None:
                continue
            root = getattr(source, "root", None)
            rel = module.path.relative_to(root) if root is not None else module.path
            if kind:
                out.append((
                    "broken",
                    f"{node.name}.{name} is a property without a setter [{rel}:{kind}]: the "
                    f"plugin sets model.{name} = False before the traced warm-up "
                    "(AttributeError at launch with tracing on)",
                ))  # fmt: skip
            doubt = setter_doubt(node, name)
            if doubt:
                out.append((
                    "unresolved",
                    f"{node.name}.{name}'s setter [{rel}:{doubt}] does not plainly keep the value "
                    "(`self.x = value`, read back by the getter): the plugin's "
                    f"model.{name} = False before the traced warm-up may be ignored, and the "
                    "traced prefill warm-up (the trace capture) never run",
                ))  # fmt: skip
            break
    return out


def _binding(node: ast.ClassDef, name: str) -> int | None:
    """The line of a read-only property ``name`` in the class body, 0 when the body binds
    ``name`` otherwise (a plain attribute, a property with a setter), None when it does not."""
    kind: int | None = None
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
            decorators = [ast.unparse(d) for d in item.decorator_list]
            # `@property` alone is read-only; `@name.setter` (or a plain def) replaces it.
            kind = item.lineno if "property" in decorators else 0
        elif isinstance(item, (ast.Assign, ast.AnnAssign)):
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                kind = 0
    return kind


def setter_doubt(node: ast.ClassDef, name: str) -> int:
    """The line of ``name``'s property setter when it does not store its value plainly
    (a statement ``self.x = value`` of its body, with a getter returning ``self.x``, or a
    getter that only returns a false constant), else 0.
    A setter that ignores ``False`` once warmed (``self.x = self.x or value``) keeps the
    traced prefill warm-up from running (rt45f W3)."""
    defs = [i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == name]
    setters = [d for d in defs if any(ast.unparse(x) == f"{name}.setter" for x in d.decorator_list)]
    getters = [d for d in defs if "property" in [ast.unparse(x) for x in d.decorator_list]]
    if not setters or not getters:
        return 0
    setter, getter = setters[-1], getters[-1]
    returns = [n for n in ast.walk(getter) if isinstance(n, ast.Return)]
    if returns and all(isinstance(r.value, ast.Constant) and not r.value.value for r in returns):
        return 0  # the getter always reads False: the warm-up runs whatever was set
    params = [*setter.args.posonlyargs, *setter.args.args]
    if len(params) < 2:
        return setter.lineno
    me, value = params[0].arg, params[1].arg
    stored = {
        st.targets[0].attr
        for st in setter.body
        if isinstance(st, ast.Assign) and len(st.targets) == 1
        and isinstance(st.targets[0], ast.Attribute)
        and isinstance(st.targets[0].value, ast.Name) and st.targets[0].value.id == me
        and isinstance(st.value, ast.Name) and st.value.id == value
    }  # fmt: skip
    returned = {
        st.value.attr
        for st in getter.body
        if isinstance(st, ast.Return) and isinstance(st.value, ast.Attribute)
        and isinstance(st.value.value, ast.Name)
    }  # fmt: skip
    return 0 if stored & returned else setter.lineno
