"""Does the same host code run slower after the thread waited longer? (No vLLM, no plugin.)

``host_overhead.py`` finds the engine's host phases taking longer per step at 17 and 40 ms device
steps than at 5 ms, for the same work. This separates the machine from the code: a fixed
pure-Python workload shaped like an engine step (attribute reads, dict lookups and list building
over ``--rows`` request-like objects, one small numpy write) is timed right after a wait of S ms,
for S in 0, 5, 17 and 40, the wait made three ways:

- **sleep**: ``time.sleep(S)``; the thread blocks and the (virtual) core may idle, as the
  engine thread does on a blocking device read-back;
- **spin**: a loop on ``time.perf_counter`` for S ms that touches no data; the core stays busy
  on this thread, so a slowdown left over is the caches' (other tenants, the host's own work);
- **spin + churn**: the spin, walking a buffer of ``--churn-mb`` MB meanwhile (what another
  process sharing the caches does to them).

It prints the median workload time per (wait, S) and its ratio to back-to-back runs (S = 0), all
measured in this one run, interleaved, so the ratios compare like with like.

    python benchmarks/idle_slowdown.py [--rows 32] [--repeats 100] [--workload rows|mixed]
                                        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.results import write_json

WAITS_MS = (0.0, 5.0, 17.0, 40.0)


@dataclass
class Row:
    """A request-like object: what the scheduler and runner touch per row and step."""

    req_id: str
    num_computed_tokens: int
    output_token_ids: list[int] = field(default_factory=list)
    block_ids: list[int] = field(default_factory=list)


def make_rows(rows: int) -> tuple[list[Row], dict[str, Row]]:
    objs = [Row(f"req-{i}", 16, [1, 2, 3], list(range(i, i + 4))) for i in range(rows)]
    return objs, {r.req_id: r for r in objs}


def workload(objs: list[Row], index: dict[str, Row], table: np.ndarray) -> int:
    """One step's worth of host work over the rows (~60 us at 32 rows on this VM)."""
    scheduled = {r.req_id: 1 for r in objs}
    total = 0
    for _ in range(8):
        for req_id, n in scheduled.items():
            row = index[req_id]
            row.num_computed_tokens += n
            total += len(row.block_ids) + row.num_computed_tokens
        outputs = [[r.num_computed_tokens & 0xFF] for r in objs]
        for r, out in zip(objs, outputs, strict=True):
            r.output_token_ids.append(out[0])
            if len(r.output_token_ids) > 64:
                del r.output_token_ids[:32]
        table[: len(objs), 0] = [r.num_computed_tokens for r in objs]
    return total


def mixed_workload(objs: list[Row], index: dict[str, Row], table: np.ndarray) -> int:
    """The rows' step plus a wider spread of interpreter paths (a JSON round trip, sorting,
    string formatting, dataclass construction): an engine step runs thousands of distinct
    functions, so its instruction and branch footprint is far larger than one loop's."""
    total = workload(objs, index, table)
    doc = [{"id": r.req_id, "n": r.num_computed_tokens, "blocks": r.block_ids} for r in objs]
    back = json.loads(json.dumps(doc))
    ranked = sorted(back, key=lambda d: (d["n"] % 7, d["id"]))
    labels = [f"{d['id']}:{d['n']:>6}/{len(d['blocks'])}" for d in ranked]
    fresh = [Row(label, i) for i, label in enumerate(labels)]
    return total + len(fresh) + sum(len(label) for label in labels)


def spin(ms: float, churn: np.ndarray | None) -> None:
    end = time.perf_counter() + ms / 1000.0
    offset = 0
    while time.perf_counter() < end:
        if churn is not None:
            # Touch one 64-byte line in every 4 KiB page of a 256 KiB stretch, moving on.
            churn[offset : offset + 262144 : 4096] += 1
            offset = (offset + 262144) % (len(churn) - 262144)


WAIT_KINDS = ("sleep", "spin", "spin+churn")


def measure(
    rows: int,
    repeats: int,
    churn_mb: int,
    work: Callable[[list[Row], dict[str, Row], np.ndarray], int],
    kinds: Sequence[str] = WAIT_KINDS,
) -> dict[str, dict[str, float]]:
    """``{"<wait> <S>": {"median_us", "ratio"}}`` for each wait kind in ``kinds``."""
    objs, index = make_rows(rows)
    table = np.zeros((max(rows, 1), 4), dtype=np.int64)
    churn = np.zeros(churn_mb * 1024 * 1024 if "spin+churn" in kinds else 0, dtype=np.uint8)
    every: dict[str, Callable[[float], None]] = {
        "sleep": lambda ms: time.sleep(ms / 1000.0),
        "spin": lambda ms: spin(ms, None),
        "spin+churn": lambda ms: spin(ms, churn),
    }
    waits = {name: every[name] for name in kinds}
    samples: dict[tuple[str, float], list[float]] = {(w, s): [] for w in waits for s in WAITS_MS}
    for _ in range(5):  # warm-up
        work(objs, index, table)
    for _ in range(repeats):
        for name, wait in waits.items():
            for step_ms in WAITS_MS:
                if step_ms:
                    wait(step_ms)
                start = time.perf_counter_ns()
                work(objs, index, table)
                samples[(name, step_ms)].append((time.perf_counter_ns() - start) / 1e3)
    out: dict[str, dict[str, float]] = {}
    for name in waits:
        base = statistics.median(samples[(name, 0.0)])
        for step_ms in WAITS_MS:
            med = statistics.median(samples[(name, step_ms)])
            out[f"{name} {step_ms:g}"] = {"median_us": round(med, 1), "ratio": round(med / base, 2)}
    return out


def after_sleep(repeats: int = 40) -> dict[str, float]:
    """The machine's state, for another benchmark's record: the mixed workload's slowdown
    right after sleeping S ms against back to back, ``{"5": ratio, "17": ..., "40": ...}``
    (``host_overhead.py`` takes it before and after its servers; ~3 s)."""
    figures = measure(32, repeats, 0, mixed_workload, kinds=("sleep",))
    return {f"{s:g}": figures[f"sleep {s:g}"]["ratio"] for s in WAITS_MS if s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--churn-mb", type=int, default=32)
    parser.add_argument(
        "--workload", choices=("rows", "mixed"), default="mixed", help="rows: the row loop only"
    )
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    work = workload if args.workload == "rows" else mixed_workload
    result = measure(args.rows, args.repeats, args.churn_mb, work)
    print(f"{'wait':<12} {'S ms':>5} {'median us':>10} {'x back-to-back':>15}")
    for key, fig in result.items():
        name, step = key.split(" ")
        print(f"{name:<12} {step:>5} {fig['median_us']:>10} {fig['ratio']:>15}")
    if args.json:
        doc = {"rows": args.rows, "workload": args.workload, "repeats": args.repeats}
        write_json(args.json, {**doc, "figures": result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
