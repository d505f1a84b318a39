"""Two small readings ``source.CheckoutReader`` delegates: a class-level alias to a base's
function (``decode_forward = Base.decode_forward_text``), and what a forward's ``**kwargs``
carries on to the next method."""

from __future__ import annotations

import ast
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
