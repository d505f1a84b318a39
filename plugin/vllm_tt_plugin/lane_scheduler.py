"""TTLaneCoordinator: single-process lane data parallelism (Galaxy generators, GPT-OSS).

``--data_parallel_size N --max_num_seqs M`` becomes N in-process lanes of M sequences in one
engine: the model hosts N KV caches (``tt_data_parallel``) on one device mesh. The coordinator
owns one TT scheduler per lane, of the class the launch plan picks (``scheduler_class``: sync or
async, as for one lane), each with its own KV block pool (lane-local block ids). A new request
goes to the least-loaded lane and stays there; all lanes share the step mode (prefill if any
lane can prefill; a prefill step that admits nothing anywhere falls back to decode); the lanes'
scheduler outputs are merged into one step for the worker, a ``TTSchedulerOutput`` carrying
each request's lane; model outputs are routed back per lane. The lane layout and the interleave
policy come from the launch plan. The coordinator reaches its lanes through public members
only: vLLM's scheduler interface and the TT scheduler's lane API.
"""

from __future__ import annotations

import copy
from collections import ChainMap, defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
from vllm.config import VllmConfig
from vllm.multimodal import MULTIMODAL_REGISTRY, MultiModalRegistry
from vllm.v1.core.sched.interface import PauseState, SchedulerInterface
from vllm.v1.core.sched.output import CachedRequestData, GrammarOutput, SchedulerOutput
from vllm.v1.engine import EngineCoreOutputs
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.metrics.stats import SchedulerStats
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from vllm_tt_plugin.launch.launch_plan import read_plan
from vllm_tt_plugin.observability import host_phases, tt_metrics
from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.policy.step_output import TTSchedulerOutput, tt_step
from vllm_tt_plugin.policy.step_policy import DECODE_ONLY, StepPolicy, WorkFacts
from vllm_tt_plugin.scheduler import scheduled_kind, scheduler_class
from vllm_tt_plugin.utils.log import get_logger

logger = get_logger(__name__)


def _lane_config(vllm_config: VllmConfig, seqs_per_lane: int) -> VllmConfig:
    """The engine config as one lane sees it: max_num_seqs is the lane's capacity."""
    lane = copy.copy(vllm_config)
    lane.scheduler_config = copy.copy(vllm_config.scheduler_config)
    lane.scheduler_config.max_num_seqs = seqs_per_lane
    return lane


def merge_outputs(outputs: list[SchedulerOutput], kind: StepKind) -> TTSchedulerOutput:
    """One SchedulerOutput for the worker, carrying every lane's work and each lane's rows
    (a row's lane: the index of the lane output that scheduled it).

    Built every step over every row: the per-row fields are joined with ``list.extend`` and
    ``dict.update`` (C loops), not comprehensions, and the fields that are empty on a decode
    step (new requests, resumptions, finishes, encoder inputs) are joined only when not."""
    req_ids: list[str] = []
    resumed: set[str] = set()
    new_token_ids: list[list[int]] = []
    new_block_ids: list[Any] = []
    num_computed: list[int] = []
    num_output: list[int] = []
    all_token_ids: dict[str, list[int]] = {}
    scheduled: dict[str, int] = {}
    encoder_inputs: dict[str, list[int]] = {}
    new_reqs: list[Any] = []
    mm_hashes: list[str] = []
    finished: set[str] = set()
    preempted: set[str] = set()
    total = 0
    structured = pending_structured = False
    for o in outputs:
        c = o.scheduled_cached_reqs
        req_ids.extend(c.req_ids)
        new_token_ids.extend(c.new_token_ids)
        new_block_ids.extend(c.new_block_ids)
        num_computed.extend(c.num_computed_tokens)
        num_output.extend(c.num_output_tokens)
        scheduled.update(o.num_scheduled_tokens)
        total += o.total_num_scheduled_tokens
        if c.all_token_ids:
            all_token_ids.update(c.all_token_ids)
        if c.resumed_req_ids:
            resumed |= c.resumed_req_ids
        if o.scheduled_new_reqs:
            new_reqs.extend(o.scheduled_new_reqs)
        if o.scheduled_encoder_inputs:
            encoder_inputs.update(o.scheduled_encoder_inputs)
        if o.free_encoder_mm_hashes:
            mm_hashes.extend(o.free_encoder_mm_hashes)
        if o.finished_req_ids:
            finished |= o.finished_req_ids
        if o.preempted_req_ids:
            preempted |= o.preempted_req_ids
        if o.has_structured_output_requests:
            structured = True
        if o.pending_structured_output_tokens:
            pending_structured = True
    return TTSchedulerOutput(
        scheduled_new_reqs=new_reqs,
        scheduled_cached_reqs=CachedRequestData(
            req_ids=req_ids,
            resumed_req_ids=resumed,
            new_token_ids=new_token_ids,
            all_token_ids=all_token_ids,
            new_block_ids=new_block_ids,
            num_computed_tokens=num_computed,
            num_output_tokens=num_output,
        ),
        num_scheduled_tokens=scheduled,
        total_num_scheduled_tokens=total,
        scheduled_spec_decode_tokens={},
        scheduled_encoder_inputs=encoder_inputs,
        num_common_prefix_blocks=[0] * len(outputs[0].num_common_prefix_blocks),
        finished_req_ids=finished,
        free_encoder_mm_hashes=mm_hashes,
        preempted_req_ids=preempted,
        has_structured_output_requests=structured,
        pending_structured_output_tokens=pending_structured,
        step_kind=kind if total else StepKind.IDLE,
        lane_scheduled=[o.num_scheduled_tokens for o in outputs],
    )


