"""Resident decode state and the reload contract that updates it (docs/DECODE_RELOAD_CONTRACT.md).

The device keeps, per global slot (``lane * per_lane_batch + slot_in_lane``): the input token, its
position (-1 = empty slot), one page-table row per KV cache group, the sampling parameters and
the penalty history. A decode call first applies ``slot_remap`` (gather: slot ``i`` takes what
slot ``remap[i]`` held) exactly once, then the reloads its flags name; without flags each slot
advances on its own after sampling (token := sampled token, position += 1, and the sampled token
joins the penalty history).

States are immutable values: a step builds the next state and the model commits it only when
the whole step succeeded, so a step that fails on the device leaves the previous state intact.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from vllm_tt_plugin.test_models.sampling import (
    PenaltyHistory,
    SamplingTensors,
    copy_params,
    select_params,
)


class ReloadContractError(ValueError):
    """A decode call's reload flags break the contract's coherence rules."""


@dataclass(frozen=True)
class DecodeUpdate:
    """Which resident pieces a decode call replaces (contract v1 flags, or v0's reset_batch)."""

    reload_inputs: bool
    reload_page_table: bool
    reload_sampling_params: bool
    reset_sampling_state: bool
    slot_remap: torch.Tensor | None = None

    @classmethod
    def from_reset_batch(cls, reset_batch: bool) -> DecodeUpdate:
        """Contract v0: ``reset_batch`` means the batch layout changed, so reload everything."""
        return cls(reset_batch, False, reset_batch, reset_batch)

    def check_coherence(self) -> None:
        if self.reload_inputs and self.reload_page_table:
            raise ReloadContractError(
                "reload_inputs and reload_page_table are both True; a full input reload "
                "already carries the page table (docs/DECODE_RELOAD_CONTRACT.md)"
            )
        if self.reset_sampling_state and not self.reload_inputs:
            raise ReloadContractError(
                "reset_sampling_state=True requires reload_inputs=True "
                "(docs/DECODE_RELOAD_CONTRACT.md)"
            )


@dataclass(frozen=True)
class DecodeInputs:
    """Host copies of one decode call's tensors, safe to hand to the device thread."""

    # None when the call does not load them (its host copies may be stale: never read).
    tokens: torch.Tensor | None  # int64 [N]
    positions: torch.Tensor | None  # int64 [N], -1 in empty slots
    page_tables: tuple[torch.Tensor, ...] | None  # per group, int32 [N, W]
    sampling_params: SamplingTensors | None
    prompt_tokens: torch.Tensor | None  # int64 [N, L], -1 padded (sent as int32)
    output_tokens: torch.Tensor | None


@dataclass(frozen=True)
class ResidentDecodeState:
    tokens: torch.Tensor  # int64 [N]
    positions: torch.Tensor  # int64 [N]
    page_tables: tuple[torch.Tensor, ...]  # per group, int32 [N, W]
    params: SamplingTensors | None
    history: PenaltyHistory

    @classmethod
    def empty(cls, slots: int, groups: int, vocab: int) -> ResidentDecodeState:
        return cls(
            tokens=torch.zeros(slots, dtype=torch.int64),
            positions=torch.full((slots,), -1, dtype=torch.int64),
            page_tables=tuple(torch.zeros((slots, 1), dtype=torch.int32) for _ in range(groups)),
            params=None,
            history=PenaltyHistory.empty(slots, vocab),
        )

    @property
    def active(self) -> torch.Tensor:
        return self.positions >= 0

    def remapped(self, remap: torch.Tensor) -> ResidentDecodeState:
        return ResidentDecodeState(
            tokens=self.tokens[remap],
            positions=self.positions[remap],
            page_tables=tuple(table[remap] for table in self.page_tables),
            params=None if self.params is None else select_params(self.params, remap),
            history=self.history.select(remap),
        )

    def updated(
        self, update: DecodeUpdate, inputs: DecodeInputs, vocab: int
    ) -> ResidentDecodeState:
        """Apply one decode call's remap and reloads, in the contract's order."""
        state = self
        if update.slot_remap is not None:
            state = state.remapped(update.slot_remap)
        if update.reload_inputs:
            assert inputs.tokens is not None and inputs.positions is not None
            assert inputs.page_tables is not None  # parse_decode copies what a call loads
            state = replace(
                state,
                tokens=inputs.tokens,
                positions=inputs.positions,
                page_tables=inputs.page_tables,
            )
        elif update.reload_page_table:
            assert inputs.page_tables is not None
            state = replace(state, page_tables=inputs.page_tables)
        if update.reload_sampling_params:
            params = inputs.sampling_params
            state = replace(state, params=None if params is None else copy_params(params))
        if update.reset_sampling_state:
            slots = int(state.tokens.shape[0])
            if (
                state.params is not None
                and state.params.any_penalties
                and inputs.prompt_tokens is None
                and inputs.output_tokens is None
            ):
                raise ReloadContractError(
                    "reset_sampling_state=True with penalties in the resident sampling params, "
                    "but neither prompt_tokens nor output_tokens was sent"
                )
            history = PenaltyHistory.from_padded(
                inputs.prompt_tokens, inputs.output_tokens, slots, vocab
            )
            state = replace(state, history=history)
        return state

    def advanced(self, rows: torch.Tensor, sampled: torch.Tensor) -> ResidentDecodeState:
        """After device sampling: each of ``rows`` consumes its sampled token next step."""
        tokens = self.tokens.clone()
        positions = self.positions.clone()
        tokens[rows] = sampled
        positions[rows] += 1
        return replace(
            self,
            tokens=tokens,
            positions=positions,
            history=self.history.with_outputs(rows, sampled),
        )

    def with_prefilled(
        self, slots: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor
    ) -> ResidentDecodeState:
        """A device-sampled prefill leaves its token where the request's decode slot starts."""
        new_tokens = self.tokens.clone()
        new_positions = self.positions.clone()
        new_tokens[slots] = tokens
        new_positions[slots] = positions
        return replace(self, tokens=new_tokens, positions=new_positions)
