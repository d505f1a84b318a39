"""A seeded request samples the same tokens on the device route and on the host route.

The reference device sampler and the plugin's host path (vLLM's Sampler) both draw vLLM's
exponential race with a generator seeded by (seed, position) (the TT seeding convention), so a
per-batch route switch caused by some other request cannot change a seeded request's tokens.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput

from vllm_tt_plugin.contract.sampling_params import TTSamplingParams, seeded_draw_seed
from vllm_tt_plugin.input_batch import TTRequestState, device_rows
from vllm_tt_plugin.step.host_sampler import HostSampler
from vllm_tt_plugin.test_models.sampling import sample as device_sample
from vllm_tt_plugin.test_models.sampling import tensors_from_params

VOCAB = 256


def seeded_state(seed: int, prompt_len: int, **params: Any) -> TTRequestState:
    return TTRequestState(
        req_id=f"s{seed}-{prompt_len}",
        prompt_token_ids=list(range(1, prompt_len + 1)),
        sampling_params=SamplingParams(max_tokens=4, seed=seed, **params),
        block_ids=([1],),
        num_computed_tokens=prompt_len,
        lane=0,
        device_seed=seed,
        generator=torch.Generator().manual_seed(seed),
    )


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 20},
        {"temperature": 1.3, "top_p": 0.8},
        {"temperature": 0.9, "top_k": 50, "top_p": 0.9},
    ],
)
def test_device_and_host_draws_agree(make_config: Any, params: dict[str, Any]) -> None:
    sampler = HostSampler(make_config(max_num_seqs=8), 8, 64)
    gen = torch.Generator().manual_seed(0)
    agree = 0
    for trial in range(40):
        logits = torch.randn((1, VOCAB), generator=gen) * 3
        state = seeded_state(seed=1000 + trial, prompt_len=5 + trial, **params)
        host = sampler.sample([state], logits, SchedulerOutput.make_empty(), None).token_ids[0]
        encoded = TTSamplingParams.encode(device_rows([state]), VOCAB)
        rows = tensors_from_params(encoded, 1, VOCAB, "test")
        position = torch.tensor([state.num_tokens - 1])
        device = int(device_sample(logits.clone(), rows, None, position)[0])
        agree += host == device
    assert agree == 40


def test_seeded_draws_depend_on_seed_and_position_only() -> None:
    assert seeded_draw_seed(5, 10) == seeded_draw_seed(5, 10)
    assert seeded_draw_seed(5, 10) != seeded_draw_seed(5, 11)
    assert seeded_draw_seed(5, 10) != seeded_draw_seed(6, 10)
    assert 0 <= seeded_draw_seed(-3, 2**40) < 2**64
