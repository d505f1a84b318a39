"""Loading a TT model: import the class the launch plan names; construct it on the mesh (via the
adapter)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_tt_plugin.adapter.model_adapter import ModelAdapter
from vllm_tt_plugin.config import TTOptions
from vllm_tt_plugin.contract.call_types import LoadCall
from vllm_tt_plugin.model_registry import ModelTarget, get_registry, register_with_vllm
from vllm_tt_plugin.utils.log import get_logger

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from vllm_tt_plugin.launch.launch_plan import LaunchPlan

logger = get_logger(__name__)


@dataclass(frozen=True)
class ResolvedModel:
    target: ModelTarget
    model_cls: type


def register_served_model(plan: LaunchPlan) -> None:
    """Make vLLM's registry of this process resolve the served class: an engine-core or worker
    process only ran the general plugin, which registers no test models (vLLM's multimodal
    processor lookup, made when the scheduler is built, goes through it)."""
    register_with_vllm(get_registry(include_test_models=plan.options.register_test_models))


def load_served_class(plan: LaunchPlan) -> ResolvedModel:
    """Import the class the platform chose for this launch (never chosen again here)."""
    model_cls = plan.model.load_class()
    register_served_model(plan)
    return ResolvedModel(plan.model, model_cls)


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
