"""Readings ``source.CheckoutReader`` delegates: a class-level alias to a base's function
(``decode_forward = Base.decode_forward_text``), what a forward's ``**kwargs`` carries on to
the next method, and the module a method is read in (constants, module functions it hands
the plugin's arguments to)."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Mapping
from typing import Any


def aliased(reader: Any, module: Any, value: ast.expr) -> Any:
    """``Base.f`` in a class body: a plain function, so it binds like a method of the class it
    is assigned in, with the signature (and ``super()``) of the def the lookup on ``Base``
    finds. None when ``Base`` is not a class of the checkout or ``f`` is not a plain def there
    (a staticmethod / classmethod read through the class is another callable)."""
    if not isinstance(value, ast.Attribute):
        return None
    ref = reader._class_ref(module, value.value)
    base = reader.canonical(ref) if ref else None
    if base is None:
        return None
    found = reader.find_method(base, value.attr)
    if found is None or found.kind != "method" or found.unresolved:
        return None
    return found


def carried(extra: Mapping[str, Any], fwd: Any) -> dict[str, Any]:
    """The part of the ``**kwargs`` received (``extra``) that ``fwd`` hands on: without the keys
    it removes or its key filter leaves out, with the keys it sets (a value moved from another
    key keeps what the plugin meant by it)."""
    more = {
        k: v for k, v in extra.items()
        if k not in fwd.dropped and (fwd.keep is None or k in fwd.keep)
    }  # fmt: skip
    moved = dict(fwd.renamed)
    more.update({k: extra.get(moved[k], k) if k in moved else k for k in fwd.added})
    return more


_MAX_DEPTH = 20


class ModuleContext:
    """What ``forwards_of`` asks of the module a method is read in: a module constant's value
    (a key filter's allow-list), and the module function a call hands the plugin's arguments
    to (``allocate_vllm_kv_cache(*args, **kwargs, model=...)``) as a link of the call path."""

    def __init__(self, reader: Any, module: Any) -> None:
        self.reader, self.module = reader, module

    def value(self, expr: ast.expr) -> Any:
        return self.reader._value(self.module, expr)

    def _function(self, module: Any, name: str, depth: int = 0) -> tuple[Any, Any] | None:
        """(module, def) of the module-level function ``name`` (through from-imports)."""
        if name in module.functions:
            return module, module.functions[name]
        source_name, _, other = module.imports.get(name, "").partition(":")
        found = self.reader._module(source_name) if other and depth < _MAX_DEPTH else None
        return self._function(found, other, depth + 1) if found is not None else None

    def function_link(self, expr: ast.Name, hands_all: bool) -> tuple[Any, str]:
        """The module function ``expr`` names, as a link (signature, body, its own forwards);
        else why the checker cannot follow it ("" when it is not a function of the tree's:
        a builtin, a class, or a helper that does not take every argument the method got)."""
        from vllm_tt_plugin.contract.found_method import FoundMethod
        from vllm_tt_plugin.contract.signatures import signature_from_ast
        from vllm_tt_plugin.contract.source_body import body_of, forwards_of

        name = expr.id
        ref = self.reader._class_ref(self.module, expr)
        if hasattr(builtins, name) or (ref and self.reader.resolve_class(ref) is not None):
            return None, ""  # a builtin, or a class of the tree (its __init__: source_scan)
        found = self._function(self.module, name)
        if found is None:
            why = f"it hands its arguments to {name}(...), which the checker cannot read"
            return None, why if hands_all else ""
        module, fn = found
        rel = module.path.relative_to(self.reader.root)

        def resolve(e: ast.expr) -> str | None:
            ref = self.reader._class_ref(module, e)
            return self.reader.canonical(ref) if ref else None

        link = FoundMethod(
            f"{module.name}:{module.name.rpartition('.')[2]}",
            fn.name,
            signature_from_ast(fn, drop_first=False),
            f"{rel}:{fn.lineno}",
            forwards_of(fn, resolve, None, ModuleContext(self.reader, module)),
            body=body_of(fn, resolve, kind="staticmethod"),
            kind="function",  # not a method the fixture pins: bound, not compared
            coroutine=isinstance(fn, ast.AsyncFunctionDef),
            node=fn,
        )
        return link, ""
