"""Block budget arithmetic and the max_model_len x KV pool table, through vLLM's real planner."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from vllm.v1.core.kv_cache_utils import get_kv_cache_configs

from tests.conftest import write_checkpoint_config
from vllm_tt_plugin.adapter.kv_cache import (
    compute_block_budget,
    pool_bytes_per_block,
    uniform_kv_cache_spec,
)


def test_budget_arithmetic() -> None:
    budget = compute_block_budget(131072, 64, 32)
    assert budget.budget_blocks == 2048
    assert budget.sequence_headroom == 32
    assert budget.num_blocks == 2080 + 1  # + vLLM's null block
    assert budget.usable_tokens == 2080 * 64
    assert compute_block_budget(100, 64, 4).num_blocks == 2 + 4 + 1  # rounds up


def test_sliding_window_headroom_per_group() -> None:
    budget = compute_block_budget(4096, 64, 8, windows=[512, 1000])
    assert budget.sliding_headroom == 8 * (8 + 1) + 8 * (16 + 1)
    # in-flight tokens (a prefill chunk per concurrent batch) add to every sliding group
    in_flight = compute_block_budget(4096, 64, 8, windows=[512, 1000], max_in_flight_tokens=4096)
    assert in_flight.sliding_headroom == budget.sliding_headroom + 2 * 64
    assert budget.num_blocks == 64 + 8 + budget.sliding_headroom + 1


def plan(config: Any, budget_tokens: int) -> list[Any]:
    """What the engine does after TTWorker.determine_available_memory()."""
    specs = uniform_kv_cache_spec(config)
    budget = compute_block_budget(
        budget_tokens, config.cache_config.block_size, config.scheduler_config.max_num_seqs
    )
    config.cache_config.num_gpu_blocks_override = budget.num_blocks
    available = budget.num_blocks * pool_bytes_per_block(config, specs)
    return get_kv_cache_configs(config, [specs], [available])


def test_byte_budget_converts_back_to_the_block_count(make_config: Any) -> None:
    config = make_config(max_model_len=512, max_num_seqs=4)
    specs = uniform_kv_cache_spec(config)
    budget = compute_block_budget(4096, 64, 4)
    # Without the override (another process): the bytes alone give the same count.
    available = budget.num_blocks * pool_bytes_per_block(config, specs)
    assert get_kv_cache_configs(config, [specs], [available])[0].num_blocks == budget.num_blocks


def test_numeric_max_model_len_that_fits_is_used(make_config: Any) -> None:
    config = make_config(max_model_len=512, max_num_seqs=4)
    kv = plan(config, 4096)[0]
    assert config.model_config.max_model_len == 512
    assert kv.num_blocks == 4096 // 64 + 4 + 1


def test_numeric_max_model_len_over_the_pool_fails_with_estimate(make_config: Any) -> None:
    config = make_config(max_model_len=1024, max_num_seqs=1)
    with pytest.raises(ValueError, match="estimated maximum model length is 640"):
        plan(config, 500)


def test_auto_fit_minus_one_fits_the_pool(make_config: Any) -> None:
    config = make_config(max_model_len=-1, max_num_seqs=2)
    plan(config, 256)
    blocks = math.ceil(256 / 64) + 2 + 1
    assert config.model_config.max_model_len == blocks * 64  # vLLM's own fit counts block 0


def test_omitted_uses_hf_value_and_fails_clearly_if_too_big(
    make_config: Any, tmp_path: Path
) -> None:
    config = make_config(max_num_seqs=2)
    assert config.model_config.max_model_len == 1024  # max_position_embeddings
    plan(config, 4096)
    big = write_checkpoint_config(tmp_path / "long", max_position_embeddings=65536)
    config = make_config(model=big, max_num_seqs=2)
    with pytest.raises(ValueError, match="max seq len \\(65536\\)"):
        plan(config, 4096)


def _worker(config: Any) -> Any:
    from vllm_tt_plugin.worker import TTWorker

    return TTWorker(config, local_rank=0, rank=0, distributed_init_method="tcp://127.0.0.1:1")


def test_worker_fits_minus_one_to_usable_pool(make_config: Any) -> None:
    config = make_config(max_model_len=-1, max_num_seqs=2)
    budget = compute_block_budget(512, 64, 2)  # 8 + 2 usable blocks (+ null block)
    _worker(config)._fit_max_model_len(budget)
    assert config.model_config.max_model_len == 10 * 64
    # vLLM's own auto-fit then keeps it: one request at the limit fits the usable blocks
    specs = uniform_kv_cache_spec(config)
    config.cache_config.num_gpu_blocks_override = budget.num_blocks
    get_kv_cache_configs(config, [specs], [budget.num_blocks * pool_bytes_per_block(config, specs)])
    assert config.model_config.max_model_len == 10 * 64


def test_worker_refuses_a_length_only_the_null_block_would_fit(make_config: Any) -> None:
    config = make_config(max_model_len=11 * 64, max_num_seqs=2)
    with pytest.raises(ValueError, match="estimated maximum model length is 640"):
        _worker(config)._fit_max_model_len(compute_block_budget(512, 64, 2))
    config = make_config(max_model_len=10 * 64, max_num_seqs=2)
    _worker(config)._fit_max_model_len(compute_block_budget(512, 64, 2))
    assert config.model_config.max_model_len == 640
