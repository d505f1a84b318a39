"""A server on the timing-only emulated device (the host-overhead benchmark's): requests complete
with the closed-form greedy tokens and sampled-token logprobs, async decode overlaps, and the
plugin's host phase times are on /metrics for both step kinds."""

from __future__ import annotations

import math
import time

import pytest
import requests
import torch
from prometheus_client.parser import text_string_to_metric_families

from tests.engine.harness import complete_many, metric, serve, vocab_size
from vllm_tt_plugin.observability.host_phases import MODEL_PHASES, PLUGIN_PHASES, VLLM_PHASES
from vllm_tt_plugin.test_models import timing_only


def closed_form(prompt: list[int], steps: int, vocab: int) -> list[int]:
    seq = list(prompt)
    for _ in range(steps):
        nxt = timing_only.next_token(torch.tensor([seq[-1]]), torch.tensor([len(seq) - 1]), vocab)
        seq.append(int(nxt))
    return seq[len(prompt) :]


def test_timing_only_server_is_contract_correct_and_times_its_phases() -> None:
    server = serve(
        tt={"sample_on_device_mode": "all"},
        vllm_args=["--max-num-seqs", "4", "--max-model-len", "256", "--async-scheduling"],
        env={"TT_EMULATED_TIMING_ONLY": "1", "TT_EMULATED_STEP_MS": "2"},
        mesh="T3K",  # 8 devices: the flat sampled-token logprob is computed on the device
    )
    vocab = vocab_size()
    prompts = [[5, 6, 7], [100, 3], [9] * 11, [42]]
    with server:
        got = complete_many(server.url, prompts, 12)
        assert got == [closed_form(p, 12, vocab) for p in prompts]
        body = {"model": "ref", "prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0,
                "ignore_eos": True, "logprobs": 0}  # fmt: skip
        resp = requests.post(f"{server.url}/v1/completions", json=body, timeout=120)
        assert resp.status_code == 200, resp.text
        logprobs = resp.json()["choices"][0]["logprobs"]["token_logprobs"]
        peak = timing_only.PEAK
        want = peak - math.log(math.exp(peak) + vocab - 1)
        assert logprobs == [pytest.approx(want, abs=1e-4)] * 3
        assert metric(server.url, "tt_async_overlapped_decodes_total") > 0
        time.sleep(0.6)  # the engine publishes its phase table every 0.25 s
        text = requests.get(f"{server.url}/metrics", timeout=30).text
    seconds: dict[tuple[str, str], float] = {}
    cpu: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "tt_host_seconds_total":
                seconds[(s.labels["kind"], s.labels["phase"])] = s.value
            elif s.name == "tt_host_cpu_seconds_total":
                cpu[(s.labels["kind"], s.labels["part"])] = s.value
    # The engine thread's CPU time of each part: positive, and never more than the wall time
    # of the same spans (the plugin's holds the device-call hand-off, inside the model phases).
    for kind in ("prefill", "decode"):
        wall_plugin = sum(seconds[(kind, p.value)] for p in (*PLUGIN_PHASES, *MODEL_PHASES))
        wall_vllm = sum(seconds[(kind, p.value)] for p in VLLM_PHASES)
        assert 0 < cpu[(kind, "plugin")] <= wall_plugin * 1.05 + 1e-3, (kind, cpu, seconds)
        assert 0 < cpu[(kind, "vllm")] <= wall_vllm * 1.05 + 1e-3, (kind, cpu, seconds)
    for kind in ("prefill", "decode"):
        for phase in (*PLUGIN_PHASES, *VLLM_PHASES):
            assert (kind, phase.value) in seconds, (kind, phase)
        assert seconds[(kind, "input_build")] > 0
        assert seconds[(kind, "vllm_schedule")] > 0
    assert seconds[("decode", "output_build")] > 0
