"""Opening and closing the mesh: a real TT mesh through ttnn, or the host-emulated one.

The real path asks ttnn for the cluster type and the chip count (a host without chips, or with
fewer than the mesh needs, fails here with one line: device/mesh_open.py), resolves the fabric
configuration (hardware default -> model dictionary -> launch overrides), applies it with
``ttnn.set_fabric_config`` unless the mesh is a single device, builds the dispatch core config
and opens the mesh with the TT memory options. The emulated path resolves the same fabric kwargs
(so a bad option fails the same way) but never calls ttnn's device API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_tt_plugin.config import TTOptions
from vllm_tt_plugin.device import startup_reason
from vllm_tt_plugin.device.fabric import describe_fabric_kwargs, resolve_fabric_kwargs
from vllm_tt_plugin.device.mesh_open import (
    ClusterFinding,
    MeshOpenError,
    MeshRequest,
    classify,
    describe,
    too_few_chips,
)
from vllm_tt_plugin.device.watchdog import DeviceTimeoutError, run_bounded
from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.launch.mesh_spec import HardwareFamily, MeshSpec
from vllm_tt_plugin.utils.log import get_logger

logger = get_logger(__name__)

# Closing a mesh (and resetting fabric) takes well under a second on hardware; a device that has
# not closed in this long is wedged, and the process exits without it (docs/RELIABILITY.md).
MESH_CLOSE_TIMEOUT_S = 10.0


@dataclass
class OpenedMesh:
    device: Any
    spec: MeshSpec
    emulated: bool
    fabric_kwargs: dict[str, Any] | None
    fabric_applied: bool


def _cluster_name(ttnn: Any) -> str:
    cluster_type = ttnn.cluster.get_cluster_type()
    return str(getattr(cluster_type, "name", cluster_type))


def _family_from_cluster(name: str, spec: MeshSpec) -> HardwareFamily:
    """The real cluster says which Galaxy (if any) this is; MESH_DEVICE names are a fallback."""
    if name == "BLACKHOLE_GALAXY":
        return HardwareFamily.BLACKHOLE_GALAXY
    if name in ("GALAXY", "TG"):
        return HardwareFamily.WORMHOLE_GALAXY
    return spec.family


def _refused(
    request: MeshRequest, finding: ClusterFinding, exc: BaseException | None = None
) -> MeshOpenError:
    """The one-line error for a mesh ttnn would not open: logged before vLLM's generic start-up
    failure and recorded for the API server's exit message (startup_reason); ttnn's own text
    (a C++ backtrace) only at DEBUG."""
    line = describe(request, finding)
    if exc is not None:
        logger.debug("TT: ttnn's error opening the mesh: %s", exc)
    logger.error("%s", line)
    startup_reason.record(line)
    return MeshOpenError(line)


def _dispatch_core_config(ttnn: Any, options: TTOptions) -> Any:
    if options.dispatch_core_axis is None:
        return ttnn.DispatchCoreConfig()
    axis = (
        ttnn.DispatchCoreAxis.COL
        if options.dispatch_core_axis == "col"
        else (ttnn.DispatchCoreAxis.ROW)
    )
    return ttnn.DispatchCoreConfig(axis=axis)


def _device_params(options: TTOptions) -> dict[str, int]:
    params: dict[str, int] = {}
    for key in ("l1_small_size", "trace_region_size", "worker_l1_size"):
        value = getattr(options, key)
        if value is not None:
            params[key] = value
    return params


def open_mesh(
    spec: MeshSpec,
    options: TTOptions,
    capabilities: ModelCapabilities,
    physical_device_ids: list[int] | None = None,
) -> OpenedMesh:
    import ttnn

    if options.emulated_mesh:
        kwargs = resolve_fabric_kwargs(
            ttnn,
            spec.family,
            spec.num_devices,
            capabilities.fabric_config,
            options.fabric_config,
            options.fabric_reliability_mode,
        )
        logger.info(
            "TT: host-emulated mesh %s %s; fabric (not applied): %s",
            spec.name,
            spec.shape,
            describe_fabric_kwargs(kwargs),
        )
        # Imported here, where the emulated mesh is selected: serving never loads emulation.
        from vllm_tt_plugin.emulation.mesh import EmulatedMeshDevice

        emulated = EmulatedMeshDevice(spec, device_ids=physical_device_ids)
        return OpenedMesh(emulated, spec, True, kwargs, False)

    request = MeshRequest.of(spec, physical_device_ids)
    try:
        cluster = _cluster_name(ttnn)
        found = int(ttnn.GetNumAvailableDevices())
    except RuntimeError as exc:
        raise _refused(request, classify(exc), exc) from None
    short = too_few_chips(request, found, cluster)
    if short is not None:
        raise _refused(request, short)
    family = _family_from_cluster(cluster, spec)
    kwargs = resolve_fabric_kwargs(
        ttnn,
        family,
        spec.num_devices,
        capabilities.fabric_config,
        options.fabric_config,
        options.fabric_reliability_mode,
    )
    if kwargs is not None:
        ttnn.set_fabric_config(**kwargs)
    try:
        open_kwargs: dict[str, Any] = {
            "mesh_shape": ttnn.MeshShape(*spec.shape),
            "dispatch_core_config": _dispatch_core_config(ttnn, options),
            **_device_params(options),
        }
        if physical_device_ids is not None:
            open_kwargs["physical_device_ids"] = physical_device_ids
        opened, device = run_bounded(
            lambda: ttnn.open_mesh_device(**open_kwargs), options.warmup_timeout_s, "tt-mesh-open"
        )
        if not opened:
            raise DeviceTimeoutError(
                f"TT device timeout: opening mesh {spec.name} {spec.shape} did not return within "
                f"the warmup_timeout_s bound of {options.warmup_timeout_s:g} s"
            )
    except Exception as exc:
        if kwargs is not None:
            # Leave the process as it was: a later open (or another model) starts clean.
            ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)
        if isinstance(exc, DeviceTimeoutError):
            startup_reason.record(str(exc))
        elif isinstance(exc, RuntimeError) and not isinstance(exc, MeshOpenError):
            raise _refused(request, classify(exc), exc) from None
        raise
    logger.info(
        "TT: opened mesh %s %s; fabric: %s", spec.name, spec.shape, describe_fabric_kwargs(kwargs)
    )
    return OpenedMesh(device, spec, False, kwargs, kwargs is not None)


def _close(opened: OpenedMesh) -> None:
    if opened.emulated:
        opened.device.close()
        return
    import ttnn

    ttnn.close_mesh_device(opened.device)
    if opened.fabric_applied:
        ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)


def close_mesh(opened: OpenedMesh, bound_s: float = MESH_CLOSE_TIMEOUT_S, why: str = "") -> bool:
    """Close the mesh (and reset fabric the plugin set) within ``bound_s``. True when closed;
    a device that cannot close (or raises closing) is logged and False is returned, so the
    caller can let the process exit anyway."""
    reason = f" ({why})" if why else ""
    try:
        closed, _ = run_bounded(lambda: _close(opened), bound_s, "tt-mesh-close")
    except Exception:
        logger.exception("TT: closing mesh %s%s raised", opened.spec.name, reason)
        return False
    if not closed:
        logger.error(
            "TT: mesh %s did not close within %g s%s; exiting without it",
            opened.spec.name,
            bound_s,
            reason,
        )
        return False
    fabric = "; fabric reset to DISABLED" if opened.fabric_applied else ""
    logger.info("TT: closed mesh %s%s%s", opened.spec.name, fabric, reason)
    return True


def visible_device_ids() -> list[int] | None:
    """TT_VISIBLE_DEVICES (set per standard-DP rank), parsed; None when unset."""
    return envs.TT_VISIBLE_DEVICES.get()
