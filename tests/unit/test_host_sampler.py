"""The host sampling path: vLLM's InputBatch and Sampler, driven the way the TT runner does."""

from __future__ import annotations

from typing import Any

import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput

from vllm_tt_plugin.input_batch import TTRequestState
from vllm_tt_plugin.step.host_sampler import HostSampler

VOCAB = 256


def state(req_id: str, **params: Any) -> TTRequestState:
    return TTRequestState(
        req_id=req_id,
        prompt_token_ids=[1, 2, 3],
        sampling_params=SamplingParams(max_tokens=8, **params),
        block_ids=([1],),
        num_computed_tokens=3,
        lane=0,
        device_seed=1,
        generator=None,
    )


def logits_preferring(tokens: list[int]) -> torch.Tensor:
    """One row per request; row i's argmax is tokens[i]."""
    out = torch.zeros((len(tokens), VOCAB))
    for i, tok in enumerate(tokens):
        out[i, tok] = 10.0
    return out


def sample(sampler: HostSampler, states: list[TTRequestState], want: list[int]) -> list[int]:
    result = sampler.sample(states, logits_preferring(want), SchedulerOutput.make_empty(), None)
    return result.token_ids


def test_greedy_rows_follow_their_own_logits_in_caller_order(make_config: Any) -> None:
    sampler = HostSampler(make_config(max_num_seqs=8), 8, 64)
    a, b, c = state("a", temperature=0), state("b", temperature=0), state("c", temperature=0)
    assert sample(sampler, [a, b, c], [7, 8, 9]) == [7, 8, 9]
    assert sample(sampler, [c, a], [11, 12]) == [11, 12]  # membership and order change


def test_allowed_token_ids_never_leak_into_a_reused_row(make_config: Any) -> None:
    """vLLM's condense() leaves a vacated row's allowed-token mask behind; a request later
    placed on that row must not inherit it (it would only be able to sample 5 or 6)."""
    sampler = HostSampler(make_config(max_num_seqs=8), 8, 64)
    x, q = state("x", temperature=0), state("q", temperature=0)
    a = state("a", temperature=0, allowed_token_ids=[5, 6])
    assert sample(sampler, [x, q, a], [40, 41, 5]) == [40, 41, 5]
    assert sample(sampler, [a], [6]) == [6]  # x, q leave: a condensed from row 2 to row 0
    v, u = state("v", temperature=0), state("u", temperature=0)
    assert sample(sampler, [a, v, u], [5, 77, 99]) == [5, 77, 99]  # u lands on old row 2


def test_min_tokens_and_logit_bias_apply_per_row(make_config: Any) -> None:
    sampler = HostSampler(make_config(max_num_seqs=8), 8, 64)
    biased = state("b", temperature=0, logit_bias={33: 100.0})
    plain = state("p", temperature=0)
    assert sample(sampler, [biased, plain], [4, 4]) == [33, 4]


def test_seeded_rows_are_reproducible(make_config: Any) -> None:
    def run() -> list[int]:
        sampler = HostSampler(make_config(max_num_seqs=8), 8, 64)
        s = state("s", temperature=1.0, seed=3)
        s.generator = torch.Generator().manual_seed(3)
        flat = torch.zeros((1, VOCAB))
        for _ in range(5):
            token = sampler.sample([s], flat, SchedulerOutput.make_empty(), None).token_ids[0]
            s.output_token_ids.append(token)  # the next draw is at the next position
        return list(s.output_token_ids)

    first = run()
    assert first == run()
    assert len(set(first)) > 1  # a flat distribution really is sampled
