"""The scheduler side of lane DP against one wide batch, with nothing else running.

Lane DP (``--data-parallel-size L --max-num-seqs S``) schedules its L x S rows as L TTScheduler
passes whose outputs the TTLaneCoordinator merges and whose model output it routes back; one
wide batch is one TTScheduler pass over L x S rows. Everything else in the step (the runner, the
model call) sees one merged batch either way. This builds both schedulers exactly as the engine
core does (vLLM's EngineArgs config through the TT platform hook, vLLM's KV planner), admits and
prefills B requests, then times steady decode steps: ``schedule()`` plus ``update_from_output``
with one sampled token per row, no runner, no device. The two are timed in alternating rounds
(medians), so the machine's drift hits both alike. Printed per decode step: wall us by phase (the
plugin's own phase table: vLLM's scheduling pass and update, the plugin's policy and routing)
and the lane/wide ratio. ``--segments`` adds rounds that time the plugin's own pieces of those
steps (the steady-decode check or readiness and work facts, the wrapper around vLLM's passes,
merging the lanes' outputs and their results) through wrappers installed for those rounds
only: each timed call then carries one clock pair more (~0.1 us), so the headline rounds run
without them.

    python benchmarks/lane_scheduler.py [--lanes 4 --seqs 32] [--steps 200] [--rounds 7]
                                        [--segments] [--json F]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "plugin"))

from benchmarks.results import write_json  # noqa: E402

ENV = {
    "VLLM_PLUGINS": "tt,tt_model_registry",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "TT_EMULATED_TIMING_ONLY": "1",
}
LANES_VARIANT = (
    "TTReferenceLlamaForCausalLM="
    "vllm_tt_plugin.test_models.reference_llama:ReferenceLlamaLanesForCausalLM"
)
PROMPT_LEN = 16
MAX_MODEL_LEN = 4096  # room for --segments rounds after the headline ones
PHASES = ("vllm_schedule", "schedule_policy", "vllm_output", "output_build")


def build_scheduler(lanes: int, seqs: int) -> Any:
    """The scheduler the engine core would build for ``--data-parallel-size lanes
    --max-num-seqs seqs`` (lane DP on an emulated TG mesh when lanes > 1, else one N150)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
    from vllm.v1.structured_output import StructuredOutputManager

    from vllm_tt_plugin.adapter.kv_cache import pool_bytes_per_block, uniform_kv_cache_spec
    from vllm_tt_plugin.emulation.server import BUNDLED_MODEL, DEFAULT_TT_OPTIONS
    from vllm_tt_plugin.model_registry import reset_registry

    os.environ["MESH_DEVICE"] = "TG" if lanes > 1 else "N150"
    if lanes > 1:
        os.environ["TT_MODEL_CLASS_OVERRIDES"] = LANES_VARIANT
    else:
        os.environ.pop("TT_MODEL_CLASS_OVERRIDES", None)
    reset_registry()
    config = EngineArgs(
        model=str(BUNDLED_MODEL),
        skip_tokenizer_init=True,
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=seqs,
        data_parallel_size=lanes,
        async_scheduling=False,
        additional_config={"tt": {**DEFAULT_TT_OPTIONS, "sample_on_device_mode": "all"}},
    ).create_engine_config()
    # Every row's KV for the whole run, so no preemption: the steady state under test.
    blocks = seqs * (MAX_MODEL_LEN // config.cache_config.block_size) + 1
    specs = uniform_kv_cache_spec(config)
    config.cache_config.num_gpu_blocks_override = blocks
    kv = get_kv_cache_configs(config, [specs], [blocks * pool_bytes_per_block(config, specs)])[0]
    config.cache_config.num_gpu_blocks = kv.num_blocks
    return resolve_obj_by_qualname(config.scheduler_config.scheduler_cls)(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=config.cache_config.block_size,
        log_stats=True,
    )


_ids = itertools.count()


def admit(sched: Any, batch: int) -> None:
    """``batch`` greedy requests, stepped until every one is decoding."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256)
    hasher = get_request_block_hasher(sched.vllm_config.cache_config.block_size, sha256)
    for _ in range(batch):
        n = next(_ids)
        sched.add_request(
            Request(
                request_id=f"r{n}",
                prompt_token_ids=[5 + n % 50] * PROMPT_LEN,
                sampling_params=SamplingParams(max_tokens=MAX_MODEL_LEN, ignore_eos=True),
                pooling_params=None,
                block_hasher=hasher,
            )
        )
    while True:
        out = sched.schedule()
        step(sched, out)
        if len(out.num_scheduled_tokens) == batch and all(
            n == 1 for n in out.num_scheduled_tokens.values()
        ):
            return


def step(sched: Any, out: Any) -> None:
    """The worker's answer to ``out``: one token for every row (a decode step's)."""
    from vllm.v1.outputs import ModelRunnerOutput

    req_ids = list(out.num_scheduled_tokens)
    sched.update_from_output(
        out,
        ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=[[7]] * len(req_ids),
        ),
    )


@dataclass
class Sample:
    step_us: float  # schedule() + the runner output + update_from_output, per decode step
    phases_us: dict[str, float]


def timed(sched: Any, steps: int) -> Sample:
    from vllm_tt_plugin.observability import host_phases as hp
    from vllm_tt_plugin.policy.step_kind import StepKind

    clock, decode = hp.CLOCK, StepKind.DECODE
    before = {p: clock.get_ns(decode, hp.Phase(p)) for p in PHASES}
    start = time.perf_counter_ns()
    for _ in range(steps):
        step(sched, sched.schedule())
    wall = time.perf_counter_ns() - start
    after = {p: clock.get_ns(decode, hp.Phase(p)) for p in PHASES}
    return Sample(wall / steps / 1e3, {p: (after[p] - before[p]) / steps / 1e3 for p in PHASES})


# The plugin's pieces of a step that ``--segments`` times (timed_segments wraps each).
SEGMENTS = (
    "steady_check",
    "readiness",
    "work_facts",
    "pass_glue",
    "merge_outputs",
    "merge_results",
)


@dataclass
class SegmentSample:
    us: dict[str, float]  # wall us per decode step, by segment
    calls: dict[str, float]  # calls per decode step, by segment


def segment_targets() -> list[tuple[Any, str, str, str | None]]:
    """What ``timed_segments`` wraps: (owner, attribute, segment, the owner's count of vLLM's
    time, which the segment leaves out; None: nothing left out). The schedulers' methods are
    wrapped on their common base, so the sync and the async class are both timed."""
    from vllm_tt_plugin import lane_scheduler as lane_module
    from vllm_tt_plugin.lane_scheduler import TTLaneCoordinator
    from vllm_tt_plugin.scheduler import TTSchedulerBase

    return [
        (TTSchedulerBase, "steady_decode", "steady_check", None),
        (TTSchedulerBase, "readiness", "readiness", None),
        (TTSchedulerBase, "work_facts", "work_facts", None),
        (TTSchedulerBase, "_vllm_schedule", "pass_glue", "timer.vllm_ns"),
        (TTLaneCoordinator, "_steady_passes", "pass_glue", "timer.vllm_ns"),
        (lane_module, "merge_outputs", "merge_outputs", None),
        (TTLaneCoordinator, "_merge_results", "merge_results", None),
    ]


def timed_segments(sched: Any, steps: int) -> SegmentSample:
    """``steps`` decode steps with the plugin's pieces timed. ``steady_check``: a scheduler's
    ``steady_decode`` (on a steady decode step it replaces ``readiness`` and ``work_facts``);
    ``pass_glue``: the plugin's wrapper around vLLM's scheduling passes, less those passes (one
    per pass, or one block for the lanes' steady passes)."""
    ns = dict.fromkeys(SEGMENTS, 0)
    calls = dict.fromkeys(SEGMENTS, 0)
    clock = time.perf_counter_ns

    def wrap(name: str, fn: Any, vllm_count: str | None) -> Any:
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            owner = args[0]
            vllm_before = attrgetter(vllm_count)(owner) if vllm_count else 0
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = clock() - start
                if vllm_count:
                    spent -= attrgetter(vllm_count)(owner) - vllm_before
                ns[name] += spent
                calls[name] += 1

        return timed_call

    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _, _ in segment_targets()]
    try:
        for owner, attr, name, vllm_count in segment_targets():
            setattr(owner, attr, wrap(name, getattr(owner, attr), vllm_count))
        for _ in range(steps):
            step(sched, sched.schedule())
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)
    return SegmentSample(
        {k: v / steps / 1e3 for k, v in ns.items()}, {k: v / steps for k, v in calls.items()}
    )


