"""What importing the target's modules does before any call is made: the rules where Python
fails (or binds something else) at import time, read from the modules the checker looked up.

- ``from m import *`` after an explicit import of a name rebinds it when ``m`` exports it (the
  last binding wins, A27); ``__all__`` as module code leaves it (``+=``, ``.append``,
  ``.extend``: ``source_module``); a name ``__all__`` lists that the module never binds is an
  AttributeError at ``import *`` (P05); an ``__all__`` changed by code the checker does not
  evaluate leaves what ``import *`` binds unknown (unresolved).
- A dotted base ``pkg.sub.Class`` whose submodule nothing imported is an AttributeError (Z7;
  a name used before it is bound, G06 / G07, is ``source_import``'s); ``from .....x`` past the
  top-level package is an ImportError (A50); a module-level import of a ``models.*`` module the
  checkout lacks is a ModuleNotFoundError (P06).
- tt-metal's host Python is 3.10 (docs/TT_HOST.md): a module using 3.11+ syntax does not
  compile there, and a module-level import of a 3.11+ standard-library name fails (A38); any
  other use of one on import, and ``sys.version_info`` gates, are ``source_py310``'s.

Skeleton trees (``contract.skeleton``) omit modules the checker does not read. A skeleton
written by this version records that it keeps every imported tt-metal module (a placeholder
file when unread: ``IMPORTS_KEPT`` in its header), so a module it lacks is one the checkout
lacks. An older skeleton (the shipped trees) left unread modules out, so there a missing module
says nothing and is not checked: each was written from a checkout the checker had read.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_tt_plugin.contract.parsed_module import ParsedModule
from vllm_tt_plugin.contract.source_module import decode_source
from vllm_tt_plugin.contract.source_names import name_failures
from vllm_tt_plugin.contract.source_py310 import (
    host_failures,
    parse_recorded,
    pep646_star,
    pep701_fstring,
    recorded_failures,
)
from vllm_tt_plugin.contract.source_pyversion import HOST_PYTHON
from vllm_tt_plugin.contract.source_stdlib import newer_stdlib

TT_METAL_PACKAGE = "models."
# A skeleton file's header records where it comes from (hand-written and tool-written alike).
_PROVENANCE = re.compile(r"^# tenstorrent/tt-metal \S+ @ [0-9a-f]{40}$", re.MULTILINE)
# Written into the header of a skeleton whose tool keeps returns, yields and a placeholder for
# every tt-metal module the kept modules import.
IMPORTS_KEPT = "# skeleton format 2: returns, yields and imported tt-metal modules kept"
NOT_PY310 = "# not Python 3.10 syntax:"
# Standard-library names added after Python 3.10, module -> names (None: the whole module is
# new): derived from the interpreters by tools/gen_py310_absent.py (source_py310).
NEWER_STDLIB = newer_stdlib()


@dataclass(frozen=True)
class ImportFailure:
    """A module on the target's path that fails (``broken``) or may fail (``unresolved``) to
    import, and why."""

    status: str
    detail: str


def newer_syntax(text: str) -> str:
    """Why ``text`` does not compile on the host's Python 3.10 ("" when it does; a skeleton
    records it as a ``NOT_PY310`` comment line, since it keeps no statement bodies)."""
    for line in text.splitlines():
        if line.startswith(NOT_PY310):
            return line[len(NOT_PY310) :].strip()
    try:
        tree = ast.parse(text, feature_version=HOST_PYTHON)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except (ValueError, MemoryError, RecursionError):
        return ""  # the reader reports a module that does not parse
    star = pep646_star(tree)
    if star:
        return f"line {star}: a star in a subscript or *args annotation (PEP 646)"
    quote = pep701_fstring(text)  # found only where a 3.12+ interpreter runs the checker
    return f"line {quote}: an f-string reusing its own quote inside (PEP 701)" if quote else ""


def skeleton_format(path: Path) -> int:
    """0: a checkout's file; 1: a skeleton of an older tool; 2: a skeleton keeping imports."""
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:2000]
    except OSError:
        return 0
    if not _PROVENANCE.search(head):
        return 0
    return 2 if IMPORTS_KEPT in head else 1


def star_binds(reader: Any, module_name: str, name: str, depth: int = 0) -> bool:
    """``from module_name import *`` binds ``name`` (the module is in the tree): listed in its
    ``__all__``, or (with none) a public name its code binds or its own ``import *`` brings."""
    module: ParsedModule | None = reader.module(module_name)
    if module is None or depth > 10:
        return False
    if module.all_names is not None:
        return name in module.all_names
    if name.startswith("_"):
        return False
    if name in module.bound:
        return True
    return any(star_binds(reader, m, name, depth + 1) for m in module.stars)


