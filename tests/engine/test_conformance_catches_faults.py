"""The conformance suite catches real faults: serve a deliberately broken reference model
(tests/engine/broken_models.py) on the host-emulated mesh and run the relevant check modules
against it; the checks aimed at the fault must fail, and a control check unrelated to it must
still pass (so the failures are the fault's, not a dead server's).

Faults: IgnoresPenalties (device sampler drops penalties -> test_penalties), KeepsStaleTokens
(half-applied reload after host-sampled steps -> test_decode_reload host switches,
test_sampling_fallback), SkipsPenaltyReset (penalty history never rebuilt -> mixed penalties,
penalised long request through arrivals), SwapsSlotRows (two live slots trade inputs ->
test_isolation). One server start per fault; the checks run in a pytest subprocess (no xdist),
exactly as a user runs them, and the test reads the run's report JSON. Needs the bundled checkpoint
fixtures/models/tt-reference-llama (a trained model: penalty and fallback checks need an LM).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tt_conformance.history import run_files
from tt_conformance.report import load_report
from vllm_tt_plugin.emulation.server import BUNDLED_MODEL, HOST_STUBS, EmulatedServer

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
CHECKS = "tt_conformance.checks"
MAX_NUM_SEQS = 8
SUITE_TIMEOUT_S = 900


@dataclass(frozen=True)
class Fault:
    model_class: str  # in tests.engine.broken_models
    selection: tuple[str, ...]  # pytest node ids under --pyargs, e.g. "<module>::<test>"
    must_fail: tuple[str, ...]  # check id patterns, ``*`` = any text that must fail
    must_pass: tuple[str, ...]  # control checks that must pass


FAULTS = (
    Fault(
        "IgnoresPenalties",
        (f"{CHECKS}.test_penalties", f"{CHECKS}.test_seeding::test_same_seed_reproduces"),
        (
            "*test_penalties::test_penalty_reduces_repetition[repetition_penalty]",
            "*test_penalties::test_penalty_reduces_repetition[presence_penalty]",
            "*test_penalties::test_penalty_reduces_repetition[frequency_penalty]",
        ),
        ("*test_seeding::test_same_seed_reproduces",),
    ),
    Fault(
        "KeepsStaleTokens",
        (
            f"{CHECKS}.test_decode_reload::test_host_sampling_switches",
            f"{CHECKS}.test_sampling_fallback::test_feature_in_device_batch",
            f"{CHECKS}.test_seeding::test_same_seed_reproduces",
        ),
        (
            "*test_decode_reload::test_host_sampling_switches[greedy]",
            "*test_decode_reload::test_host_sampling_switches[penalised]",
            "*test_sampling_fallback::test_feature_in_device_batch[min_p]",
        ),
        ("*test_seeding::test_same_seed_reproduces",),
    ),
    Fault(
        "SkipsPenaltyReset",
        (
            f"{CHECKS}.test_penalties::test_mixed_penalties_match_solo",
            f"{CHECKS}.test_decode_reload::test_companions_arrive_and_leave",
        ),
        (
            "*test_penalties::test_mixed_penalties_match_solo",
            "*test_decode_reload::test_companions_arrive_and_leave[penalised]",
        ),
        ("*test_decode_reload::test_companions_arrive_and_leave[greedy]",),
    ),
    Fault(
        "SwapsSlotRows",
        (
            f"{CHECKS}.test_isolation::test_mixed_batch_matches_solo",
            f"{CHECKS}.test_isolation::test_distinct_greedy_prompts_batched",
            f"{CHECKS}.test_seeding::test_same_seed_reproduces",
        ),
        (
            "*test_isolation::test_mixed_batch_matches_solo",
            "*test_isolation::test_distinct_greedy_prompts_batched[half]",
            "*test_isolation::test_distinct_greedy_prompts_batched[full]",
        ),
        ("*test_seeding::test_same_seed_reproduces",),
    ),
)


def server_env(model_class: str) -> dict[str, str]:
    # The engine's worker imports the override target, so the repo root must be importable
    # there; keep the host stub on the path too when no real ttnn is installed.
    path = [str(REPO)]
    if importlib.util.find_spec("ttnn") is None and HOST_STUBS.is_dir():
        path.append(str(HOST_STUBS))
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    return {
        "TT_MODEL_CLASS_OVERRIDES": (
            f"TTReferenceLlamaForCausalLM=tests.engine.broken_models:{model_class}"
        ),
        "PYTHONPATH": os.pathsep.join(path),
        "VLLM_LOGGING_LEVEL": "INFO",  # the platform logs which class serves the model
    }


def run_checks(server: EmulatedServer, selection: tuple[str, ...], report_dir: Path) -> dict:
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", *selection,
        "--tt-server-url", server.url,
        "--tt-device", "emulated",
        "--tt-max-num-seqs", str(MAX_NUM_SEQS),
        "--tt-report-dir", str(report_dir),
        "--tt-baselines-dir", str(report_dir / "no-baselines"),  # no expectations apply
        "-q", "-n", "0",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S, check=False
    )
    reports = run_files(report_dir)
    assert reports, (
        f"the check run wrote no report (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
    )
    report = load_report(reports[-1])
    return {
        "outcomes": {c.id: c.outcome for c in report.checks},
        "reasons": {c.id: c.reason for c in report.checks},
        "stdout": proc.stdout,
    }


def matching(outcomes: dict[str, str], pattern: str) -> dict[str, str]:
    """Check ids matching ``pattern``, where only ``*`` is special (brackets are literal)."""
    regex = re.compile(".*".join(re.escape(part) for part in pattern.split("*")))
    return {cid: out for cid, out in outcomes.items() if regex.fullmatch(cid)}


@pytest.fixture(scope="module")
def bundled_model() -> Path:
    if not (BUNDLED_MODEL / "config.json").is_file():
        pytest.skip(f"bundled checkpoint {BUNDLED_MODEL} is not generated")
    return BUNDLED_MODEL


@pytest.mark.parametrize("fault", FAULTS, ids=[f.model_class for f in FAULTS])
def test_suite_catches_fault(fault: Fault, bundled_model: Path, tmp_path: Path) -> None:
    server = EmulatedServer(
        model=bundled_model,
        mesh_device="N300",
        tt_options={"sample_on_device_mode": "all"},
        vllm_args=[
            f"--max-num-seqs={MAX_NUM_SEQS}",
            "--max-model-len=1024",
            "--async-scheduling",
        ],
        env=server_env(fault.model_class),
        log_path=tmp_path / "server.log",
    )
    with server:
        result = run_checks(server, fault.selection, tmp_path / "report")
    log = (tmp_path / "server.log").read_text(errors="replace")
    assert f"tests.engine.broken_models:{fault.model_class}" in log, (
        f"the server log does not show that {fault.model_class} served the model"
    )
    outcomes = result["outcomes"]
    summary = json.dumps(outcomes, indent=1)
    for pattern in fault.must_fail:
        hits = matching(outcomes, pattern)
        assert hits, f"{fault.model_class}: no check matches {pattern!r}; ran:\n{summary}"
        passed = {cid: out for cid, out in hits.items() if out not in ("fail", "error")}
        assert not passed, (
            f"{fault.model_class}: the suite did not catch the fault: {passed} should fail"
        )
    for pattern in fault.must_pass:
        hits = matching(outcomes, pattern)
        assert hits and all(out == "pass" for out in hits.values()), (
            f"{fault.model_class}: control check {pattern!r} did not pass: "
            f"{ {cid: result['reasons'][cid] for cid in hits} }\n{result['stdout'][-2000:]}"
        )
