"""MESH_DEVICE parsing: the mesh shape and hardware family a launch asks for.

Pure: no ttnn calls. The worker combines this with the real cluster type (on hardware) or uses it
as-is (host-emulated mesh).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from vllm_tt_plugin.launch import envs


class HardwareFamily(str, enum.Enum):
    """What decides the fabric default: the Galaxy variants differ, everything else is alike."""

    WORMHOLE_GALAXY = "wormhole_galaxy"
    BLACKHOLE_GALAXY = "blackhole_galaxy"
    OTHER = "other"


@dataclass(frozen=True)
class MeshSpec:
    name: str
    rows: int
    cols: int
    family: HardwareFamily = HardwareFamily.OTHER

    @property
    def num_devices(self) -> int:
        return self.rows * self.cols

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)


# Named systems (MESH_DEVICE values) and their mesh shapes.
NAMED_MESHES: dict[str, MeshSpec] = {
    "N150": MeshSpec("N150", 1, 1),
    "N300": MeshSpec("N300", 1, 2),
    "T3K": MeshSpec("T3K", 1, 8),
    "TG": MeshSpec("TG", 8, 4, HardwareFamily.WORMHOLE_GALAXY),
    "P150": MeshSpec("P150", 1, 1),
    "P300": MeshSpec("P300", 1, 2),
    "P150x4": MeshSpec("P150x4", 1, 4),
    "P150x8": MeshSpec("P150x8", 1, 8),
    "BH-Galaxy": MeshSpec("BH-Galaxy", 8, 4, HardwareFamily.BLACKHOLE_GALAXY),
}

_SHAPE_RE = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
DEFAULT_MESH_DEVICE = envs.MESH_DEVICE.default


class MeshSpecError(ValueError):
    """MESH_DEVICE names no known system and is not a "(rows,cols)" shape."""


def parse_mesh_device(value: str | None) -> MeshSpec:
    """Parse a MESH_DEVICE value: a system name (N150, N300, T3K, TG, BH-Galaxy, ...) or "(r,c)"."""
    if value is None or not value.strip():
        return NAMED_MESHES[DEFAULT_MESH_DEVICE]
    value = value.strip()
    by_upper = {name.upper(): spec for name, spec in NAMED_MESHES.items()}
    if value.upper() in by_upper:
        return by_upper[value.upper()]
    match = _SHAPE_RE.match(value)
    if match:
        rows, cols = int(match.group(1)), int(match.group(2))
        if rows < 1 or cols < 1:
            raise MeshSpecError(f"MESH_DEVICE={value!r}: mesh dimensions must be >= 1")
        return MeshSpec(f"({rows},{cols})", rows, cols)
    raise MeshSpecError(
        f"MESH_DEVICE={value!r} is not a known system ({', '.join(NAMED_MESHES)}) "
        'nor a mesh shape such as "(4,8)"'
    )


def mesh_spec_from_env(env: Mapping[str, str] | None = None) -> MeshSpec:
    return parse_mesh_device(envs.MESH_DEVICE.get(env))
