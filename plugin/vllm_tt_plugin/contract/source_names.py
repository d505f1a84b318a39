"""Names a module takes from another module of the checkout that does not bind them (round 7,
rt45g V06 / B01 / B02): Python fails at import however the name is reached.

- ``from m import X`` (absolute, relative, ``as``; also in a ``try`` whose handlers do not
  catch ImportError: a missing name raises ImportError, not ModuleNotFoundError) where ``m``
  is in the checkout and binds no ``X`` (after its own ``from n import *`` and with no module
  ``__getattr__``; a submodule ``m.X`` counts): ImportError.
- ``m.X`` evaluated at import where ``m`` is bound to such a module (``import a.b as m``,
  ``from a import b as m``): AttributeError.
- A name module code evaluates that nothing binds, where each ``from n import *`` of the
  module is of a checkout module that binds no such name: NameError.

Whether ``m`` binds ``X`` is only decided where ``m``'s file is the module as written: a
checkout's file, or a skeleton of this tool's format 2 (which keeps every module-level
binding). A placeholder (a module the skeleton tool did not read) or an older, hand-written
skeleton says nothing: there the skeleton tool records the failure it found in the checkout
(``source_py310.HOST_FAILS``), so a skeleton reads as its tree.
"""

from __future__ import annotations

import ast
import builtins
from functools import lru_cache
from pathlib import Path
from typing import Any

from vllm_tt_plugin.contract.source_module import absolute
from vllm_tt_plugin.contract.source_py310 import HostFailure, evaluated, expr_nodes

PLACEHOLDER = "# Placeholder written by"
_PROVENANCE = "# tenstorrent/tt-metal "
_FORMAT_2 = "# skeleton format 2:"
_CATCHING = {"ImportError", "Exception", "BaseException"}
_MODULE_DUNDERS = {
    "__name__", "__file__", "__doc__", "__package__", "__spec__", "__loader__", "__path__",
    "__builtins__", "__annotations__", "__dict__", "__cached__",
}  # fmt: skip
_BUILTINS = frozenset(dir(builtins))


def as_written(path: Path) -> bool:
    """``path`` binds what the module binds: a checkout's file or a format-2 skeleton (not a
    placeholder, not an older skeleton)."""
    try:
        stat = path.stat()
    except OSError:
        return False
    return _as_written(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4096)
def _as_written(path: Path, mtime: int, size: int) -> bool:  # the file as it is now: once
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:2000]
    except OSError:
        return False
    if head.startswith(PLACEHOLDER) or PLACEHOLDER in head[:200]:
        return False
    return _PROVENANCE not in head or _FORMAT_2 in head


def binds(reader: Any, module_name: str, name: str, depth: int = 0) -> bool | None:
    """``module_name`` (a checkout module) binds ``name`` once imported: True / False, None
    when the checker cannot tell (not in the tree, not as written, a module ``__getattr__``,
    code that may bind anything, a star import of a module outside the tree)."""
    module = reader.module(module_name) if depth < 10 else None
    if module is None or not as_written(module.path):
        return None
    if name in module.bound or name in global_names(module):
        return True
    if module.is_package and reader.module_file(f"{module_name}.{name}") is not None:
        return True  # `from pkg import sub` imports the submodule
    if "__getattr__" in module.bound or module.dynamic:
        return None
    for star in module.stars:
        got = _star_binds(reader, star, name, depth + 1)
        if got is not False:
            return got
    return False


def _star_binds(reader: Any, star: str, name: str, depth: int) -> bool | None:
    other = reader.module(star)
    if other is None or other.all_doubt or not as_written(other.path):
        return None
    if other.all_names is not None:
        return name in other.all_names
    if name.startswith("_"):
        return False
    return binds(reader, star, name, depth)


def global_names(module: Any) -> frozenset[str]:
    """Names a function of the module declares ``global`` (bound once it runs)."""
    return _global_names(module.tree) if module.tree is not None else frozenset()


