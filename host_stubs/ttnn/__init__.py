"""Import-only ``ttnn`` for hosts without tt-metal (hostless CI: ``PYTHONPATH=host_stubs``).

It answers the device-independent names vllm-tt-plugin touches, with real ttnn's names, values
and behaviour (checked against the real wheel by tests/stub_parity), and raises from anything
that would reach a device exactly as real ttnn does on a host with no chips: RuntimeError from
calls that probe the cluster, TypeError from calls that need a MeshDevice handle (none can exist).
So a test that starts to depend on hardware fails here instead of passing against a fake.

Rule for this package: every public (non-underscore) name in a stub module is a claim that the
real module has it too; helpers are imported under underscore aliases.
"""

from . import _cluster as cluster
from ._errors import no_chips as _no_chips
from ._fabric import FabricConfig, FabricReliabilityMode, get_fabric_config, set_fabric_config
from ._mesh import MeshDevice, MeshShape, close_mesh_device, open_mesh_device
from .device import (
    DispatchCoreAxis,
    DispatchCoreConfig,
    DispatchCoreType,
    GetNumAvailableDevices,
    GetNumPCIeDevices,
    ReadDeviceProfiler,
    get_max_worker_l1_unreserved_size,
    synchronize_device,
)

# Real ttnn has no __version__ (its version is importlib.metadata.version("ttnn")); the stub's
# marks it as the stub for anyone printing versions.
__version__ = "0.0.0+host.stub"


def get_num_devices() -> int:
    raise _no_chips("ttnn.get_num_devices()")


def get_device_ids() -> list[int]:
    raise _no_chips("ttnn.get_device_ids()")


def get_num_pcie_devices() -> int:
    raise _no_chips("ttnn.get_num_pcie_devices()")


def get_pcie_device_ids() -> list[int]:
    raise _no_chips("ttnn.get_pcie_device_ids()")


__all__ = [
    "DispatchCoreAxis",
    "DispatchCoreConfig",
    "DispatchCoreType",
    "FabricConfig",
    "FabricReliabilityMode",
    "GetNumAvailableDevices",
    "GetNumPCIeDevices",
    "MeshDevice",
    "MeshShape",
    "ReadDeviceProfiler",
    "close_mesh_device",
    "cluster",
    "device",
    "get_device_ids",
    "get_fabric_config",
    "get_max_worker_l1_unreserved_size",
    "get_num_devices",
    "get_num_pcie_devices",
    "get_pcie_device_ids",
    "open_mesh_device",
    "set_fabric_config",
    "synchronize_device",
]
