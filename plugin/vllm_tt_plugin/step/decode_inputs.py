"""Persistent decode input tensors, updated in place (the per-step host hot path).

A decode step sends the whole slot-indexed batch: tokens, positions, one page table per KV
group, sampling parameters. Between two steps almost nothing changes: the device advances
tokens and positions itself (resident inputs), a few requests get one more KV block, a request
joins or leaves a slot. So the tensors live here, across steps, and a step writes only what
changed, whatever the batch size:

- tokens / positions are written only when the step reloads inputs (the model ignores them
  otherwise: docs/DECODE_RELOAD_CONTRACT.md);
- a page-table row is written when its slot's occupant changed (a request joined or left; a
  request moved by a compaction takes its old row along), else only the new blocks of a request
  whose block list grew (``TTInputBatch.blocks_dirty``); a step's moves, clears and writes go in
  one indexed assignment each per KV group;
- the sampling parameters are kept per slot as encoded rows, a slot's row replaced when its
  occupant changed (a request's row is encoded once, ``TTRequestState.encoded_sampling``); each
  new layout gets its own ``TTSamplingParams`` (fresh lists), the same object while the layout
  stays.

The model copies what it takes from these tensors during the call (as tt-metal copies host
tensors to the device), so updating them in place for the next step is safe. Writes go through
numpy views of the tensors: a small numpy assignment keeps the GIL, a torch op releases it, and
each release can leave the engine thread waiting for another thread (docs/BENCHMARKS.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vllm_tt_plugin.contract.reload_contract import Layout
from vllm_tt_plugin.contract.sampling_params import (
    EMPTY_ROW,
    TTSamplingParams,
    encode_row,
    encoded_has_penalties,
)
from vllm_tt_plugin.input_batch import TTRequestState


def changed_slots(layout: Layout, before: Layout) -> list[int]:
    """The slots whose occupant in ``layout`` differs from ``before``."""
    return [slot for slot, (new, old) in enumerate(zip(layout, before, strict=True)) if new != old]


# One KV group's writes of a step: row (slot) indices, column indices, block ids.
_Writes = tuple[list[int], list[int], list[int]]


class _PageTables:
    """The page tables (one int32 [slots, width] per KV group) and, per slot, whose blocks
    they hold: the request, its block epoch and how many of its blocks per group."""

    def __init__(self, num_slots: int, width: int, num_groups: int) -> None:
        self.width = width
        self.tensors = [
            torch.zeros((num_slots, width), dtype=torch.int32) for _ in range(num_groups)
        ]
        self._np = [t.numpy() for t in self.tensors]
        self._epoch = [0] * num_slots
        self._written = [[0] * num_slots for _ in range(num_groups)]
        self._slot_of: dict[str, int] = {}
        self.layout: Layout = (None,) * num_slots  # whose rows the tables hold: nobody's yet

    def update(
        self, active: Sequence[TTRequestState | None], layout: Layout, dirty: set[str]
    ) -> None:
        # Rows copied from another slot (a compaction), rows zeroed, and per group the
        # (slot, column) positions and values written this step.
        move_to: list[int] = []
        move_from: list[int] = []
        zero: list[int] = []
        writes: list[_Writes] = [([], [], []) for _ in self._np]
        if layout != self.layout:
            fresh: list[int] = []
            for slot in changed_slots(layout, self.layout):
                state = active[slot]
                src = None if state is None else self._slot_of.get(state.req_id)
                if src is not None and state is not None and state.block_epoch == self._epoch[src]:
                    move_to.append(slot)  # moved: its row as written, then any new blocks
                    move_from.append(src)
                else:
                    fresh.append(slot)
            if move_to:
                epochs, counts = list(self._epoch), [list(w) for w in self._written]
                for dst, src in zip(move_to, move_from, strict=True):
                    self._epoch[dst] = epochs[src]
                    for kept, old in zip(self._written, counts, strict=True):
                        kept[dst] = old[src]
            for slot in fresh:
                zero.append(slot)
                self._append(writes, slot, active[slot], rewrite=True)
                dirty.discard(layout[slot])
            self._slot_of = {req_id: i for i, req_id in enumerate(layout) if req_id is not None}
            self.layout = layout
        for req_id in dirty:
            at = self._slot_of.get(req_id)
            state = None if at is None else active[at]
            if at is None or state is None:
                continue  # not decoding now: written in full when it takes a slot again
            # Replaced (a resume: the only way a block list shrinks, and it bumps the epoch): the
            # old row goes; else only the new blocks.
            rewrite = state.block_epoch != self._epoch[at]
            if rewrite:
                zero.append(at)
            self._append(writes, at, state, rewrite)
        dirty.clear()
        for group, table in enumerate(self._np):
            if move_to:
                table[move_to] = table[move_from]  # the right side is copied first
            if zero:
                table[zero] = 0
            rows, cols, values = writes[group]
            if rows:
                table[rows, cols] = values

    def _append(
        self, writes: list[_Writes], slot: int, state: TTRequestState | None, rewrite: bool
    ) -> None:
        """Queue the slot's blocks from the first unwritten one (all of them: ``rewrite``)."""
        self._epoch[slot] = 0 if state is None else state.block_epoch
        for group, (rows, cols, values) in enumerate(writes):
            written = self._written[group]
            blocks = () if state is None else state.block_ids[group]
            end = min(len(blocks), self.width)
            start = 0 if rewrite else written[slot]
            if end > start:
                rows.extend([slot] * (end - start))
                cols.extend(range(start, end))
                values.extend(blocks[start:end])
            written[slot] = end

    def forget(self) -> None:
        """Rewrite every row next time."""
        for table in self._np:
            table[:] = 0
        for written in self._written:
            written[:] = [0] * len(written)
        self._slot_of = {}
        self.layout = (None,) * len(self.layout)


