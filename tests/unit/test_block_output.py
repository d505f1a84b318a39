"""Block-output serving, hostless: launch constraints, canvas KV rules, request validation.

Configs are real VllmConfigs from vLLM's EngineArgs serving the reference block model's class
surface (``test_models/reference_block.py``); nothing opens a device.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

from vllm_tt_plugin.adapter.kv_cache import compute_block_budget
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.platform import TTPlatform
from vllm_tt_plugin.policy import block_output
from vllm_tt_plugin.policy.block_output import (
    BlockLaunchError,
    BlockRequestError,
    output_capacity,
    physical_tokens,
)

BLOCK = "vllm_tt_plugin.test_models.reference_block:ReferenceBlockForCausalLM"
FAKES = "tests.unit.fakes.models"
SERVABLE = {"max_num_seqs": 1, "async_scheduling": False}
DEVICE_ALL = {"sample_on_device_mode": "all"}


@pytest.fixture(autouse=True)
def _fresh_serving() -> Any:
    block_output.reset_serving()
    yield
    block_output.reset_serving()


@pytest.fixture
def block_config(make_config: Any) -> Any:
    def build(tt: dict[str, Any] | None = None, **engine_args: Any) -> Any:
        return make_config(
            model_class=BLOCK, tt={**DEVICE_ALL, **(tt or {})}, **{**SERVABLE, **engine_args}
        )

    return build


# --- launch constraints ---------------------------------------------------------------------------
def test_servable_launch_forces_chunked_prefill_and_prefix_caching_off(
    block_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="vllm.tt_plugin"):
        config = block_config(enable_chunked_prefill=True, enable_prefix_caching=True)
    # The operator is told which of their flags were overridden (one line each, naming why).
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "forced off" in r.getMessage()]
    assert [level for level, _ in said] == [logging.INFO, logging.WARNING], said
    assert said[0][1].endswith(": chunked prefill forced off"), said
    assert said[1][1].endswith(": prefix caching forced off"), said
    assert all("output_tokens_per_step" in text or "block" in text for _, text in said), said
    assert not config.scheduler_config.enable_chunked_prefill
    assert not config.cache_config.enable_prefix_caching
    assert not config.scheduler_config.async_scheduling
    # Without chunking one step holds a whole prompt.
    assert config.scheduler_config.max_num_batched_tokens >= config.model_config.max_model_len
    assert block_output.serving_canvas() == 256


@pytest.mark.parametrize(
    ("tt", "engine_args", "fragment"),
    [
        ({}, {"max_num_seqs": 2}, "--max-num-seqs 2 is not supported.*pass --max-num-seqs 1"),
        (
            {},
            {"async_scheduling": True},
            "--async-scheduling is not supported.*synchronous step; pass --no-async-scheduling",
        ),
        # vLLM's default resolves to async before the platform hook: refused, not downgraded.
        ({}, {"async_scheduling": None}, "pass --no-async-scheduling"),
        ({"sample_on_device_mode": None}, {}, "'sample_on_device_mode'=None is not supported"),
        (
            {"sample_on_device_mode": "decode_only"},
            {},
            "'sample_on_device_mode'='decode_only' is not supported",
        ),
        (
            {},
            {"distributed_executor_backend": "mp"},
            "--distributed-executor-backend mp.*pass --distributed-executor-backend uni or leave "
            "it unset",
        ),
        (
            {},
            {"logits_processors": ["vllm.v1.sample.logits_processor:MinPLogitsProcessor"]},
            "--logits-processors",
        ),
    ],
)
def test_launch_constraints_are_refused_naming_the_option(
    block_config: Any, tt: dict[str, Any], engine_args: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(Exception, match=fragment) as info:
        block_config(tt=tt, **engine_args)
    assert "block-output model" in str(info.value)


def test_speculative_decoding_is_refused(block_config: Any) -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2}
    with pytest.raises(Exception, match="--speculative-config"):
        block_config(speculative_config=spec)


def test_max_device_top_k_is_refused(make_config: Any) -> None:
    with pytest.raises(Exception, match="max_device_top_k"):
        make_config(model_class=f"{FAKES}:BlockTopKModel", tt=DEVICE_ALL, **SERVABLE)


def test_launch_errors_are_value_errors() -> None:
    assert issubclass(BlockLaunchError, ValueError)
    assert issubclass(BlockRequestError, ValueError)


# --- KV rules -------------------------------------------------------------------------------------
def _worker(config: Any) -> Any:
    from vllm_tt_plugin.adapter.model_adapter import ModelAdapter
    from vllm_tt_plugin.test_models.reference_block import ReferenceBlockForCausalLM
    from vllm_tt_plugin.worker import TTWorker

    worker = TTWorker(config, local_rank=0, rank=0, distributed_init_method="tcp://127.0.0.1:1")
    worker.adapter = ModelAdapter(ReferenceBlockForCausalLM, config.model_config.hf_config)
    return worker


def test_canvas_headroom_replaces_the_one_block_headroom() -> None:
    budget = compute_block_budget(1024, 64, 1, canvas_tokens=256)
    assert budget.sequence_headroom == 4
    assert budget.usable_tokens == 1024 + 256
    assert budget.max_model_len_limit == 1024
    plain = compute_block_budget(1024, 64, 1)
    assert plain.max_model_len_limit == plain.usable_tokens == 1024 + 64


def test_max_model_len_plus_one_canvas_must_fit(
    block_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = block_config(max_model_len=1024)
    monkeypatch.setenv("TT_REFERENCE_MAX_TOKENS_ALL_USERS", "900")
    worker = _worker(config)
    # 900 tokens -> 15 blocks + 4 canvas blocks: 1216 usable, 960 servable with a canvas.
    with pytest.raises(
        ValueError, match="plus one 256-token output canvas.*maximum model length is 960"
    ):
        worker.determine_available_memory()
    monkeypatch.delenv("TT_REFERENCE_MAX_TOKENS_ALL_USERS")
    worker.determine_available_memory()  # the model's budget is max_model_len: it fits
    assert worker.block_budget.max_model_len_limit >= 1024
    assert config.model_config.max_model_len == 1024


def test_minus_one_fits_the_pool_less_one_canvas(
    block_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = block_config(max_model_len=-1)
    monkeypatch.setenv("TT_REFERENCE_MAX_TOKENS_ALL_USERS", "700")
    worker = _worker(config)
    worker.determine_available_memory()
    budget = worker.block_budget
    assert config.model_config.max_model_len == budget.usable_tokens - 256 == 11 * 64 + 256 - 256


# --- request validation ---------------------------------------------------------------------------
def _prompt(n: int) -> dict[str, Any]:
    return {"type": "token", "prompt_token_ids": list(range(3, 3 + n))}


def _openai(**kwargs: Any) -> SamplingParams:
    """SamplingParams as vLLM's OpenAI protocols build them."""
    return SamplingParams.from_optional(
        output_kind=RequestOutputKind.FINAL_ONLY, skip_clone=True, **kwargs
    )


