"""The launch plan: every launch-time decision of the TT backend, resolved once.

``TTPlatform.check_and_update_config`` resolves the TT options, the serving model class, its
capabilities, the lanes, the DP device groups and every decision derived from them into one
frozen :class:`LaunchPlan` (:func:`resolve_plan`), and stores it as JSON in
``vllm_config.additional_config[PLAN_KEY]``. The config is what vLLM hands to every process it
spawns (engine cores, workers, DP ranks), so the plan crosses the process boundary with it; the
worker, runner, schedulers and warm-up read it back (:func:`read_plan`) instead of re-deciding.
Per-request choices (``sampling_route.decide_route``) stay per request, with their static inputs
from the plan. docs/ARCHITECTURE.md lists each decision, where it is made and who reads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_tt_plugin.config import TTOptions
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.launch.data_parallel import LaneLayout
from vllm_tt_plugin.model_registry import ModelTarget
from vllm_tt_plugin.policy.device_logprobs import DeviceLogprobSupport
from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.policy.step_policy import InterleaveConfig
from vllm_tt_plugin.utils.device_discovery import DeviceGroups

if TYPE_CHECKING:
    from vllm.config import VllmConfig

# additional_config key of the serialised plan (not a user option).
PLAN_KEY = "tt_launch_plan"
# Bumped when the serialised form changes: a plan is only read by the plugin that wrote it.
PLAN_FORMAT = 2


class LaunchPlanError(RuntimeError):
    """A process was started without (or with an unreadable) TT launch plan."""


@dataclass(frozen=True)
class StepPlan:
    """What a launch does for one step kind (prefill or decode)."""

    # Why this step kind always samples on the host (None: device sampling is allowed, and a
    # batch still falls back per request, see sampling_route.decide_route).
    host_reason: str | None
    traced: bool  # serving and warm-up capture and replay a trace for this step kind

    @property
    def device_sampling(self) -> bool:
        return self.host_reason is None


@dataclass(frozen=True)
class LaunchPlan:
    options: TTOptions
    model: ModelTarget  # the class serving the checkpoint ("module:Class")
    # The class's declared capabilities, without fabric_config (ttnn arguments kept by
    # reference: device.open_mesh reads them from the class, never from a config).
    capabilities: ModelCapabilities
    # The class's declared decode_input_update_contract (the loaded instance must agree where a
    # decision below depends on it: served_model.ServedModel checks it after load).
    decode_contract: int
    lanes: LaneLayout  # in-process lanes (lane-DP); 1 lane of max_num_seqs otherwise
    device_groups: DeviceGroups | None  # standard DP: every rank's device group
    devices_per_rank: int  # devices one lane / DP rank drives
    prefill: StepPlan
    decode: StepPlan
    logprobs: DeviceLogprobSupport  # device logprob forms this class and mesh give
    async_overlap: bool  # async scheduling with split decode submit / read-back
    resident_decode_inputs: bool  # decode inputs stay on the device between steps
    chunked_prefill: bool
    prefix_caching: bool
    canvas_tokens: int  # tokens a block-output model commits per step; 0 otherwise
    interleave: InterleaveConfig

    def step(self, kind: StepKind) -> StepPlan:
        if kind is StepKind.IDLE:
            raise ValueError("an idle step calls no model: it has no step plan")
        return self.prefill if kind is StepKind.PREFILL else self.decode

    # --- the process boundary ---------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["format"] = PLAN_FORMAT
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LaunchPlan:
        if data.get("format") != PLAN_FORMAT:
            raise LaunchPlanError(
                f"TT launch plan format {data.get('format')!r} is not {PLAN_FORMAT}: the engine "
                "processes run another vllm_tt_plugin than the one that resolved the launch"
            )
        groups = data["device_groups"]
        return cls(
            options=TTOptions(**data["options"]),
            model=ModelTarget(**data["model"]),
            capabilities=ModelCapabilities(**data["capabilities"]),
            decode_contract=int(data["decode_contract"]),
            lanes=LaneLayout(**data["lanes"]),
            device_groups=None
            if groups is None
            else DeviceGroups(
                parent_shape=_pair(groups["parent_shape"]),
                submesh_shape=_pair(groups["submesh_shape"]),
                groups=tuple(tuple(int(d) for d in g) for g in groups["groups"]),
            ),
            devices_per_rank=int(data["devices_per_rank"]),
            prefill=StepPlan(**data["prefill"]),
            decode=StepPlan(**data["decode"]),
            logprobs=DeviceLogprobSupport(**data["logprobs"]),
            async_overlap=bool(data["async_overlap"]),
            resident_decode_inputs=bool(data["resident_decode_inputs"]),
            chunked_prefill=bool(data["chunked_prefill"]),
            prefix_caching=bool(data["prefix_caching"]),
            canvas_tokens=int(data["canvas_tokens"]),
            interleave=InterleaveConfig(**data["interleave"]),
        )


def _pair(value: Any) -> tuple[int, int]:
    rows, cols = value
    return int(rows), int(cols)


# --- resolution (pure) ----------------------------------------------------------------------------
def sampling_host_reason(options: TTOptions, caps: ModelCapabilities, kind: StepKind) -> str | None:
    """Why a step kind never samples on the device at this launch, or None when it may."""
    if options.always_compat_sampling:
        return "always_compat_sampling"
    if options.sample_on_device_mode is None:
        return "sample_on_device_mode not set"
    if not caps.supports_sample_on_device:
        return "model does not support device sampling"
    if options.sample_on_device_mode == "decode_only" and kind is StepKind.PREFILL:
        return "sample_on_device_mode=decode_only"
    return None


def traced(options: TTOptions, kind: StepKind) -> bool:
    """Whether ``trace_mode`` captures a trace for this step kind."""
    if kind is StepKind.PREFILL:
        return options.trace_mode == "all"
    return options.trace_mode in ("all", "decode_only")


def resolve_plan(
    options: TTOptions,
    model: ModelTarget,
    capabilities: ModelCapabilities,
    *,
    decode_contract: int,
    lanes: LaneLayout,
    device_groups: DeviceGroups | None = None,
    devices_per_rank: int = 1,
    top_k_logprobs: bool = False,
    flat_logprobs: bool = False,
    async_scheduling: bool = False,
    chunked_prefill: bool = False,
    prefix_caching: bool = False,
) -> LaunchPlan:
    """The plan of a launch whose vLLM config the platform has already gated (the scheduler
    and cache switches passed here are the gated ones)."""
    from vllm_tt_plugin.policy.block_output import canvas_tokens

    caps = dataclasses.replace(capabilities, fabric_config=None)

    def step(kind: StepKind) -> StepPlan:
        return StepPlan(sampling_host_reason(options, caps, kind), traced(options, kind))

    decode = step(StepKind.DECODE)
    # Overlap needs the split submit/read-back (the capability) and the reload commands of
    # contract version 1: a version-0 decode loads its inputs every step, so the host must
    # have read the previous step back first.
    async_overlap = async_scheduling and caps.supports_async_decode and decode_contract >= 1
    return LaunchPlan(
        options=options,
        model=model,
        capabilities=caps,
        decode_contract=decode_contract,
        lanes=lanes,
        device_groups=device_groups,
        devices_per_rank=devices_per_rank,
        prefill=step(StepKind.PREFILL),
        decode=decode,
        logprobs=DeviceLogprobSupport(top_k=top_k_logprobs, flat=flat_logprobs),
        async_overlap=async_overlap,
        # Resident inputs need the split async contract and a captured decode trace.
        # Resident inputs (a version-0 model: reset_batch only when they change) need the split
        # async contract and a captured decode trace.
        resident_decode_inputs=caps.supports_async_decode and decode.traced,
        chunked_prefill=chunked_prefill,
        prefix_caching=prefix_caching,
        canvas_tokens=canvas_tokens(caps),
        interleave=InterleaveConfig(
            enabled=options.decode_interleave_enabled,
            prefill_steps=options.decode_interleave_prefill_steps,
            decode_steps=options.decode_interleave_decode_steps,
        ),
    )


# --- carried on the vLLM config -------------------------------------------------------------------
def store_plan(vllm_config: VllmConfig, plan: LaunchPlan) -> None:
    if not isinstance(vllm_config.additional_config, dict):
        vllm_config.additional_config = {}
    vllm_config.additional_config[PLAN_KEY] = plan.to_json()


def find_plan(vllm_config: VllmConfig) -> LaunchPlan | None:
    """The plan the platform stored on this config, or None before it resolved one."""
    additional = vllm_config.additional_config
    data = additional.get(PLAN_KEY) if isinstance(additional, dict) else None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise LaunchPlanError(f"additional_config[{PLAN_KEY!r}] is not a JSON object: {data!r}")
    return LaunchPlan.from_json(data)


def read_plan(vllm_config: VllmConfig) -> LaunchPlan:
    """The launch plan every TT process reads (the worker, runner, schedulers, warm-up)."""
    plan = find_plan(vllm_config)
    if plan is None:
        raise LaunchPlanError(
            "No TT launch plan on this vLLM config: TTPlatform.check_and_update_config "
            "resolves it; build the config through vLLM's EngineArgs with the TT platform active"
        )
    return plan
