"""TTWorker: the vLLM worker for a TT mesh (selected as ``parallel_config.worker_cls``).

vLLM drives it through init_device, load_model, get_kv_cache_spec, determine_available_memory,
initialize_from_config, compile_or_warm_up_model and get_supported_tasks, then per step
execute_model and sample_tokens. execute_model always returns None so that the grammar bitmask
for structured output reaches sample_tokens, where the model is called.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from vllm.config import VllmConfig
from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheSpec
from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput
from vllm.v1.worker.worker_base import CompilationTimes, WorkerBase

from vllm_tt_plugin.adapter.instance_capabilities import instance_declared, read_instance
from vllm_tt_plugin.adapter.kv_cache import (
    BlockBudget,
    compute_block_budget,
    kv_tp_width,
    layer_index,
    layer_specs_for_model,
    pool_bytes_per_block,
    sliding_windows,
    uniform_kv_cache_spec,
)
from vllm_tt_plugin.adapter.model_adapter import ModelAdapter
from vllm_tt_plugin.adapter.served_model import ServedModel
from vllm_tt_plugin.contract.call_types import KVSizingCall, WarmupPlan
from vllm_tt_plugin.device.mesh import OpenedMesh, close_mesh, open_mesh, visible_device_ids
from vllm_tt_plugin.device.watchdog import DeviceCall, DeviceTimeoutError, arm_exit_fallback
from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.launch.data_parallel import rank_devices
from vllm_tt_plugin.launch.launch_plan import read_plan
from vllm_tt_plugin.launch.mesh_spec import MeshSpec, mesh_spec_from_env
from vllm_tt_plugin.loader import ResolvedModel, load_model, load_served_class
from vllm_tt_plugin.model_runner import TTModelRunner
from vllm_tt_plugin.observability import tt_metrics
from vllm_tt_plugin.utils.log import get_logger

logger = get_logger(__name__)


class TTWorker(WorkerBase):  # type: ignore[misc]
    def __init__(
        self,
        vllm_config: VllmConfig,
        local_rank: int,
        rank: int,
        distributed_init_method: str,
        is_driver_worker: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(vllm_config, local_rank, rank, distributed_init_method, is_driver_worker)
        # Every launch decision this worker acts on comes from the platform's plan.
        self.plan = read_plan(vllm_config)
        self.options = self.plan.options
        self.layout = self.plan.lanes
        self.mesh_spec = mesh_spec_from_env()
        self.resolved: ResolvedModel | None = None
        self.adapter: ModelAdapter | None = None
        self.served: ServedModel | None = None  # the plan plus the loaded instance's facts
        self.mesh: OpenedMesh | None = None
        self.model_runner: TTModelRunner | None = None
        self.block_budget: BlockBudget | None = None
        self.device = torch.device("cpu")

    # --- start-up -----------------------------------------------------------------------------
    def init_device(self) -> None:
        self.resolved = load_served_class(self.plan)
        self.adapter = ModelAdapter(
            self.resolved.model_cls,
            self.vllm_config.model_config.hf_config,
            device_timeout_s=self.options.device_timeout_s,
            warmup_timeout_s=self.options.warmup_timeout_s,
            capabilities=self.plan.capabilities,
        )
        self.adapter.watchdog.add_failure_hook(self._on_device_failure)
        device_ids = visible_device_ids()
        rank = rank_devices(self.plan.device_groups, self.vllm_config.parallel_config)
        if rank is not None:
            # Standard DP: this rank opens only its discovered group, as a submesh.
            if rank.check_visible(device_ids):
                logger.info(
                    "TT: DP rank %d narrows the parent-wide TT_VISIBLE_DEVICES=%s to its group %s",
                    rank.rank,
                    device_ids,
                    rank.group,
                )
            device_ids = rank.group
            envs.TT_VISIBLE_DEVICES.export(",".join(map(str, rank.group)))
            rows, cols = rank.submesh_shape
            self.mesh_spec = MeshSpec(
                f"{self.mesh_spec.name}/dp{rank.rank}", rows, cols, self.mesh_spec.family
            )
            logger.info(
                "TT: DP rank %d uses device group %s (TT_VISIBLE_DEVICES=%s), submesh %s",
                rank.rank,
                rank.group,
                envs.TT_VISIBLE_DEVICES.raw(),
                self.mesh_spec.shape,
            )
        if self.options.emulated_mesh:
            # The emulated device thread and the host share this process's cores; one torch
            # thread each avoids oversubscription (measured 5-20x faster decode steps here).
            torch.set_num_threads(1)
        # The plan's capabilities leave the ttnn fabric arguments out: read them from the class.
        capabilities = self.plan.capabilities.with_fabric_config_of(self.resolved.model_cls)
        self.mesh = open_mesh(self.mesh_spec, self.options, capabilities, device_ids)

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        assert self.adapter is not None and self.mesh is not None, "init_device first"
        assert self.resolved is not None
        load_model(
            self.vllm_config,
            self.resolved,
            self.adapter,
            self.mesh.device,
            self.options,
            self.layout.lanes,
        )
        facts = self.adapter.facts  # the loaded instance's
        # tt_transformers.vllm_registry's classes return their generator's own model (and any
        # class may return a subclass), whose capabilities the platform never read: they are
        # parsed here, to be checked and to narrow the per-request limits.
        model = self.adapter.model
        declared = instance_declared(model, self.resolved.model_cls, self.plan.capabilities)
        self.served = ServedModel.after_load(
            self.plan,
            class_name=self.adapter.profile.class_name,
            contract_version=facts.decode_contract,
            block_size=self.cache_config.block_size,
            instance=read_instance(model, declared),
        )
        for reason in self.served.narrowed:
            logger.warning("TT: %s serves with %s", type(model).__qualname__, reason)
        self.model_runner = TTModelRunner(self.vllm_config, self.adapter, self.served)

    def get_kv_cache_spec(self) -> dict[str, KVCacheSpec]:
        assert self.adapter is not None
        specs = self.adapter.kv_cache_spec(self.vllm_config)
        return specs if specs is not None else uniform_kv_cache_spec(self.vllm_config)

    def get_num_available_blocks_tt(self) -> BlockBudget:
        """Blocks of one lane's KV pool, from the model's token budget plus headroom."""
        assert self.adapter is not None
        model_config = self.vllm_config.model_config
        budget_tokens = self.adapter.max_tokens_all_users(
            KVSizingCall(
                model_name=model_config.model,
                num_devices=self.mesh_spec.num_devices,
                tt_data_parallel=self.layout.lanes,
                max_model_len=model_config.max_model_len,
                max_num_seqs=self.layout.seqs_per_lane,
            )
        )
        # Sliding-window headroom only for classes that enable hybrid KV groups.
        windows = (
            sliding_windows(self.get_kv_cache_spec())
            if self.adapter.profile.hybrid_groups_enabled
            else []
        )
        return compute_block_budget(
            budget_tokens,
            self.cache_config.block_size,
            self.layout.seqs_per_lane,
            windows,
            self.vllm_config.max_in_flight_tokens,
            canvas_tokens=self.plan.canvas_tokens,
        )

    def determine_available_memory(self) -> int:
        """Publish the block count as num_gpu_blocks_override and as an equivalent byte budget.

        The byte budget is what reaches vLLM's engine-side KV planner, which can run in another
        process than this worker (standard DP); it converts back to exactly this block count.
        """
        budget = self.get_num_available_blocks_tt()
        self.block_budget = budget
        self._fit_max_model_len(budget)
        self.cache_config.num_gpu_blocks_override = budget.num_blocks
        per_block = pool_bytes_per_block(self.vllm_config, self.get_kv_cache_spec())
        logger.info(
            "TT KV pool per lane: %d blocks of %d tokens (budget %d tokens = %d blocks, "
            "+%d sequence headroom, +%d sliding-window headroom)",
            budget.num_blocks,
            budget.block_size,
            budget.max_tokens_all_users,
            budget.budget_blocks,
            budget.sequence_headroom,
            budget.sliding_headroom,
        )
        return budget.num_blocks * per_block

    def _fit_max_model_len(self, budget: BlockBudget) -> None:
        """Keep max_model_len servable by one request holding the whole pool.

        vLLM's capacity check and its -1 auto-fit count the null block as usable, so without
        this a request exactly at max_model_len could need one block more than exists and wait
        forever. -1 is fitted here (vLLM's auto-fit then finds it fits); an explicit or
        HF-derived length beyond the pool fails start-up with the servable estimate. A
        block-output model must fit max_model_len plus one output canvas (docs/BLOCK_SERVING.md).
        """
        if budget.sliding_headroom:
            return  # hybrid pools are checked per group by vLLM's planner
        model_config = self.model_config
        limit = budget.max_model_len_limit
        if model_config.max_model_len <= limit:
            return
        if getattr(model_config, "original_max_model_len", None) == -1:
            logger.info(
                "TT: fitting max_model_len %d to the KV pool: %d", model_config.max_model_len, limit
            )
            self.update_max_model_len(limit)
            return
        canvas = (
            f" plus one {budget.canvas_tokens}-token output canvas (a block-output model)"
            if budget.canvas_tokens
            else ""
        )
        raise ValueError(
            f"max_model_len {model_config.max_model_len}{canvas} does not fit the TT KV pool: "
            f"{budget.num_blocks - budget.null_blocks} usable blocks of {budget.block_size} "
            f"tokens; the estimated maximum model length is {limit}. Lower --max-model-len, "
            "raise the model's max_tokens_all_users, or lower --max-num-seqs."
        )

    def update_max_model_len(self, max_model_len: int) -> None:
        self.model_config.max_model_len = max_model_len
        if self.model_runner is not None:
            self.model_runner.update_max_model_len(max_model_len)

    def initialize_from_config(self, kv_cache_config: KVCacheConfig) -> None:
        assert self.model_runner is not None
        self.cache_config.num_gpu_blocks = kv_cache_config.num_blocks
        for group_id, group in enumerate(kv_cache_config.kv_cache_groups):
            # What vLLM's KV manager lets one request hold per group (hybrid models: a sliding
            # group holds about a window's worth, a full group max_model_len).
            spec = group.kv_cache_spec
            max_bytes = spec.max_memory_usage_bytes(self.vllm_config)
            logger.info(
                "TT KV cache group %d: %s x %d layer(s), sliding_window=%s; one request holds "
                "at most %d blocks = %d bytes per layer",
                group_id,
                type(spec).__name__,
                len(group.layer_names),
                getattr(spec, "sliding_window", None),
                max_bytes // spec.page_size_bytes,
                max_bytes,
            )
        assert self.adapter is not None
        entries = layer_specs_for_model(
            kv_cache_config, kv_tp_width(self.mesh_spec.shape, self.layout.lanes)
        )
        kv_cache = self.adapter.allocate_kv_cache(entries)
        group_of = {
            layer_index(name): g
            for g, group in enumerate(kv_cache_config.kv_cache_groups)
            for name in group.layer_names
        }
        self.model_runner.set_kv_cache(
            kv_cache,
            len(kv_cache_config.kv_cache_groups),
            tuple(group_of[e.layer_index] for e in entries),
        )
        # Metrics hook: the launch is settled (max_model_len fitted to the KV pool).
        assert self.resolved is not None
        tt_metrics.publish_info(
            tt_metrics.collect_info(
                self.options,
                mesh_spec_from_env(),  # the whole mesh (a DP rank's submesh is part of it)
                self.resolved.model_cls,
                self.layout.lanes,
                self.layout.seqs_per_lane,
                self.model_config.max_model_len,
                tt_metrics.ServingProfile(
                    model=self.model_config.model,
                    revision=self.model_config.revision,
                    async_scheduling=bool(self.scheduler_config.async_scheduling),
                    chunked_prefill=bool(self.scheduler_config.enable_chunked_prefill),
                    prefix_caching=bool(self.cache_config.enable_prefix_caching),
                ),
                # Model instances: lanes, or vLLM's standard DP ranks (the platform's own max).
                data_parallel=max(
                    self.vllm_config.parallel_config.data_parallel_size, self.layout.lanes
                ),
            )
        )

    def compile_or_warm_up_model(self) -> CompilationTimes:
        if not self.options.enable_model_warmup:
            return CompilationTimes(language_model=0.0, encoder=0.0)
        assert self.model_runner is not None and self.adapter is not None
        assert self.served is not None
        start = time.perf_counter()
        plan = self.plan
        pool = int(self.cache_config.num_gpu_blocks or 0)
        width = self.served.table_width(self.model_config.max_model_len)
        self.adapter.warm_up(
            WarmupPlan(
                kv_cache=self.model_runner.kv_cache,
                max_batch_size=self.scheduler_config.max_num_seqs,
                # The traced page table is one request wide, never the pool.
                num_blocks=min(width, pool) if pool else width,
                # Warm up exactly what serving runs: device sampling and traces per step kind.
                prefill_on_device=plan.prefill.device_sampling,
                decode_on_device=plan.decode.device_sampling,
                trace_prefill=plan.prefill.traced,
                trace_decode=plan.decode.traced,
            )
        )
        elapsed = time.perf_counter() - start
        logger.info("TT warm-up (trace_mode=%s) took %.2f s", plan.options.trace_mode, elapsed)
        return CompilationTimes(language_model=elapsed, encoder=0.0)

    def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    # --- per step -----------------------------------------------------------------------------
    def execute_model(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput | None:
        assert self.model_runner is not None
        return self.model_runner.execute_model(scheduler_output)

    def sample_tokens(
        self, grammar_output: GrammarOutput | None
    ) -> ModelRunnerOutput | AsyncModelRunnerOutput:
        assert self.model_runner is not None
        return self.model_runner.sample_tokens(grammar_output)

    def take_draft_token_ids(self) -> None:
        return None

    def get_model(self) -> Any:
        return self.adapter.model if self.adapter is not None and self.adapter.loaded else None

    def get_cache_block_size_bytes(self) -> int:
        return pool_bytes_per_block(self.vllm_config, self.get_kv_cache_spec())

    def check_health(self) -> None:
        return

    def add_lora(self, lora_request: Any) -> bool:
        raise ValueError("LoRA is not supported on TT")

    def remove_lora(self, lora_id: int) -> bool:
        raise ValueError("LoRA is not supported on TT")

    def pin_lora(self, lora_id: int) -> bool:
        raise ValueError("LoRA is not supported on TT")

    def list_loras(self) -> set[int]:
        return set()

    def _on_device_failure(self, call: DeviceCall, exc: BaseException) -> None:
        """A device call raised or timed out: the engine dies with it (vLLM's engine-dead path),
        so close the mesh and reset fabric now, once, instead of waiting for shutdown."""
        if isinstance(exc, DeviceTimeoutError):
            # The watchdog logged the one ERROR line. The hung call's thread cannot be stopped:
            # make sure it cannot keep this process alive.
            arm_exit_fallback()
        else:
            logger.error(
                "TT: fatal device error in the %s (%s: %s); closing the mesh",
                call.describe(),
                type(exc).__name__,
                exc,
            )
        self._close_mesh("after a device failure")

    def _close_mesh(self, why: str) -> None:
        mesh, self.mesh = self.mesh, None
        if mesh is not None:
            close_mesh(mesh, why=why)

    def shutdown(self) -> None:
        if self.plan.canvas_tokens and self.adapter is not None and self.adapter.loaded:
            try:
                self.adapter.release_persistent_capture()
            except Exception:  # shutting down anyway; the device is closed below
                logger.exception("TT: release_persistent_capture at shutdown failed")
        if self.model_runner is not None:
            if self.adapter is None or self.adapter.watchdog.failure is None:
                try:
                    self.model_runner.drain()
                except Exception:  # shutting down anyway; the device is closed below
                    logger.exception("TT: draining in-flight decode at shutdown failed")
            logger.info("TT runner stats: %s", self.model_runner.stats.summary())
            if self.model_runner.block_stepper is not None:
                logger.info("TT block stats: %s", self.model_runner.block_stepper.stats.summary())
        self._close_mesh("shutdown")
