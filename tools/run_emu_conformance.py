"""Run the conformance suite against the bundled reference model on the host-emulated mesh, then
gate the report against the committed baseline (`tox -e emu`).

    python tools/run_emu_conformance.py [--model DIR] [--workers 2] [--update-baseline]
                                        [-- EXTRA PYTEST ARGS]

1. starts `vllm serve` on 127.0.0.1 (free port) with the default server options below;
2. runs `pytest --pyargs tt_conformance.checks -n WORKERS --dist loadgroup` against it, writing
   the report (JSON + Markdown + JUnit) to reports/<model>/emulated-T3K/ and applying the
   committed expectations reports/baselines/<model>/emulated-T3K/expectations.json;
3. stops the server (always, also when pytest or the start fails);
4. gates the new report against reports/baselines/<model>/emulated-T3K/baseline.json with
   tt-conformance-gate.

Exit status: pytest's usage/internal errors (>= 2) as they are (3 also when the suite exceeds
--timeout); otherwise the gate's status when it is non-zero, else pytest's (so a failing check
that is new to the baseline also fails).
``--update-baseline`` promotes the new report to baseline.json instead of gating (with promote's
refusals: a failing check the expectations do not list is refused; review the diff).
This driver may import the plugin (it launches the server); the checks never do.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from tt_conformance.baseline import PromoteError, promote
from tt_conformance.history import run_files
from tt_conformance.names import emulated_device, mesh_shape_for
from vllm_tt_plugin.emulation.server import BUNDLED_MODEL, EmulatedServer

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SUITE_TIMEOUT_S = 2400.0  # far above the few minutes the suite takes; CI has 90 minutes
EXIT_TIMEOUT = 3


# The hybrid model's pool adds sliding-window headroom (3 blocks per sequence and the tokens in
# flight) to the budget, so 2048 budget tokens make an 8256-token pool that 8 requests of at
# most 1024 tokens cannot overrun; 256 leaves about 2900, and the preemption check can run.
KV_TOKENS_PER_LANE = {"tt-reference-hybrid": 256}


@dataclass(frozen=True)
class ServerOptions:
    """What the suite runs against by default, recorded in the report via --tt-server-options.

    Device sampling on (batches needing host-only features fall back per batch), async decode
    on (the reload contract's resident-input path), 8 sequences and 1024 tokens of context (a
    full batch and the context-length edge stay cheap on a CPU), and a KV pool of 2048 tokens
    per lane so that a full batch of long requests forces preemption.
    """

    # Eight emulated devices: the flat sampled-token device logprob (contract v2: only on 8 or
    # 32 devices per rank) is then served by the device, so the logprobs checks' device path runs.
    mesh: str = "T3K"
    tt: dict[str, object] = field(default_factory=lambda: {"sample_on_device_mode": "all"})
    max_num_seqs: int = 8
    max_model_len: int = 1024
    async_scheduling: bool = True
    kv_tokens_per_lane: int = 2048

    def vllm_args(self) -> list[str]:
        args = [f"--max-num-seqs={self.max_num_seqs}", f"--max-model-len={self.max_model_len}"]
        return [*args, "--async-scheduling"] if self.async_scheduling else args

    def env(self) -> dict[str, str]:
        return {"TT_REFERENCE_MAX_TOKENS_ALL_USERS": str(self.kv_tokens_per_lane)}

    def record(self, model: Path) -> str:
        return json.dumps(
            {
                "model": str(model.name),
                "mesh_device": self.mesh,
                "additional_config.tt": self.tt,
                "vllm_args": self.vllm_args(),
                "env": {"TT_REFERENCE_MAX_TOKENS_ALL_USERS": self.kv_tokens_per_lane},
            },
            sort_keys=True,
        )


def report_files(directory: Path) -> set[Path]:
    return set(run_files(directory))


# The report's device: one name per emulated mesh (names.emulated_device), emulated-T3K.
DEVICE = emulated_device(ServerOptions().mesh)


def pytest_command(
    server: EmulatedServer,
    options: ServerOptions,
    model: Path,
    report_dir: Path,
    expectations: Path,
    workers: int,
    extra: Sequence[str],
) -> list[str]:
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "tt_conformance.checks",
        "--tt-server-url", server.url,
        "--tt-model-name", server.model_name,
        "--tt-device", emulated_device(options.mesh),
        "--tt-max-num-seqs", str(options.max_num_seqs),
        "--tt-server-options", options.record(model),
        "--tt-report-dir", str(report_dir),
        # The server runs this checkout's plugin; the harness cannot see that over HTTP.
        "--tt-plugin-version", metadata.version("vllm-tt-plugin"),
        # The bundled checkpoint is at hand: the forward reference always runs here.
        "--tt-reference-checkpoint", str(model),
        "-rfEsxX",
    ]  # fmt: skip
    mesh_shape = mesh_shape_for(options.mesh)
    if mesh_shape:
        cmd += ["--tt-mesh-shape", mesh_shape]
    if expectations.is_file():
        cmd += ["--tt-expectations", str(expectations)]
    if workers > 0:
        cmd += ["-n", str(workers), "--dist", "loadgroup"]
    return cmd + list(extra)


def run_suite(cmd: list[str], timeout_s: float) -> int:
    """Run pytest in its own process group; on timeout kill the group (xdist workers too)."""
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"[emu] the suite exceeded {timeout_s:.0f} s; killing it", flush=True)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return EXIT_TIMEOUT
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def update_baseline(report: Path, baselines: Path, tag: str, allow_partial: bool = False) -> int:
    """Promote the run to the committed baseline with promote's refusals (a failing check the
    expectations do not cover, an aborted or older run, a partial one unless ``allow_partial``):
    a baseline that failed a check would pass that check's regression in every later gate."""
    try:
        promoted = promote(report, baselines, allow_partial=allow_partial)
    except PromoteError as exc:
        print(f"[{tag}] baseline not updated: {exc}", flush=True)
        return 2
    print(f"[{tag}] baseline updated: {promoted.baseline} <- {report}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=BUNDLED_MODEL, help="checkpoint directory")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (0 = none)")
    parser.add_argument("--reports", type=Path, default=REPO / "reports", help="reports root")
    parser.add_argument(
        "--update-baseline",
        action="store_true",
        help="store the new report as the baseline instead of gating against it",
    )
    parser.add_argument(
        "--baselines",
        type=Path,
        default=None,
        help="baselines root (default REPORTS/baselines; the mutation suite writes its reports "
        "elsewhere and gates against the committed baselines)",
    )
    parser.add_argument("--server-log", type=Path, default=None, help="keep the server log here")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_SUITE_TIMEOUT_S,
        help=f"kill the suite after this many seconds (default {DEFAULT_SUITE_TIMEOUT_S:.0f})",
    )
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- extra pytest arguments")
    args = parser.parse_args(argv)
    extra = list(args.pytest_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    if not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: no config.json there (is the checkpoint generated?)")
    if args.workers < 0:
        parser.error(f"--workers must be >= 0, got {args.workers}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")

    name = args.model.name
    options = ServerOptions(kv_tokens_per_lane=KV_TOKENS_PER_LANE.get(name, 2048))
    report_dir = args.reports / name / DEVICE
    baseline_dir = (args.baselines or args.reports / "baselines") / name / DEVICE
    baseline, expectations = baseline_dir / "baseline.json", baseline_dir / "expectations.json"
    server = EmulatedServer(
        model=args.model,
        mesh_device=options.mesh,
        tt_options=options.tt,
        vllm_args=options.vllm_args(),
        env=options.env(),
        served_model_name=name,
        log_path=args.server_log,
    )
    before = report_files(report_dir)
    started = time.monotonic()
    with server:
        print(
            f"[emu] server {name} healthy at {server.url} after "
            f"{time.monotonic() - started:.1f} s (log {server.log_path})",
            flush=True,
        )
        suite_start = time.monotonic()
        cmd = pytest_command(
            server, options, args.model, report_dir, expectations, args.workers, extra
        )
        pytest_rc = run_suite(cmd, args.timeout)
        print(
            f"[emu] suite finished in {time.monotonic() - suite_start:.1f} s "
            f"(pytest exit {pytest_rc}); stopping the server",
            flush=True,
        )
    new = sorted(report_files(report_dir) - before)
    if pytest_rc >= 2 or not new:
        print(f"[emu] no usable report (pytest exit {pytest_rc}, new reports {new})", flush=True)
        return pytest_rc if pytest_rc >= 2 else 2
    report = new[-1]
    if args.update_baseline:
        return update_baseline(report, args.baselines or args.reports / "baselines", "emu")
    # tt-conformance-gate's module, run by this interpreter: the one on PATH may be another
    # environment's (or missing when this env's python runs without the env activated).
    gate = [sys.executable, "-m", "tt_conformance.cli.gate"]
    gate += ["--baseline", str(baseline), "--candidate", str(report)]
    # What changes between the committed baseline and this run is this repository's code (the
    # plugin's commit); everything else (weights, profile, ttnn stub, vLLM) must be equal.
    gate += ["--axis", "plugin"]
    if expectations.is_file():
        gate += ["--expectations", str(expectations)]
    gate_rc = subprocess.call(gate, cwd=REPO)
    return gate_rc or pytest_rc


if __name__ == "__main__":
    sys.exit(main())
