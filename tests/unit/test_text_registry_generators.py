"""What the plugin drives when tt_transformers.vllm_registry serves: the generator's own model.

The importable stand-in (tests/unit/fakes/tt_transformers_tree) is laid out as
tenstorrent/tt-transformers is: ``tt_transformers.vllm_registry`` (@ db0b69c3) whose
architecture classes declare only the capabilities all their generators share and return the
generator selected by the checkpoint's Hugging Face id; three ``tt_transformers.models.<package>
.vllm_generator`` classes in the three forms the index holds (Llama 3.1 8B and Phi-4 @ 4fc26a3e,
Llama 3.2 1B @ 1f5f52bf), each normalising its calls through a ``VLLMAdapter`` that forwards
only its ``request_state_fields``. The checkpoint is a tiny Llama in a Hugging Face cache
snapshot directory, which is how the registry finds the id of a local checkpoint.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.outputs import AsyncModelRunnerOutput
from vllm.v1.request import Request

from tests.unit.tiny_checkpoint import (
    BLOCK_HASHER,
    start_worker_and_scheduler,
    write_tiny_checkpoint,
)
from vllm_tt_plugin.model_registry import get_registry
from vllm_tt_plugin.policy.sampling_route import row_feature

TREE = Path(__file__).parent / "fakes" / "tt_transformers_tree"
PENALISED = SamplingParams(temperature=0.8, top_k=8, repetition_penalty=1.3)
WIDE_TOP_K = SamplingParams(temperature=0.8, top_k=64)


@pytest.fixture
def tt_transformers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(TREE))
    yield
    for name in [m for m in sys.modules if m.split(".")[0] == "tt_transformers"]:
        del sys.modules[name]


def _snapshot(root: Path, hf_id: str, arch: str) -> Path:
    org, name = hf_id.split("/")
    path = root / f"models--{org}--{name}" / "snapshots" / "0123abcd"
    path.mkdir(parents=True)
    return write_tiny_checkpoint(path, architectures=[arch])


def _config(make_config: Any, tmp_path: Path, hf_id: str, arch: str) -> Any:
    config = make_config(
        model=_snapshot(tmp_path, hf_id, arch),
        model_class=None,
        tt={"emulated_mesh": True, "sample_on_device_mode": "all"},
        max_num_seqs=4,
        max_model_len=256,
    )
    assert get_registry().resolve(arch).source == "tt_transformers"
    return config


def _serve(make_config: Any, tmp_path: Path, hf_id: str, arch: str = "LlamaForCausalLM") -> Any:
    return start_worker_and_scheduler(_config(make_config, tmp_path, hf_id, arch), warm_up=False)[0]


def test_a_generator_s_own_top_k_and_penalties_limit_routing_instead_of_refusing_the_load(
    make_config: Any, tmp_path: Path, tt_transformers: None
) -> None:
    """Llama 3.1 8B's generator declares max_device_top_k 32, which its architecture class
    leaves out: the launch is planned without a limit and the instance used to be refused at
    load; now a row wider than 32 samples on the host, and penalties stay on the device (its
    adapter forwards the histories)."""
    worker = _serve(make_config, tmp_path, "meta-llama/Llama-3.1-8B-Instruct")
    try:
        model = worker.get_model()
        assert type(model).__qualname__ == "Llama3Generator"
        assert worker.plan.capabilities.max_device_top_k is None  # the class's
        served = worker.served.plan
        assert served.capabilities.max_device_top_k == 32
        assert row_feature(served, WIDE_TOP_K) == "top_k"
        assert row_feature(served, PENALISED) is None
    finally:
        worker.shutdown()


def test_a_generator_declaring_no_device_penalties_gets_penalised_rows_on_the_host(
    make_config: Any, tmp_path: Path, tt_transformers: None
) -> None:
    worker = _serve(make_config, tmp_path, "microsoft/phi-4", "Phi3ForCausalLM")
    try:
        assert type(worker.get_model()).__qualname__ == "Phi4Generator"
        assert worker.plan.capabilities.supports_device_penalties  # the class's default
        served = worker.served
        assert row_feature(served.plan, PENALISED) == "penalties"
        assert served.narrowed == (
            "supports_device_penalties False (the instance's): penalised rows sample on the host",
        )
    finally:
        worker.shutdown()


def test_a_generator_whose_adapter_drops_the_histories_gets_penalised_rows_on_the_host(
    make_config: Any, tmp_path: Path, tt_transformers: None
) -> None:
    """Llama 3.2 1B's generator declares nothing about penalties (so True by default) but its
    adapter forwards no request state: a penalised device decode would reach the sampler
    without prompt_tokens / output_tokens."""
    worker = _serve(make_config, tmp_path, "meta-llama/Llama-3.2-1B-Instruct")
    try:
        model = worker.get_model()
        assert type(model).__qualname__ == "Llama32_1BGenerator"
        assert worker.plan.capabilities.supports_device_penalties
        # The premise: what the plugin sends a penalised device decode never reaches the target.
        history = torch.zeros((4, 1), dtype=torch.int64)
        normalized, _ = model._adapter.normalize_decode(
            torch.zeros(4, dtype=torch.int64), torch.zeros(4, dtype=torch.int64), None,
            enable_trace=False, reset_batch=True,
            compatibility_kwargs={"prompt_tokens": history, "output_tokens": history},
        )  # fmt: skip
        assert "prompt_tokens" not in normalized and "output_tokens" not in normalized
        assert row_feature(worker.served.plan, PENALISED) == "penalties"
        assert row_feature(worker.served.plan, SamplingParams(temperature=0.8, top_k=8)) is None
    finally:
        worker.shutdown()


def test_a_penalised_request_to_a_generator_that_drops_the_histories_decodes_on_the_host(
    make_config: Any, tmp_path: Path, tt_transformers: None
) -> None:
    """Served end to end: the plain request samples on the device, the penalised one on the
    host. (Before, its decodes went to the device without the histories reaching the target,
    which the reference model refuses; tt-transformers' sampler would apply no penalty.)"""
    config = _config(make_config, tmp_path, "meta-llama/Llama-3.2-1B-Instruct", "LlamaForCausalLM")
    worker, sched = start_worker_and_scheduler(config)
    try:
        target = worker.get_model().target
        for index, penalty in enumerate((1.0, 1.3)):
            params = SamplingParams(
                max_tokens=4, ignore_eos=True, temperature=0.0, repetition_penalty=penalty
            )
            sched.add_request(
                Request(f"r{index}", [5, 6, 7, 8, 9], params, None, block_hasher=BLOCK_HASHER)
            )
            target.call_log.clear()
            while sched.has_requests():
                out = sched.schedule()
                result = worker.execute_model(out) or worker.sample_tokens(None)
                if isinstance(result, AsyncModelRunnerOutput):
                    result = result.get_output()
                sched.update_from_output(out, result)
            decodes = [r for r in target.call_log if r.method == "decode_forward"]
            assert decodes and {r.device_sampling for r in decodes} == {penalty == 1.0}, decodes
    finally:
        worker.shutdown()
