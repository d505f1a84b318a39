"""Which modules of the tree importing a module runs: every parent package's ``__init__``
first (P1-P4), then each module a module-level import names (P5-P7), transitively. A
failure in any of them stops the import of the target as surely as one in its own module,
whether or not the checker looked a class up there (a skeleton, whose bodies are flattened,
looks fewer up)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

_LIMIT = 5000  # modules: a guard against a pathological tree, far above a real model's


def import_closure(names: Iterable[str], load: Callable[[str], Any]) -> list[str]:
    """``names`` and the modules importing them runs; ``load(name)`` is the reader's lookup
    (a ParsedModule, or None for a module the tree lacks or cannot read)."""
    queue = sorted(set(names), reverse=True)
    seen: set[str] = set()
    while queue and len(seen) < _LIMIT:
        name = queue.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        queue += [".".join(parts[:i]) for i in range(1, len(parts))]
        module = load(name)
        for _, imported, beyond in getattr(module, "module_imports", []):
            if not beyond:
                queue.append(imported)
    return sorted(seen)
