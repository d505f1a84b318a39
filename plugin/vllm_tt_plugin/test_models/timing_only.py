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

from typing import Any

import torch

from vllm_tt_plugin.test_models.paged_kv import check_page_rows, write_tokens

PEAK = 8.0
# next_token(t, p) = (MUL * t + STRIDE * p + 1) mod vocab: a full-period walk, so outputs vary.
MUL = 31
STRIDE = 7


def next_token(tokens: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    return (tokens.to(torch.int64) * MUL + positions.to(torch.int64) * STRIDE + 1) % vocab


def peaked_logits(
    rows: int, vocab: int, index: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    logits = torch.zeros((rows, vocab), dtype=torch.float32)
    if index.numel():
        logits[index, targets] = PEAK
    return logits


def decode_logits(
    kv: Any,
    state: Any,
    slots: int,
    slots_per_lane: int,
    vocab: int,
    allow_null: bool,
    checked: list[Any],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ReferenceLlamaCore._decode_logits`` without the decoder: the token record written, the
    logits [slots, vocab] (zeros in empty slots) and the active slot ids. Page rows are checked
    in full when the resident tables changed (``checked[0]`` holds the last ones checked), else
    only the block each row writes: the earlier blocks passed that check on earlier steps."""
    rows = state.active.nonzero().flatten()
    if rows.numel() == 0:
        return torch.zeros((slots, vocab), dtype=torch.float32), rows
    tokens, positions = state.tokens[rows], state.positions[rows]
    lane_of = rows // slots_per_lane
    single = bool((lane_of == lane_of[0]).all())
    lanes = (
        [(int(lane_of[0]), None)]
        if single
        else [(lane, (lane_of == lane).nonzero().flatten()) for lane in lane_of.unique().tolist()]
    )
    full_check = checked[0] is not state.page_tables
    for group in range(kv.num_groups):
        layout = kv.group_layout(group)
        table = state.page_tables[group][rows]
        col = (positions // layout.block_size)[:, None]
        if not full_check and int(col.max()) < table.shape[1]:
            blocks = table.long().gather(1, col)[:, 0]
            low = 0 if allow_null else 1
            if not bool(((blocks < low) | (blocks >= layout.num_blocks)).any()):
                _write(kv, group, lanes, blocks, positions % layout.block_size, tokens)
                continue
        for lane, sel in lanes:  # a full check (it names the offending row)
            pick = slice(None) if sel is None else sel
            check_page_rows(
                table[pick],
                positions[pick],
                positions[pick],
                layout,
                f"decode_forward (lane {lane}, KV group {group})",
                allow_null,
            )
        blocks = table.long().gather(1, col)[:, 0]
        _write(kv, group, lanes, blocks, positions % layout.block_size, tokens)
    checked[0] = state.page_tables
    return peaked_logits(slots, vocab, rows, next_token(tokens, positions, vocab)), rows


def _write(
    kv: Any, group: int, lanes: list[Any], blocks: torch.Tensor, offsets: torch.Tensor,
    tokens: torch.Tensor,
) -> None:  # fmt: skip
    for lane, sel in lanes:
        pick = slice(None) if sel is None else sel
        write_tokens(kv.lanes[lane], group, blocks[pick], offsets[pick], tokens[pick])


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