def median(samples: list[Sample]) -> dict[str, float]:
    out = {"step_us": statistics.median(s.step_us for s in samples)}
    for p in PHASES:
        out[f"{p}_us"] = statistics.median(s.phases_us[p] for s in samples)
    return {k: round(v, 1) for k, v in out.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--seqs", type=int, default=32, help="sequences per lane")
    parser.add_argument("--steps", type=int, default=200, help="decode steps per timed round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--segments", action="store_true", help="also time the plugin's pieces of a step"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    batch = args.lanes * args.seqs
    rounds_run = (2 if args.segments else 1) * args.rounds + 1
    if args.steps * rounds_run + 8 > MAX_MODEL_LEN - PROMPT_LEN:
        parser.error(
            f"--steps x rounds ({rounds_run} with the warm-up) must stay under "
            f"{MAX_MODEL_LEN - PROMPT_LEN}"
        )
    scheds = {
        "wide": build_scheduler(1, batch),
        "lanes": build_scheduler(args.lanes, args.seqs),
    }
    for sched in scheds.values():
        admit(sched, batch)
        timed(sched, args.steps)  # warm
    samples: dict[str, list[Sample]] = {name: [] for name in scheds}
    for _ in range(args.rounds):
        for name, sched in scheds.items():
            samples[name].append(timed(sched, args.steps))
    result = {name: median(s) for name, s in samples.items()}
    doc = {
        "batch": batch,
        "lanes": args.lanes,
        "seqs_per_lane": args.seqs,
        "steps": args.steps,
        "rounds": args.rounds,
        "wide": result["wide"],
        "lanes_result": result["lanes"],
        "ratio": round(result["lanes"]["step_us"] / result["wide"]["step_us"], 3),
    }
    # Both run vLLM over the same rows; what L passes cost beyond one is L - 1 fixed costs.
    vllm_keys = ("vllm_schedule_us", "vllm_output_us")
    extra = sum(result["lanes"][k] - result["wide"][k] for k in vllm_keys)
    doc["vllm_us_per_extra_pass"] = round(extra / max(args.lanes - 1, 1), 1)
    print(f"batch {batch}: one pass vs {args.lanes} lanes x {args.seqs}, us per decode step")
    for key in result["wide"]:
        wide, lanes = result["wide"][key], result["lanes"][key]
        print(f"  {key:22s} {wide:8.1f} {lanes:8.1f}  {lanes - wide:+8.1f}")
    print(f"  lanes / wide step: {doc['ratio']:.3f}")
    print(f"  vLLM's fixed cost per extra pass: {doc['vllm_us_per_extra_pass']:.1f} us")
    if args.json is not None:  # now, so a failing --segments part keeps the headline figures
        write_json(args.json, doc)
    if args.segments:
        parts: dict[str, list[SegmentSample]] = {name: [] for name in scheds}
        for _ in range(args.rounds):
            for name, sched in scheds.items():
                parts[name].append(timed_segments(sched, args.steps))
        doc["segments_us"] = {}
        print("  the plugin's pieces (us per step; calls per step):")
        for seg in SEGMENTS:
            row = {
                name: round(statistics.median(p.us[seg] for p in parts[name]), 1) for name in scheds
            }
            doc["segments_us"][seg] = row
            counts = " / ".join(f"{parts[name][0].calls[seg]:g}" for name in scheds)
            print(
                f"  {seg:22s} {row['wide']:8.1f} {row['lanes']:8.1f}  "
                f"{row['lanes'] - row['wide']:+8.1f}   ({counts})"
            )
        if args.json is not None:
            write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
