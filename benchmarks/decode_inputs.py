"""Host cost of a decode step's inputs when the batch changes, measured in one run.

In continuous batching a request joins or leaves the decode batch almost every step at high
concurrency, and every such step used to rebuild the whole slot-indexed batch: every page-table
row and every row's encoded sampling parameters (``from_scratch`` below: the same operations the
runner ran before ``step/decode_inputs.py`` wrote by change). Now a join or a leave writes one row.
For 32, 128 and 256 slots, all taken by requests with mixed sampling parameters, this times:

- ``join``: one slot's request leaves and another takes the slot (page tables and sampling
  parameters brought to the new layout), kept inputs against a build from scratch;
- ``compaction``: a request in front leaves, the last request moves into its slot (the runner's
  compaction since 2026-12-02: ``LaneSlots.compaction``) and a new one takes the last slot;
- ``shift``: the same departure and join as the compaction before, when every later request
  moved up a slot;
- ``block``: every request gets one more KV block in the same step (requests admitted together
  cross a block boundary together); only the kept inputs (no layout change to rebuild for).

    python benchmarks/decode_inputs.py [--repeats 200]

Figures are the median of ``--repeats`` (us per step) on this machine; compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugin"))

from vllm.sampling_params import SamplingParams  # noqa: E402

from vllm_tt_plugin.contract.sampling_params import TTSamplingParams  # noqa: E402
from vllm_tt_plugin.input_batch import TTRequestState, device_rows  # noqa: E402
from vllm_tt_plugin.step.decode_inputs import PersistentDecodeInputs  # noqa: E402

VOCAB = 128256  # Llama 3's
WIDTH = 64  # blocks per request: 4096 tokens of 64-token blocks
PARAMS = (
    {"temperature": 0.0},
    {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "seed": 3},
    {"temperature": 1.0, "top_p": 0.95},
)


def make_state(n: int, rng: random.Random) -> TTRequestState:
    return TTRequestState(
        req_id=f"r{n}",
        prompt_token_ids=[1] * 16,
        sampling_params=SamplingParams(**rng.choice(PARAMS)),
        block_ids=([rng.randrange(1, 10_000) for _ in range(rng.randrange(1, 24))],),
        num_computed_tokens=16,
        lane=0,
        device_seed=5,
        generator=None,
    )


def layout_of(active: list[TTRequestState | None]) -> tuple[str | None, ...]:
    return tuple(None if s is None else s.req_id for s in active)


def from_scratch(active: list[TTRequestState | None]) -> None:
    """What a layout change cost before: every row's blocks padded and copied, every row's
    sampling parameters derived and encoded."""
    rows = [[] if s is None else s.block_ids[0][:WIDTH] for s in active]
    padded = [ids + [0] * (WIDTH - len(ids)) for ids in rows]
    np.asarray(padded, dtype=np.int32).reshape(len(active), WIDTH)
    TTSamplingParams.encode(device_rows(active), VOCAB)


def median_us(step: Callable[[int], None], repeats: int) -> float:
    times = []
    for i in range(repeats):
        start = time.perf_counter_ns()
        step(i)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000.0


def measure(slots: int, repeats: int) -> dict[str, float]:
    rng = random.Random(slots)
    counter = iter(range(10**9))
    active: list[TTRequestState | None] = [make_state(next(counter), rng) for _ in range(slots)]
    inputs = PersistentDecodeInputs(slots, WIDTH, 1, VOCAB)

    def apply(dirty: set[str] | None = None) -> None:
        layout = layout_of(active)
        inputs.update_tables(active, layout, set() if dirty is None else dirty)
        inputs.sampling_params(active, layout)

    apply()
    spare = [make_state(next(counter), rng) for _ in range(repeats + 1)]

    def join(i: int) -> None:
        active[i % slots] = spare[i]
        apply()

    def join_from_scratch(i: int) -> None:
        active[i % slots] = spare[i]
        from_scratch(active)

    def compaction(i: int) -> None:
        active[0] = active[-1]
        active[-1] = spare[i]
        apply()

    def compaction_from_scratch(i: int) -> None:
        active[0] = active[-1]
        active[-1] = spare[i]
        from_scratch(active)

    def shift(i: int) -> None:
        del active[0]
        active.append(spare[i])
        apply()

    def block(i: int) -> None:
        dirty = set()
        for s in active:
            if s is not None:
                s.block_ids[0].append(i + 1)
                dirty.add(s.req_id)
        apply(dirty)

    out = {
        "join_us": median_us(join, repeats),
        "join_from_scratch_us": median_us(join_from_scratch, repeats),
        "compaction_us": median_us(compaction, repeats),
        "compaction_from_scratch_us": median_us(compaction_from_scratch, repeats),
        "shift_us": median_us(shift, repeats),
        "block_us": median_us(block, min(repeats, WIDTH // 2)),
    }
    out["join_ratio"] = out["join_from_scratch_us"] / out["join_us"]
    out["compaction_ratio"] = out["compaction_from_scratch_us"] / out["compaction_us"]
    return {k: round(v, 1) for k, v in out.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    print("| slots | join us | join from scratch us | ratio | compaction us "
          "| compaction from scratch us | ratio | shift us | every row +1 block us |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    rows = {}
    for slots in (32, 128, 256):
        r = rows[slots] = measure(slots, args.repeats)
        print(
            f"| {slots} | {r['join_us']} | {r['join_from_scratch_us']} | {r['join_ratio']} "
            f"| {r['compaction_us']} | {r['compaction_from_scratch_us']} "
            f"| {r['compaction_ratio']} | {r['shift_us']} | {r['block_us']} |"
        )
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