def later_star(reader: Any, module: ParsedModule, name: str) -> str | None:
    """The module of the last ``from m import *`` below the name's last binding that binds it
    again (Python keeps that one), or None."""
    last = module.timeline.get(name, [(0, None)])[-1][0]
    for line, star in reversed(module.star_lines):
        if line > last and star_binds(reader, star, name):
            return star
    return None


def _rel(reader: Any, module: ParsedModule) -> str:
    root = getattr(reader, "root", None)
    return str(module.path.relative_to(root)) if root is not None else str(module.path)


def import_failures(reader: Any, target: str) -> list[ImportFailure]:
    """Every import-time failure along the modules the checker looked up for ``target``."""
    touched: Callable[[], list[ParsedModule]] = getattr(reader, "touched_modules", lambda: [])
    if not hasattr(reader, "root"):
        return []
    out: list[ImportFailure] = []
    for module in touched():
        rel = _rel(reader, module)
        out += _syntax_and_stdlib(module, rel)
        live = [*host_failures(module), *name_failures(reader, module)]
        recorded = [parse_recorded(r) for r in module.recorded]  # a skeleton's, read above
        seen = {f.why for f in live}  # a statement the skeleton kept is found again: once
        out += [
            ImportFailure(f.status, f"{rel}:{f.line} {f.why}: the module does not import on "
                          "Python 3.10 (tt-metal's host Python)")
            for f in [*live, *(r for r in recorded if r is not None and r.why not in seen)]
        ]  # fmt: skip
        out += _exports(reader, module, rel)
        out += _missing_modules(reader, module, rel)
    out += _premature(reader, target)
    return list(dict.fromkeys(out))


def _syntax_and_stdlib(module: ParsedModule, rel: str) -> Iterator[ImportFailure]:
    if module.py310 is None:  # read once, as the import decodes it (the file parsed already)
        try:
            text = decode_source(module.path.read_bytes(), rel)
        except (OSError, ValueError):
            text = ""
        module.py310 = newer_syntax(text)
        module.recorded = recorded_failures(text)
    if module.py310:
        yield ImportFailure(
            "broken", f"{rel}: {module.py310}: not Python 3.10 syntax (tt-metal's host Python): "
            "the module does not compile on Python 3.10"
        )  # fmt: skip
    for line, source, names in module.from_imports:
        newer = NEWER_STDLIB.get(source, frozenset())
        lacking = [n for n in names if newer is None or n in newer]
        if lacking:
            yield ImportFailure("broken", (
                f"{rel}:{line} imports {', '.join(lacking)} from {source}, which Python 3.10 "
                "(tt-metal's host Python) does not have: ImportError on Python 3.10"
            ))  # fmt: skip
    for line, source, _ in module.module_imports:
        if source in NEWER_STDLIB and NEWER_STDLIB[source] is None:
            yield ImportFailure("broken", (
                f"{rel}:{line} imports {source}, new in Python 3.11: ModuleNotFoundError on "
                "Python 3.10 (tt-metal's host Python)"
            ))  # fmt: skip


def _exports(reader: Any, module: ParsedModule, rel: str) -> Iterator[ImportFailure]:
    """The modules ``module`` star-imports: a stale ``__all__`` entry, or one not evaluated."""
    for line, star in module.star_lines:
        other: ParsedModule | None = reader.module(star)
        if other is None:
            continue
        orel = _rel(reader, other)
        if other.all_doubt:
            yield ImportFailure("unresolved", (
                f"{rel}:{line} does `from {star} import *`, whose __all__ is set or changed by "
                f"code the checker does not evaluate [{orel}:{other.all_doubt}]: which names it "
                "binds is not known"
            ))  # fmt: skip
        if other.all_names is None or other.stars or "__getattr__" in other.bound:
            continue  # names another star import or a module __getattr__ may provide
        for name in other.all_names:
            submodule = other.is_package and reader.module_file(f"{star}.{name}") is not None
            if name not in other.bound and not submodule:
                yield ImportFailure("broken", (
                    f"{rel}:{line} does `from {star} import *`, whose __all__ lists {name!r}, "
                    f"which {orel} never binds: AttributeError on import"
                ))  # fmt: skip


