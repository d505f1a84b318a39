"""Base class for the stub's copies of ttnn's nanobind enums.

Real ttnn's enums are plain ``enum.Enum`` subclasses (nanobind 2): name lookup through
``Enum[...]`` / ``__members__``, ``.name`` / ``.value``, hashable, no ordering, and *not*
int-like (``int(member)`` raises TypeError, ``member == 2`` is False). A plain Enum gives all of
that; only ``repr`` differs: nanobind prints ``FabricConfig.FABRIC_1D`` where Enum prints
``<FabricConfig.FABRIC_1D: 2>``.
"""

from __future__ import annotations

import enum


class NbEnum(enum.Enum):
    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"