class TTLaneCoordinator(SchedulerInterface):  # type: ignore[misc]
    def __init__(
        self,
        vllm_config: VllmConfig,
        kv_cache_config: KVCacheConfig,
        structured_output_manager: StructuredOutputManager,
        block_size: int,
        hash_block_size: int | None = None,
        mm_registry: MultiModalRegistry = MULTIMODAL_REGISTRY,
        include_finished_set: bool = False,
        log_stats: bool = False,
    ) -> None:
        self.vllm_config = vllm_config
        plan = read_plan(vllm_config)
        self.layout = plan.lanes
        lane_config = _lane_config(vllm_config, self.layout.seqs_per_lane)
        lane_class = scheduler_class(plan)
        self.lanes = [
            lane_class(
                vllm_config=lane_config,
                kv_cache_config=kv_cache_config,
                structured_output_manager=structured_output_manager,
                block_size=block_size,
                hash_block_size=hash_block_size,
                mm_registry=mm_registry,
                include_finished_set=include_finished_set,
                log_stats=log_stats,
            )
            for _ in range(self.layout.lanes)
        ]
        self.step_policy = StepPolicy(plan.interleave)
        self.lane_of: dict[str, int] = {}
        self.connector = None
        self.last_step_kind = StepKind.IDLE
        self._pending: dict[int, list[SchedulerOutput]] = {}
        # The step against vLLM's passes: its own steady passes, plus each lane's (absorbed).
        self.timer = host_phases.ScheduleTimer()
        logger.info(
            "TT lane coordinator: %d lanes x %d sequences, %d KV blocks per lane",
            self.layout.lanes,
            self.layout.seqs_per_lane,
            kv_cache_config.num_blocks,
        )

    # --- requests -----------------------------------------------------------------------------
    def lane_load(self, lane: int) -> int:
        sched = self.lanes[lane]
        return len(sched.running) + len(sched.waiting) + len(sched.skipped_waiting)

    def add_request(self, request: Request) -> None:
        lane = min(range(len(self.lanes)), key=lambda i: (self.lane_load(i), i))
        self.lane_of[request.request_id] = lane
        self.lanes[lane].add_request(request)

    def finish_requests(
        self, request_ids: str | Iterable[str] | None, finished_status: RequestStatus
    ) -> list[Request]:
        if request_ids is None:
            return [r for lane in self.lanes for r in lane.finish_requests(None, finished_status)]
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
        by_lane: dict[int, list[str]] = defaultdict(list)
        for req_id in ids:
            if req_id in self.lane_of:
                by_lane[self.lane_of[req_id]].append(req_id)
        return [
            r
            for lane, lane_ids in by_lane.items()
            for r in self.lanes[lane].finish_requests(lane_ids, finished_status)
        ]

    # --- steps --------------------------------------------------------------------------------
    def schedule(self, throttle_prefills: bool = False) -> TTSchedulerOutput:
        self.timer.begin()
        for lane in self.lanes:
            lane.timer.clear()
        merged = self._schedule_lanes(throttle_prefills)
        for lane in self.lanes:
            self.timer.absorb(lane.timer)
        self.timer.finish(merged.step_kind)
        return merged

    def _steady_passes(self, throttle_prefills: bool) -> list[SchedulerOutput] | None:
        """The steady decode step: every lane is in its steady decode state
        (``TTSchedulerBase.steady_decode``) or empty, so each lane's step is vLLM's pass over its
        running list, with nothing to hide. The passes run back to back and are timed as one
        block (None: not this step; with every lane empty the step comes out idle)."""
        for lane in self.lanes:
            if not lane.steady_decode() and (lane.running or lane.waiting or lane.skipped_waiting):
                return None
        return self.timer.vllm(self._lane_passes, throttle_prefills)

    def _lane_passes(self, throttle_prefills: bool) -> list[SchedulerOutput]:
        return [lane.vllm_pass(throttle_prefills) for lane in self.lanes]

    def _schedule_lanes(self, throttle_prefills: bool) -> TTSchedulerOutput:
        steady = self._steady_passes(throttle_prefills)
        if steady is not None:
            facts = DECODE_ONLY
            mode = self.step_policy.choose(facts)
            return self._merged(steady, mode, facts)
        readies = [lane.readiness() for lane in self.lanes]
        lane_facts = [lane.work_facts(r) for lane, r in zip(self.lanes, readies, strict=True)]
        facts = WorkFacts(
            prefill_ready=any(f.prefill_ready for f in lane_facts),
            decode_ready=any(f.decode_ready for f in lane_facts),
        )
        mode = self.step_policy.choose(facts)
        # (An idle choice means no lane holds a request: _steady_passes took that step.)
        outputs = [
            lane.schedule_only(mode, throttle_prefills, r)
            for lane, r in zip(self.lanes, readies, strict=True)
        ]
        if (
            mode is StepKind.PREFILL
            and facts.decode_ready
            and not any(o.total_num_scheduled_tokens for o in outputs)
        ):
            # A forced prefill that admits nothing in any lane falls back to decode.
            for lane, output in zip(self.lanes, outputs, strict=True):
                lane.rollback_empty_pass(output)
            mode, facts = StepKind.DECODE, DECODE_ONLY
            outputs = [lane.schedule_only(mode, throttle_prefills) for lane in self.lanes]
        return self._merged(outputs, mode, facts)

    def _merged(
        self, outputs: list[SchedulerOutput], kind: StepKind, facts: WorkFacts
    ) -> TTSchedulerOutput:
        merged = merge_outputs(outputs, kind)  # idle when nothing was scheduled
        if merged.step_kind is StepKind.PREFILL:  # all rows resumed decode-shaped: a decode
            requests = ChainMap(*(lane.requests for lane in self.lanes))
            block = self.lanes[0].block_output
            merged.step_kind = scheduled_kind(StepKind.PREFILL, merged, requests, block)
        self.step_policy.record(merged.step_kind, facts)
        self.last_step_kind = merged.step_kind
        self._pending[id(merged)] = outputs
        return merged

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        self.timer.begin()
        # Each lane reads only its own requests' rows (the runner output is indexed by id).
        lane_outputs = self._pending.pop(id(scheduler_output))
        # vLLM's share is the lanes' updates, timed as one block; the merge is the plugin's.
        results = self.timer.vllm(self._lane_updates, lane_outputs, model_runner_output)
        merged = self._merge_results(scheduler_output, results)
        self.timer.finish_output(tt_step(scheduler_output).step_kind)
        if any(lane.finished_req_ids for lane in self.lanes):
            # A request finished: its client may scrape /metrics as soon as it has the output.
            tt_metrics.flush()
        return merged

    def _lane_updates(
        self, lane_outputs: list[SchedulerOutput], model_runner_output: ModelRunnerOutput
    ) -> list[dict[int, EngineCoreOutputs]]:
        return [
            lane.vllm_update(lane_output, model_runner_output)
            for lane, lane_output in zip(self.lanes, lane_outputs, strict=True)
        ]

    def _merge_results(
        self, scheduler_output: SchedulerOutput, results: list[dict[int, EngineCoreOutputs]]
    ) -> dict[int, EngineCoreOutputs]:
        """The lanes' engine outputs as one per client, with one merged SchedulerStats.

        A client's first lane output (vLLM builds them fresh in every update) carries the other
        lanes' outputs for that client, in lane order."""
        merged: dict[int, EngineCoreOutputs] = {}
        stats: list[SchedulerStats] = []
        for result in results:
            for client, eco in result.items():
                if eco.scheduler_stats is not None:
                    stats.append(eco.scheduler_stats)
                    eco.scheduler_stats = None
                target = merged.get(client)
                if target is None:
                    merged[client] = eco
                    continue
                target.outputs.extend(eco.outputs)
                if eco.finished_requests:
                    target.finished_requests = (target.finished_requests or set()) | set(
                        eco.finished_requests
                    )
        for req_id in scheduler_output.finished_req_ids:
            self.lane_of.pop(req_id, None)
        if stats:
            eco = merged.setdefault(0, EngineCoreOutputs())
            eco.scheduler_stats = self._merge_stats(stats)
        return merged

    def get_grammar_bitmask(self, scheduler_output: SchedulerOutput) -> GrammarOutput | None:
        outputs = self._pending.get(id(scheduler_output), [])
        ids: list[str] = []
        masks: list[np.ndarray] = []
        for lane, output in zip(self.lanes, outputs, strict=True):
            part = lane.get_grammar_bitmask(output)
            if part is not None:
                ids.extend(part.structured_output_request_ids)
                # The manager fills one shared buffer and returns a view of it: copy before the
                # next lane's call overwrites it.
                masks.append(np.array(part.grammar_bitmask, copy=True))
        if not ids:
            return None
        return GrammarOutput(
            structured_output_request_ids=ids, grammar_bitmask=np.concatenate(masks)
        )

    @staticmethod
    def _merge_stats(stats: list[SchedulerStats]) -> SchedulerStats:
        """The lanes' stats as one: counts and prefix-cache stats summed, KV usage averaged,
        eviction events joined; the rest (the caller's perf and cudagraph stats, the same for
        every lane) is the first lane's. vLLM builds each lane's stats and prefix-cache stats
        fresh per call (``make_stats``), so the first lane's are the merged ones."""
        merged = stats[0]
        prefix = merged.prefix_cache_stats
        usage = merged.kv_cache_usage
        for s in stats[1:]:
            merged.num_running_reqs += s.num_running_reqs
            merged.num_waiting_reqs += s.num_waiting_reqs
            merged.num_skipped_waiting_reqs += s.num_skipped_waiting_reqs
            usage += s.kv_cache_usage
            p = s.prefix_cache_stats
            prefix.requests += p.requests
            prefix.queries += p.queries
            prefix.hits += p.hits
            prefix.preempted_requests += p.preempted_requests
            prefix.preempted_queries += p.preempted_queries
            prefix.preempted_hits += p.preempted_hits
            if s.kv_cache_eviction_events:
                merged.kv_cache_eviction_events.extend(s.kv_cache_eviction_events)
        merged.kv_cache_usage = usage / len(stats)
        return merged

    # --- the rest of the scheduler interface --------------------------------------------------
    def update_draft_token_ids(self, draft_token_ids: DraftTokenIds) -> None:
        raise ValueError("speculative decoding is not supported on TT")

    def update_draft_token_ids_in_output(
        self, draft_token_ids: DraftTokenIds, scheduler_output: SchedulerOutput
    ) -> None:
        raise ValueError("speculative decoding is not supported on TT")

    def get_num_unfinished_requests(self) -> int:
        return sum(lane.get_num_unfinished_requests() for lane in self.lanes)

    def has_finished_requests(self) -> bool:
        return any(lane.has_finished_requests() for lane in self.lanes)

    @property
    def pause_state(self) -> PauseState:
        return self.lanes[0].pause_state

    def set_pause_state(self, pause_state: PauseState) -> None:
        for lane in self.lanes:
            lane.set_pause_state(pause_state)

    def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        return all(
            lane.reset_prefix_cache(reset_running_requests, reset_connector) for lane in self.lanes
        )

    def reset_encoder_cache(self) -> None:
        for lane in self.lanes:
            lane.reset_encoder_cache()

    def get_request_counts(self) -> tuple[int, int]:
        counts = [lane.get_request_counts() for lane in self.lanes]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)

    def make_stats(self, *args: Any, **kwargs: Any) -> SchedulerStats | None:
        stats = [s for lane in self.lanes if (s := lane.make_stats(*args, **kwargs)) is not None]
        return self._merge_stats(stats) if stats else None

    def shutdown(self) -> None:
        for lane in self.lanes:
            lane.shutdown()
