"""``ttnn.cluster``: the cluster-type enum and the call that probes the cluster.

Real ttnn exposes this as the attribute ``ttnn.cluster`` (its nanobind submodule
``ttnn._ttnn.cluster``); ``import ttnn.cluster`` fails there, so the stub keeps this module
private and binds it to ``ttnn.cluster`` rather than shipping an importable ``cluster.py``.
"""

from __future__ import annotations

from ._enum import NbEnum as _NbEnum
from ._errors import no_chips as _no_chips


class ClusterType(_NbEnum):
    # Declaration order and values as in ttnn 0.81.1 (values are not contiguous in that order).
    INVALID = 0
    N150 = 1
    N300 = 2
    T3K = 3
    GALAXY = 4
    TG = 5
    P100 = 6
    P150 = 7
    P150_X2 = 8
    P150_X4 = 9
    P150_X8 = 13
    SIMULATOR_WORMHOLE_B0 = 10
    SIMULATOR_BLACKHOLE = 11
    N300_2x2 = 12
    P300 = 14
    SIMULATOR_QUASAR = 15
    BLACKHOLE_GALAXY = 16
    P300_X2 = 17
    CUSTOM = 18


def get_cluster_type() -> ClusterType:
    raise _no_chips("ttnn.cluster.get_cluster_type()")
