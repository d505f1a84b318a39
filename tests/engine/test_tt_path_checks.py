"""The TT-path checks, proved both ways on the emulated server (bundled checkpoint):

- device sampling and async decode on: every TT-path check runs and passes, the plugin's
  counters on /metrics agree with the runner's own shutdown stats, and a --tt-device that
  disagrees with the served mesh stops the run before any check;
- both off: the same checks still verify outputs but report "not exercised" (skip) with the
  reason, never "pass";
- the plugin's metrics off (TT_VLLM_METRICS=0), so the server shows no TT plugin: the suite
  refuses to certify it (TT-path checks not applicable, report labelled not-tt) while the
  generic checks still run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from tests.engine.harness import MODEL_DIR, live_stats, run_suite, runner_stats, serve
from tt_conformance.ttmetrics import parse_metrics

MAX_NUM_SEQS = 8
VLLM_ARGS = [f"--max-num-seqs={MAX_NUM_SEQS}", "--max-model-len=1024"]
# Checks claiming a TT path (device batch + host fallback, resident decode between reloads,
# async overlap, device logprobs, the device path staying on).
TT_PATH = (
    "test_sampling_fallback::test_feature_in_device_batch",
    "test_sampling_fallback::test_seeded_companion_keeps_its_tokens",
    "test_decode_reload::test_companions_arrive_and_leave",
    "test_decode_reload::test_host_sampling_switches",
    "test_decode_reload::test_aborted_companions",
    "test_logprobs::test_logprobs_shape_and_values",
    "test_isolation::test_mixed_batch_matches_solo",
)
TT_RULES = ("test_logprobs::test_logprobs_rejected",)
GENERIC = (
    "test_seeding::test_same_seed_reproduces",
    "test_errors::test_malformed_request_rejected",
)


@pytest.fixture(scope="module", autouse=True)
def bundled_model() -> Path:
    if not (MODEL_DIR / "config.json").is_file():
        pytest.skip(f"bundled checkpoint {MODEL_DIR} is not generated")
    return MODEL_DIR


def of(outcomes: dict[str, str], selection: tuple[str, ...]) -> dict[str, str]:
    picked = {cid: out for cid, out in outcomes.items() if any(s in cid for s in selection)}
    assert picked, f"no check of {selection} ran: {sorted(outcomes)}"
    return picked


# Contract v2: a TT device returns at most the sampled token's logprob (and only on 8 or 32
# devices per rank), so batches mixing every k from 0 to 20 are host-sampled on any model but
# GPT-OSS. Those two variants must say so ("not exercised", naming the logprobs fallback) unless
# a step of theirs really ran on the device: a k=0 request admitted a step before its neighbours
# (or finishing a step after them) decodes alone on the device, and the suite runs with -n 0, so
# the device steps counted in the check's window are its own. A pass is then honest; which of
# the two happens depends on arrival timing.
HOST_ONLY_LOGPROB_BATCHES = (
    "test_logprobs_shape_and_values[half]",
    "test_logprobs_shape_and_values[full]",
)


def test_tt_path_checks_run_and_pass_with_device_sampling_and_async(tmp_path: Path) -> None:
    # Eight devices (T3K), so the flat sampled-token device logprob path runs too.
    server = serve(
        tt={"sample_on_device_mode": "all"},
        vllm_args=[*VLLM_ARGS, "--async-scheduling"],
        mesh="T3K",
    )
    server.log_path = tmp_path / "server.log"
    with server:
        wrong = run_suite(server.url, ["test_errors"], tmp_path / "wrong", device="N150")
        run = run_suite(server.url, [*TT_PATH, *TT_RULES], tmp_path / "report")
        info, counters = parse_metrics(requests.get(f"{server.url}/metrics", timeout=30).text)
        live = live_stats(server)
    assert wrong.returncode == pytest.ExitCode.USAGE_ERROR and wrong.report is None
    assert "--tt-device N150, but the server runs a host-emulated mesh" in wrong.stderr
    not_passed = {c: run.reasons[c] for c, o in run.outcomes.items() if o != "pass"}
    host_only = {c: r for c, r in not_passed.items() if c.endswith(HOST_ONLY_LOGPROB_BATCHES)}
    ran = [c for c in run.outcomes if c.endswith(HOST_ONLY_LOGPROB_BATCHES)]
    assert len(ran) == len(HOST_ONLY_LOGPROB_BATCHES), sorted(run.outcomes)
    for cid, reason in host_only.items():
        assert reason.startswith("not exercised: ") and "for logprobs" in reason, (cid, reason)
    rest = {c: r for c, r in not_passed.items() if c not in host_only}
    assert not rest, json.dumps(rest, indent=1)
    assert len(run.outcomes) >= 20
    # --tt-device emulated names no mesh: the report carries the one the server emulates.
    assert run.report is not None and (run.report.device, run.report.mesh_shape) == (
        "emulated-T3K",
        "1x8",
    )
    # The info describes this launch.
    assert info is not None
    assert (info.mesh_device, info.mesh_shape, info.lanes) == ("T3K", "1x8", 1)
    assert info.get("max_num_seqs") == str(MAX_NUM_SEQS) and info.get("max_model_len") == "1024"
    assert info.get("model_class").endswith("ReferenceLlamaForCausalLM")
    assert info.tt_options["sample_on_device_mode"] == "all" and info.emulated
    assert info.get("plugin_version") != "unknown" and info.get("ttnn_version") != "unknown"
    # The counters and the runner's own stats (logged at shutdown) count the same steps.
    (stats,) = runner_stats(server)
    # The live reading the other engine tests use names the same counts as the stats.
    assert live == {key: stats[key] for key in live}
    assert counters.value("tt_steps_total", kind="decode") == stats["decode_steps"]
    assert counters.value("tt_steps_total", kind="prefill") == stats["prefill_steps"]
    assert counters.value("tt_async_overlapped_decodes_total") == stats["overlapped_decodes"] > 0
    assert counters.value("tt_slot_remaps_total") == stats["slot_remaps"]
    full = counters.value("tt_decode_commands_total", command="full_reload")
    assert full == stats["full_reloads"] > 0
    page_table = counters.value("tt_decode_commands_total", command="page_table_only")
    assert page_table == stats["page_table_reloads"]
    assert counters.value("tt_decode_commands_total", command="resident") > 0
    # The situations the steps created: the same rows counted on /metrics and in the stats.
    situations = counters.label_values("tt_situations_total", "situation")
    assert {k: v for k, v in situations.items() if v} == stats["situations"]
    assert stats["situations"].get("device_decode_logprobs", 0) > 0  # k=0 on eight devices
    reasons = counters.label_values("tt_host_fallback_steps_total", "reason")
    assert {"min_p", "logit_bias", "bad_words", "allowed_token_ids", "logprobs"} <= {
        r for r, v in reasons.items() if v
    }


def test_tt_path_checks_report_not_exercised_without_device_sampling_or_async(
    tmp_path: Path,
) -> None:
    with serve(tt={}, vllm_args=VLLM_ARGS) as server:
        run = run_suite(server.url, [*TT_PATH, *TT_RULES], tmp_path / "report")
    for cid, outcome in of(run.outcomes, TT_PATH).items():
        reason = run.reasons[cid]
        assert outcome == "skip" and reason.startswith("not exercised: "), (cid, outcome, reason)
        assert "device sampling is off" in reason, (cid, reason)
    assert set(of(run.outcomes, TT_RULES).values()) == {"pass"}  # rules hold on any TT launch


def test_server_without_plugin_metrics_is_not_certified(tmp_path: Path) -> None:
    server = serve(
        tt={"sample_on_device_mode": "all"},
        vllm_args=[*VLLM_ARGS, "--async-scheduling"],
        env={"TT_VLLM_METRICS": "0"},
    )
    with server:
        text = requests.get(f"{server.url}/metrics", timeout=30).text
        run = run_suite(
            server.url, [*TT_PATH, *TT_RULES, *GENERIC], tmp_path / "report", device="N300"
        )
    assert "vllm:" in text and not [ln for ln in text.splitlines() if ln.startswith("tt_")]
    assert run.report is not None
    assert (run.report.device, run.report.mesh_shape) == ("not-tt", None)
    assert run.report.warnings[0].startswith("not a TT server")
    assert run.stdout.count("NOT A TT SERVER") == 1
    claimed = {
        cid: out for cid, out in of(run.outcomes, (*TT_PATH, *TT_RULES)).items()
        if "test_isolation" not in cid  # a generic check with a TT claim on TT servers only
    }  # fmt: skip
    for cid, outcome in claimed.items():
        assert outcome == "skip" and run.reasons[cid].startswith("not applicable: "), (
            cid,
            outcome,
            run.reasons[cid],
        )
    generic = of(run.outcomes, (*GENERIC, "test_isolation"))
    assert set(generic.values()) == {"pass"}, {c: run.reasons[c] for c in generic}


LANES_VARIANT = (
    "TTReferenceLlamaForCausalLM="
    "vllm_tt_plugin.test_models.reference_llama:ReferenceLlamaLanesForCausalLM"
)


def test_lane_checks_see_rows_on_every_lane(tmp_path: Path) -> None:
    """Two in-process lanes: the lane checks pass and the counters show both lanes carried
    rows."""
    server = serve(
        tt={"sample_on_device_mode": "all"},
        vllm_args=["--data-parallel-size=2", "--max-num-seqs=4", "--max-model-len=512"],
        env={"TT_MODEL_CLASS_OVERRIDES": LANES_VARIANT},
        mesh="TG",
    )
    with server:
        run = run_suite(
            server.url, ["test_lanes"], tmp_path / "lanes", "--tt-lanes=2", "--tt-max-num-seqs=4"
        )
        _, counters = parse_metrics(requests.get(f"{server.url}/metrics", timeout=30).text)
    assert set(run.outcomes.values()) == {"pass"}, run.reasons
    lanes = counters.label_values("tt_lane_steps_total", "lane")
    assert set(lanes) == {"0", "1"} and min(lanes.values()) > 0, lanes
    assert counters.value("tt_multi_lane_steps_total") > 0
