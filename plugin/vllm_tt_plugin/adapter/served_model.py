"""The served model: the launch plan plus what only the loaded instance knows, derived once.

The platform plans a launch from the model class (launch/launch_plan.py). A few facts exist only
once the worker has loaded the instance: its ``decode_input_update_contract`` (an instance may set
it) is the one decisions depend on here (the adapter keeps the instance's hooks and allocator in its
own facts, ``model_adapter.instance_facts``). The worker builds one frozen :class:`ServedModel`
right after load; the runner, the block stepper and warm-up read their effective values from it
(overlap, resident inputs, slot remaps, legacy reload, page-table width, canvas) instead of
combining plan and instance facts themselves.

A decision the platform already acted on in another process (the scheduler class follows
``plan.async_overlap``) cannot change after load: an instance that contradicts it is refused
here with the attribute to fix. The per-request limits the runner applies itself (the device
top-k, device penalties) are the narrower of the class's and the instance's
(adapter/instance_capabilities.py): tt_transformers.vllm_registry's classes leave them to the
generator whose model they return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from vllm_tt_plugin.adapter.instance_capabilities import InstanceCapabilities
from vllm_tt_plugin.adapter.model_adapter import ModelContractError
from vllm_tt_plugin.launch.capabilities import ModelCapabilities, capability_conflicts
from vllm_tt_plugin.launch.launch_plan import LaunchPlan


@dataclass(frozen=True)
class Narrowed:
    """The plan's capabilities with the loaded instance's per-request limits, and why."""

    capabilities: ModelCapabilities
    reasons: tuple[str, ...]  # one line per narrowed key (logged once by the worker)


def per_request_capabilities(
    planned: ModelCapabilities, instance: InstanceCapabilities
) -> Narrowed:
    """The limits ``sampling_route`` applies per request, the narrower of the class's and the
    instance's: the device top-k and device penalties (the instance may also be seen to drop
    the penalty histories). Routing is decided in the runner after load, so no launch decision
    depends on them."""
    declared = instance.declared
    caps = planned.narrowed_by(declared)
    reasons: list[str] = []
    if caps.max_device_top_k != planned.max_device_top_k:
        reasons.append(
            f"max_device_top_k {caps.max_device_top_k} (the instance's; the class declared "
            f"{planned.max_device_top_k}): stochastic rows with top_k outside "
            f"[1, {caps.max_device_top_k}] sample on the host"
        )
    if planned.supports_device_penalties and not caps.supports_device_penalties:
        reasons.append(
            "supports_device_penalties False (the instance's): penalised rows sample on the host"
        )
    elif caps.supports_device_penalties and instance.drops_penalty_histories is not None:
        reasons.append(f"{instance.drops_penalty_histories}: penalised rows sample on the host")
        caps = replace(caps, supports_device_penalties=False)
    return Narrowed(caps, tuple(reasons))


@dataclass(frozen=True)
class ServedModel:
    plan: LaunchPlan  # with the instance's per-request limits (per_request_capabilities)
    class_name: str
    contract_version: int  # the instance's decode_input_update_contract
    block_size: int  # tokens per KV block (settled by the platform)
    narrowed: tuple[str, ...] = ()  # what the instance narrowed in the plan, and why

    @classmethod
    def after_load(
        cls,
        plan: LaunchPlan,
        *,
        class_name: str,
        contract_version: int,
        block_size: int,
        instance: InstanceCapabilities | None = None,
    ) -> ServedModel:
        """The served model of a loaded instance, refused when the instance contradicts a
        decision the launch already made from its class; its per-request limits replace the
        class's where narrower."""
        conflicts = (
            capability_conflicts(plan.capabilities, instance.declared)
            if instance is not None
            else []
        )
        if conflicts:
            raise ModelContractError(
                f"{class_name} was planned from the model_capabilities of its registered class, "
                f"but the instance its initialize_vllm_model returned declares less: "
                f"{'; '.join(conflicts)}. The launch would send it what it cannot take; declare "
                "the same capabilities on the registered class."
            )
        narrowed = (
            per_request_capabilities(plan.capabilities, instance)
            if instance is not None
            else Narrowed(plan.capabilities, ())
        )
        plan = replace(plan, capabilities=narrowed.capabilities)
        if plan.async_overlap and contract_version < 1:
            raise ModelContractError(
                f"{class_name} declares decode_input_update_contract={plan.decode_contract} on "
                f"its class, so this launch scheduled asynchronously, but the loaded instance "
                f"has {contract_version}: async overlap needs contract version >= 1 "
                "(docs/DECODE_RELOAD_CONTRACT.md). Set the attribute on the class only, or "
                "serve with --no-async-scheduling."
            )
        return cls(
            plan=plan,
            class_name=class_name,
            contract_version=contract_version,
            block_size=block_size,
            narrowed=narrowed.reasons,
        )

    # --- effective values, derived here only -----------------------------------------------------
    @property
    def reload_commands(self) -> bool:
        """Decode calls carry the four reload commands (contract >= 1); else ``reset_batch``
        and every decode reloads its inputs."""
        return self.contract_version >= 1

    @property
    def overlap(self) -> bool:
        """Decode submit and read-back are split across steps (async scheduling): the plan's
        choice, which ``after_load`` checked the instance can honour."""
        return self.plan.async_overlap

    @property
    def resident_inputs(self) -> bool:
        """Decode inputs stay on the device between steps: a version-1 model is told with
        ``reload_inputs``, a version-0 one with ``reset_batch`` (the plan's choice)."""
        return self.plan.resident_decode_inputs

    @property
    def remaps_slots(self) -> bool:
        """Idle slots may be compacted with ``slot_remap`` (a version-0 decode never moves)."""
        return self.reload_commands

    @property
    def canvas(self) -> int:
        """Tokens a block-output model commits per step; 0 for every other model."""
        return self.plan.canvas_tokens

    def table_width(self, max_model_len: int) -> int:
        """Blocks one request can hold: the width of a decode row's page table. Warm-up traces
        with it and serving runs with it, so both take it from here."""
        return math.ceil(max_model_len / self.block_size)
