"""Block-output serving (DiffusionGemma): launch constraints, KV arithmetic, request validation.

A block-output model (``model_capabilities['output_tokens_per_step'] > 1``) commits a whole
canvas per step: prefill writes the prompt's KV and emits block 0, each decode emits one more
block. The facts are in docs/BLOCK_SERVING.md. This module decides, in one place:

- the launch constraints (:func:`check_block_launch`, from the platform hook, before any device
  is opened; each refusal names the option);
- the KV arithmetic (one canvas of headroom per sequence; ``max_model_len`` + one canvas must
  fit the pool; the physical admission formula);
- request validation (:func:`validate_block_request`, from ``TTPlatform.validate_request`` in
  the API-server / LLM process).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_tt_plugin.utils.log import get_logger

if TYPE_CHECKING:
    from vllm.config import ModelConfig, VllmConfig

    from vllm_tt_plugin.config import TTOptions
    from vllm_tt_plugin.launch.capabilities import ModelCapabilities

logger = get_logger(__name__)

# Prompts are laid out on 32-token tiles; max_model_len is usable in whole tiles.
TILE = 32
# The only device sampling mode a block model serves with (its canvas is committed on device).
REQUIRED_SAMPLE_MODE = "all"
# Accepted but ignored: the denoiser commits its own tokens (an older release rejected them).
IGNORED_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)
# What each ignored field is when it is not set (vLLM's SamplingParams defaults).
_NEUTRAL: dict[str, Any] = {
    "temperature": (0.0, 1.0),
    "top_p": (1.0,),
    "top_k": (0, -1),
    "min_p": (0.0,),
    "seed": (None,),
    "presence_penalty": (0.0,),
    "frequency_penalty": (0.0,),
    "repetition_penalty": (1.0,),
}


class BlockLaunchError(ValueError):
    """A launch option a block-output model cannot serve with (names the option)."""


class BlockRequestError(ValueError):
    """A request a block-output model cannot serve (names the field; the server answers 400)."""


def is_block_model(caps: ModelCapabilities) -> bool:
    return caps.output_tokens_per_step > 1


def canvas_tokens(caps: ModelCapabilities) -> int:
    """Tokens a block model commits per step; 0 for token-at-a-time models."""
    return caps.output_tokens_per_step if is_block_model(caps) else 0


# --- launch -------------------------------------------------------------------------------------
def check_block_launch(
    vllm_config: VllmConfig, options: TTOptions, caps: ModelCapabilities, arch: str
) -> None:
    """Refuse what a block model cannot serve with; force chunked prefill and prefix caching
    off. Runs in the platform hook, before the device opens."""
    scheduler = vllm_config.scheduler_config
    parallel = vllm_config.parallel_config
    model_config = vllm_config.model_config
    what = f"{arch} is a block-output model (output_tokens_per_step={caps.output_tokens_per_step})"
    if scheduler.max_num_seqs != 1:
        raise BlockLaunchError(
            f"--max-num-seqs {scheduler.max_num_seqs} is not supported: {what} and serves one "
            "sequence at a time; pass --max-num-seqs 1."
        )
    if parallel.data_parallel_size != 1:
        raise BlockLaunchError(
            f"--data-parallel-size {parallel.data_parallel_size} is not supported: {what}; "
            "leave it at 1."
        )
    backend = parallel.distributed_executor_backend
    if backend not in (None, "uni"):
        raise BlockLaunchError(
            f"--distributed-executor-backend {backend} is not supported: {what} and runs on the "
            "uni executor; pass --distributed-executor-backend uni or leave it unset."
        )
    if scheduler.async_scheduling:
        # vLLM resolves its async default before the platform hook, so a default and an explicit
        # --async-scheduling look the same here: both are refused, never downgraded.
        raise BlockLaunchError(
            f"--async-scheduling is not supported: {what} and commits a whole canvas per "
            "synchronous step; pass --no-async-scheduling."
        )
    if options.sample_on_device_mode != REQUIRED_SAMPLE_MODE:
        raise BlockLaunchError(
            f"TT option 'sample_on_device_mode'={options.sample_on_device_mode!r} is not "
            f"supported: {what} and commits its canvas on the device; set "
            f'{{"tt": {{"sample_on_device_mode": "{REQUIRED_SAMPLE_MODE}"}}}}.'
        )
    if vllm_config.speculative_config is not None:
        raise BlockLaunchError(f"--speculative-config is not supported: {what}.")
    if caps.max_device_top_k is not None:
        raise BlockLaunchError(
            f"model_capabilities['max_device_top_k']={caps.max_device_top_k} is not supported: "
            f"{what} and does not sample per token."
        )
    if model_config.logits_processors:
        raise BlockLaunchError(
            f"--logits-processors {list(model_config.logits_processors)} is not supported: "
            f"{what} and never exposes logits."
        )
    if scheduler.enable_chunked_prefill:
        logger.info("%s: chunked prefill forced off", what)
        scheduler.enable_chunked_prefill = False
    if vllm_config.cache_config.enable_prefix_caching:
        logger.warning("%s: prefix caching forced off", what)
        vllm_config.cache_config.enable_prefix_caching = False
    remember_served(model_config, caps.output_tokens_per_step)


# --- KV and admission arithmetic -----------------------------------------------------------------
def physical_tokens(prompt_len: int, max_tokens: int, canvas: int) -> int:
    """Tokens a request occupies: its prompt in whole tiles plus its output in whole canvases."""
    return math.ceil(prompt_len / TILE) * TILE + math.ceil(max_tokens / canvas) * canvas


def physical_limit(max_model_len: int) -> int:
    return (max_model_len // TILE) * TILE


def output_capacity(prompt_len: int, max_model_len: int, canvas: int) -> int:
    """The largest max_tokens (whole canvases) a prompt of this length admits (0: none)."""
    room = physical_limit(max_model_len) - math.ceil(prompt_len / TILE) * TILE
    return max(room // canvas, 0) * canvas


@dataclass
class _Serving:
    """The served block model as the request path sees it (set by the platform hook in every
    process that builds the config; the model config is shared, so a -1 fit is seen)."""

    model_config: ModelConfig | None = None
    canvas: int = 0


_serving = _Serving()
_warned_fields: set[str] = set()


def remember_served(model_config: ModelConfig, canvas: int) -> None:
    """Record the served block model for this process's request validation (the platform hook,
    also when it re-validates a config whose launch plan was resolved elsewhere)."""
    _serving.model_config = model_config
    _serving.canvas = canvas


def serving_canvas() -> int:
    """The canvas of the block model this process serves, 0 when it serves none."""
    return _serving.canvas


def reset_serving() -> None:
    """Forget the served model (tests that build several configs in one process)."""
    _serving.model_config = None
    _serving.canvas = 0
    _warned_fields.clear()


# --- request validation --------------------------------------------------------------------------
def from_openai_server(params: Any) -> bool:
    """vLLM's OpenAI protocols build a fresh SamplingParams per request with ``skip_clone=True``
    and a DELTA/FINAL_ONLY output kind; an offline ``SamplingParams()`` has neither."""
    from vllm.sampling_params import RequestOutputKind

    return bool(getattr(params, "skip_clone", False)) and (
        params.output_kind is not RequestOutputKind.CUMULATIVE
    )


def _rejected_field(processed_inputs: Any, params: Any) -> str | None:
    if isinstance(processed_inputs, dict) and processed_inputs.get("type") == "embeds":
        return "prompt_embeds"
    if params.n > 1:
        return "n"
    if params.logprobs is not None:
        return "logprobs"
    if params.prompt_logprobs is not None:
        return "prompt_logprobs"
    if params.structured_outputs is not None:
        return "structured_outputs"
    if params.bad_words:
        return "bad_words"
    if params.logit_bias:
        return "logit_bias"
    if params.allowed_token_ids is not None:
        return "allowed_token_ids"
    if params.min_tokens:
        return "min_tokens"
    if params.extra_args:
        return "extra_args"
    return None


def _prompt_len(processed_inputs: Any) -> int:
    if isinstance(processed_inputs, dict):
        ids = processed_inputs.get("prompt_token_ids")
        if ids is not None:
            return len(ids)
        embeds = processed_inputs.get("prompt_embeds")
        if embeds is not None:
            return int(embeds.shape[0])
    return 0


def validate_block_request(processed_inputs: Any, params: Any) -> None:
    """Reject what a block model cannot honour (400 naming the field), warn once about sampling
    fields it ignores, and apply the physical admission formula (OpenAI: cap max_tokens to the
    whole-canvas capacity; offline: reject)."""
    model_config = _serving.model_config
    canvas = _serving.canvas
    if model_config is None or canvas <= 1:
        return
    field = _rejected_field(processed_inputs, params)
    if field is not None:
        raise BlockRequestError(
            f"'{field}' is not supported by the block-output model (it commits {canvas}-token "
            f"canvases): remove '{field}' from the request (docs/BLOCK_SERVING.md)"
        )
    for name in IGNORED_FIELDS:
        if getattr(params, name) not in _NEUTRAL[name] and name not in _warned_fields:
            _warned_fields.add(name)
            logger.warning(
                "TT block-output model: request field '%s' is accepted but ignored (the model "
                "commits its own canvas); this warning is shown once",
                name,
            )
    max_model_len = model_config.max_model_len
    prompt_len = _prompt_len(processed_inputs)
    capacity = output_capacity(prompt_len, max_model_len, canvas)
    if capacity < 1:
        raise BlockRequestError(
            f"the prompt ({prompt_len} tokens) leaves no room for one {canvas}-token canvas "
            f"within max_model_len {max_model_len}: shorten the prompt"
        )
    max_tokens = params.max_tokens
    if max_tokens is None:
        max_tokens = max_model_len - prompt_len  # what vLLM will set
    if physical_tokens(prompt_len, max_tokens, canvas) <= physical_limit(max_model_len):
        return
    if from_openai_server(params):
        params.max_tokens = capacity
        return
    raise BlockRequestError(
        f"'max_tokens'={max_tokens} with a {prompt_len}-token prompt needs "
        f"{physical_tokens(prompt_len, max_tokens, canvas)} physical tokens (prompt in "
        f"{TILE}-token tiles + output in {canvas}-token canvases), more than max_model_len "
        f"{max_model_len} allows ({physical_limit(max_model_len)}): request at most "
        f"max_tokens={capacity}"
    )
