"""Engine tests: a hybrid (sliding-window / full attention) model through vLLM's hybrid KV manager.

The server serves `fixtures/models/tt-reference-hybrid` (HF SmolLM3, layers alternating sliding /
full attention, window 96 tokens) as `ReferenceHybridForCausalLM` on the emulated mesh. Prompts
are longer than the window, so vLLM frees the sliding group's out-of-window blocks while the
model keeps decoding; greedy tokens must equal transformers' SmolLM3 token for token. The start-up
log proves the KV cache really is hybrid: two groups, the sliding group's per-request KV a small
fraction of the full group's, and the TT block budget's sliding-window headroom.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.engine.harness import (
    complete_ids,
    complete_many,
    hf_greedy,
    live_stats,
    log_lines,
    metric,
    serve,
    text_id_end,
)
from vllm_tt_plugin.adapter.kv_cache import compute_block_budget

# Engine tests may point at another hybrid checkpoint (same format) while developing.
MODEL = Path(
    os.environ.get(
        "TT_ENGINE_TEST_HYBRID_MODEL", str(REPO / "fixtures" / "models" / "tt-reference-hybrid")
    )
)
MAX_TOKENS = 16
BLOCK = 64  # the TT default block size
SEQS = 8
PRESSURE_ROUNDS = 3  # batches sent until the small KV pool preempts (the preemption test)

GROUP_RE = re.compile(
    r"TT KV cache group (\d+): (\w+) x (\d+) layer\(s\), sliding_window=(\w+); one request holds "
    r"at most (\d+) blocks = (\d+) bytes per layer"
)
POOL_RE = re.compile(
    r"TT KV pool per lane: (\d+) blocks of (\d+) tokens \(budget (\d+) tokens = (\d+) blocks, "
    r"\+(\d+) sequence headroom, \+(\d+) sliding-window headroom\)"
)
OVERRIDE_RE = re.compile(r"with num_gpu_blocks_override=(\d+)")


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    path = MODEL / "config.json"
    if not path.is_file():
        pytest.fail(f"{MODEL} is missing: run `python tools/make_hybrid_checkpoint.py`")
    cfg = json.loads(path.read_text())
    assert "sliding_attention" in cfg["layer_types"] and "full_attention" in cfg["layer_types"]
    return cfg


def long_prompts(cfg: dict[str, Any], n: int, seed: int, lo: int, hi: int) -> list[list[int]]:
    """Token-id prompts around and well beyond the window (ordinary ids only)."""
    rng = random.Random(seed)
    window = cfg["sliding_window"]
    lengths = [window - 1, window, window + 1, 2 * BLOCK + 1]
    while len(lengths) < n:
        lengths.append(rng.randint(lo, hi))
    end = text_id_end(MODEL)
    return [[rng.randrange(end) for _ in range(k)] for k in lengths[:n]]


def hf_reference(prompts: list[list[int]], max_tokens: int = MAX_TOKENS) -> list[list[int]]:
    return [hf_greedy(p, max_tokens, model_dir=MODEL) for p in prompts]


def assert_parity(got: list[list[int]], want: list[list[int]], prompts: list[list[int]]) -> None:
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    assert not bad, (
        f"{len(bad)}/{len(want)} prompts differ from HF SmolLM3 greedy; first: prompt {bad[0]} "
        f"(len {len(prompts[bad[0]])}): {got[bad[0]]} != {want[bad[0]]}"
    )


def kv_groups(server: Any) -> list[dict[str, Any]]:
    groups = []
    for line in log_lines(server, "TT KV cache group"):
        match = GROUP_RE.search(line)
        assert match, f"unparsable group line: {line}"
        gid, kind, layers, window, blocks, size = match.groups()
        groups.append(
            {
                "id": int(gid),
                "kind": kind,
                "layers": int(layers),
                "window": None if window == "None" else int(window),
                "blocks": int(blocks),
                "bytes": int(size),
            }
        )
    return groups


def test_hybrid_parity_two_groups_and_sliding_memory(config: dict[str, Any]) -> None:
    """Chunked prefill (64-token steps), host sampling, 4096-token context."""
    max_model_len, batched = 4096, 64
    window = config["sliding_window"]
    prompts = long_prompts(config, 16, seed=1, lo=window + 2, hi=420)
    want = hf_reference(prompts)
    args = ["--max-num-seqs", str(SEQS), "--max-model-len", str(max_model_len)]
    args += ["--max-num-batched-tokens", str(batched), "--no-async-scheduling"]
    with serve(model=MODEL, vllm_args=args) as server:
        got = complete_many(server.url, prompts, MAX_TOKENS)
        stats = live_stats(server)
    assert_parity(got, want, prompts)
    assert stats["prefill_chunks"] > 0, "long prompts were not split into chunks"

    # vLLM's hybrid manager packed one sliding and one full group (the plugin logs each).
    groups = kv_groups(server)
    assert [(g["id"], g["kind"], g["window"]) for g in groups] == [
        (0, "SlidingWindowSpec", window),
        (1, "FullAttentionSpec", None),
    ]
    kinds = config["layer_types"]
    assert [g["layers"] for g in groups] == [
        kinds.count("sliding_attention"),
        kinds.count("full_attention"),
    ]
    sliding, full = groups
    # Per request a full layer holds max_model_len; a sliding one the window - 1 tokens before
    # the next plus the tokens in flight (one 64-token step), +1 block for alignment.
    assert full["blocks"] == math.ceil(max_model_len / BLOCK)
    assert sliding["blocks"] == math.ceil((window - 1 + batched) / BLOCK) + 1
    ratio = sliding["bytes"] / full["bytes"]
    assert ratio <= (window + batched + 2 * BLOCK) / max_model_len
    assert ratio < 0.1, f"sliding/full per-request KV = {ratio:.3f}"

    # The TT block budget adds ceil(window / block) + 1 sliding blocks per sequence (plus the
    # blocks of the tokens in flight) to what
    # kv_cache.compute_block_budget gives a uniform model, and vLLM built its pool with exactly
    # the logged number of blocks.
    [pool] = [POOL_RE.search(line) for line in log_lines(server, "TT KV pool per lane")]
    assert pool is not None
    total, block, budget_tokens, budget_blocks, seq_room, sliding_room = map(int, pool.groups())
    assert (block, seq_room) == (BLOCK, SEQS)
    in_flight_tokens = batched  # one batch in flight without async scheduling
    assert sliding_room == SEQS * (math.ceil(window / BLOCK) + 1) + math.ceil(
        in_flight_tokens / BLOCK
    )
    expected = compute_block_budget(budget_tokens, BLOCK, SEQS, [window], in_flight_tokens)
    assert (total, budget_blocks, sliding_room) == (
        expected.num_blocks,
        expected.budget_blocks,
        expected.sliding_headroom,
    )
    assert total == compute_block_budget(budget_tokens, BLOCK, SEQS).num_blocks + sliding_room
    lines = log_lines(server, "Overriding num_gpu_blocks")
    assert {int(m.group(1)) for m in map(OVERRIDE_RE.search, lines) if m} == {total}, lines


def test_hybrid_parity_device_sampling_async_no_prefix_cache_and_preemption(
    config: dict[str, Any],
) -> None:
    """Device sampling with async scheduling, shared prefixes past the window, and a KV pool
    small enough that requests are preempted and replayed. A sliding-window model never keeps
    prefix caching on TT (contract v2): asked for, it is turned off with a warning."""
    window = config["sliding_window"]
    rng = random.Random(7)
    end = text_id_end(MODEL)
    prefix = [rng.randrange(end) for _ in range(2 * window + 40)]
    shared = [prefix + [rng.randrange(end) for _ in range(rng.randint(1, 60))] for _ in range(8)]
    prompts = shared + long_prompts(config, 8, seed=2, lo=window + 2, hi=300)
    max_tokens = 48
    want = hf_reference(prompts, max_tokens)
    args = ["--max-num-seqs", str(SEQS), "--max-model-len", "512", "--async-scheduling"]
    args += ["--enable-prefix-caching", "--max-num-batched-tokens", "128"]
    # A 64-token budget: 1 budget block + 8 sequence + 24 sliding + 4 in-flight headroom blocks
    # (2 async batches of 128 tokens) + the null block, for 8 sequences of up to ~340 tokens
    # (6 full + 3-4 sliding blocks each), so decode growth preempts.
    env = {"TT_REFERENCE_MAX_TOKENS_ALL_USERS": "64"}
    with serve(model=MODEL, tt={"sample_on_device_mode": "all"}, vllm_args=args, env=env) as server:
        first = complete_ids(server.url, prompts[0], max_tokens)  # fills the prefix cache
        # How many long requests decode at once depends on how the prefill chunks and decode
        # steps of concurrent arrivals interleave, so the pool runs out only in most rounds:
        # send the batch again (at most PRESSURE_ROUNDS times) until a preemption happened.
        # Every round must match the reference.
        for _ in range(PRESSURE_ROUNDS):
            rest = complete_many(server.url, prompts[1:], max_tokens)
            assert_parity([first, *rest], want, prompts)
            preemptions = metric(server.url, "vllm:num_preemptions_total")
            if preemptions > 0:
                break
        hits = metric(server.url, "vllm:prefix_cache_hits_total")
        stats = live_stats(server)
    assert hits == 0, "prefix caching stayed on for a sliding-window model"
    assert log_lines(server, "has a sliding window"), "no warning that prefix caching is off"
    assert preemptions > 0, "the small KV pool never preempted a request"
    assert stats["device_sampled_steps"] > 0 and stats["overlapped_decodes"] > 0
    assert len(kv_groups(server)) == 2