def module_exists(root: Path, name: str) -> bool:
    """A module or a (regular or namespace) package of that dotted name under ``root``."""
    base = root.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or base.is_dir()


def _missing_modules(reader: Any, module: ParsedModule, rel: str) -> Iterator[ImportFailure]:
    root: Path = reader.root
    kind = -1
    for line, name, beyond in module.module_imports:
        if beyond:
            yield ImportFailure("broken", (
                f"{rel}:{line}: a relative import beyond the top-level package (ImportError on "
                "import)"
            ))  # fmt: skip
            continue
        if not name.startswith(TT_METAL_PACKAGE) or module_exists(root, name):
            continue
        kind = skeleton_format(module.path) if kind < 0 else kind
        if kind != 1:  # an older skeleton left unread modules out: not recorded, not checked
            yield ImportFailure("broken", (
                f"{rel}:{line} imports {name}, which is not in this checkout: "
                "ModuleNotFoundError on import"
            ))  # fmt: skip


def _premature(reader: Any, target: str) -> list[ImportFailure]:
    """Dotted bases along the MRO through a submodule nothing imported (a name used before it
    is bound, G06 / G07, is ``source_import.import_time_raises``)."""
    classes = [found for found in map(reader.resolve_class, reader.mro(target)) if found]
    failing = (
        _dotted_base(reader, module, node, base, _rel(reader, module))
        for module, node in classes
        for base in node.bases
    )
    return [f for f in failing if f is not None]


def _dotted_base(
    reader: Any, module: ParsedModule, node: ast.ClassDef, base: ast.expr, rel: str
) -> ImportFailure | None:
    """``import a.b.c`` then ``class C(a.b.d.Base)``: ``a.b.d`` is an attribute of ``a.b``
    only once some import loaded it; nothing the import of this module runs does."""
    parts: list[str] = []
    value: ast.expr = base
    while isinstance(value, ast.Attribute):
        parts.insert(0, value.attr)
        value = value.value
    if not isinstance(value, ast.Name) or len(parts) < 2:
        return None
    if module.imports.get(value.id) != value.id:  # only `import a.b.c` (binds package `a`)
        return None
    root: Path = reader.root
    path = [value.id, *parts[:-1]]
    loaded = _loaded(reader, module, node.lineno)
    for i in range(1, len(path)):
        name = ".".join(path[: i + 1])
        if not module_exists(root, name):
            return None  # not a module: an attribute (a class, a constant) the checker follows
        parent = reader.module(".".join(path[:i]))
        if name in loaded or (parent is not None and path[i] in parent.bound):
            continue
        return ImportFailure("broken", (
            f"{rel}:{node.lineno}: class {node.name}'s base {ast.unparse(base)}: nothing "
            f"imported before it loads {name}, so {'.'.join(path[:i])} has no attribute "
            f"{path[i]!r}: AttributeError on import"
        ))  # fmt: skip
    return None


def _loaded(reader: Any, module: ParsedModule, line: int) -> set[str]:
    """The tt-metal modules loaded once ``module`` has run up to ``line``: its packages, its
    own imports above ``line``, and (transitively) what each of those imports."""
    root: Path = reader.root
    parts = module.name.split(".")
    queue = [".".join(parts[: i + 1]) for i in range(len(parts) - 1)]
    for at, name, _ in module.module_imports:
        if at < line:
            bits = name.split(".")
            queue += [".".join(bits[: i + 1]) for i in range(len(bits))]
    seen: set[str] = set()
    while queue and len(seen) < 500:
        name = queue.pop()
        if name in seen or not module_exists(root, name):
            continue
        seen.add(name)
        other: ParsedModule | None = reader.module(name) if name != module.name else None
        for _, imported, _ in other.module_imports if other is not None else []:
            bits = imported.split(".")
            queue += [".".join(bits[: i + 1]) for i in range(len(bits))]
    return seen


# Decorators that leave the signature Python calls as written, each trusted only when it
# resolves to this library object: (module, name, called with no arguments). torch's wrapper
# calls func(*args, **kwargs) in the context (pytorch/pytorch torch/utils/_contextlib.py @
# 78c267385f7b75b0e8f9d82d8fc691ee4d34bf72, context_decorator).
SIGNATURE_PRESERVING = {
    ("typing", "override", False), ("typing_extensions", "override", False),
    ("typing", "final", False), ("typing_extensions", "final", False),
    ("abc", "abstractmethod", False),
    ("torch", "no_grad", True), ("torch", "inference_mode", True),
}  # fmt: skip
_BUILTIN_DECORATORS = ("staticmethod", "classmethod")