class _SamplingColumns:
    """The encoded sampling parameters per slot (one ``EncodedRow`` each) and the object sent."""

    def __init__(self, num_slots: int, vocab_size: int) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size={vocab_size} must be positive")
        self.vocab_size = vocab_size
        self._empty = encode_row(EMPTY_ROW, vocab_size)
        self._rows = [self._empty] * num_slots
        # The same values by field (one list per TTSamplingParams field, indexed by slot), kept
        # in step with _rows: a new layout copies them instead of transposing every row.
        self._columns = [list(c) for c in zip(*self._rows, strict=True)]
        self._penalized = [False] * num_slots
        self.penalized_slots = 0
        self.params: TTSamplingParams | None = None
        self.layout: Layout = (None,) * num_slots  # whose rows _rows holds

    def update(self, active: Sequence[TTRequestState | None], layout: Layout) -> TTSamplingParams:
        if self.params is not None and layout == self.layout:
            return self.params
        columns = self._columns
        for slot in changed_slots(layout, self.layout):
            state = active[slot]
            row = self._empty if state is None else state.encoded_sampling(self.vocab_size)
            if row is self._rows[slot]:
                continue  # the same request (or empty) in the slot again
            self._rows[slot] = row
            for column, value in zip(columns, row, strict=True):
                column[slot] = value
            penalized = encoded_has_penalties(row)
            self.penalized_slots += int(penalized) - int(self._penalized[slot])
            self._penalized[slot] = penalized
        # Fresh lists: a model may keep the object it was sent.
        self.params = TTSamplingParams.from_columns([column.copy() for column in columns])
        self.layout = layout
        return self.params

    def forget(self) -> None:
        """Build a new object next time, every slot re-read."""
        self._rows = [self._empty] * len(self._rows)
        self._columns = [list(c) for c in zip(*self._rows, strict=True)]
        self._penalized = [False] * len(self._penalized)
        self.penalized_slots = 0
        self.params = None
        self.layout = (None,) * len(self._rows)


class PersistentDecodeInputs:
    def __init__(self, num_slots: int, width: int, num_groups: int, vocab_size: int) -> None:
        self.num_slots = num_slots
        self.tokens = torch.zeros((num_slots, 1), dtype=torch.int32)
        self.positions = torch.full((num_slots,), -1, dtype=torch.int32)
        self._tokens_np = self.tokens.numpy()
        self._positions_np = self.positions.numpy()
        self._tables = _PageTables(num_slots, width, num_groups)
        self._sampling = _SamplingColumns(num_slots, vocab_size)

    @property
    def tables(self) -> list[torch.Tensor]:
        return self._tables.tensors

    @property
    def penalties(self) -> bool:
        """Whether the last sampling parameters built carry a penalty in some slot."""
        return self._sampling.penalized_slots > 0

    def reshape(self, width: int, num_groups: int) -> None:
        """A new page-table width (max_model_len settled) or KV group count: start over."""
        if (width, num_groups) != (self._tables.width, len(self._tables.tensors)):
            self._tables = _PageTables(self.num_slots, width, num_groups)

    def load_tokens(self, active: Sequence[TTRequestState | None]) -> None:
        """Every slot's latest token and its position (-1 and token 0 in empty slots)."""
        self._tokens_np[:, 0] = [0 if s is None else s.last_token() for s in active]
        self._positions_np[:] = [-1 if s is None else s.num_computed_tokens for s in active]

    def update_tables(
        self, active: Sequence[TTRequestState | None], layout: Layout, dirty: set[str]
    ) -> None:
        """Bring the page tables to ``active`` (its slots' occupants and their block lists);
        ``dirty``: requests whose block lists grew since the last call (cleared)."""
        self._tables.update(active, layout, dirty)

    def sampling_params(
        self, active: Sequence[TTRequestState | None], layout: Layout
    ) -> TTSamplingParams:
        """The encoded per-slot sampling parameters of ``layout`` (one object per layout)."""
        return self._sampling.update(active, layout)

    def forget_layout(self) -> None:
        """After a failed call: rebuild everything from the states next time."""
        self._tables.forget()
        self._sampling.forget()
