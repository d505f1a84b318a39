"""Bases the checker cannot read, kept in the MRO where Python puts them.

A base from outside the checkout (tenstorrent/tt-transformers' ``GeneratorBase``, a ``models.*``
module the checkout lacks) or one given by an expression (``with_trace_capture(Base)``) is an
opaque entry of the MRO (``?`` + what names it): a method or fact looked up past it may be
defined there, so it is unresolved, never the next class's (a tracing mixin listed first
overrides ``decode_forward``), nor "missing". Bases that define none of the names the plugin
reads (``object``, builtins, ``typing`` / ``abc``, vLLM's interface mixins, ``torch``) are left
out. The MRO ends with ``object``, whose ``__init__`` takes no arguments: a cooperative
``super().__init__(**kwargs)`` with nothing left binds, one with keywords is a ``TypeError``.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from collections.abc import Callable
from typing import Any, Literal, TypeVar

_Found = TypeVar("_Found")
OPAQUE = "?"  # prefix of an MRO entry the checker cannot read
LIBRARY_BASE = "!"  # prefix of a library base (while linearising only)
OBJECT = "builtins:object"
# Modules whose classes define none of the methods or facts the plugin reads.
LIBRARY = ("vllm.", "typing:", "typing_extensions:", "abc:", "torch.", "torch:", "builtins:",
           "types:", "enum:", "collections:", "dataclasses:")  # fmt: skip


def base_entries(reader: Any, target: str) -> list[str]:
    """``target``'s bases as MRO entries: each class the reader holds, an opaque entry for each
    base it cannot read (in the written order), a library entry for library bases."""
    found = reader.resolve_class(target)
    if found is None:
        return []
    module, node = found
    out: list[str] = []
    for expr in node.bases:
        ref = reader._class_ref(module, expr, before=node.lineno)
        canonical = reader.canonical(ref) if ref else None
        if canonical is not None:
            out.append(canonical)
        elif ref is not None:
            out.append((LIBRARY_BASE if ref.startswith(LIBRARY) else OPAQUE) + ref)
        elif not (isinstance(expr, ast.Name) and hasattr(builtins, expr.id)):
            out.append(OPAQUE + ast.unparse(expr))  # a call, a subscript of one, ...
    return out


def linearize(start: str, bases: Callable[[str], list[str]], c3: Any) -> list[str]:
    """The MRO of ``start``: C3 over ``bases``, library bases left out; ``object`` last when
    none was there (a library class, ``torch.nn.Module``, may define ``__init__``)."""
    order = c3(start, lambda c: [] if c.startswith((OPAQUE, LIBRARY_BASE)) else bases(c))
    library = [e for e in order if e.startswith(LIBRARY_BASE)]
    return [e for e in order if e not in library] + ([] if library else [OBJECT])


def opaque(entry: str) -> bool:
    return entry.startswith(OPAQUE)


def known(found: Any) -> bool:
    """A method lookup found a method the checker reads (not an opaque base's maybe)."""
    return found is not None and not opaque(found.owner)


def describe(entry: str) -> str:
    ref = entry[len(OPAQUE) :]
    module, _, name = ref.rpartition(":")
    if ref.startswith("models."):  # a tt-metal base the checkout lacks
        return f"the base {name} ({module}) is not in this checkout"
    return f"the base {ref} is not read (from outside tt-metal, or not a class name)"


def entry_method(
    entry: str, method: str, found_method: Callable[..., _Found], any_signature: Any
) -> _Found | None:
    """The ``FoundMethod`` lookup stops at for an opaque entry (unresolved) or ``object``'s
    ``__init__`` (None for anything else ``object`` holds: not a method the plugin calls)."""
    if opaque(entry):
        why = f"{describe(entry)}; it comes first in the MRO, so it may define {method}"
        return found_method(entry, method, any_signature, "(not read)", unresolved=why)
    if entry == OBJECT and method == "__init__":
        return found_method(entry, method, inspect.Signature(), "object.__init__")
    return None


def unplanned(maybe: Any, lone: str) -> tuple[Literal["unresolved", "absent"], str] | None:
    """The finding of a method the plugin does not plan for the class's facts: one an opaque
    base may define (``maybe``) is unresolved, since the plugin would call it; a read-back hook
    without its pair (``lone``) is absent."""
    if maybe is not None and not known(maybe):
        return "unresolved", f"{maybe.unresolved}: the plugin calls it where defined"
    return ("absent", lone) if lone else None


def hidden_fact(reader: Any, target: str, name: str) -> str:
    """Why the class attribute ``name`` of ``target`` may not be what the checker read: an
    opaque base comes before every class that declares it ("" when none does, or an
    ``__init__`` sets it on the instance)."""
    classes = [reader.resolve_class(e) for e in reader.mro(target) if not opaque(e)]
    for found in classes:  # `self.name = ...` in an __init__ is read first (attribute_expr)
        inits = [d for d in found[1].body if isinstance(d, ast.FunctionDef)
                 and d.name == "__init__"] if found else []  # fmt: skip
        if any(isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name)
               and t.value.id == "self" for d in inits for n in ast.walk(d)
               if isinstance(n, ast.Assign) for t in n.targets):  # fmt: skip
            return ""
    for entry in reader.mro(target):
        if opaque(entry):
            return f"{describe(entry)}; it comes first in the MRO, so it may declare {name}"
        found = reader.resolve_class(entry)
        if found is None:
            continue
        if any(assigns(item, name) for item in found[1].body):
            return ""
    return ""


def assigns(item: ast.stmt, name: str) -> bool:
    """``item`` is a class-body assignment of ``name`` (plain or annotated)."""
    targets = (
        item.targets if isinstance(item, ast.Assign)
        else [item.target] if isinstance(item, ast.AnnAssign) else []
    )  # fmt: skip
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)
