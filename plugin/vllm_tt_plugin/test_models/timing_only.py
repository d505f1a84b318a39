"""The timing-only device: the reference model's contract path without its matmuls.

Selected with ``TT_EMULATED_TIMING_ONLY=1`` on the emulated mesh (docs/EMULATED_MESH.md). Every
call is still parsed, validated, ordered on the device thread, and the resident decode state,
reload contract, device sampling, logprobs and async read-back events all work as usual; only
the decoder (embeddings, attention, MLP, LM head) is replaced by a closed form of the input
token and its position. The emulated mesh then sleeps out the configured step time
(``TT_EMULATED_STEP_MS``, the GIL released), so a model call costs the device time and almost no
host CPU: what remains of a step's host time is the plugin's and vLLM's. HF parity keeps using
the real decoder.

The logits of a row with input token ``t`` at position ``p`` are ``PEAK`` at
``next_token(t, p)`` and 0 elsewhere: greedy decoding is deterministic and independent of batch
composition, logprobs are finite, and seeded random sampling still draws from a real
distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from vllm_tt_plugin.test_models.paged_kv import check_page_rows, write_tokens
from vllm_tt_plugin.test_models.resident import ResidentDecodeState
from vllm_tt_plugin.test_models.sampling import SAMPLING_EPS, SamplingTensors

PEAK = 8.0
# next_token(t, p) = (MUL * t + STRIDE * p + 1) mod vocab: a full-period walk, so outputs vary.
MUL = 31
STRIDE = 7


def next_token(tokens: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """(MUL * t + STRIDE * p + 1) mod vocab, int64 (four tensor ops: a decode step runs it)."""
    t = tokens.to(torch.int64) * MUL
    return t.add_(positions.to(torch.int64), alpha=STRIDE).add_(1).remainder_(vocab)


def peaked_logits(
    rows: int, vocab: int, index: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    logits = torch.zeros((rows, vocab), dtype=torch.float32)
    if index.numel():
        logits[index, targets] = PEAK
    return logits


@dataclass(frozen=True)
class ActiveRows:
    """The active slots of a resident state and what a step reads of them: their tokens,
    positions (the largest as an int), page-table rows per group (int64) and lane split."""

    active: torch.Tensor  # bool [slots]
    rows: torch.Tensor  # int64 [n], the active slot ids
    tokens: torch.Tensor  # int64 [n]
    positions: torch.Tensor  # int64 [n]
    max_position: int
    tables: tuple[torch.Tensor, ...]  # per group, int64 [n, W]
    lanes: tuple[tuple[int, torch.Tensor | None], ...]  # (lane, index into rows; None = all)

    @classmethod
    def of(cls, state: ResidentDecodeState, slots_per_lane: int) -> ActiveRows | None:
        active = state.active
        rows = active.nonzero().flatten()
        if rows.numel() == 0:
            return None
        lane_of = rows // slots_per_lane
        lanes: tuple[tuple[int, torch.Tensor | None], ...] = (
            ((int(lane_of[0]), None),)
            if bool((lane_of == lane_of[0]).all())
            else tuple(
                (lane, (lane_of == lane).nonzero().flatten()) for lane in lane_of.unique().tolist()
            )
        )
        positions = state.positions[rows]
        return cls(
            active,
            rows,
            state.tokens[rows],
            positions,
            int(positions.max()),
            tuple(table[rows].long() for table in state.page_tables),
            lanes,
        )

    def advanced(self, targets: torch.Tensor) -> ActiveRows:
        """The same slots one step on: each consumes its target token at the next position."""
        return replace(
            self, tokens=targets, positions=self.positions + 1, max_position=self.max_position + 1
        )


@dataclass
class TimingCache:
    """What the timing-only device keeps between decode steps (device state, touched only on
    its thread): the page tables it last checked in full; whether the resident sampling
    parameters it last saw are greedy-only; and the state its last greedy step produced with
    that state's active rows (objects are held, so identity tests cannot be fooled)."""

    checked: Any = None
    params: SamplingTensors | None = None
    greedy: bool = False
    state: ResidentDecodeState | None = None
    rows: ActiveRows | None = None

    def greedy_only(self, params: SamplingTensors | None) -> bool:
        """Can a step with these resident parameters skip the logits and the sampler? Every
        row (empty slots too: their sampled value is returned) greedy, no penalties and no
        logprobs asked. Checked once per parameter upload."""
        if params is None:
            return False
        if params is not self.params:
            self.params = params
            self.greedy = (
                bool((params.temperature < SAMPLING_EPS).all())
                and params.max_num_logprobs < 0
                and not params.any_penalties
            )
        return self.greedy

    def active_rows(self, state: ResidentDecodeState, slots_per_lane: int) -> ActiveRows | None:
        """``ActiveRows.of(state)``, without recomputing it when ``state`` is exactly the one
        the last greedy step produced (nothing reloaded, remapped or prefilled since)."""
        last = self.state
        if (
            last is not None
            and self.rows is not None
            and state.tokens is last.tokens
            and state.positions is last.positions
            and state.page_tables is last.page_tables
        ):
            return self.rows
        return ActiveRows.of(state, slots_per_lane)


