"""The two ways the host stub refuses work, worded after real ttnn on a host with no chips.

Real ttnn (0.81.1) raises ``RuntimeError`` ("TT_FATAL ... No chips detected in the cluster") from
anything that probes the cluster, and ``TypeError`` from calls that take a device handle when
handed anything else, which is all a chipless host can hand them. The stub keeps both types so
that code exercised here sees the same exceptions it would see on a chipless tt-metal host.
"""

from __future__ import annotations

_WHERE = "ttnn host stub (host_stubs/ttnn; tt-metal is not installed)"


def no_chips(name: str) -> RuntimeError:
    """Error for a call that would have to reach Tenstorrent hardware."""
    return RuntimeError(
        f"{name}: No chips detected in the cluster. This is the {_WHERE}: it answers only "
        "device-independent names, and any call that would reach a device raises."
    )


def not_a_device(name: str, value: object) -> TypeError:
    """Error for a call that takes a MeshDevice, which the stub can never produce."""
    return TypeError(
        f"{name}(): incompatible function arguments: expected ttnn.MeshDevice, got "
        f"{type(value).__name__}. The {_WHERE} cannot open a mesh device."
    )


def require(name: str, arg: str, value: object, expected: type, allow_none: bool = False) -> None:
    """Reject an argument of the wrong type the way real ttnn's bindings do, before any device
    probe, so a caller passing e.g. a string where an enum belongs fails here as it would there."""
    if value is None and allow_none:
        return
    if not isinstance(value, expected):
        raise TypeError(
            f"{name}(): incompatible function arguments: {arg} must be "
            f"{expected.__name__}{' or None' if allow_none else ''}, got {value!r}"
        )
