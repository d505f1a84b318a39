"""A tiny random Llama checkpoint served as the reference model, the engine core's block hasher,
and the start-up of TTWorker + the TT scheduler in-process: shared by the runner-level tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import (
    get_kv_cache_configs,
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.structured_output import StructuredOutputManager

from vllm_tt_plugin.launch.launch_plan import read_plan
from vllm_tt_plugin.scheduler import TTSchedulerBase, scheduler_class
from vllm_tt_plugin.worker import TTWorker

TINY: dict[str, Any] = dict(
    vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
)  # fmt: skip

_HASH = get_hash_fn_by_name("sha256")
init_none_hash(_HASH)
# As the engine core does with prefix caching (64 = the TT block size); the hashes include
# the identifiers of a request's multimodal items.
BLOCK_HASHER = get_request_block_hasher(64, _HASH)


def write_tiny_checkpoint(path: Path, **config: Any) -> Path:
    """Random (seeded) HF Llama weights under the reference model's architecture name; extra
    keyword arguments are written into config.json."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**TINY, tie_word_embeddings=False)).save_pretrained(path)
    data = json.loads((path / "config.json").read_text())
    data["architectures"] = ["ReferenceLlamaForCausalLM"]
    data.update(config)
    (path / "config.json").write_text(json.dumps(data))
    return path


def start_worker_and_scheduler(
    config: Any, warm_up: bool = True
) -> tuple[TTWorker, TTSchedulerBase]:
    """The engine core's start-up sequence over ``config``; the caller shuts the worker down."""
    worker = TTWorker(config, local_rank=0, rank=0, distributed_init_method="tcp://127.0.0.1:1")
    worker.init_device()
    try:
        worker.load_model()
        specs, available = worker.get_kv_cache_spec(), worker.determine_available_memory()
        kv = get_kv_cache_configs(config, [specs], [available])[0]
        worker.initialize_from_config(kv)
        if warm_up:
            worker.compile_or_warm_up_model()
        sched = scheduler_class(read_plan(config))(
            vllm_config=config,
            kv_cache_config=kv,
            structured_output_manager=StructuredOutputManager(config),
            block_size=config.cache_config.block_size,
        )
    except BaseException:
        worker.shutdown()
        raise
    return worker, sched
