"""The lanes concern at the server (`tox -e emu`, second run): the bundled reference model served
as a lane-DP model (4 in-process lanes of 8 sequences, one engine, one emulated TG mesh), the
`lanes` checks run against it (`--tt-lanes 4`), the report written to
reports/<model>/emulated-GALAXY-lanes4/ and gated against
reports/baselines/<model>/emulated-GALAXY-lanes4/.

    python tools/run_emu_lanes_conformance.py [--model DIR] [--update-baseline] [-- PYTEST ARGS]

The main run (tools/run_emu_conformance.py) serves one lane, so its lanes checks skip; this run
is where they execute. It reuses that driver's server options, pytest command, suite runner and
gate, changing only what makes a lane server: the lane-DP variant of the reference model (the
same weights, `supports_lane_data_parallel`), `--data-parallel-size 4` and the TG mesh.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_emu_conformance import (
    DEFAULT_SUITE_TIMEOUT_S,
    REPO,
    ServerOptions,
    pytest_command,
    report_files,
    run_suite,
    update_baseline,
)

from tt_conformance.matrix import column_dir
from tt_conformance.names import emulated_device
from vllm_tt_plugin.emulation.server import BUNDLED_MODEL, EmulatedServer

LANES = 4
# The report's device is the emulated TG mesh's (emulated-GALAXY); the directory adds the lanes,
# as the matrix's column does (matrix.column_dir): emulated-GALAXY-lanes4.
LANES_VARIANT = (
    "TTReferenceLlamaForCausalLM="
    "vllm_tt_plugin.test_models.reference_llama:ReferenceLlamaLanesForCausalLM"
)


@dataclass(frozen=True)
class LaneServerOptions(ServerOptions):
    """The main run's options (8 sequences -- per lane here --, 1024 tokens, device sampling,
    async decode, 2048 KV tokens per lane) on 4 lanes of a TG mesh."""

    mesh: str = "TG"
    lanes: int = LANES

    def vllm_args(self) -> list[str]:
        return [*super().vllm_args(), f"--data-parallel-size={self.lanes}"]

    def env(self) -> dict[str, str]:
        return {**super().env(), "TT_MODEL_CLASS_OVERRIDES": LANES_VARIANT}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=BUNDLED_MODEL, help="checkpoint directory")
    parser.add_argument("--reports", type=Path, default=REPO / "reports", help="reports root")
    parser.add_argument("--update-baseline", action="store_true")
    parser.add_argument("--timeout", type=float, default=DEFAULT_SUITE_TIMEOUT_S)
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- extra pytest arguments")
    args = parser.parse_args(argv)
    extra = list(args.pytest_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    if not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: no config.json there (is the checkpoint generated?)")

    name = args.model.name
    options = LaneServerOptions()
    device = emulated_device(options.mesh)
    report_dir = column_dir(args.reports, name, device, LANES)
    baseline_dir = column_dir(args.reports / "baselines", name, device, LANES)
    baseline, expectations = baseline_dir / "baseline.json", baseline_dir / "expectations.json"
    server = EmulatedServer(
        model=args.model,
        mesh_device=options.mesh,
        tt_options=options.tt,
        vllm_args=options.vllm_args(),
        env=options.env(),
        served_model_name=name,
    )
    before = report_files(report_dir)
    with server:
        print(f"[emu-lanes] {name}: {LANES} lanes healthy at {server.url}", flush=True)
        cmd = pytest_command(server, options, args.model, report_dir, expectations, 0, extra)
        cmd = [*cmd, "--tt-lanes", str(LANES), "-m", "lanes"]
        pytest_rc = run_suite(cmd, args.timeout)
    new = sorted(report_files(report_dir) - before)
    if pytest_rc >= 2 or not new:
        print(f"[emu-lanes] no usable report (pytest exit {pytest_rc}, new {new})", flush=True)
        return pytest_rc if pytest_rc >= 2 else 2
    report = new[-1]
    if args.update_baseline:
        # Partial by design (-m lanes): its gate runs the same selection.
        return update_baseline(report, args.reports / "baselines", "emu-lanes", allow_partial=True)
    gate = [sys.executable, "-m", "tt_conformance.cli.gate", "--baseline", str(baseline)]
    gate += ["--candidate", str(report), "--axis", "plugin"]  # as the main run's gate
    if expectations.is_file():
        gate += ["--expectations", str(expectations)]
    return subprocess.call(gate, cwd=REPO) or pytest_rc


if __name__ == "__main__":
    sys.exit(main())
