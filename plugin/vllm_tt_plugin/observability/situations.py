"""Situations a step put the model in that faults live in, counted as the runner meets them.

The conformance harness reads these counters (``tt_situations_total{situation}``) around a run
and records which situations the run created, so "the suite covers chunk starts inside a KV
block" is measured on the server rather than assumed from the requests sent: vLLM decides
chunking, prefix hits and batch shapes, not the client. Each count is of rows, or of steps for
the sampling situations:

- ``prefill_start_mid_block``: a prefill row starting after position 0 inside a KV block (a
  chunk continuation or a prefix hit that does not end on a block boundary): the model writes
  into a block that already holds KV of the same request;
- ``prefill_start_on_block``: a prefill row starting after position 0 on a block boundary (a
  block-aligned prefix-cache hit or chunk continuation);
- ``decode_new_block``: a decode row whose token is the first of a KV block (its position a
  multiple of the block size): the step writes through a page-table entry no earlier step of
  the request used;
- ``device_decode_penalties`` / ``device_decode_logprobs``: device-sampled decode steps with a
  penalised row / returning logprobs (the device applies penalties and computes logprobs).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

__all__ = ["Situation", "decode_situations", "prefill_situations"]


class Situation(str, Enum):
    PREFILL_START_MID_BLOCK = "prefill_start_mid_block"
    PREFILL_START_ON_BLOCK = "prefill_start_on_block"
    DECODE_NEW_BLOCK = "decode_new_block"
    DEVICE_DECODE_PENALTIES = "device_decode_penalties"
    DEVICE_DECODE_LOGPROBS = "device_decode_logprobs"


def prefill_situations(starts: Iterable[int], block_size: int) -> dict[Situation, int]:
    """The prefill rows' situations, from each row's first position (num_computed_tokens)."""
    mid = on = 0
    for start in starts:
        if start > 0:
            if start % block_size:
                mid += 1
            else:
                on += 1
    found = {Situation.PREFILL_START_MID_BLOCK: mid, Situation.PREFILL_START_ON_BLOCK: on}
    return {s: n for s, n in found.items() if n}


def decode_situations(
    positions: Iterable[int],
    block_size: int,
    on_device: bool,
    penalties: bool,
    logprobs: bool,
) -> dict[Situation, int]:
    """A decode step's situations: ``positions`` of its rows (the token each row decodes),
    ``penalties`` / ``logprobs``: whether a row of the step is penalised / wants logprobs."""
    found = {Situation.DECODE_NEW_BLOCK: sum(1 for p in positions if p % block_size == 0)}
    if on_device:
        found[Situation.DEVICE_DECODE_PENALTIES] = int(penalties)
        found[Situation.DEVICE_DECODE_LOGPROBS] = int(logprobs)
    return {s: n for s, n in found.items() if n}
