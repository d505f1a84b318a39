"""The parity checker's findings and the rules about a target as a whole (not one call's
binding): the block-output hooks, module-level imports of the plugin, circular imports, and
methods the plugin calls on the class rather than an instance."""

from __future__ import annotations

import ast
import builtins
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from vllm_tt_plugin.contract.call_plan import PlanFacts
from vllm_tt_plugin.contract.source import FoundMethod, SignatureSource, find_method
from vllm_tt_plugin.contract.source_loadable import import_failures
from vllm_tt_plugin.contract.source_module import instance_store

Status = Literal[
    "ok",
    "drift",
    "known",
    "broken",
    "missing",
    "unresolved",
    "abstract",
    "absent",
    "facts",
    "unlisted",
    "no_class",
    "unprofiled",
    "dropped",
    "unreadable",
]
FAILING: frozenset[str] = frozenset(
    {"broken", "missing", "unresolved", "abstract", "unprofiled", "dropped", "unreadable"}
)
# Worst first: the status a method gets when its variants (environment values) disagree.
SEVERITY: tuple[str, ...] = (
    "unreadable", "broken", "missing", "abstract", "dropped", "unresolved", "unprofiled", "known",
    "drift", "facts", "absent", "unlisted", "no_class", "ok",
)  # fmt: skip
FACTS = "(class facts)"  # the method column of a "facts" finding
SOURCE = "(source)"  # the method column of a finding about the modules themselves
# The plugin calls these on the class (``model_cls.initialize_vllm_model(...)``), not an instance.
# (model_adapter.kv_cache_spec: ``hybrid_cls.get_kv_cache_spec(vllm_config)``.)
CLASS_CALLS = ("initialize_vllm_model", "get_max_tokens_all_users", "get_kv_cache_spec")


@dataclass(frozen=True)
class Finding:
    target: str
    archs: tuple[str, ...]
    method: str
    status: Status
    detail: str = ""


def not_shipped(module: str, names: tuple[str, ...]) -> str:
    """What of ``from module import names`` this plugin lacks ("" when it has it all)."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return module + (f" ({', '.join(names)})" if names else "")
    missing = [n for n in names if n != "*" and not hasattr(mod, n)]
    return f"{', '.join(missing)} from {module}" if missing else ""


def call_shape(method: str, found: FoundMethod) -> str:
    """Why calling ``found`` as the plugin does fails whatever the arguments ("" if it
    does not): a plain def called on the class (its first parameter takes the plugin's first
    argument), an ``async def`` (the plugin would get a coroutine, not the result)."""
    if found.unresolved:
        return ""
    if method in CLASS_CALLS and found.kind == "method":
        return (
            f"{method} is a plain def, not a classmethod/staticmethod: the plugin calls it on "
            f"the class, so its first parameter would take the plugin's first argument "
            f"[{found.where}]"
        )
    if found.coroutine:
        return (
            f"{method} is an `async def`: the plugin calls it synchronously and would get a "
            f"coroutine, not its result [{found.where}]"
        )
    return ""


def instance_shadow(source: SignatureSource, target: str, method: str) -> str:
    """Where a method along the MRO sets ``method`` on an object (``self.decode_forward =
    ...`` in ``__init__``): the instance attribute hides the class's def ("": nowhere)."""
    resolve: Callable[[str], Any] = getattr(source, "resolve_class", lambda t: None)
    for cls in source.mro(target):
        found = resolve(cls)
        line = instance_store(found[1], method) if found is not None else 0
        if line:
            root = getattr(source, "root", None)
            rel = found[0].path.relative_to(root) if root is not None else found[0].path
            return (
                f"{method} is set on an object in a method of {found[1].name} [{rel}:{line}]: "
                "on the instance it hides the def, and what it holds is not evaluated"
            )
    return ""


def module_findings(source: SignatureSource, target: str, archs: tuple[str, ...]) -> list[Finding]:
    """The modules on the target's path as imports: one that imports a plugin module this
    plugin does not ship at module level (outside a try / except ImportError) cannot be
    imported at all; nor one whose ``from a import X`` meets a partly imported module that
    has not bound X yet (a circular import)."""
    touched: Callable[[], list[Any]] = getattr(source, "touched_modules", lambda: [])
    found: list[Finding] = []
    modules = touched()
    for module in modules:
        root = getattr(source, "root", None)
        rel = module.path.relative_to(root) if root is not None else module.path
        for line, name, names in module.plugin_imports:
            lacking = not_shipped(name, names)
            if lacking:
                found.append(Finding(target, archs, SOURCE, "broken", (
                    f"{rel}:{line} imports {lacking} at module level, which this plugin does "
                    "not ship: the adapter module does not import on a TT host"
                )))  # fmt: skip
    found += [Finding(target, archs, SOURCE, "broken", d) for d in _unbound_bases(source, target)]
    found += [
        Finding(target, archs, SOURCE, "broken" if f.status == "broken" else "unresolved", f.detail)
        for f in import_failures(source, target)
    ]
    found += [Finding(target, archs, SOURCE, "unresolved", d) for d in _rebound(source, target)]
    cycle = _cycle(source, target.partition(":")[0])
    if cycle:
        found.append(Finding(target, archs, SOURCE, "broken", cycle))
    return found


