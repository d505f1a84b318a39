"""Device groups for standard data parallelism: the parent mesh split into ``dp`` submeshes.

Discovery runs once, at start-up, in a subprocess that opens the parent mesh, tiles it into
``dp`` submeshes and reports each submesh's physical device ids; the subprocess exits before any
engine opens a device. The result travels to every vLLM process (API servers, engine cores,
workers) in the ``TT_DP_DEVICE_GROUPS`` environment variable and in the config. Each DP rank then
opens only its own group (``TT_VISIBLE_DEVICES``).

    python -m vllm_tt_plugin.utils.device_discovery --rows 1 --cols 8 --dp 2 [--emulated]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.launch.mesh_spec import MeshSpec

GROUPS_ENV = envs.TT_DP_DEVICE_GROUPS.name
DISCOVERY_TIMEOUT_S = 300


class DeviceDiscoveryError(ValueError):
    """The mesh cannot be split for this DP size, or discovery failed."""


@dataclass(frozen=True)
class DeviceGroups:
    parent_shape: tuple[int, int]
    submesh_shape: tuple[int, int]
    groups: tuple[tuple[int, ...], ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "parent_shape": list(self.parent_shape),
                "submesh_shape": list(self.submesh_shape),
                "groups": [list(g) for g in self.groups],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> DeviceGroups:
        data = json.loads(text)
        return cls(
            parent_shape=tuple(data["parent_shape"]),
            submesh_shape=tuple(data["submesh_shape"]),
            groups=tuple(tuple(int(d) for d in g) for g in data["groups"]),
        )


def submesh_shape(rows: int, cols: int, dp: int) -> tuple[int, int]:
    """Split rows when they divide evenly (keeps rows whole), else columns."""
    if dp < 1:
        raise DeviceDiscoveryError(f"--data-parallel-size must be >= 1, got {dp}")
    if rows % dp == 0:
        return rows // dp, cols
    if cols % dp == 0:
        return rows, cols // dp
    raise DeviceDiscoveryError(
        f"cannot split the ({rows},{cols}) mesh (MESH_DEVICE) into {dp} equal submeshes for "
        f"--data-parallel-size {dp}"
    )


def discover_in_process(rows: int, cols: int, dp: int, emulated: bool) -> DeviceGroups:
    shape = submesh_shape(rows, cols, dp)
    if emulated:
        from vllm_tt_plugin.emulation.mesh import EmulatedMeshDevice

        parent = EmulatedMeshDevice(MeshSpec("parent", rows, cols))
        try:
            groups = tuple(tuple(s.get_device_ids()) for s in parent.create_submeshes(shape))
        finally:
            parent.close()
    else:
        import ttnn

        # The stub's MeshDevice declares no members (no handle can exist without chips).
        mesh: Any = ttnn.open_mesh_device(mesh_shape=ttnn.MeshShape(rows, cols))
        try:
            subs = mesh.create_submeshes(ttnn.MeshShape(*shape))
            groups = tuple(tuple(int(d) for d in s.get_device_ids()) for s in subs)
        finally:
            ttnn.close_mesh_device(mesh)
    return DeviceGroups((rows, cols), shape, groups)


def discover_device_groups(spec: MeshSpec, dp: int, emulated: bool) -> DeviceGroups:
    """The DP device groups of this launch: reused from the environment, else discovered."""
    submesh_shape(spec.rows, spec.cols, dp)  # fail fast on an impossible split
    cached = envs.TT_DP_DEVICE_GROUPS.get()
    if cached:
        groups = DeviceGroups.from_json(cached)
        if groups.parent_shape == spec.shape and len(groups.groups) == dp:
            return groups
    cmd = [
        sys.executable,
        "-m",
        "vllm_tt_plugin.utils.device_discovery",
        "--rows",
        str(spec.rows),
        "--cols",
        str(spec.cols),
        "--dp",
        str(dp),
    ] + (["--emulated"] if emulated else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DISCOVERY_TIMEOUT_S)
    if proc.returncode != 0:
        raise DeviceDiscoveryError(
            f"TT device discovery for --data-parallel-size {dp} on MESH_DEVICE={spec.name} "
            f"failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    groups = DeviceGroups.from_json(proc.stdout.strip().splitlines()[-1])
    envs.TT_DP_DEVICE_GROUPS.export(groups.to_json())  # inherited by every process vLLM starts
    return groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--cols", type=int, required=True)
    parser.add_argument("--dp", type=int, required=True)
    parser.add_argument("--emulated", action="store_true")
    args = parser.parse_args(argv)
    print(discover_in_process(args.rows, args.cols, args.dp, args.emulated).to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
