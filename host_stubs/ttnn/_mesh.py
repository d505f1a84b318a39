"""MeshShape (a device-independent value type), MeshDevice, and opening/closing a mesh.

MeshShape follows real ttnn 0.81.1 (``ttnn._ttnn.multi_device.MeshShape``) where it is easy to
get wrong in portable code:
- ``==`` / ``!=`` accept only another MeshShape; comparing with a tuple raises TypeError.
- hashing is by identity (nanobind keeps ``object.__hash__``): two equal shapes are *not* the
  same dict key or set member.
- no ``len()``, no ordering, no slicing, no pickling or copying; an out-of-range index raises
  RuntimeError (a TT_THROW), not IndexError; negative indices past the rank (down to -4) give 1.
"""

from __future__ import annotations

import collections.abc as _abc
import math as _math
import operator as _operator

from ._errors import no_chips as _no_chips
from ._errors import not_a_device as _not_a_device
from .device import DEFAULT_L1_SMALL_SIZE as _DEFAULT_L1_SMALL_SIZE
from .device import DEFAULT_TRACE_REGION_SIZE as _DEFAULT_TRACE_REGION_SIZE
from .device import DispatchCoreConfig as _DispatchCoreConfig

_UINT32_MAX = 2**32 - 1
_PADDED_RANK = 4
_OVERLOADS = (
    "__init__(self, s0: int, s1: int)",
    "__init__(self, s0: int, s1: int, s2: int)",
    "__init__(self, shape: Sequence[int])",
)


def _dim(value: object) -> int | None:
    """A dimension as real ttnn's uint32 argument accepts it (ints incl. bool and numpy ints,
    0..2**32-1), or None if it would not."""
    try:
        dim = _operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None
    return dim if 0 <= dim <= _UINT32_MAX else None


def _bind(
    names: tuple[str, ...], args: tuple[object, ...], kwargs: dict[str, object]
) -> list[object] | None:
    """Bind call arguments to one overload's parameter names, or None if they do not fit."""
    if len(args) > len(names):
        return None
    bound = dict(zip(names, args, strict=False))  # args may be shorter
    for key, value in kwargs.items():
        if key not in names or key in bound:
            return None
        bound[key] = value
    if len(bound) != len(names):
        return None
    return [bound[name] for name in names]


def _as_sequence(value: object) -> list[object] | None:
    if isinstance(value, MeshShape):
        return list(value)
    if isinstance(value, (str, bytes, bytearray, _abc.Mapping)):
        return None
    # A sequence as nanobind's caster sees one (list, tuple, range, numpy array...), not a bare
    # iterator: real ttnn rejects MeshShape(iter([1, 8])).
    if not (hasattr(type(value), "__len__") and hasattr(type(value), "__getitem__")):
        return None
    return list(value)  # type: ignore[call-overload]


def _parse_dims(args: tuple[object, ...], kwargs: dict[str, object]) -> tuple[int, ...]:
    for names in (("s0", "s1"), ("s0", "s1", "s2")):
        values = _bind(names, args, kwargs)
        if values is not None:
            dims = [_dim(v) for v in values]
            if all(d is not None for d in dims):
                return tuple(dims)  # type: ignore[arg-type]
    values = _bind(("shape",), args, kwargs)
    items = _as_sequence(values[0]) if values is not None else None
    if items is not None:
        dims = [_dim(v) for v in items]
        if all(d is not None for d in dims):
            if not dims:
                raise RuntimeError("MeshShape cannot have 0 dimension.")
            return tuple(dims)  # type: ignore[arg-type]
    given = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    raise TypeError(
        "MeshShape.__init__(): incompatible function arguments (dimensions are non-negative "
        f"ints below 2**32). Supported: {'; '.join(_OVERLOADS)}. Invoked with: ({given})"
    )


class MeshShape:
    """Shape of a mesh device: MeshShape(rows, cols), MeshShape(s0, s1, s2) or MeshShape(seq)."""

    __slots__ = ("_dims",)

    def __init__(self, *args: object, **kwargs: object) -> None:
        self._dims = _parse_dims(args, kwargs)

    def dims(self) -> int:
        return len(self._dims)

    def mesh_size(self) -> int:
        return _math.prod(self._dims)

    def __getitem__(self, index: int) -> int:
        try:
            i = _operator.index(index)
        except TypeError:
            raise TypeError(
                f"MeshShape.__getitem__(): index must be an int, got {index!r}"
            ) from None
        n = len(self._dims)
        # Real ttnn reads the shape as if padded to rank 4 with leading ones: for n < 4, indices
        # -4..-(n+1) are valid and give 1, e.g. MeshShape(2, 4)[-3] == 1.
        lowest = -max(n, _PADDED_RANK)
        if not lowest <= i < n:
            raise RuntimeError(f"MeshShape index out of range: {i} not in [{lowest}, {n})")
        return self._dims[i] if i >= -n else 1

    def __iter__(self) -> _abc.Iterator[int]:
        return iter(self._dims)

    def _same_type(self, op: str, other: object) -> MeshShape:
        if not isinstance(other, MeshShape):
            raise TypeError(
                f"MeshShape.{op}(): incompatible function arguments: expected MeshShape, "
                f"got {type(other).__name__}"
            )
        return other

    def __eq__(self, other: object) -> bool:
        return self._dims == self._same_type("__eq__", other)._dims

    def __ne__(self, other: object) -> bool:
        return self._dims != self._same_type("__ne__", other)._dims

    # Identity hash, as in real ttnn; defining __eq__ would otherwise make the type unhashable.
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"MeshShape({list(self._dims)})"

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("cannot pickle 'MeshShape' object")


class MeshDevice:
    """Handle to an open mesh. Only open_mesh_device makes one, so the stub never does."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("ttnn.MeshDevice: no constructor defined! Use ttnn.open_mesh_device().")


def open_mesh_device(
    mesh_shape: MeshShape | None = None,
    l1_small_size: int = _DEFAULT_L1_SMALL_SIZE,
    trace_region_size: int = _DEFAULT_TRACE_REGION_SIZE,
    num_command_queues: int = 1,
    dispatch_core_config: _DispatchCoreConfig | None = None,
    offset: object | None = None,
    physical_device_ids: _abc.Sequence[int] = (),
    worker_l1_size: int = 0,
) -> MeshDevice:
    raise _no_chips("ttnn.open_mesh_device()")


def close_mesh_device(mesh_device: MeshDevice) -> None:
    raise _not_a_device("close_mesh_device", mesh_device)
