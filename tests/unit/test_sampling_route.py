"""Per-batch sampling route: every host-only feature, each mode, each capability gate."""

from __future__ import annotations

from typing import Any

import pytest
from vllm.sampling_params import SamplingParams, StructuredOutputsParams

from vllm_tt_plugin.config import TTOptions
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.launch.data_parallel import LaneLayout
from vllm_tt_plugin.launch.launch_plan import LaunchPlan, resolve_plan
from vllm_tt_plugin.model_registry import ModelTarget
from vllm_tt_plugin.policy.device_logprobs import SAMPLING_EPS, DeviceLogprobSupport
from vllm_tt_plugin.policy.sampling_route import (
    Route,
    StepKind,
    choose_route,
    decide_route,
    host_only_feature,
    row_feature,
)

CAPS = ModelCapabilities(supports_sample_on_device=True, max_device_top_k=32)
ON = TTOptions(sample_on_device_mode="all")
PLAIN = SamplingParams(temperature=0.7, top_k=10, top_p=0.9, seed=3)
NO_LOGPROBS = DeviceLogprobSupport()
FLAT = DeviceLogprobSupport(flat=True)  # 8 or 32 devices per rank
TOP_K = DeviceLogprobSupport(top_k=True)  # GPT-OSS


def plan(
    options: TTOptions = ON,
    caps: ModelCapabilities = CAPS,
    logprobs: DeviceLogprobSupport = NO_LOGPROBS,
) -> LaunchPlan:
    """The launch plan choose_route takes its static inputs from."""
    return resolve_plan(
        options,
        ModelTarget("TTReferenceLlamaForCausalLM", "tests.unit.fakes.models:CapableModel", "test"),
        caps,
        decode_contract=1,
        lanes=LaneLayout(1, 4),
        top_k_logprobs=logprobs.top_k,
        flat_logprobs=logprobs.flat,
    )


HOST_ONLY: list[tuple[str, dict[str, Any]]] = [
    ("min_p", {"min_p": 0.1}),
    ("logit_bias", {"logit_bias": {5: 100.0}}),
    ("min_tokens", {"min_tokens": 4}),
    ("allowed_token_ids", {"allowed_token_ids": [1, 2, 3]}),
    ("bad_words", {"bad_words": ["cat"]}),
    ("structured_outputs", {"structured_outputs": StructuredOutputsParams(choice=["a", "b"])}),
    ("logprobs", {"logprobs": 0}),  # no device logprobs on this mesh
    ("logprobs", {"logprobs": 5}),
    ("logprob_token_ids", {"logprob_token_ids": [4, 5]}),
    ("top_k", {"top_k": 33, "temperature": 0.8}),
    ("top_k", {"top_k": -1, "temperature": 0.8}),  # stochastic, top_k off: outside 1..32
]


def test_the_first_host_only_row_names_the_host_route() -> None:
    """The runner derives each request's feature once (``row_feature``) and decides per batch
    from those; the batch's first host-only row names the route, and no row after it is read."""
    rows = [PLAIN, SamplingParams(min_p=0.1), SamplingParams(logit_bias={3: 1.0})]
    features = [row_feature(plan(), p) for p in rows]
    assert features == [None, "min_p", "logit_bias"]
    rest = iter(features)
    decision = decide_route(plan(), StepKind.DECODE, rest)
    assert (decision.route, decision.reason) == (Route.HOST, "min_p")
    assert list(rest) == ["logit_bias"]
    assert decide_route(plan(), StepKind.DECODE, [None, None]).on_device
    assert decide_route(plan(), StepKind.DECODE, []).on_device


@pytest.mark.parametrize(("feature", "kwargs"), HOST_ONLY)
def test_host_only_features(feature: str, kwargs: dict[str, Any]) -> None:
    params = SamplingParams(**kwargs)
    assert host_only_feature(params, CAPS) == feature
    decision = choose_route(plan(), StepKind.DECODE, [PLAIN, params])
    assert decision.route is Route.HOST
    assert decision.reason == feature


def test_device_eligible_batch() -> None:
    rows = [
        PLAIN,
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.0, presence_penalty=0.5),
        SamplingParams(temperature=0.9, top_k=32),
        SamplingParams(temperature=0.0, top_k=-1),  # greedy rows ignore max_device_top_k
    ]
    assert choose_route(plan(), StepKind.DECODE, rows).route is Route.DEVICE
    assert choose_route(plan(), StepKind.PREFILL, rows).route is Route.DEVICE


def test_penalties_need_device_penalty_support() -> None:
    caps = ModelCapabilities(supports_sample_on_device=True, supports_device_penalties=False)
    for kwargs in (
        {"presence_penalty": 0.5},
        {"frequency_penalty": 0.5},
        {"repetition_penalty": 1.2},
    ):
        decision = choose_route(plan(caps=caps), StepKind.DECODE, [SamplingParams(**kwargs)])
        assert (decision.route, decision.reason) == (Route.HOST, "penalties")
    assert choose_route(plan(caps=caps), StepKind.DECODE, [PLAIN]).route is Route.DEVICE