@pytest.mark.parametrize(
    ("params", "field"),
    [
        (SamplingParams(n=2), "n"),
        (SamplingParams(logprobs=1), "logprobs"),
        (SamplingParams(prompt_logprobs=0), "prompt_logprobs"),
        (
            SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+")),
            "structured_outputs",
        ),
        (SamplingParams(bad_words=["x"]), "bad_words"),
        (SamplingParams(logit_bias={5: 1.0}), "logit_bias"),
        (SamplingParams(allowed_token_ids=[5, 6]), "allowed_token_ids"),
        (SamplingParams(min_tokens=3), "min_tokens"),
        (SamplingParams(extra_args={"custom": 1}), "extra_args"),
    ],
)
def test_unsupported_fields_are_rejected_by_name(
    block_config: Any, params: SamplingParams, field: str
) -> None:
    block_config(max_model_len=1024)
    with pytest.raises(ValueError, match=f"'{field}' is not supported by the block-output model"):
        TTPlatform.validate_request(_prompt(8), params)


def test_prompt_embeddings_are_rejected(block_config: Any) -> None:
    import torch

    block_config(max_model_len=1024)
    embeds = {"type": "embeds", "prompt_embeds": torch.zeros(4, 8)}
    with pytest.raises(ValueError, match="'prompt_embeds' is not supported"):
        TTPlatform.validate_request(embeds, SamplingParams(max_tokens=16))


def test_ignored_sampling_fields_warn_once(
    block_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    block_config(max_model_len=1024)
    params = SamplingParams(temperature=0.8, top_p=0.5, top_k=5, seed=3, repetition_penalty=1.2)

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "accepted but ignored" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="vllm.tt_plugin"):
        TTPlatform.validate_request(_prompt(8), params)
        first = warned()
        TTPlatform.validate_request(_prompt(8), params)
        TTPlatform.validate_request(_prompt(8), SamplingParams(temperature=0.5))
    assert warned() == first  # once per process and field
    assert sorted({w.split("'")[1] for w in first}) == [
        "repetition_penalty",
        "seed",
        "temperature",
        "top_k",
        "top_p",
    ]
    assert params.temperature == 0.8  # accepted as sent


def test_admission_formula() -> None:
    assert physical_tokens(33, 16, 256) == 64 + 256
    assert physical_tokens(32, 257, 256) == 32 + 512
    assert output_capacity(33, 1024, 256) == 768
    assert output_capacity(1, 300, 256) == 256  # floor(300/32)*32 = 288 - 32 -> one canvas
    assert output_capacity(33, 300, 256) == 0


