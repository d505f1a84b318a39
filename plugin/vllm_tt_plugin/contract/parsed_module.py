"""One module of a checkout as the checker reads it (``source.parse_module``): its classes,
imports, module-level bindings and what its module code does to them. Its own module so the
fact readers can name it without importing the reader that builds it."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ParsedModule:
    name: str
    path: Path
    is_package: bool
    classes: dict[str, ast.ClassDef]
    imports: dict[str, str]  # local name -> "module" (import) or "module:Name" (from-import)
    assigns: dict[str, ast.expr]  # module-level NAME = value
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # module-level defs
    # (name, attribute) of every ``name.attribute`` in module-level code outside classes and
    # functions: a class attribute set or changed after the class body (``Cls.caps[k] = v``).
    touched: set[tuple[str, str]] = field(default_factory=set)
    stars: list[str] = field(default_factory=list)  # modules of `from m import *`, in order
    # Every module-level binding of a name, in order: (line, ClassDef / FunctionDef / assigned
    # expr / import ref): a base or alias refers to the binding before its own line.
    timeline: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    earlier: dict[str, ast.ClassDef] = field(default_factory=dict)  # "Name@line": rebound since
    # (line, module, names) of module-level imports of the plugin outside a try / except
    plugin_imports: list[tuple[int, str, tuple[str, ...]]] = field(default_factory=list)
    # (line, module, names) of module-level `from module import names` outside a try, in order
    from_imports: list[tuple[int, str, tuple[str, ...]]] = field(default_factory=list)
    stored: dict[tuple[str, str], int] = field(default_factory=dict)  # Class.attr = ... : line
    mutated: dict[str, int] = field(default_factory=dict)  # NAME[k] = v, NAME.update(...): line
    rebound: set[str] = field(default_factory=set)  # names assigned more than once
    all_names: list[str] | None = None  # __all__, when a literal
    bound: set[str] = field(default_factory=set)  # names module code binds in any branch
    nested: dict[str, int] = field(default_factory=dict)  # also bound in an if / loop: line
    star_lines: list[tuple[int, str]] = field(default_factory=list)  # `from m import *`: (line, m)
    py310: str | None = None  # why it does not compile on Python 3.10 ("": it does; None: unread)
    recorded: tuple[str, ...] = ()  # a skeleton's `# fails on Python 3.10:` lines (source_py310)
    guarded: set[str] = field(default_factory=set)  # imported in a `try` an except may rebind
    tree: ast.Module | None = None  # the module as parsed
    # (line, absolute module, level beyond the top-level package) of each module-level import
    # outside a try (`import a.b`, `from a.b import c`): what the import needs to exist.
    module_imports: list[tuple[int, str, bool]] = field(default_factory=list)
    all_doubt: int = 0  # line where code the checker does not evaluate changes __all__
    # name -> [(line, why)]: bound under a condition (``source_import.conditional_bindings``)
    conditional: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    raises: list[Any] = field(default_factory=list)  # source_import.ImportRaise, in order
    dynamic: Any = None  # source_shape.Doubt: module code that may bind anything (exec, ...)
    # NAME passed to a module-level call: (line, the callee as written)
    handed: dict[str, tuple[int, str]] = field(default_factory=dict)