@pytest.mark.parametrize(
    ("options", "caps", "kind", "reason"),
    [
        (TTOptions(), CAPS, StepKind.DECODE, "sample_on_device_mode not set"),
        (
            TTOptions(sample_on_device_mode="all", always_compat_sampling=True),
            CAPS,
            StepKind.DECODE,
            "always_compat_sampling",
        ),
        (ON, ModelCapabilities(), StepKind.DECODE, "model does not support device sampling"),
        (
            TTOptions(sample_on_device_mode="decode_only"),
            CAPS,
            StepKind.PREFILL,
            "sample_on_device_mode=decode_only",
        ),
    ],
)
def test_mode_and_capability_gates(
    options: TTOptions, caps: ModelCapabilities, kind: StepKind, reason: str
) -> None:
    decision = choose_route(plan(options, caps), kind, [PLAIN])
    assert (decision.route, decision.reason) == (Route.HOST, reason)


def test_decode_only_mode_samples_decode_on_device() -> None:
    options = TTOptions(sample_on_device_mode="decode_only")
    assert choose_route(plan(options), StepKind.DECODE, [PLAIN]).route is Route.DEVICE


def test_custom_logits_processors_force_host() -> None:
    decision = choose_route(plan(), StepKind.DECODE, [PLAIN], has_custom_logitsprocs=True)
    assert (decision.route, decision.reason) == (Route.HOST, "custom logits processors")


def test_flat_device_logprobs_only_for_the_sampled_token() -> None:
    """The default device path returns the sampled token's logprob only, and only on meshes
    with 8 or 32 devices per rank: logprobs=0 stays there, any k >= 1 goes to the host."""
    zero = SamplingParams(temperature=0.0, logprobs=0)
    five = SamplingParams(temperature=0.0, logprobs=5)
    assert choose_route(plan(logprobs=FLAT), StepKind.DECODE, [zero]).on_device
    assert not choose_route(plan(logprobs=NO_LOGPROBS), StepKind.DECODE, [zero]).on_device
    decision = choose_route(plan(logprobs=FLAT), StepKind.DECODE, [zero, five])
    assert (decision.route, decision.reason) == (Route.HOST, "logprobs")


def test_top_k_device_logprobs_cover_k_up_to_20_without_penalties() -> None:
    """GPT-OSS: top-32 logprobs serve any k <= 20, as long as the sampled token is sure to be
    among the raw top 32 (greedy or 1 <= top_k <= 32, no penalties)."""
    for row in (
        SamplingParams(logprobs=20, temperature=0.0),
        SamplingParams(logprobs=3, temperature=0.8, top_k=32),
    ):
        assert choose_route(plan(logprobs=TOP_K), StepKind.DECODE, [row]).on_device
    for row in (
        SamplingParams(logprobs=3, temperature=0.8, top_k=-1),
        SamplingParams(logprobs=3, temperature=0.0, repetition_penalty=1.3),
    ):
        decision = choose_route(plan(logprobs=TOP_K), StepKind.DECODE, [row])
        assert decision.route is Route.HOST and decision.reason.startswith("logprobs")


def test_intermediate_prefill_chunk_forces_host() -> None:
    decision = choose_route(plan(), StepKind.PREFILL, [PLAIN], intermediate_chunk=True)
    assert (decision.route, decision.reason) == (Route.HOST, "intermediate prefill chunk")


def test_the_boundaries_of_each_host_only_rule() -> None:
    """Each rule's edge: one min_token is host-only, top_k=1 is device-eligible, and a request
    at vLLM's greedy threshold (SAMPLING_EPS; vLLM raises it to its 0.01 floor) samples."""
    assert host_only_feature(SamplingParams(min_tokens=1), CAPS) == "min_tokens"
    assert host_only_feature(SamplingParams(temperature=0.8, top_k=1), CAPS) is None
    assert host_only_feature(SamplingParams(temperature=SAMPLING_EPS, top_k=-1), CAPS) == "top_k"


def rule(feature: str | None) -> str | None:
    """The rule a host-only feature names, without its explanation in parentheses."""
    return None if feature is None else feature.split(" (", 1)[0]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"temperature": 0.8, "top_k": 1}, None),
        ({"temperature": SAMPLING_EPS, "top_k": -1}, "logprobs"),  # samples (at 0.01), top_k off
        ({"temperature": 0.0, "logprobs": 0}, None),
        ({"temperature": 0.0, "logprobs": 32}, None),  # the device's whole top-32
        ({"temperature": 0.0, "logprobs": 33}, "logprobs"),
    ],
)
def test_top_k_device_logprobs_bounds(kwargs: dict[str, Any], expected: str | None) -> None:
    params = SamplingParams(**{"logprobs": 1, **kwargs})
    assert rule(host_only_feature(params, CAPS, TOP_K)) == expected


@pytest.mark.parametrize("max_device_top_k", [None, 8])
def test_top_k_device_logprobs_respect_the_models_top_k_limit(
    max_device_top_k: int | None,
) -> None:
    """The device's top-32 logprobs hold the sampled token only when top_k fits both the
    model's device top-k limit and the 32; a model without a limit is held to the 32."""
    caps = ModelCapabilities(supports_sample_on_device=True, max_device_top_k=max_device_top_k)
    inside = SamplingParams(temperature=0.8, top_k=5, logprobs=1)
    beyond = SamplingParams(temperature=0.8, top_k=16, logprobs=1)
    assert host_only_feature(inside, caps, TOP_K) is None
    expected = None if max_device_top_k is None else "logprobs"
    assert rule(host_only_feature(beyond, caps, TOP_K)) == expected
