"""``ttnn.device``: dispatch-core enums and config, open-time defaults, per-device calls.

Only names that exist in real ``ttnn.device`` live here. ``get_arch_name``, ``is_wormhole_b0``
and ``is_blackhole`` are left out on purpose: on a chipless host real ttnn *returns* ("invalid",
False, False) instead of raising, and a stub answering those would be a fake that works.
"""

from __future__ import annotations

import collections.abc as _abc

from ._enum import NbEnum as _NbEnum
from ._errors import no_chips as _no_chips
from ._errors import not_a_device as _not_a_device
from ._errors import require as _require

# Real values in ttnn 0.81.1: open_mesh_device uses these when the caller gives no size.
DEFAULT_L1_SMALL_SIZE = 0
DEFAULT_TRACE_REGION_SIZE = 0


class DispatchCoreAxis(_NbEnum):
    ROW = 0
    COL = 1


class DispatchCoreType(_NbEnum):
    WORKER = 0
    ETH = 1


class DispatchCoreConfig:
    """Real construction resolves defaults from the cluster's architecture, so it raises on a
    host without chips (after type-checking its arguments); so does the stub's."""

    type: DispatchCoreType
    axis: DispatchCoreAxis

    def __init__(
        self,
        type: DispatchCoreType | None = None,  # `type` is the real keyword name
        axis: DispatchCoreAxis | None = None,
        fabric_tensix_config: object | None = None,
    ) -> None:
        _require("DispatchCoreConfig", "type", type, DispatchCoreType, allow_none=True)
        _require("DispatchCoreConfig", "axis", axis, DispatchCoreAxis, allow_none=True)
        raise _no_chips("ttnn.DispatchCoreConfig()")


def GetNumAvailableDevices() -> int:
    raise _no_chips("ttnn.GetNumAvailableDevices()")


def GetNumPCIeDevices() -> int:
    raise _no_chips("ttnn.GetNumPCIeDevices()")


def get_max_worker_l1_unreserved_size() -> int:
    raise _no_chips("ttnn.get_max_worker_l1_unreserved_size()")


def synchronize_device(
    device: object, cq_id: int | None = None, sub_device_ids: _abc.Sequence[object] = ()
) -> None:
    raise _not_a_device("synchronize_device", device)


def ReadDeviceProfiler(device: object) -> None:
    raise _not_a_device("ReadDeviceProfiler", device)
