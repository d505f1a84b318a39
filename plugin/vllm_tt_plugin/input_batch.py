"""The TT input batch: per-request state and the persistent, slot-stable decode batch.

A TT decode step runs the whole batch: ``lanes x seqs_per_lane`` slots, each slot owned by at
most one request for as long as it lives (or until the runner compacts a lane). Prefill steps
place new requests into free slots (``empty_slots``). The worker keeps its own token history per
request: vLLM's V1 scheduler does not send back the tokens it already got from the worker.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import NewRequestData, SchedulerOutput

from vllm_tt_plugin.contract.sampling_params import (
    EMPTY_ROW,
    DeviceSamplingRow,
    EncodedRow,
    encode_row,
)

# Range of seeds drawn for requests without one (device sampling needs a seed per request).
_SEED_BOUND = 2**31 - 1


@dataclass
class TTRequestState:
    req_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int
    lane: int
    device_seed: int
    # Host sampling: vLLM's per-request generator (seeded requests only).
    generator: torch.Generator | None
    # Mutated in place only: vLLM's host InputBatch keeps a reference to this list.
    output_token_ids: list[int] = field(default_factory=list)
    slot: int | None = None  # lane-local decode slot
    mm_features: list[Any] = field(default_factory=list)
    rope_delta: int | None = None  # mRoPE models: set by prefill (step/multimodal.py)
    # Bumped when block_ids is replaced rather than grown (replace_blocks): readers that kept
    # a copy of the old list (the decode page tables) then rewrite it instead of appending.
    block_epoch: int = 0
    # sampling_route.row_feature of its sampling parameters under this launch (the runner sets
    # it when the request arrives; they never change): the host-only feature, or None.
    host_feature: str | None = None
    # encoded_sampling's value: a request's sampling parameters never change.
    _encoded: tuple[int, EncodedRow] | None = field(default=None, repr=False, compare=False)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_slice(self, start: int, end: int) -> list[int]:
        prompt_len = len(self.prompt_token_ids)
        if end <= prompt_len:
            return self.prompt_token_ids[start:end]
        head = self.prompt_token_ids[start:prompt_len] if start < prompt_len else []
        out_start = max(start - prompt_len, 0)
        return head + self.output_token_ids[out_start : end - prompt_len]

    def replace_blocks(self, block_ids: tuple[list[int], ...]) -> None:
        """New block lists (a resume after preemption); growth extends the lists in place."""
        self.block_ids = block_ids
        self.block_epoch += 1

    def last_token(self) -> int:
        return self.output_token_ids[-1] if self.output_token_ids else self.prompt_token_ids[-1]

    def device_row(self) -> DeviceSamplingRow:
        params = self.sampling_params
        greedy = params.temperature < 1e-5
        return DeviceSamplingRow(
            temperature=0.0 if greedy else float(params.temperature),
            top_k=params.top_k if params.top_k > 0 else 0,
            top_p=float(params.top_p),
            presence_penalty=float(params.presence_penalty),
            frequency_penalty=float(params.frequency_penalty),
            repetition_penalty=float(params.repetition_penalty),
            # Unseeded -> None: the device draws its own randomness.
            seed=None if params.seed is None else self.device_seed,
            num_logprobs=-1 if params.logprobs is None else int(params.logprobs),
        )

    def encoded_sampling(self, vocab_size: int) -> EncodedRow:
        """``device_row`` encoded for the device (``encode_row``), computed once."""
        cached = self._encoded
        if cached is None or cached[0] != vocab_size:
            cached = self._encoded = (vocab_size, encode_row(self.device_row(), vocab_size))
        return cached[1]


def make_request_state(new_req: NewRequestData, lane: int) -> TTRequestState:
    params = new_req.sampling_params
    if params is None:
        raise ValueError(f"request {new_req.req_id}: TT serves generation requests only")
    if new_req.prompt_token_ids is None:
        raise ValueError(f"request {new_req.req_id}: prompt embeddings are not supported on TT")
    generator = None
    if params.seed is not None:
        generator = torch.Generator(device="cpu")
        generator.manual_seed(params.seed)
        device_seed = params.seed % _SEED_BOUND
    else:
        device_seed = int(torch.randint(0, _SEED_BOUND, (1,)).item())
    return TTRequestState(
        req_id=new_req.req_id,
        prompt_token_ids=list(new_req.prompt_token_ids),
        sampling_params=params,
        block_ids=tuple(list(ids) for ids in new_req.block_ids),
        num_computed_tokens=new_req.num_computed_tokens,
        lane=lane,
        device_seed=device_seed,
        generator=generator,
        mm_features=list(new_req.mm_features or []),
    )


class LaneSlots:
    """Slot ownership of one lane's decode batch."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.owner: list[str | None] = [None] * capacity

    def take_free(self, req_id: str) -> int:
        for slot, owner in enumerate(self.owner):
            if owner is None:
                self.owner[slot] = req_id
                return slot
        raise RuntimeError(
            f"no free decode slot for request {req_id}: all {self.capacity} slots of the lane "
            "are taken (the scheduler admitted more requests than max_num_seqs per lane)"
        )

    def release(self, req_id: str) -> None:
        for slot, owner in enumerate(self.owner):
            if owner == req_id:
                self.owner[slot] = None

    def compaction(self, idle: Collection[str] = ()) -> list[int] | None:
        """Gather permutation packing the active owners (owned, not ``idle``) into the front
        slots, moving as few rows as it can; None if nothing would move.

        Each hole among the first ``n`` slots (``n`` active owners) swaps with the last active
        owner behind them, so one departure moves one row (its resident device state, page-table
        row and sampling row), not every row after it: with a steady stream of finishes in a
        large batch, a stable shift would rewrite most of the batch every few steps.

        An idle owner is one that is done decoding but still holds its slot: under vLLM's async
        scheduling a request that reached ``max_tokens`` leaves the steps a step before vLLM
        reports it finished and its slot is freed. It goes behind the active owners (a hole in
        front would stay after its release, as no later layout change compacts it).
        ``remap[i] = j``: after the move, slot i holds what slot j held.
        """
        owners = self.owner
        active = [o is not None and o not in idle for o in owners]
        n = sum(active)
        holes = [slot for slot in range(n) if not active[slot]]
        if not holes:
            return None
        movers = [slot for slot in range(len(owners) - 1, n - 1, -1) if active[slot]]
        remap = list(range(len(owners)))
        for hole, mover in zip(holes, movers, strict=True):
            remap[hole], remap[mover] = mover, hole
        return remap

    def apply(self, remap: list[int]) -> None:
        self.owner = [self.owner[j] for j in remap]


