"""The harness's device names and mesh shapes agree with the plugin's.

The harness never imports the plugin (it checks any server black-box), so it keeps its own list
(`tt_conformance.names`); this test is what keeps the two in step: every system the plugin can
open (its MESH_DEVICE names) is a device the harness files reports under, with the same shape.
"""

from __future__ import annotations

import pytest

from tt_conformance.names import DEVICE_ALIASES, KNOWN_MESH_SHAPES, mesh_shape_for, normalize_device
from vllm_tt_plugin.launch.mesh_spec import NAMED_MESHES, parse_mesh_device


@pytest.mark.parametrize("name", sorted(NAMED_MESHES))
def test_every_plugin_system_has_the_harness_shape(name: str) -> None:
    spec = NAMED_MESHES[name]
    canonical = normalize_device(name)  # ValueError: the harness does not know the system
    assert canonical in KNOWN_MESH_SHAPES
    assert mesh_shape_for(name) == f"{spec.rows}x{spec.cols}"


def test_harness_aliases_the_plugin_accepts_mean_the_same_mesh() -> None:
    # An alias the plugin also takes as MESH_DEVICE (TG, BH-Galaxy) must name the same mesh.
    shared = []
    for alias in sorted(DEVICE_ALIASES):
        try:
            spec = parse_mesh_device(alias)
        except ValueError:
            continue  # a harness-only spelling (tt-inference-server's)
        shared.append(alias)
        assert mesh_shape_for(alias) == f"{spec.rows}x{spec.cols}", alias
    assert shared, "no alias is shared with the plugin: the check above checked nothing"


def test_one_device_name_per_emulated_mesh() -> None:
    from tt_conformance.names import emulated_device, is_emulated, mesh_shape_for, normalize_device

    assert emulated_device("T3K") == "emulated-T3K" and emulated_device("tg") == "emulated-GALAXY"
    assert normalize_device("Emulated-t3k") == "emulated-T3K"
    assert mesh_shape_for("emulated-T3K") == "1x8" and mesh_shape_for("emulated-GALAXY") == "8x4"
    assert is_emulated("emulated") and is_emulated("emulated-N300") and not is_emulated("N300")
    with pytest.raises(ValueError, match="emulated-<a TT mesh device>"):
        normalize_device("emulated-cpu")