def trusted_decorator(reader: Any, module: ParsedModule, decorator: ast.expr) -> bool:
    """``decorator`` is one of ``SIGNATURE_PRESERVING`` (or the builtin staticmethod /
    classmethod), followed through the imports of the tree: a same-named local shim, an import
    inside a ``try`` whose ``except`` may bind another object (Python 3.10 runs the handler for
    3.11+ names), or any other decorator is not trusted."""
    called = isinstance(decorator, ast.Call)
    if isinstance(decorator, ast.Call) and (decorator.args or decorator.keywords):
        return False
    expr = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(expr, ast.Name) and expr.id in _BUILTIN_DECORATORS and not called:
        return expr.id not in module.timeline and expr.id not in module.bound
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        head = module.imports.get(expr.value.id)  # `import torch` / `import typing as t`
        if head is None or ":" in head or expr.value.id in module.guarded:
            return False
        return (head, expr.attr, called) in SIGNATURE_PRESERVING
    if not isinstance(expr, ast.Name):
        return False
    name, current = expr.id, module
    for _ in range(10):  # `from a import override`, a re-exporting `a`, ...
        ref = current.imports.get(name)
        if name in current.guarded:  # trusted when every import the try binds it by is
            refs = _shim_refs(current, name)
            return bool(refs) and all(
                reader.module(r.partition(":")[0]) is None
                and (*r.split(":"), called) in SIGNATURE_PRESERVING
                for r in refs
            )
        if ref is None or ":" not in ref:
            return False
        source, _, name = ref.partition(":")
        following: ParsedModule | None = reader.module(source)
        if following is None:
            return (source, name, called) in SIGNATURE_PRESERVING
        current = following
    return False


def _shim_refs(module: ParsedModule, name: str) -> list[str]:
    """``module:attr`` of every binding of ``name`` in the module-level ``try`` statements
    that bind it (``try: from typing import override`` / ``except ImportError: from
    typing_extensions import override``); [] when one of them is not a plain from-import."""
    refs: list[str] = []
    for node in module.tree.body if module.tree is not None else []:
        if not isinstance(node, ast.Try):
            continue
        branches = [*node.body, *node.orelse, *(s for h in node.handlers for s in h.body)]
        for st in ast.walk(ast.Module(body=branches, type_ignores=[])):
            if isinstance(st, ast.ImportFrom) and st.level == 0 and st.module:
                refs += [f"{st.module}:{a.name}" for a in st.names if (a.asname or a.name) == name]
            elif isinstance(st, ast.stmt) and not isinstance(st, ast.Module) and _binds(st, name):
                return []
    return refs


def _binds(st: ast.stmt, name: str) -> bool:
    """``st`` binds ``name`` otherwise than by a from-import."""
    if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return st.name == name
    if isinstance(st, ast.Import):
        return any((a.asname or a.name.split(".")[0]) == name for a in st.names)
    return any(
        isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == name
        for n in ast.walk(st)
        if not isinstance(st, ast.ImportFrom)
    )


def wrapped_builtin(reader: Any, module: ParsedModule, decorators: list[ast.expr]) -> str:
    """Why a trusted decorator stacked above ``@classmethod`` / ``@staticmethod`` fails ("" when
    none does): ``abc.abstractmethod`` cannot mark either object (AttributeError while the class
    body runs, Python 3.10), and torch's context wrapper calls the object it wraps, which a
    classmethod object is not (O03: TypeError on every call)."""
    for i, below in enumerate(decorators):
        if not (isinstance(below, ast.Name) and below.id in _BUILTIN_DECORATORS):
            continue
        if not trusted_decorator(reader, module, below):
            continue
        for above in decorators[:i]:
            if not trusted_decorator(reader, module, above):
                continue
            text = ast.unparse(above)
            if isinstance(above, ast.Call) and below.id == "classmethod":
                return (
                    f"@{text} is stacked above @classmethod: its wrapper calls the classmethod "
                    "object, which is not callable (TypeError: 'classmethod' object is not "
                    "callable, on every call)"
                )
            if not isinstance(above, ast.Call) and text.endswith("abstractmethod"):
                return (
                    f"@{text} is stacked above @{below.id}: it cannot mark a {below.id} object "
                    "(AttributeError while the class body runs: the module does not import)"
                )
    return ""
