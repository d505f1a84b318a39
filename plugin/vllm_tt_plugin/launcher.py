"""Retained tt-run / MPI launcher support (not hooked by vLLM 0.26.0).

tt-metal launches multi-process (and multi-host) programs with ``tt-run``, which starts one MPI
rank per entry of a *rank binding* file and gives each rank its own environment (its device
group in ``TT_VISIBLE_DEVICES``, its mesh). Earlier plugin versions started vLLM's data-parallel
ranks this way. vLLM 0.26.0 starts DP ranks itself (one engine-core process per rank, see
``launch/data_parallel.py``) and offers no hook for an external launcher, and the platform refuses
multi-host DP. This module keeps the launch description so the path can be wired again when
vLLM offers a hook: it builds the rank binding from the same device groups standard DP
discovers, and the ``tt-run`` command line for it. Nothing in the serving path calls it.

    python -m vllm_tt_plugin.launcher --mesh T3K --dp 2 --out ranks.yaml -- vllm serve MODEL ...
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.launch.mesh_spec import MeshSpec, parse_mesh_device
from vllm_tt_plugin.utils.device_discovery import DeviceGroups, discover_in_process


@dataclass(frozen=True)
class RankBinding:
    rank: int
    mesh_id: int
    env: dict[str, str] = field(default_factory=dict)


def rank_bindings(spec: MeshSpec, groups: DeviceGroups) -> list[RankBinding]:
    """One rank per DP device group: its devices and its submesh shape."""
    rows, cols = groups.submesh_shape
    return [
        RankBinding(
            rank=rank,
            mesh_id=rank,
            env={
                envs.TT_VISIBLE_DEVICES.name: ",".join(map(str, group)),
                envs.MESH_DEVICE.name: f"({rows},{cols})",
                # For the operator reading the binding; the plugin does not read it.
                "TT_PARENT_MESH_DEVICE": spec.name,
            },
        )
        for rank, group in enumerate(groups.groups)
    ]


def render_rank_binding(bindings: Sequence[RankBinding]) -> str:
    """The rank binding file tt-run reads (YAML; written without a YAML library)."""
    lines = ["rank_bindings:"]
    for b in bindings:
        lines += [f"  - rank: {b.rank}", f"    mesh_id: {b.mesh_id}", "    env_overrides:"]
        lines += [f"      {key}: {json.dumps(value)}" for key, value in sorted(b.env.items())]
    return "\n".join(lines) + "\n"


def tt_run_command(rank_binding: Path, program: Sequence[str], mpi_args: str = "") -> list[str]:
    if not program:
        raise ValueError("tt-run needs the program to launch (e.g. vllm serve MODEL ...)")
    cmd = ["tt-run", "--rank-binding", str(rank_binding)]
    if mpi_args:
        cmd += ["--mpi-args", mpi_args]
    return cmd + list(program)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--mesh", required=True, help="parent MESH_DEVICE (N300, T3K, TG, (r,c))")
    parser.add_argument("--dp", type=int, required=True, help="number of ranks")
    parser.add_argument("--out", type=Path, required=True, help="rank binding file to write")
    parser.add_argument("--mpi-args", default="")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    spec = parse_mesh_device(args.mesh)
    # The emulated split gives the same groups as hardware discovery for a row-major mesh.
    groups = discover_in_process(spec.rows, spec.cols, args.dp, emulated=True)
    args.out.write_text(render_rank_binding(rank_bindings(spec, groups)))
    print(shlex.join(tt_run_command(args.out, program, args.mpi_args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
