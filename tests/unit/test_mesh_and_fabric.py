"""MESH_DEVICE parsing and fabric resolution for every hardware default and override layer."""

from __future__ import annotations

from typing import Any

import pytest
import ttnn

from vllm_tt_plugin.device.fabric import HARDWARE_DEFAULTS, resolve_fabric_kwargs
from vllm_tt_plugin.launch.mesh_spec import HardwareFamily, MeshSpecError, parse_mesh_device


@pytest.mark.parametrize(
    ("value", "shape", "family"),
    [
        (None, (1, 1), HardwareFamily.OTHER),
        ("N150", (1, 1), HardwareFamily.OTHER),
        ("n300", (1, 2), HardwareFamily.OTHER),
        ("T3K", (1, 8), HardwareFamily.OTHER),
        ("TG", (8, 4), HardwareFamily.WORMHOLE_GALAXY),
        ("BH-Galaxy", (8, 4), HardwareFamily.BLACKHOLE_GALAXY),
        ("P150x4", (1, 4), HardwareFamily.OTHER),
        ("(4,8)", (4, 8), HardwareFamily.OTHER),
        (" ( 2 , 4 ) ", (2, 4), HardwareFamily.OTHER),
    ],
)
def test_mesh_device_values(
    value: str | None, shape: tuple[int, int], family: HardwareFamily
) -> None:
    spec = parse_mesh_device(value)
    assert spec.shape == shape
    assert spec.num_devices == shape[0] * shape[1]
    assert spec.family is family


@pytest.mark.parametrize("value", ["N400", "(0,4)", "(4)", "4x8"])
def test_bad_mesh_device_is_named(value: str) -> None:
    with pytest.raises(MeshSpecError, match="MESH_DEVICE"):
        parse_mesh_device(value)


def test_single_device_never_initialises_fabric() -> None:
    assert resolve_fabric_kwargs(ttnn, HardwareFamily.OTHER, 1) is None
    # ... even with a model dictionary or an explicit override
    assert (
        resolve_fabric_kwargs(
            ttnn, HardwareFamily.OTHER, 1, {"num_planes": 2}, "FABRIC_2D", "RELAXED_INIT"
        )
        is None
    )


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        (HardwareFamily.WORMHOLE_GALAXY, "FABRIC_1D_RING"),
        (HardwareFamily.BLACKHOLE_GALAXY, "FABRIC_2D_TORUS_XY"),
        (HardwareFamily.OTHER, "FABRIC_1D"),
    ],
)
def test_hardware_defaults(family: HardwareFamily, expected: str) -> None:
    kwargs = resolve_fabric_kwargs(ttnn, family, 32)
    assert kwargs == {"config": ttnn.FabricConfig[expected]}
    assert HARDWARE_DEFAULTS[family] == expected


def test_model_dictionary_overrides_the_default_and_is_not_mutated() -> None:
    model_fabric: dict[str, Any] = {"config": ttnn.FabricConfig.FABRIC_2D, "num_planes": 2}
    snapshot = dict(model_fabric)
    kwargs = resolve_fabric_kwargs(ttnn, HardwareFamily.WORMHOLE_GALAXY, 32, model_fabric)
    assert kwargs == {"config": ttnn.FabricConfig.FABRIC_2D, "num_planes": 2}
    assert model_fabric == snapshot
    assert kwargs is not model_fabric


def test_model_dictionary_without_config_keeps_hardware_default() -> None:
    kwargs = resolve_fabric_kwargs(ttnn, HardwareFamily.BLACKHOLE_GALAXY, 32, {"num_planes": 2})
    assert kwargs == {"config": ttnn.FabricConfig.FABRIC_2D_TORUS_XY, "num_planes": 2}


def test_launch_overrides_win_over_model_and_default() -> None:
    model_fabric = {
        "config": ttnn.FabricConfig.FABRIC_2D,
        "reliability_mode": ttnn.FabricReliabilityMode.STRICT_INIT,
    }
    kwargs = resolve_fabric_kwargs(
        ttnn, HardwareFamily.OTHER, 8, model_fabric, "FABRIC_1D_RING", "RELAXED_INIT"
    )
    assert kwargs == {
        "config": ttnn.FabricConfig.FABRIC_1D_RING,
        "reliability_mode": ttnn.FabricReliabilityMode.RELAXED_INIT,
    }


def test_reliability_override_alone_keeps_default_config() -> None:
    kwargs = resolve_fabric_kwargs(ttnn, HardwareFamily.OTHER, 2, None, None, "STRICT_INIT")
    assert kwargs == {
        "config": ttnn.FabricConfig.FABRIC_1D,
        "reliability_mode": ttnn.FabricReliabilityMode.STRICT_INIT,
    }


def test_bad_override_name_is_named() -> None:
    with pytest.raises(ValueError, match="'fabric_config' has invalid value 'FABRIC_9D'"):
        resolve_fabric_kwargs(ttnn, HardwareFamily.OTHER, 2, None, "FABRIC_9D")