@lru_cache(maxsize=256)
def _global_names(tree: ast.Module) -> frozenset[str]:
    return frozenset(
        n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names
    )


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:
            return True
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(k, ast.Name) and k.id in _CATCHING for k in kinds):
            return True
    return False


def _from_imports(tree: ast.Module) -> list[ast.ImportFrom]:
    """Module-level ``from ... import`` that run on import unguarded against ImportError."""
    out: list[ast.ImportFrom] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.Try) and not _catches_import_error(node):
            out += [s for s in [*node.body, *node.orelse] if isinstance(s, ast.ImportFrom)]
    return out


def _package(module: Any) -> str:
    return str(module.name if module.is_package else module.name.rpartition(".")[0])


def lacking_name(reader: Any, source: str, name: str) -> str:
    """Why ``from source import name`` fails ("" when it binds or cannot be told)."""
    if not source.startswith("models.") or binds(reader, source, name) is not False:
        return ""
    return f"{source} (in this checkout) binds no {name}"


def module_attribute(reader: Any, module: Any, node: ast.Attribute) -> str:
    """Why ``m.X`` fails where ``m`` is a checkout module the module imported ("")."""
    parts: list[str] = []
    value: ast.expr = node
    while isinstance(value, ast.Attribute):
        parts.insert(0, value.attr)
        value = value.value
    if not isinstance(value, ast.Name) or value.id not in module.imports:
        return ""
    ref = str(module.imports[value.id]).replace(":", ".")
    if not ref.startswith("models."):
        return ""
    path = ref.split(".")
    full = [*path, *parts]
    # the longest module prefix in the tree, at least the imported module itself
    for cut in range(len(full) - 1, len(path) - 1, -1):
        head = ".".join(full[:cut])
        if reader.module(head) is None:
            continue
        if binds(reader, head, full[cut]) is False and reader.module_file(
            f"{head}.{full[cut]}"
        ) is None:  # fmt: skip
            return f"{head} (in this checkout) binds no {full[cut]}"
        return ""
    return ""


def name_failures(reader: Any, module: Any) -> list[HostFailure]:
    """What importing ``module`` does with names its checkout modules do not bind."""
    tree: ast.Module | None = module.tree
    if tree is None:
        return []
    out: list[HostFailure] = []
    for node in _from_imports(tree):
        source = absolute(_package(module), node.module, node.level)
        for alias in node.names:
            why = lacking_name(reader, source, alias.name) if alias.name != "*" else ""
            if why:
                out.append(HostFailure(node.lineno, "broken", f"imports {alias.name}: {why} "
                                       "(ImportError on import)"))  # fmt: skip
    everywhere = _all_bound(tree)
    bases = {id(b) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for b in c.bases}
    for expr, sure in evaluated(module, tree.body, lazy=True, sure=True):
        for n in expr_nodes(expr):
            why = ""
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load):
                why = module_attribute(reader, module, n)
                why = f"uses {ast.unparse(n)}: {why} (AttributeError on import)" if why else ""
            elif isinstance(n, ast.Name) and module.stars and id(n) not in bases:
                # a base nothing binds is parity_rules' "does not export" finding
                loaded = isinstance(n.ctx, ast.Load)
                why = _unstarred(reader, module, n.id, everywhere) if loaded else ""
            if why:
                out.append(HostFailure(getattr(n, "lineno", 0), "broken" if sure else
                                       "unresolved", why))  # fmt: skip
                break
    return out


def _unstarred(reader: Any, module: Any, name: str, everywhere: set[str]) -> str:
    if name in everywhere or name in _BUILTINS or name in _MODULE_DUNDERS:
        return ""
    found = [_star_binds(reader, star, name, 0) for star in module.stars]
    if not found or any(f is not False for f in found):
        return ""
    stars = ", ".join(f"`from {s} import *`" for s in module.stars)
    return f"uses {name}, which nothing binds ({stars} does not: NameError on import)"


def _all_bound(tree: ast.Module) -> set[str]:
    """Every name bound anywhere in the module (class bodies, functions, comprehensions)."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name.split(".")[0]) for a in n.names}
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.Global):
            out |= set(n.names)
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            out.add(n.name)
    return out
