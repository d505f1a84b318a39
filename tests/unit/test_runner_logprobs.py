"""Device logprobs through the real runner: which batches keep them on the device, and what
vLLM receives (the reference model computes them as tt-metal does; the host route is vLLM's
sampler on the same logits, so the two must agree)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from vllm.sampling_params import SamplingParams
from vllm.v1.outputs import AsyncModelRunnerOutput
from vllm.v1.request import Request

from tests.unit.test_runner_steps import prompt, serving
from tests.unit.tiny_checkpoint import BLOCK_HASHER, write_tiny_checkpoint
from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.step.runner_outputs import UNKNOWN_RANK

GPT_OSS = "vllm_tt_plugin.test_models.variants:GptOssForCausalLM"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("runner-logprobs"))


def logprob_rows(s: Any, logprobs: int, steps: int = 4) -> list[tuple[list[int], list[float], int]]:
    """Serve one greedy request; per generated token: (ids, logprobs, rank) as vLLM gets them."""
    req = Request(
        request_id=f"lp{logprobs}-{id(s)}",
        prompt_token_ids=prompt(3, 10),
        sampling_params=SamplingParams(
            max_tokens=steps, ignore_eos=True, temperature=0.0, logprobs=logprobs
        ),
        pooling_params=None,
        block_hasher=BLOCK_HASHER,
    )
    s.sched.add_request(req)
    rows = []
    while s.sched.has_requests():
        out = s.sched.schedule()
        result = s.worker.execute_model(out)
        if result is None:
            result = s.worker.sample_tokens(None)
        if isinstance(result, AsyncModelRunnerOutput):
            result = result.get_output()
        if result.logprobs is not None and result.sampled_token_ids[0]:
            ids, values, ranks, _ = result.logprobs
            rows.append((ids[0].tolist(), values[0].tolist(), int(ranks[0])))
        s.sched.update_from_output(out, result)
    return rows


def test_flat_sampled_token_logprob_on_8_devices_matches_the_host(
    make_config: Callable[..., Any], checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(make_config, checkpoint) as host:  # one device: logprobs go to the host
        want = logprob_rows(host, 0)
    monkeypatch.setenv("MESH_DEVICE", "T3K")  # 8 devices: the flat form is computed
    with serving(make_config, checkpoint, tt={"sample_on_device_mode": "all"}) as s:
        got = logprob_rows(s, 0)
        assert s.runner.last_route[StepKind.DECODE].on_device
        assert s.runner.stats.host_sampled_steps == 0
        # k >= 1 needs alternatives the flat form does not carry: that batch goes to the host.
        logprob_rows(s, 2)
        assert not s.runner.last_route[StepKind.DECODE].on_device
    assert [ids for ids, _, _ in got] == [ids for ids, _, _ in want]
    for (_, values, rank), (_, host_values, host_rank) in zip(got, want, strict=True):
        assert values == pytest.approx(host_values, abs=1e-4)
        assert rank == UNKNOWN_RANK and host_rank == 1  # greedy: the host knows it is rank 1


def test_gpt_oss_top_k_logprobs_match_the_host_with_ranks(
    make_config: Callable[..., Any], checkpoint: Path
) -> None:
    with serving(make_config, checkpoint, model_class=GPT_OSS) as host:
        want = logprob_rows(host, 3)
    with serving(make_config, checkpoint, model_class=GPT_OSS,
                 tt={"sample_on_device_mode": "all"}) as s:  # fmt: skip
        got = logprob_rows(s, 3)
        assert s.runner.last_route[StepKind.DECODE].on_device
        assert s.runner.stats.host_sampled_steps == 0
    assert len(got) == len(want) == 4
    for (ids, values, rank), (host_ids, host_values, host_rank) in zip(got, want, strict=True):
        assert ids == host_ids and len(ids) == 4  # sampled token first, then the top 3
        assert values == pytest.approx(host_values, abs=1e-4)
        assert rank == host_rank == 1
