"""Both data-parallel modes in the real engine on emulated meshes."""

from __future__ import annotations

import re

import requests

from tests.engine.harness import (
    complete_many,
    hf_greedy,
    log_lines,
    mixed_prompts,
    runner_stats,
    serve,
)

LANES_VARIANT = (
    "TTReferenceLlamaForCausalLM="
    "vllm_tt_plugin.test_models.reference_llama:ReferenceLlamaLanesForCausalLM"
)


def test_lane_dp_four_lanes_of_eight() -> None:
    """--data-parallel-size 4 --max-num-seqs 8 on a lane model: 32 concurrent requests in one
    engine, spread over the lanes, each equal to its solo (HF greedy) output."""
    prompts = mixed_prompts(32, seed=11, min_len=4, max_len=120)
    max_tokens = 10
    want = [hf_greedy(p, max_tokens) for p in prompts]
    with serve(
        tt={"sample_on_device_mode": "all"},
        vllm_args=[
            "--data-parallel-size",
            "4",
            "--max-num-seqs",
            "8",
            "--max-model-len",
            "512",
            "--async-scheduling",
        ],
        env={"TT_MODEL_CLASS_OVERRIDES": LANES_VARIANT},
        mesh="TG",
    ) as server:
        got = complete_many(server.url, prompts, max_tokens, workers=32)
        constrained = structured_batch(server.url)
    assert got == want
    assert constrained == [True] * len(constrained), "structured output invalid across lanes"
    assert log_lines(server, "running single-process lane-DP: 4 lanes x 8 sequences")
    stats = runner_stats(server)
    assert len(stats) == 1, "lane-DP runs one engine"
    admissions = stats[0]["lane_admissions"]
    assert len(admissions) == 4 and sum(admissions) == len(prompts) + len(constrained)
    assert min(admissions) >= 4, f"requests not spread over lanes: {admissions}"
    # Lanes share the step mode: steps carry rows of several lanes, and never mix prefill with
    # decode (the runner refuses such a step, which would have failed requests above).
    assert stats[0]["multi_lane_steps"] > 0, stats[0]


def structured_batch(url: str) -> list[bool]:
    """Constrained requests spread over lanes in one step (each lane fills the grammar bitmask
    of its own requests; a mix-up surfaces as grammar-rejected tokens and HTTP 500)."""
    choices = ["yes", "no", "maybe"]
    bodies = [
        {"prompt": "Is it? Answer:", "structured_outputs": {"choice": choices}},
        {"prompt": "Number:", "structured_outputs": {"regex": "[0-9]{3}"}},
    ] * 4 + [{"prompt": "1 2 3"}] * 4
    import concurrent.futures as cf

    def one(body: dict) -> bool:
        resp = requests.post(
            f"{url}/v1/completions",
            json={"model": "ref", "max_tokens": 8, "temperature": 0, **body},
            timeout=300,
        )
        if resp.status_code != 200:
            return False
        text = resp.json()["choices"][0]["text"]
        so = body.get("structured_outputs")
        if so is None:
            return True
        if "choice" in so:
            return text in choices
        return re.fullmatch(so["regex"], text) is not None

    with cf.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(one, bodies))


def test_standard_dp_ranks_own_their_device_groups() -> None:
    prompts = mixed_prompts(16, seed=12, min_len=4, max_len=100)
    max_tokens = 8
    want = [hf_greedy(p, max_tokens) for p in prompts]
    with serve(
        vllm_args=["--data-parallel-size", "2", "--max-num-seqs", "8", "--max-model-len", "512"],
        mesh="T3K",
    ) as server:
        got = complete_many(server.url, prompts, max_tokens)
    assert got == want
    assert log_lines(server, "TT: DP rank 0 uses device group [0, 1, 2, 3]")
    assert log_lines(server, "TT: DP rank 1 uses device group [4, 5, 6, 7]")
    assert log_lines(server, "host-emulated mesh T3K/dp0 (1, 4)")
    assert log_lines(server, "host-emulated mesh T3K/dp1 (1, 4)")
    stats = runner_stats(server)
    assert len(stats) == 2, "one engine (and runner) per DP rank"
    assert all(s["prefill_steps"] > 0 for s in stats), "both ranks served requests"