def test_offline_over_capacity_is_rejected_and_openai_is_capped(block_config: Any) -> None:
    block_config(max_model_len=1024)
    # 40-token prompt -> 64 physical; 1024 - 64 = 960 -> three canvases = 768 tokens.
    TTPlatform.validate_request(_prompt(40), SamplingParams(max_tokens=768))
    with pytest.raises(ValueError, match="'max_tokens'=769.*at most max_tokens=768"):
        TTPlatform.validate_request(_prompt(40), SamplingParams(max_tokens=769))
    with pytest.raises(ValueError, match="'max_tokens'=None|max_tokens=768"):
        TTPlatform.validate_request(_prompt(40), SamplingParams(max_tokens=None))
    params = _openai(max_tokens=984)  # the chat default: max_model_len - prompt
    TTPlatform.validate_request(_prompt(40), params)
    assert params.max_tokens == 768
    small = _openai(max_tokens=16)
    TTPlatform.validate_request(_prompt(40), small)
    assert small.max_tokens == 16


def test_a_prompt_leaving_no_canvas_is_rejected(block_config: Any) -> None:
    block_config(max_model_len=512)
    with pytest.raises(ValueError, match="leaves no room for one 256-token canvas"):
        TTPlatform.validate_request(_prompt(260), _openai(max_tokens=16))


def test_token_models_are_not_validated_as_block_models(make_config: Any) -> None:
    make_config(max_model_len=1024)
    TTPlatform.validate_request(_prompt(8), SamplingParams(n=2, min_tokens=3, max_tokens=5000))


def test_two_tokens_per_step_is_a_block_model_and_one_is_not() -> None:
    token, block = ModelCapabilities(), ModelCapabilities(output_tokens_per_step=2)
    assert not block_output.is_block_model(token) and block_output.is_block_model(block)
    assert (block_output.canvas_tokens(token), block_output.canvas_tokens(block)) == (0, 2)


def test_the_physical_limit_is_whole_tiles() -> None:
    assert block_output.physical_limit(3 * block_output.TILE + 5) == 3 * block_output.TILE


def test_nothing_is_served_after_a_reset() -> None:
    assert block_output.serving_canvas() == 0


def test_a_two_token_canvas_is_validated(block_config: Any) -> None:
    config = block_config(max_model_len=1024)
    block_output.remember_served(config.model_config, 2)
    with pytest.raises(ValueError, match="'n' is not supported by the block-output model"):
        TTPlatform.validate_request(_prompt(8), SamplingParams(n=2))


def test_an_offline_default_max_tokens_that_fills_max_model_len_exactly_is_admitted(
    block_config: Any,
) -> None:
    """A 256-token prompt leaves 768 = three canvases of a 1024-token max_model_len: vLLM's
    default max_tokens (max_model_len - prompt) needs exactly the physical limit, and fits."""
    block_config(max_model_len=1024)
    params = SamplingParams(max_tokens=None)
    TTPlatform.validate_request(_prompt(256), params)
    assert params.max_tokens is None


def test_offline_streaming_is_not_the_openai_server() -> None:
    """Only the server's fresh per-request parameters are capped; an offline request asking
    for deltas is still offline (rejected, never silently capped)."""
    offline = SamplingParams(output_kind=RequestOutputKind.DELTA)
    assert not block_output.from_openai_server(offline)
    assert block_output.from_openai_server(_openai())


def test_a_block_model_declaring_chunking_and_prefix_caching_still_gets_neither(
    make_config: Any,
) -> None:
    """The block rules turn both off even when the class declares them (a canvas step holds a
    whole prompt and commits on the device)."""
    config = make_config(
        model_class=f"{FAKES}:BlockOutputModel",
        tt=DEVICE_ALL,
        enable_chunked_prefill=True,
        enable_prefix_caching=True,
        **SERVABLE,
    )
    assert config.scheduler_config.enable_chunked_prefill is False
    assert config.cache_config.enable_prefix_caching is False
    assert block_output.serving_canvas() == 256


def test_data_parallel_is_refused_naming_the_option(
    block_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MESH_DEVICE", "N300")  # two devices: a mesh that splits in two
    monkeypatch.delenv("TT_DP_DEVICE_GROUPS", raising=False)
    with pytest.raises(
        Exception,
        match=r"--data-parallel-size 2 is not supported: .* is a block-output model "
        r"\(output_tokens_per_step=256\); leave it at 1\. ",
    ):
        block_config(tt={"emulated_mesh": True}, data_parallel_size=2)


def test_an_input_without_prompt_tokens_counts_as_an_empty_prompt(block_config: Any) -> None:
    """An encoder-decoder shaped input carries no top-level prompt_token_ids: no prompt tiles,
    so max_model_len's four canvases are all output."""
    block_config(max_model_len=1024)
    params = SamplingParams(max_tokens=1024)
    TTPlatform.validate_request({"encoder": {}, "decoder": {}}, params)
    with pytest.raises(ValueError, match="with a 1-token prompt"):
        TTPlatform.validate_request(_prompt(1), SamplingParams(max_tokens=1024))
