"""TTPlatform: vLLM's handoff into the TT runtime.

``check_and_update_config`` validates the launch (TT options, operational constraints, model
capabilities), rewrites checkpoint architectures to their TT-prefixed names, resolves the launch
plan (launch/launch_plan.py: every launch-time decision, stored on the config for every process),
and installs the TT-owned worker and scheduler classes -- all before any device is opened, so bad
input fails with a clear message instead of on the device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from vllm.platforms.interface import Platform, PlatformEnum

from vllm_tt_plugin.config import TTOptions, get_tt_options
from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.launch.vllm_patches import pin_v1_model_runner, reserve_shutdown_teardown
from vllm_tt_plugin.policy.block_output import (
    check_block_launch,
    is_block_model,
    remember_served,
    validate_block_request,
)
from vllm_tt_plugin.utils.log import get_logger

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from vllm_tt_plugin.adapter.model_adapter import AdapterProfile
    from vllm_tt_plugin.launch.capabilities import ModelCapabilities
    from vllm_tt_plugin.launch.data_parallel import DataParallelLayout
    from vllm_tt_plugin.launch.launch_plan import LaunchPlan
    from vllm_tt_plugin.model_registry import ModelTarget

logger = get_logger(__name__)

WORKER_CLS = "vllm_tt_plugin.worker.TTWorker"
LANE_COORDINATOR_CLS = "vllm_tt_plugin.lane_scheduler.TTLaneCoordinator"

# TT paged attention works on 32-token tiles; 64 is what tt-metal generators are tuned for.
DEFAULT_TT_BLOCK_SIZE = 64
BLOCK_SIZE_MULTIPLE = 32
# The contract caps requested logprobs per token at 20 (vLLM's default --max-logprobs).
MAX_LOGPROBS = 20


class TTConfigurationError(ValueError):
    """A launch option combination the TT backend does not support."""


class TTPlatform(Platform):  # type: ignore[misc]
    _enum = PlatformEnum.OOT
    device_name: str = "tt"
    # Host-side tensors (inputs, host sampling) live on the CPU; the TT mesh is not a torch
    # device, so vLLM's DeviceConfig gets "cpu".
    device_type: str = "cpu"
    dispatch_key: str = "CPU"
    dist_backend: str = "gloo"
    device_control_env_var: str = envs.TT_VISIBLE_DEVICES.name
    simple_compile_backend: str = "eager"
    supported_quantization: list[str] = []

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return "tt"

    @classmethod
    def import_kernels(cls) -> None:
        # vllm._C is a CUDA/CPU kernel library the TT backend never calls; importing it here only
        # produces a misleading warning.
        return

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        return

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.manual_seed(seed)

    @classmethod
    def inference_mode(cls) -> Any:
        return torch.no_grad()

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        # TT does not profile device memory: the KV budget comes from the model class
        # (get_max_tokens_all_users), see TTWorker.determine_available_memory.
        return 0

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return True

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        return

    @classmethod
    def update_block_size_for_backend(cls, vllm_config: VllmConfig) -> None:
        # No vLLM attention backend runs on TT; block size is settled in check_and_update_config.
        return

    @classmethod
    def pre_register_and_update(cls, parser: FlexibleArgumentParser | None = None) -> None:
        pin_v1_model_runner()

    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        pin_v1_model_runner()
        from vllm_tt_plugin.launch.launch_plan import find_plan, store_plan

        options = get_tt_options(vllm_config)
        # A config that already carries a plan was resolved in another process (and is
        # re-validated here): its plan stands, nothing is decided again.
        resolved = find_plan(vllm_config)
        _check_parallelism(vllm_config, resolved)
        _check_unsupported_features(vllm_config)
        _cap_logprobs(vllm_config)
        _disable_graph_compilation(vllm_config)
        reserve_shutdown_teardown(vllm_config)

        model_config = vllm_config.model_config
        if model_config is None:  # vLLM builds model-less configs in a few utility paths
            return
        if resolved is not None:
            from vllm_tt_plugin.loader import register_served_model

            register_served_model(resolved)
            if resolved.canvas_tokens:
                remember_served(model_config, resolved.canvas_tokens)
            _install_classes(vllm_config, resolved)
            return
        target, profile = _resolve_model(vllm_config, options)
        from vllm_tt_plugin.launch import data_parallel

        layout = data_parallel.configure(vllm_config, target, profile.capabilities, options)
        _configure_block_size(vllm_config)
        _gate_on_capabilities(
            vllm_config, options, profile.capabilities, profile.plan_facts.decode_contract
        )
        plan = _resolve_plan(vllm_config, options, target, profile, layout)
        store_plan(vllm_config, plan)
        _install_classes(vllm_config, plan)
        logger.info(
            "TT platform: %s served by %s (%s); %s; device sampling: prefill %s, decode %s",
            model_config.hf_config.architectures,
            target.target,
            target.source,
            "emulated mesh" if options.emulated_mesh else "hardware mesh",
            plan.prefill.host_reason or "on",
            plan.decode.host_reason or "on",
        )

    @classmethod
    def validate_request(cls, processed_inputs: Any, params: Any) -> None:
        from vllm.sampling_params import SamplingParams

        if isinstance(params, SamplingParams):
            validate_block_request(processed_inputs, params)  # no-op unless a block model
        if isinstance(params, SamplingParams) and params.prompt_logprobs is not None:
            raise ValueError(
                "prompt_logprobs is not supported on TT: remove 'prompt_logprobs' from the request"
            )
        if isinstance(params, SamplingParams) and (params.logprobs or 0) > MAX_LOGPROBS:
            raise ValueError(
                f"logprobs={params.logprobs} is more than TT returns: request at most "
                f"{MAX_LOGPROBS} 'logprobs'"
            )


def _install_classes(vllm_config: VllmConfig, plan: LaunchPlan) -> None:
    vllm_config.parallel_config.worker_cls = WORKER_CLS
    if plan.lanes.lanes > 1:
        # It builds each lane's scheduler with the same plan choice (scheduler_class).
        vllm_config.scheduler_config.scheduler_cls = LANE_COORDINATOR_CLS
        return
    from vllm_tt_plugin.scheduler import scheduler_class

    chosen = scheduler_class(plan)  # sync or async bookkeeping, as the plan's async_overlap
    vllm_config.scheduler_config.scheduler_cls = f"{chosen.__module__}.{chosen.__qualname__}"


def _resolve_plan(
    vllm_config: VllmConfig,
    options: TTOptions,
    target: ModelTarget,
    profile: AdapterProfile,
    layout: DataParallelLayout,
) -> LaunchPlan:
    """The launch plan over the gated config (the scheduler and cache switches are final)."""
    from vllm_tt_plugin.adapter.model_adapter import LogprobsForm
    from vllm_tt_plugin.launch.launch_plan import resolve_plan
    from vllm_tt_plugin.launch.mesh_spec import mesh_spec_from_env

    if layout.device_groups is not None:
        rows, cols = layout.device_groups.submesh_shape
        devices_per_rank = rows * cols
    else:
        devices_per_rank = max(mesh_spec_from_env().num_devices // layout.lanes.lanes, 1)
    return resolve_plan(
        options,
        target,
        profile.capabilities,
        decode_contract=profile.plan_facts.decode_contract,
        lanes=layout.lanes,
        device_groups=layout.device_groups,
        devices_per_rank=devices_per_rank,
        top_k_logprobs=profile.logprobs_form is LogprobsForm.TOP_K,
        flat_logprobs=profile.device_logprobs_on(devices_per_rank),
        async_scheduling=bool(vllm_config.scheduler_config.async_scheduling),
        chunked_prefill=bool(vllm_config.scheduler_config.enable_chunked_prefill),
        prefix_caching=bool(vllm_config.cache_config.enable_prefix_caching),
    )


def _check_parallelism(vllm_config: VllmConfig, resolved: LaunchPlan | None) -> None:
    parallel = vllm_config.parallel_config
    if parallel.tensor_parallel_size > 1:
        raise TTConfigurationError(
            f"--tensor-parallel-size {parallel.tensor_parallel_size} is not supported on TT: "
            "tensor parallelism is implemented inside the TT model across the mesh "
            "(MESH_DEVICE); leave --tensor-parallel-size at 1."
        )
    if parallel.pipeline_parallel_size > 1:
        raise TTConfigurationError(
            f"--pipeline-parallel-size {parallel.pipeline_parallel_size} is not supported on TT: "
            "leave it at 1."
        )
    if parallel.nnodes > 1 or parallel.data_parallel_size_local not in (
        0,
        parallel.data_parallel_size,
    ):
        raise TTConfigurationError(
            "Multi-host data parallelism is not supported on TT "
            f"(--nnodes {parallel.nnodes}, --data-parallel-size {parallel.data_parallel_size}, "
            f"--data-parallel-size-local {parallel.data_parallel_size_local}): run every "
            "data-parallel rank on this host."
        )
    import vllm.envs as envs

    # Lane-DP has already folded --data-parallel-size into lanes when the config is re-checked.
    lanes = resolved.lanes.lanes if resolved is not None else 1
    if (parallel.data_parallel_size > 1 or lanes > 1) and not envs.VLLM_ENABLE_V1_MULTIPROCESSING:
        dp = max(parallel.data_parallel_size, lanes)
        raise TTConfigurationError(
            f"VLLM_ENABLE_V1_MULTIPROCESSING=0 is not compatible with --data-parallel-size {dp} "
            "on TT, neither standard DP nor lane-DP (the in-process engine core is a debugging "
            "mode for one engine without DP): unset VLLM_ENABLE_V1_MULTIPROCESSING, or debug "
            "with --data-parallel-size 1."
        )
    if parallel.data_parallel_backend == "ray" and parallel.data_parallel_size > 1:
        raise TTConfigurationError(
            "--data-parallel-backend ray is not supported on TT; use the default 'mp'."
        )


def _cap_logprobs(vllm_config: VllmConfig) -> None:
    """TT returns at most MAX_LOGPROBS logprobs per token (the contract's cap); vLLM's own
    request validation then answers a larger request with a 400 naming ``logprobs``."""
    model_config = vllm_config.model_config
    if model_config is None:
        return
    current = model_config.max_logprobs
    if current < 0 or current > MAX_LOGPROBS:
        logger.warning(
            "--max-logprobs %d capped to %d on TT (the most logprobs TT returns per token)",
            current,
            MAX_LOGPROBS,
        )
        model_config.max_logprobs = MAX_LOGPROBS


def _check_unsupported_features(vllm_config: VllmConfig) -> None:
    if vllm_config.speculative_config is not None:
        raise TTConfigurationError(
            "Speculative decoding (--speculative-config) is not supported on TT."
        )
    if vllm_config.lora_config is not None:
        raise TTConfigurationError("LoRA (--enable-lora) is not supported on TT.")


def _disable_graph_compilation(vllm_config: VllmConfig) -> None:
    # TT models are compiled and traced by tt-metal; torch.compile and CUDA graphs do not apply.
    from vllm.config import CompilationMode, CUDAGraphMode

    compilation = vllm_config.compilation_config
    compilation.mode = CompilationMode.NONE
    compilation.cudagraph_mode = CUDAGraphMode.NONE


def _resolve_model(
    vllm_config: VllmConfig, options: TTOptions
) -> tuple[ModelTarget, AdapterProfile]:
    """The one place a checkpoint's serving class is chosen (the plan carries it on)."""
    from vllm_tt_plugin.adapter.model_adapter import AdapterProfile
    from vllm_tt_plugin.model_registry import (
        get_registry,
        launch_refusal,
        register_with_vllm,
        tt_arch,
    )

    registry = get_registry(include_test_models=options.register_test_models)
    register_with_vllm(registry)
    hf_config = vllm_config.model_config.hf_config
    architectures = list(getattr(hf_config, "architectures", None) or [])
    if not architectures:
        raise TTConfigurationError(
            f"The checkpoint {vllm_config.model_config.model!r} declares no 'architectures' in "
            "its config.json; TT needs one to pick a model class."
        )
    # Rewrite in place: everything downstream (registry, worker, loader) uses TT names.
    hf_config.architectures = [tt_arch(a) for a in architectures]
    target = None
    for arch in hf_config.architectures:
        target = registry.get(arch)
        if target is not None:
            break
    if target is None:
        target = registry.resolve(hf_config.architectures[0])  # raises with the full message
    # An architecture or class this vLLM cannot serve is refused before its class is imported.
    unservable = launch_refusal(target)
    if unservable is not None:
        raise TTConfigurationError(unservable)
    profile = AdapterProfile.of(target.load_class(), hf_config)
    # A warm-up form the plugin cannot call is refused here, before any device opens.
    refused = profile.plan_facts.warmup_refusal()
    if refused is not None and options.enable_model_warmup:
        raise TTConfigurationError(
            f"{refused.error(target.target)}; serving without warm-up "
            '(additional_config {"tt": {"enable_model_warmup": false}}) never calls it.'
        )
    return target, profile


def _configure_block_size(vllm_config: VllmConfig) -> None:
    cache = vllm_config.cache_config
    if not cache.user_specified_block_size:
        cache.block_size = DEFAULT_TT_BLOCK_SIZE
    elif cache.block_size % BLOCK_SIZE_MULTIPLE:
        raise TTConfigurationError(
            f"--block-size {cache.block_size} is not supported on TT: it must be a multiple of "
            f"{BLOCK_SIZE_MULTIPLE} (the TT tile height); {DEFAULT_TT_BLOCK_SIZE} is the default."
        )


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


def _sliding_window(model_config: Any) -> int | None:
    """The model's sliding window (any layer), or None."""
    text = model_config.hf_config
    getter = getattr(text, "get_text_config", None)
    if callable(getter):
        text = getter()
    window = getattr(text, "sliding_window", None)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        return None
    layer_types = getattr(text, "layer_types", None)
    if layer_types and "sliding_attention" not in layer_types:
        return None  # a window is configured but no layer uses it
    return window


def _gate_on_capabilities(
    vllm_config: VllmConfig, options: TTOptions, caps: ModelCapabilities, decode_contract: int
) -> None:
    scheduler = vllm_config.scheduler_config
    cache = vllm_config.cache_config
    model_config = vllm_config.model_config
    arch = model_config.hf_config.architectures[0]

    if is_block_model(caps):
        # Before the generic gates: a block model's async scheduling is refused, not downgraded.
        check_block_launch(vllm_config, options, caps, arch)

    if scheduler.enable_chunked_prefill and not caps.supports_chunked_prefill:
        logger.info("%s does not declare supports_chunked_prefill: chunked prefill disabled", arch)
        scheduler.enable_chunked_prefill = False
    if scheduler.enable_chunked_prefill:
        # Chunks stop before a multimodal item they would cut (vLLM still cuts one that starts
        # the chunk when the budget is short: docs/SCHEDULING.md).
        scheduler.disable_chunked_mm_input = True
    if not scheduler.enable_chunked_prefill and scheduler.max_num_batched_tokens < (
        model_config.max_model_len
    ):
        # Without chunking a whole prompt must fit in one prefill step.
        scheduler.max_num_batched_tokens = model_config.max_model_len
        if scheduler.max_num_scheduled_tokens is not None:
            scheduler.max_num_scheduled_tokens = model_config.max_model_len

    if cache.enable_prefix_caching and not caps.supports_prefix_caching:
        _warn_once(
            f"{arch} does not declare supports_prefix_caching: prefix caching disabled on TT"
        )
        cache.enable_prefix_caching = False
    window = _sliding_window(model_config)
    if cache.enable_prefix_caching and window is not None:
        _warn_once(
            f"{arch} has a sliding window ({window} tokens): prefix caching disabled on TT "
            "(docs/TT_MODEL_CONTRACT.md)"
        )
        cache.enable_prefix_caching = False

    if scheduler.async_scheduling and not caps.supports_async_decode:
        # vLLM turns async scheduling on by default; only models certifying the split
        # submit/read-back contract keep it (docs/VLLM_PATCHES.md, P2 retired).
        _warn_once(
            f"{arch} does not declare model_capabilities['supports_async_decode']: async "
            "scheduling turned off on TT"
        )
        scheduler.async_scheduling = False
    elif scheduler.async_scheduling and decode_contract < 1:
        # The runner overlaps only under the reload commands (a version-0 decode reloads its
        # inputs, so it must read every step back first): keep the scheduler synchronous too.
        _warn_once(
            f"{arch} declares supports_async_decode but decode_input_update_contract="
            f"{decode_contract}: decode overlap needs contract version 1 "
            "(docs/DECODE_RELOAD_CONTRACT.md); async scheduling turned off on TT"
        )
        scheduler.async_scheduling = False

    if options.sample_on_device_mode is not None and not caps.supports_sample_on_device:
        raise TTConfigurationError(
            f"TT option 'sample_on_device_mode'={options.sample_on_device_mode!r} is not "
            f"supported by {arch}: its TT model class does not declare "
            "model_capabilities['supports_sample_on_device']. Remove the option to sample on "
            "the host."
        )
