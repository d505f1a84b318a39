"""Persistent decode input tensors, updated in place (the per-step host hot path).

A decode step sends the whole slot-indexed batch: tokens, positions, one page table per KV
group, sampling parameters. Between two steps of the same layout almost nothing changes: the
device advances tokens and positions itself (resident inputs), a few requests get one more KV
block, the sampling parameters are the same requests'. So the tensors live here, across steps:

- tokens / positions are written only when the step reloads inputs (the model ignores them
  otherwise: docs/DECODE_RELOAD_CONTRACT.md);
- a page table is rebuilt when the layout changes, else only the rows of requests whose block
  list grew (``TTInputBatch.blocks_dirty``);
- the encoded sampling parameters are kept per layout (a request's parameters never change).

The model copies what it takes from these tensors during the call (as tt-metal copies host
tensors to the device), so updating them in place for the next step is safe. Writes go through
numpy views of the tensors: a small numpy assignment keeps the GIL, a torch op releases it, and
each release can leave the engine thread waiting for another thread (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import numpy as np
import torch

from vllm_tt_plugin.input_batch import TTRequestState, device_rows
from vllm_tt_plugin.reload_contract import Layout
from vllm_tt_plugin.sampling_params import TTSamplingParams


class PersistentDecodeInputs:
    def __init__(self, num_slots: int, width: int, num_groups: int, vocab_size: int) -> None:
        self.num_slots = num_slots
        self.vocab_size = vocab_size
        self.tokens = torch.zeros((num_slots, 1), dtype=torch.int32)
        self.positions = torch.full((num_slots,), -1, dtype=torch.int32)
        self._width = width
        self._groups = num_groups
        self.tables = self._empty_tables()
        self._tokens_np = self.tokens.numpy()
        self._positions_np = self.positions.numpy()
        self._tables_np = [t.numpy() for t in self.tables]
        self._table_layout: Layout | None = None
        self._slot_of: dict[str, int] = {}
        self._params: TTSamplingParams | None = None
        self._params_layout: Layout | None = None
        self.penalties = False  # whether the kept parameters carry a penalty

    def _empty_tables(self) -> list[torch.Tensor]:
        shape = (self.num_slots, self._width)
        return [torch.zeros(shape, dtype=torch.int32) for _ in range(self._groups)]

    def reshape(self, width: int, num_groups: int) -> None:
        """A new page-table width (max_model_len settled) or KV group count: start over."""
        if (width, num_groups) != (self._width, self._groups):
            self._width, self._groups = width, num_groups
            self.tables = self._empty_tables()
            self._tables_np = [t.numpy() for t in self.tables]
            self._table_layout = None

    def load_tokens(self, active: list[TTRequestState | None]) -> None:
        """Every slot's latest token and its position (-1 and token 0 in empty slots)."""
        tokens = [0 if s is None else s.last_token() for s in active]
        positions = [-1 if s is None else s.num_computed_tokens for s in active]
        self._tokens_np[:, 0] = tokens
        self._positions_np[:] = positions

    def update_tables(
        self, active: list[TTRequestState | None], layout: Layout, dirty: set[str]
    ) -> None:
        """Bring the page tables to ``active``: a rebuild when the layout changed, else the
        rows of the requests in ``dirty`` (their block lists grew)."""
        if layout != self._table_layout:
            self._rebuild_tables(active, layout)
        elif dirty:
            for req_id in dirty:
                slot = self._slot_of.get(req_id)
                state = active[slot] if slot is not None else None
                if state is not None:
                    self._write_row(slot, state)  # type: ignore[arg-type]
        dirty.clear()

    def _rebuild_tables(self, active: list[TTRequestState | None], layout: Layout) -> None:
        width = self._width
        for group, table in enumerate(self._tables_np):
            rows = [
                [] if s is None else s.block_ids[group][:width] for s in active
            ]  # fmt: skip
            padded = [ids + [0] * (width - len(ids)) for ids in rows]
            table[:] = np.asarray(padded, dtype=np.int32).reshape(self.num_slots, width)
        self._table_layout = layout
        self._slot_of = {req_id: i for i, req_id in enumerate(layout) if req_id is not None}

    def _write_row(self, slot: int, state: TTRequestState) -> None:
        for group, table in enumerate(self._tables_np):
            ids = state.block_ids[group][: self._width]
            if ids:
                table[slot, : len(ids)] = ids

    def sampling_params(
        self, active: list[TTRequestState | None], layout: Layout
    ) -> TTSamplingParams:
        """The encoded per-slot sampling parameters of ``layout`` (built once per layout)."""
        if self._params is None or layout != self._params_layout:
            self._params = TTSamplingParams.encode(device_rows(active), self.vocab_size)
            self._params_layout = layout
            self.penalties = self._params.any_penalties
        return self._params

    def forget_layout(self) -> None:
        """After a slot move or a failed call: rebuild everything from the states next time."""
        self._table_layout = None
        self._params_layout = None
