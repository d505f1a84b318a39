"""Fabric configuration resolution (pure).

Layers, later wins: hardware default -> the model's ``model_capabilities["fabric_config"]``
dictionary -> explicit ``fabric_config`` / ``fabric_reliability_mode`` launch options. The result
is the kwargs for ``ttnn.set_fabric_config(**kwargs)``, or None for single-device meshes, which
never initialise fabric. The model's dictionary is copied, never mutated, and its TTNN objects
never enter vLLM's serialisable config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from vllm_tt_plugin.launch.mesh_spec import HardwareFamily

HARDWARE_DEFAULTS: dict[HardwareFamily, str] = {
    HardwareFamily.WORMHOLE_GALAXY: "FABRIC_1D_RING",
    HardwareFamily.BLACKHOLE_GALAXY: "FABRIC_2D_TORUS_XY",
    HardwareFamily.OTHER: "FABRIC_1D",
}


class _EnumNamespace(Protocol):
    """The part of ttnn this module needs: FabricConfig and FabricReliabilityMode enums."""

    FabricConfig: Any
    FabricReliabilityMode: Any


def _member(enum: Any, name: str, option: str) -> Any:
    members = getattr(enum, "__members__", {})
    if name not in members:
        raise ValueError(
            f"TT option {option!r} has invalid value {name!r}; accepted values: "
            f"{', '.join(members)}"
        )
    return members[name]


def resolve_fabric_kwargs(
    ttnn: _EnumNamespace,
    family: HardwareFamily,
    num_devices: int,
    model_fabric: Mapping[str, Any] | None = None,
    fabric_config: str | None = None,
    fabric_reliability_mode: str | None = None,
) -> dict[str, Any] | None:
    """The ``ttnn.set_fabric_config`` kwargs for this launch, or None (single device)."""
    if num_devices <= 1:
        return None
    kwargs: dict[str, Any] = {
        "config": _member(ttnn.FabricConfig, HARDWARE_DEFAULTS[family], "fabric_config")
    }
    if model_fabric:
        kwargs.update(model_fabric)
    if fabric_config is not None:
        kwargs["config"] = _member(ttnn.FabricConfig, fabric_config, "fabric_config")
    if fabric_reliability_mode is not None:
        kwargs["reliability_mode"] = _member(
            ttnn.FabricReliabilityMode, fabric_reliability_mode, "fabric_reliability_mode"
        )
    return kwargs


def describe_fabric_kwargs(kwargs: Mapping[str, Any] | None) -> str:
    """Readable form for logs (enum members by name)."""
    if kwargs is None:
        return "none (single device)"
    parts = []
    for key, value in kwargs.items():
        parts.append(f"{key}={getattr(value, 'name', value)}")
    return ", ".join(parts)
