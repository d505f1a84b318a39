"""Planning the decode reload commands (docs/DECODE_RELOAD_CONTRACT.md). Pure: no model, no torch.

Given what the device last saw and what this decode step looks like, decide which resident
inputs the model must replace. The runner turns the command into ``decode_forward`` kwargs for
contract v1 models, or into the sticky ``reset_batch`` for legacy (v0) models, and commits the
new device view only after the model accepted the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vllm_tt_plugin.policy.sampling_route import Route
from vllm_tt_plugin.policy.step_kind import StepKind

# One entry per global slot: the owning request id, or None.
Layout = tuple[str | None, ...]


class ReloadContractError(ValueError):
    """A reload command breaks the contract's coherence rules."""


@dataclass(frozen=True)
class ReloadCommand:
    reload_inputs: bool = False
    reload_page_table: bool = False
    reload_sampling_params: bool = False
    reset_sampling_state: bool = False
    slot_remap: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.reload_inputs and self.reload_page_table:
            raise ReloadContractError(
                "reload_inputs and reload_page_table are never both set: a full reload already "
                "carries the page table"
            )
        if self.reset_sampling_state and not self.reload_inputs:
            raise ReloadContractError("reset_sampling_state requires reload_inputs")
        if self.slot_remap is not None:
            check_permutation(self.slot_remap)

    @property
    def is_full_reload(self) -> bool:
        return self.reload_inputs

    @property
    def touches_device_inputs(self) -> bool:
        return self.reload_inputs or self.reload_page_table

    def v1_kwargs(self) -> dict[str, Any]:
        return {
            "reload_inputs": self.reload_inputs,
            "reload_page_table": self.reload_page_table,
            "reload_sampling_params": self.reload_sampling_params,
            "reset_sampling_state": self.reset_sampling_state,
        }


FULL_RELOAD = ReloadCommand(
    reload_inputs=True, reload_sampling_params=True, reset_sampling_state=True
)
# The host samples: the device's sampling parameters are not used, so none are sent
# (reload_sampling_params = device_sampling and transition; tt-metal's
# models/common/decode_contract.py require_full_input_reload refuses them from an adapter with
# no device sampler, @ 40f4746e). The switch back to device sampling is a full reload.
HOST_STEP_RELOAD = ReloadCommand(reload_inputs=True)
STEADY = ReloadCommand()
PAGE_TABLE_ONLY = ReloadCommand(reload_page_table=True)
# Steady device steps of a model whose inputs are not resident (no supports_async_decode, or
# decode tracing off: tt-metal keeps resident inputs only in a captured trace).
INPUTS_ONLY = ReloadCommand(reload_inputs=True)


def check_permutation(remap: Sequence[int]) -> None:
    if sorted(remap) != list(range(len(remap))):
        raise ReloadContractError(f"slot_remap {list(remap)} is not a permutation of its slots")


def apply_remap(values: Sequence[Any], remap: Sequence[int]) -> list[Any]:
    """Gather semantics: ``out[i] = values[remap[i]]`` (applied exactly once per remap)."""
    check_permutation(remap)
    if len(remap) != len(values):
        raise ReloadContractError(f"slot_remap has {len(remap)} entries for {len(values)} slots")
    return [values[j] for j in remap]


@dataclass(frozen=True)
class DecodeStep:
    """The facts of one decode step the plan depends on."""

    layout: Layout  # after this step's remap
    route: Route
    # Allocation signature: per-slot block counts, or any value that changes whenever a slot's
    # block list does (the runner sends the input batch's blocks_version).
    block_counts: tuple[int, ...]
    slot_remap: tuple[int, ...] | None = None


@dataclass(frozen=True)
class DeviceView:
    """What the device holds after the last accepted step."""

    last_kind: StepKind | None = None
    layout: Layout | None = None
    route: Route | None = None
    block_counts: tuple[int, ...] | None = None


@dataclass
class ReloadPlanner:
    """Holds the device view between steps; plans each decode, commits after acceptance."""

    view: DeviceView = field(default_factory=DeviceView)
    # False: every decode reloads its inputs (not supports_async_decode, or decode untraced).
    resident_inputs: bool = True

    def plan(self, step: DecodeStep) -> ReloadCommand:
        view = self.view
        if step.route is Route.HOST:
            # The host sampled last step's token; the device never saw it.
            command = HOST_STEP_RELOAD
        elif (
            view.last_kind is not StepKind.DECODE
            or view.route is not Route.DEVICE
            or view.layout != step.layout
            or step.slot_remap is not None
        ):
            command = FULL_RELOAD
        elif view.block_counts != step.block_counts:
            command = PAGE_TABLE_ONLY
        else:
            command = STEADY
        if not self.resident_inputs and not command.reload_inputs:
            command = INPUTS_ONLY
        if step.slot_remap is not None:
            command = replace(command, slot_remap=step.slot_remap)
        return command

    @staticmethod
    def legacy_reset_batch(command: ReloadCommand) -> bool:
        """v0 models get one flag for any reload. It is sticky for free: the view only
        advances when a call is accepted, so a rejected call is planned again next step."""
        return command.touches_device_inputs

    def commit_decode(self, step: DecodeStep) -> None:
        self.view = DeviceView(
            last_kind=StepKind.DECODE,
            layout=step.layout,
            route=step.route,
            block_counts=step.block_counts,
        )

    def commit_prefill(self) -> None:
        self.view = replace(self.view, last_kind=StepKind.PREFILL)
