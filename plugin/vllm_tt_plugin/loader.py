"""Loading a TT model: resolve its registered class; construct it on the mesh (via the adapter)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_tt_plugin.call_types import LoadCall
from vllm_tt_plugin.capabilities import ModelCapabilities
from vllm_tt_plugin.config import TTOptions
from vllm_tt_plugin.log import get_logger
from vllm_tt_plugin.model_adapter import ModelAdapter
from vllm_tt_plugin.model_registry import ModelTarget, get_registry, register_with_vllm

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = get_logger(__name__)


@dataclass(frozen=True)
class ResolvedModel:
    target: ModelTarget
    model_cls: type
    capabilities: ModelCapabilities


def resolve_model_class(vllm_config: VllmConfig, options: TTOptions) -> ResolvedModel:
    """The class serving this checkpoint (architectures are TT-prefixed by the platform)."""
    registry = get_registry(include_test_models=options.register_test_models)
    architectures = vllm_config.model_config.hf_config.architectures or []
    target = None
    for arch in architectures:
        target = registry.get(arch)
        if target is not None:
            break
    if target is None:
        target = registry.resolve(architectures[0] if architectures else "<none>")
    model_cls = target.load_class()
    # The engine-core process only ran the general plugin, which registers no test models:
    # make vLLM's registry resolve the served class here too (its multimodal processor
    # lookup, made when the scheduler is built, goes through it).
    register_with_vllm(registry)
    return ResolvedModel(target, model_cls, ModelCapabilities.from_model_class(model_cls))


def load_model(
    vllm_config: VllmConfig,
    resolved: ResolvedModel,
    adapter: ModelAdapter,
    mesh_device: Any,
    options: TTOptions,
    lanes: int,
) -> None:
    """Load through the adapter with the contract's arguments (docs/TT_MODEL_CONTRACT.md)."""
    model_config = vllm_config.model_config
    # This engine's max_num_seqs: under lane-DP already lanes x per-lane; never times DP.
    max_batch_size = vllm_config.scheduler_config.max_num_seqs
    logger.info(
        "TT: loading %s (max_batch_size=%d, max_seq_len=%d, tt_data_parallel=%d, optimizations=%s)",
        resolved.target.target,
        max_batch_size,
        model_config.max_model_len,
        lanes,
        options.optimizations,
    )
    adapter.load(
        LoadCall(
            hf_config=model_config.hf_config,
            mesh_device=mesh_device,
            max_batch_size=max_batch_size,
            max_seq_len=model_config.max_model_len,
            tt_data_parallel=lanes,
            optimizations=options.optimizations,
            vllm_config=vllm_config,
        )
    )