class TTInputBatch:
    """All live requests of this worker and the slot layout of every lane."""

    def __init__(self, lanes: int, seqs_per_lane: int, max_blocks_per_req: int) -> None:
        self.lanes = lanes
        self.seqs_per_lane = seqs_per_lane
        self.max_blocks_per_req = max_blocks_per_req
        self.requests: dict[str, TTRequestState] = {}
        self.slots = [LaneSlots(seqs_per_lane) for _ in range(lanes)]
        # Requests whose block lists changed since the decode page tables last caught up, and a
        # counter of such changes (the reload planner's allocation signature).
        self.blocks_dirty: set[str] = set()
        self.blocks_version = 0

    @property
    def num_slots(self) -> int:
        return self.lanes * self.seqs_per_lane

    def global_slot(self, state: TTRequestState) -> int:
        if state.slot is None:
            raise RuntimeError(f"request {state.req_id} has no decode slot")
        return state.lane * self.seqs_per_lane + state.slot

    # --- state updates from the scheduler ------------------------------------------------------
    def add(self, state: TTRequestState) -> None:
        self.requests[state.req_id] = state

    def remove(self, req_id: str) -> TTRequestState | None:
        state = self.requests.pop(req_id, None)
        if state is not None:
            self.release_slot(state)
        return state

    def release_slot(self, state: TTRequestState) -> None:
        if state.slot is not None:
            self.slots[state.lane].release(state.req_id)
            state.slot = None

    def ensure_slot(self, state: TTRequestState) -> int:
        if state.slot is None:
            state.slot = self.slots[state.lane].take_free(state.req_id)
        return self.global_slot(state)

    def apply_cached_updates(self, scheduler_output: SchedulerOutput) -> set[str]:
        """Fold the step's cached-request data into the states; returns the resumed req ids."""
        cached = scheduler_output.scheduled_cached_reqs
        resumed = cached.resumed_req_ids
        requests = self.requests
        # One pass per step over every decoding request: locals and zip, no per-row indexing.
        for req_id, new_blocks, computed in zip(
            cached.req_ids, cached.new_block_ids, cached.num_computed_tokens, strict=True
        ):
            state = requests[req_id]
            if resumed and req_id in resumed:
                # Preempted and back: blocks start over and the scheduler's history is the truth.
                state.replace_blocks(tuple(list(ids) for ids in (new_blocks or ())))
                all_ids = cached.all_token_ids.get(req_id)
                if all_ids is not None:
                    state.output_token_ids[:] = all_ids[state.num_prompt_tokens :]
                self.blocks_dirty.add(req_id)
                self.blocks_version += 1
            elif new_blocks is not None and any(new_blocks):
                for group, ids in zip(state.block_ids, new_blocks, strict=True):
                    group.extend(ids)
                self.blocks_dirty.add(req_id)
                self.blocks_version += 1
            state.num_computed_tokens = computed
        return set(cached.resumed_req_ids)

    # --- tensors ------------------------------------------------------------------------------
    def page_table(
        self, states: Sequence[TTRequestState | None], group: int, width: int
    ) -> torch.Tensor:
        """int32 [len(states), width]: each row the request's block ids, zero padded."""
        table = torch.zeros((len(states), width), dtype=torch.int32)
        for row, state in enumerate(states):
            if state is None:
                continue
            ids = state.block_ids[group][:width]
            if ids:
                table[row, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        return table

    def slot_states(self) -> list[TTRequestState | None]:
        """Global slot -> owning request state (None for a free slot)."""
        out: list[TTRequestState | None] = []
        for lane_slots in self.slots:
            out.extend(
                None if owner is None else self.requests.get(owner) for owner in lane_slots.owner
            )
        return out


def device_rows(states: Sequence[TTRequestState | None]) -> list[DeviceSamplingRow]:
    return [EMPTY_ROW if state is None else state.device_row() for state in states]


def padded_token_lists(lists: list[list[int]], pad: int = -1) -> torch.Tensor:
    """int32 [rows, longest] token histories padded with ``pad`` in both axes."""
    width = max((len(x) for x in lists), default=0)
    out = torch.full((len(lists), max(width, 1)), pad, dtype=torch.int32)
    for row, values in enumerate(lists):
        if values:
            out[row, : len(values)] = torch.tensor(values, dtype=torch.int32)
    return out
