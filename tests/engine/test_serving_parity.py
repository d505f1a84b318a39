"""Served greedy tokens equal Hugging Face's for the same weights, under every execution mode.

Each test starts one emulated server with one feature switched on or off and sends the same
mixed-length prompts concurrently. Every configuration is compared token for token with HF
transformers' greedy output, so any two configurations (feature on / off) are equal too. The
runner's own counters (logged at shutdown) or vLLM's metrics prove the feature really engaged.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.engine.harness import (
    complete_ids,
    complete_many,
    hf_greedy,
    live_stats,
    metric,
    mixed_prompts,
    serve,
    shared_prefix_prompts,
)

MAX_TOKENS = 12
PROMPTS = mixed_prompts(64)
BASE_ARGS = ["--max-num-seqs", "16", "--max-model-len", "512"]


@pytest.fixture(scope="module")
def hf_reference() -> list[list[int]]:
    return [hf_greedy(p, MAX_TOKENS) for p in PROMPTS]


def assert_parity(got: list[list[int]], want: list[list[int]]) -> None:
    mismatched = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    assert not mismatched, (
        f"{len(mismatched)}/{len(want)} prompts differ from HF greedy, first: prompt "
        f"{mismatched[0]} (len {len(PROMPTS[mismatched[0]])}): {got[mismatched[0]]} != "
        f"{want[mismatched[0]]}"
    )


def test_host_sampling_parity(hf_reference: list[list[int]]) -> None:
    with serve(vllm_args=BASE_ARGS) as server:
        assert_parity(complete_many(server.url, PROMPTS, MAX_TOKENS), hf_reference)
        stats = live_stats(server)
    assert stats["host_sampled_steps"] > 0 and stats["device_sampled_steps"] == 0


def test_device_sampling_with_async_decode_parity(hf_reference: list[list[int]]) -> None:
    # No --async-scheduling: a model declaring supports_async_decode gets vLLM's default (on).
    with serve(tt={"sample_on_device_mode": "all"}, vllm_args=BASE_ARGS) as server:
        assert_parity(complete_many(server.url, PROMPTS, MAX_TOKENS), hf_reference)
        stats = live_stats(server)
    assert stats["device_sampled_steps"] > 0 and stats["host_sampled_steps"] == 0
    assert stats["overlapped_decodes"] > 0


def test_device_sampling_without_async_parity(hf_reference: list[list[int]]) -> None:
    with serve(
        tt={"sample_on_device_mode": "decode_only"},
        vllm_args=[*BASE_ARGS, "--no-async-scheduling"],
    ) as server:
        assert_parity(complete_many(server.url, PROMPTS, MAX_TOKENS), hf_reference)
        stats = live_stats(server)
    assert stats["overlapped_decodes"] == 0 and stats["device_sampled_steps"] > 0


def test_chunked_prefill_parity(hf_reference: list[list[int]]) -> None:
    # A 64-token budget splits every prompt longer than 64 tokens across prefill steps.
    with serve(vllm_args=[*BASE_ARGS, "--max-num-batched-tokens", "64"]) as server:
        assert_parity(complete_many(server.url, PROMPTS, MAX_TOKENS), hf_reference)
        stats = live_stats(server)
    assert stats["prefill_chunks"] > 0, "no prompt was split into chunks"


def test_unchunked_prefill_parity(hf_reference: list[list[int]]) -> None:
    with serve(vllm_args=[*BASE_ARGS, "--no-enable-chunked-prefill"]) as server:
        assert_parity(complete_many(server.url, PROMPTS, MAX_TOKENS), hf_reference)


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_prefix_caching_parity(prefix_caching: bool) -> None:
    prompts = shared_prefix_prompts(12, prefix_len=150)
    want = [hf_greedy(p, MAX_TOKENS) for p in prompts]
    flag = "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching"
    with serve(vllm_args=[*BASE_ARGS, flag]) as server:
        first = complete_ids(server.url, prompts[0], MAX_TOKENS)  # fills the cache
        rest = complete_many(server.url, prompts[1:], MAX_TOKENS)
        hits = metric(server.url, "vllm:prefix_cache_hits_total")
    assert [first, *rest] == want
    assert (hits > 0) is prefix_caching


def test_forced_preemption_parity() -> None:
    prompts = mixed_prompts(16, seed=3, min_len=40, max_len=90)
    max_tokens = 40
    want = [hf_greedy(p, max_tokens) for p in prompts]
    # 1024 tokens (16 blocks + headroom) for 16 sequences that each need ~2 blocks.
    env = {"TT_REFERENCE_MAX_TOKENS_ALL_USERS": "1024"}
    with serve(tt={"sample_on_device_mode": "all"}, vllm_args=BASE_ARGS, env=env) as server:
        got = complete_many(server.url, prompts, max_tokens)
        preemptions = metric(server.url, "vllm:num_preemptions_total")
    assert preemptions > 0
    assert_parity_list(got, want)


def assert_parity_list(got: list[list[int]], want: list[list[int]]) -> None:
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    assert not bad, f"prompts {bad} differ from HF greedy"


def test_host_device_switches_inside_one_run() -> None:
    """Greedy requests keep HF's tokens while host-only companions (min_p, logit_bias) come and
    go, switching the batch between device and host sampling."""
    prompts = mixed_prompts(8, seed=5, min_len=10, max_len=60)
    max_tokens = 48
    want = [hf_greedy(p, max_tokens) for p in prompts]
    import concurrent.futures as cf

    with (
        serve(
            tt={"sample_on_device_mode": "all"}, vllm_args=[*BASE_ARGS, "--async-scheduling"]
        ) as server,
        cf.ThreadPoolExecutor(16) as pool,
    ):
        greedy = [pool.submit(complete_ids, server.url, p, max_tokens) for p in prompts]
        companions = []
        for i in range(6):
            time.sleep(0.15)
            extra: dict[str, Any] = (
                {"min_p": 0.05, "temperature": 1.0, "seed": i}
                if i % 2
                else {"logit_bias": {"9": 5.0}}
            )
            companions.append(pool.submit(complete_ids, server.url, prompts[i][:5], 8, **extra))
        got = [f.result() for f in greedy]
        for f in companions:
            f.result()
        stats = live_stats(server)
    assert_parity_list(got, want)
    assert stats["host_sampled_steps"] > 0 and stats["device_sampled_steps"] > 0


def test_legacy_decode_contract_parity(hf_reference: list[list[int]]) -> None:
    env = {
        "TT_MODEL_CLASS_OVERRIDES": (
            "TTReferenceLlamaForCausalLM=vllm_tt_plugin.test_models.variants:LegacyDecodeContract"
        )
    }
    with serve(tt={"sample_on_device_mode": "all"}, vllm_args=BASE_ARGS, env=env) as server:
        assert_parity(complete_many(server.url, PROMPTS, MAX_TOKENS), hf_reference)
