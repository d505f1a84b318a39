"""Fabric enums and the fabric set-up calls (real ttnn: ``ttnn._ttnn.fabric``)."""

from __future__ import annotations

from ._enum import NbEnum as _NbEnum
from ._errors import no_chips as _no_chips
from ._errors import require as _require


class FabricConfig(_NbEnum):
    # Declaration order as in ttnn 0.81.1, which is not value order.
    DISABLED = 0
    FABRIC_1D = 2
    FABRIC_1D_RING = 3
    FABRIC_1D_NEIGHBOR_EXCHANGE = 1
    FABRIC_2D = 4
    FABRIC_2D_TORUS_XY = 7
    FABRIC_2D_TORUS_X = 5
    FABRIC_2D_TORUS_Y = 6
    CUSTOM = 8


class FabricReliabilityMode(_NbEnum):
    STRICT_INIT = 0
    RELAXED_INIT = 1
    DYNAMIC_RECONFIG = 2


def set_fabric_config(
    config: FabricConfig,
    reliability_mode: FabricReliabilityMode = FabricReliabilityMode.STRICT_INIT,
    num_planes: int | None = None,
    fabric_tensix_config: object | None = None,
    fabric_udm_mode: object | None = None,
    fabric_manager_mode: object | None = None,
    router_config: object | None = None,
) -> None:
    # Real ttnn type-checks its arguments before it probes the cluster: a fabric name passed as a
    # string fails with TypeError there, so it does here too. The last four keep real ttnn's
    # keyword names; their enums/config types are not part of the stub.
    _require("set_fabric_config", "config", config, FabricConfig)
    _require("set_fabric_config", "reliability_mode", reliability_mode, FabricReliabilityMode)
    _require("set_fabric_config", "num_planes", num_planes, int, allow_none=True)
    raise _no_chips("ttnn.set_fabric_config()")


def get_fabric_config() -> FabricConfig:
    raise _no_chips("ttnn.get_fabric_config()")