def _record(kv: Any, state: ResidentDecodeState, act: ActiveRows, allow_null: bool,
            cache: TimingCache) -> None:  # fmt: skip
    """Check the page rows the active rows use and write their token record. Page rows are
    checked in full when the resident tables changed (``cache.checked`` holds the last ones
    checked), else only the block each row writes: the earlier blocks passed that check on
    earlier steps."""
    full_check = cache.checked is not state.page_tables
    positions = act.positions
    for group in range(kv.num_groups):
        layout = kv.group_layout(group)
        table = act.tables[group]
        col = (positions // layout.block_size)[:, None]
        offsets = positions % layout.block_size
        if not full_check and act.max_position // layout.block_size < table.shape[1]:
            blocks = table.gather(1, col)[:, 0]
            low, high = (int(x) for x in torch.aminmax(blocks))
            if low >= (0 if allow_null else 1) and high < layout.num_blocks:
                _write(kv, group, act.lanes, blocks, offsets, act.tokens)
                continue
        for lane, sel in act.lanes:  # a full check (it names the offending row)
            pick = slice(None) if sel is None else sel
            check_page_rows(
                table[pick],
                positions[pick],
                positions[pick],
                layout,
                f"decode_forward (lane {lane}, KV group {group})",
                allow_null,
            )
        _write(kv, group, act.lanes, table.gather(1, col)[:, 0], offsets, act.tokens)
    cache.checked = state.page_tables


def decode_logits(
    kv: Any,
    state: ResidentDecodeState,
    slots: int,
    slots_per_lane: int,
    vocab: int,
    allow_null: bool,
    cache: TimingCache,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ReferenceLlamaCore._decode_logits`` without the decoder: the token record written, the
    logits [slots, vocab] (zeros in empty slots) and the active slot ids."""
    act = ActiveRows.of(state, slots_per_lane)
    if act is None:
        return torch.zeros((slots, vocab), dtype=torch.float32), torch.zeros(0, dtype=torch.int64)
    _record(kv, state, act, allow_null, cache)
    targets = next_token(act.tokens, act.positions, vocab)
    return peaked_logits(slots, vocab, act.rows, targets), act.rows


def greedy_decode(
    kv: Any, state: ResidentDecodeState, slots_per_lane: int, vocab: int, cache: TimingCache
) -> tuple[torch.Tensor, ResidentDecodeState]:
    """A device-sampled decode step whose parameters are greedy-only (``cache.greedy_only``):
    the tokens the full path (``decode_logits``, then ``device_sample``) gives, taken from the
    closed form without the [slots, vocab] logits or the sampler: the argmax of a peaked row is
    its peak, of an empty slot's zeros 0. Returns the tokens [slots] and the advanced state."""
    act = cache.active_rows(state, slots_per_lane)
    sampled = torch.zeros_like(state.tokens)
    if act is None:
        return sampled, state
    _record(kv, state, act, False, cache)
    targets = next_token(act.tokens, act.positions, vocab)
    sampled[act.rows] = targets
    advanced = state.advanced(act.rows, targets)
    cache.state, cache.rows = advanced, act.advanced(targets)
    return sampled, advanced


def _write(
    kv: Any, group: int, lanes: tuple[tuple[int, torch.Tensor | None], ...],
    blocks: torch.Tensor, offsets: torch.Tensor, tokens: torch.Tensor,
) -> None:  # fmt: skip
    for lane, sel in lanes:
        if sel is None:  # one lane: no per-lane selection
            write_tokens(kv.lanes[lane], group, blocks, offsets, tokens)
        else:
            write_tokens(kv.lanes[lane], group, blocks[sel], offsets[sel], tokens[sel])


def prefill_logits(kv: Any, rows: Any, vocab: int, allow_null: bool) -> torch.Tensor:
    """``ReferenceLlamaCore._prefill_logits`` without the decoder: the page rows are checked and
    the token record written (prefill penalties and prefix hits read it back); each row's logits
    peak at the successor of its last token."""
    last_tokens = []
    last_positions = []
    for row in rows:
        lane = kv.lanes[row.lane]
        positions = torch.arange(row.start, row.end, dtype=torch.int64)
        for group in range(kv.num_groups):
            layout = kv.group_layout(group)
            page_row = row.page_rows[group]
            check_page_rows(
                page_row[None],
                positions[:1],
                positions[-1:],
                layout,
                f"prefill_forward row {row.index} (KV group {group})",
                allow_null,
            )
            blocks = page_row.long()[positions // layout.block_size]
            write_tokens(lane, group, blocks, positions % layout.block_size, row.tokens)
        last_tokens.append(int(row.tokens[-1]))
        last_positions.append(row.end - 1)
    targets = next_token(torch.tensor(last_tokens), torch.tensor(last_positions), vocab)
    return peaked_logits(len(last_tokens), vocab, torch.arange(len(last_tokens)), targets)