def _rebound(source: SignatureSource, target: str) -> list[str]:
    """Classes along the MRO whose name their module binds again inside a module-level
    ``if`` / loop / ``with``: which class Python keeps is not evaluated."""
    resolve: Callable[[str], Any] = getattr(source, "resolve_class", lambda t: None)
    root = getattr(source, "root", None)
    out: list[str] = []
    for cls in source.mro(target):
        found = resolve(cls)
        if found is None or found[1].name not in found[0].nested:
            continue
        module, node = found
        rel = module.path.relative_to(root) if root is not None else module.path
        out.append(
            f"{rel}:{module.nested[node.name]}: {node.name} is bound again inside a module-level "
            "`if` / loop / `with`: which class Python keeps is not evaluated"
        )
    return out


def _unbound_bases(source: SignatureSource, target: str) -> list[str]:
    """Bases named by a name nothing in their module binds, and that no ``from m import *``
    there provides (m's ``__all__`` leaves it out, or it is private): a NameError on import."""
    resolve: Callable[[str], Any] = getattr(source, "resolve_class", lambda t: None)
    exports: Callable[[str, str], bool] = getattr(source, "star_exports", lambda m, n: True)
    module_of: Callable[[str], Any] = getattr(source, "module", lambda name: None)
    out: list[str] = []
    for cls in source.mro(target):
        found = resolve(cls)
        if found is None:
            continue
        module, node = found
        for expr in node.bases:
            name = expr.id if isinstance(expr, ast.Name) else ""
            if not name or name in module.bound or hasattr(builtins, name):
                continue
            if any(module_of(m) is None or exports(m, name) for m in module.stars):
                continue  # a star import from outside the tree may bind it
            stars = f" (`from {', '.join(module.stars)} import *` does not export it)"
            root = getattr(source, "root", None)
            rel = module.path.relative_to(root) if root is not None else module.path
            out.append(
                f"{rel}:{node.lineno}: class {node.name}'s base {name} is not "
                f"bound{stars if module.stars else ''}: a NameError on import"
            )
    return out


def _cycle(source: SignatureSource, start: str) -> str:
    """Import ``start`` as Python would, following module-level ``from m import names`` in
    order: a name taken from a module still being imported (a cycle) must be bound above the
    line where that module paused, else ImportError. Returns what fails ("": none)."""
    module_of: Callable[[str], Any] = getattr(source, "module", lambda name: None)
    paused: dict[str, int] = {}  # module being imported -> the line it is importing from
    done: set[str] = set()

    def run(name: str, depth: int = 0) -> str:
        parsed = module_of(name)
        if parsed is None or depth > 30:
            return ""
        for line, other, names in parsed.from_imports:
            if other in paused:  # partly initialised: only what is bound above its pause
                bound = {n for n, seen in module_of(other).timeline.items()
                         if any(at < paused[other] for at, _ in seen)}  # fmt: skip
                lacking = [n for n in names if n != "*" and n not in bound]
                if lacking and module_of(f"{other}.{lacking[0]}") is None:
                    return (
                        f"{name} (line {line}) imports {', '.join(lacking)} from {other}, "
                        f"which is still being imported (paused at line {paused[other]}): "
                        "a circular import, ImportError"
                    )
                continue
            if other in done or module_of(other) is None:
                continue
            paused[name] = line
            failed = run(other, depth + 1)
            del paused[name]
            if failed:
                return failed
        done.add(name)
        return ""

    return run(start)


def block_hooks_without_blocks(
    source: SignatureSource, target: str, facts: PlanFacts, archs: tuple[str, ...]
) -> Finding | None:
    """A class with the block-output hooks but no ``output_tokens_per_step > 1``: the plugin
    plans it as a token model and keeps one token per row of each block."""
    if facts.block_output or not source.complete:
        return None
    hooks = [found for m in ("release_request", "release_persistent_capture")
             if (found := find_method(source, target, m)) is not None]  # fmt: skip
    if len(hooks) < 2:
        return None
    doubt = next((h.unresolved for h in hooks if h.unresolved), "")
    if doubt:  # the hooks may or may not be there (source_shape): not known to be broken
        return Finding(target, archs, "output_tokens_per_step", "unresolved",
                       f"whether the class defines the block-output hooks: {doubt}")  # fmt: skip
    return Finding(
        target,
        archs,
        "output_tokens_per_step",
        "broken",
        "the class defines release_request and release_persistent_capture (the block-output "
        "hooks) but its model_capabilities declare no output_tokens_per_step > 1: the plugin "
        "plans a token model, so a block returned per row would be read as one token",
    )
