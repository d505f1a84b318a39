"""The TT model runner: vLLM scheduler outputs in, typed TT model calls, vLLM runner outputs back.

Each step is prefill-only or decode-only (TTScheduler guarantees it; the runner checks). Prefill
rows carry their whole token sequence from position 0 up to the end of the scheduled chunk, and
the slot they will decode in. Decode runs the whole slot-indexed batch, padded, with the reload
commands of docs/DECODE_RELOAD_CONTRACT.md. Sampling happens on the device or through vLLM's
host sampler, chosen per batch. The model itself is called only by ``model_adapter``. Launch
decisions (lanes, traces, which step kinds may sample on the device, async overlap) are read
from the launch plan, never re-decided here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from vllm.config import VllmConfig
from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, LogprobsTensors, ModelRunnerOutput

from vllm_tt_plugin.adapter.model_adapter import ModelAdapter
from vllm_tt_plugin.adapter.served_model import ServedModel
from vllm_tt_plugin.async_decode import InflightQueue, PendingStep, TTAsyncModelRunnerOutput
from vllm_tt_plugin.contract.call_types import (
    DecodeCall,
    DecodeSubmission,
    ModelOutput,
    PrefillCall,
)
from vllm_tt_plugin.contract.reload_contract import DecodeStep, Layout, ReloadCommand, ReloadPlanner
from vllm_tt_plugin.contract.sampling_params import TTSamplingParams
from vllm_tt_plugin.input_batch import (
    TTInputBatch,
    TTRequestState,
    device_rows,
    make_request_state,
    padded_token_lists,
)
from vllm_tt_plugin.observability.host_phases import Phase
from vllm_tt_plugin.observability.situations import decode_situations, prefill_situations
from vllm_tt_plugin.observability.step_recorder import StepRecorder, cpu_counted
from vllm_tt_plugin.policy.sampling_route import RouteDecision, decide_route, row_feature
from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.policy.step_output import TTSchedulerOutput, tt_step
from vllm_tt_plugin.step.block_runner import BlockStepper
from vllm_tt_plugin.step.decode_inputs import PersistentDecodeInputs
from vllm_tt_plugin.step.host_sampler import HostSampler
from vllm_tt_plugin.step.multimodal import decode_rope_deltas, prefill_multimodal_kwargs
from vllm_tt_plugin.step.runner_outputs import build_output, logprobs_rows_from_device
from vllm_tt_plugin.utils.log import get_logger

logger = get_logger(__name__)


class UnsupportedStepError(RuntimeError):
    """A scheduler output TT cannot execute: mixed prefill and decode work (TT steps are one or
    the other), or work the TT runtime does not do (KV block copies)."""


@dataclass
class _ScheduledRow:
    state: TTRequestState
    start: int  # num_computed_tokens before this step
    num_tokens: int  # scheduled this step

    @property
    def end(self) -> int:
        return self.start + self.num_tokens

    @property
    def req_id(self) -> str:
        return self.state.req_id

    @property
    def mm_features(self) -> list[Any]:
        return self.state.mm_features


@dataclass
class _DecodeBatch:
    """One decode step's rows in slot order. Kept after an accepted step: while the same
    requests decode in the same slots, the next step reuses it instead of re-deriving it."""

    ids: set[str]  # the scheduled request ids
    active: list[TTRequestState | None]  # per global slot, after this step's remap
    layout: Layout
    req_ids: list[str]  # output order
    slots: list[int]  # the global slot of each req_ids entry
    states: list[TTRequestState]  # the state of each req_ids entry
    lanes: set[int]
    want_logprobs: bool
    remap: tuple[int, ...] | None = None
    new_slots: list[TTRequestState] = field(default_factory=list)  # slots taken this step
    decision: RouteDecision | None = None  # the sampling route, once chosen
    # req_id -> output index (vLLM only reads it, so every step of the batch shares one) and
    # whether slots == range(len(req_ids)) (the device's tokens then need no gather).
    index: dict[str, int] = field(default_factory=dict)
    in_slot_order: bool = False


def is_decode_row(state: TTRequestState, num_computed: int, num_scheduled: int) -> bool:
    """One token whose input is a generated token: a decode. Everything else is prefill."""
    return num_scheduled == 1 and num_computed >= state.num_prompt_tokens


def misfit_rows(kind: StepKind, rows: Sequence[_ScheduledRow], block_output: bool) -> list[str]:
    """The rows that do not fit the step kind the scheduler chose (the runner's one check of a
    step's rows; empty when all fit).

    A decode row decodes: one token after its prompt (a block-output model: its whole last
    canvas, any number of tokens after the prompt). A prefill step may hold prompt chunks and
    rows resumed after preemption with all but their last token cached: decode-shaped, but from
    the waiting queue, without a slot, placed again by prefill like the rows they join. A
    prefill step may not hold a row that decodes in its slot; an idle step holds no row."""
    if kind is StepKind.IDLE:
        return [r.req_id for r in rows]
    decode = kind is StepKind.DECODE
    if block_output:
        return [r.req_id for r in rows if (r.start >= r.state.num_prompt_tokens) != decode]
    if decode:
        return [r.req_id for r in rows if not is_decode_row(r.state, r.start, r.num_tokens)]
    return [
        r.req_id
        for r in rows
        if r.state.slot is not None and is_decode_row(r.state, r.start, r.num_tokens)
    ]


@dataclass
class _PrefillStep:
    """One prefill step's rows, placed in their slots, and what the step found for them."""

    rows: list[_ScheduledRow]
    states: list[TTRequestState]
    new_slots: list[TTRequestState]  # slots taken this step (released if the call fails)
    empty_slots: list[int]  # each row's global slot
    completing: list[bool]  # rows whose prompt ends in this chunk: they sample a first token
    sampling: list[TTRequestState]  # the states of those rows
    sampled: list[int | None]  # per row: its first token
    logprob_rows: list[int | None]  # per row: its row of ``logprobs``
    logprobs: LogprobsTensors | None = None
    decision: RouteDecision | None = None  # the sampling route, once chosen
    on_device: bool = False  # the device samples (some row samples and the route says so)

    def sample_index(self) -> list[int]:
        return [i for i, done in enumerate(self.completing) if done]


class TTModelRunner:
    def __init__(
        self,
        vllm_config: VllmConfig,
        adapter: ModelAdapter,
        served: ServedModel,
    ) -> None:
        self.vllm_config = vllm_config
        self.adapter = adapter
        # Every launch decision, with the loaded instance's facts, derived once (served_model).
        self.served = served
        plan = served.plan
        self.plan = plan
        lanes = plan.lanes.lanes
        seqs_per_lane = plan.lanes.seqs_per_lane
        self.lanes = lanes
        self.seqs_per_lane = seqs_per_lane
        self.block_size: int = vllm_config.cache_config.block_size
        self.max_model_len: int = vllm_config.model_config.max_model_len
        self.vocab_size = vllm_config.model_config.get_vocab_size()
        self.uses_mrope = bool(vllm_config.model_config.uses_mrope)
        self.async_decode = served.overlap
        self.prefill_trace = plan.prefill.traced
        self.decode_trace = plan.decode.traced
        self.logprob_support = plan.logprobs
        self.batch = TTInputBatch(lanes, seqs_per_lane, self._decode_table_width())
        self.inputs = PersistentDecodeInputs(
            lanes * seqs_per_lane, self._decode_table_width(), 1, self.vocab_size
        )
        self._decode_cache: _DecodeBatch | None = None
        self.host_sampler = HostSampler(vllm_config, lanes * seqs_per_lane, self.block_size)
        self.planner = ReloadPlanner(resident_inputs=served.resident_inputs)
        self.inflight = InflightQueue()
        # The last overlapped decode not read back yet (the next submit reads it).
        self._unread: DecodeSubmission | None = None
        self.kv_cache: Any = None
        self.num_kv_groups = 1
        self.layer_groups: tuple[int, ...] | None = None
        self._scheduled: TTSchedulerOutput | None = None
        self._step_id = 0
        # Every timing, counter and metric hook of a step (step_recorder).
        self.rec = StepRecorder(lanes)
        self.stats = self.rec.stats
        # Python's 5 ms GIL switch interval stays: a shorter one lets vLLM's output thread
        # force the engine thread off mid-step (docs/VLLM_PATCHES.md, W18, removed).
        logger.info(
            "TT runner: %d lane(s) x %d slots, decode contract v%d, async decode overlap %s, "
            "sample_on_device_mode=%s, trace_mode=%s, device logprobs %s",
            lanes,
            seqs_per_lane,
            served.contract_version,
            "on" if self.async_decode else "off",
            plan.options.sample_on_device_mode,
            plan.options.trace_mode,
            "top-32"
            if self.logprob_support.top_k
            else ("sampled token" if self.logprob_support.flat else "host only"),
        )
        # Route chosen for the last sampled batch of each kind (tests and logs read it).
        self.last_route: dict[StepKind, RouteDecision] = {}
        canvas = served.canvas
        self.block_stepper = BlockStepper(self, canvas) if canvas else None

    def _decode_table_width(self) -> int:
        return self.served.table_width(self.max_model_len)

    def set_kv_cache(
        self, kv_cache: Any, num_groups: int, layer_groups: tuple[int, ...] | None = None
    ) -> None:
        self.kv_cache = kv_cache
        self.num_kv_groups = num_groups
        self.layer_groups = layer_groups
        self.inputs.reshape(self._decode_table_width(), num_groups)

    def update_max_model_len(self, max_model_len: int) -> None:
        self.max_model_len = max_model_len
        self.batch.max_blocks_per_req = self._decode_table_width()
        self.inputs.reshape(self._decode_table_width(), self.num_kv_groups)

    # --- engine entry points ------------------------------------------------------------------
    def execute_model(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput | None:
        """Fold the step into the request states. Sampling (and the model call) happens in
        sample_tokens, which receives the grammar bitmask for structured output. An empty step
        is answered here: the engine calls sample_tokens only for steps with work."""
        self.rec.update_started()
        so = tt_step(scheduler_output)  # refuses a step no TT scheduler made
        self._update_states(so)
        self.rec.update_done(so, so.step_kind)
        if so.total_num_scheduled_tokens == 0:
            self._scheduled = None
            return EMPTY_MODEL_RUNNER_OUTPUT
        self._scheduled = so
        return None

    def sample_tokens(
        self, grammar_output: GrammarOutput | None
    ) -> ModelRunnerOutput | TTAsyncModelRunnerOutput:
        """The step's model call and its output. The engine thread's CPU time of it is the
        plugin's (the model's host side runs on the device-call thread), less the drains in
        it: the drained steps count their own (``_finish_decode``)."""
        so = self._scheduled
        self.rec.sampling_started()
        try:
            return self._sample_tokens(grammar_output)
        finally:
            self.rec.sampling_done(StepKind.IDLE if so is None else so.step_kind)

    def _sample_tokens(
        self, grammar_output: GrammarOutput | None
    ) -> ModelRunnerOutput | TTAsyncModelRunnerOutput:
        scheduler_output, self._scheduled = self._scheduled, None
        if scheduler_output is None or scheduler_output.total_num_scheduled_tokens == 0:
            return EMPTY_MODEL_RUNNER_OUTPUT
        kind = scheduler_output.step_kind
        self.rec.open_step(kind)
        if scheduler_output.kv_cache_block_copies:
            # Copy-on-write of partially cached blocks needs block copies in the TT KV cache;
            # it only arises when vLLM hashes at a finer granularity than the block size.
            raise UnsupportedStepError(
                "KV cache block copies (partial prefix-cache hits) are not supported on TT"
            )
        if kind is StepKind.DECODE and self.block_stepper is None:
            steady = self._steady_decode(scheduler_output)
            states = None if steady is not None else self._decode_states(scheduler_output)
            if states is not None:
                steady = self._decode_batch(states)
            if steady is not None:
                self._step_id += 1
                self.rec.decode_lanes(steady.lanes)
                return self._run_decode(steady, scheduler_output, grammar_output)
        rows = self._checked_rows(kind, scheduler_output)
        self._step_id += 1
        self.rec.lanes({r.state.lane for r in rows})
        if self.block_stepper is not None:
            decode = kind is StepKind.DECODE
            output = self.block_stepper.run([r.state for r in rows], decode=decode)
            self.rec.block_step(decode)
            return output
        self.drain()
        self.rec.prefill_started()
        return self._run_prefill(rows, scheduler_output, grammar_output)

    def _checked_rows(self, kind: StepKind, so: SchedulerOutput) -> list[_ScheduledRow]:
        """The step's rows, refused unless every one fits the step kind (``misfit_rows``)."""
        requests = self.batch.requests
        rows = [
            _ScheduledRow(requests[req_id], requests[req_id].num_computed_tokens, n)
            for req_id, n in so.num_scheduled_tokens.items()
        ]
        misfits = misfit_rows(kind, rows, self.block_stepper is not None)
        if misfits:
            raise UnsupportedStepError(
                f"TT steps are prefill-only or decode-only: rows {misfits} of this "
                f"{kind.value} step do not {kind.value} "
                f"({dict(so.num_scheduled_tokens)})"
            )
        return rows

    def drain(self) -> None:
        """Read back every in-flight decode step (the host then knows every latest token)."""
        if len(self.inflight):
            self.rec.drain(self.inflight.drain)

    # --- state ------------------------------------------------------------------------------------
    def _update_states(self, so: TTSchedulerOutput) -> None:
        for req_id in so.finished_req_ids:
            state = self.batch.requests.get(req_id)
            if state is not None and self.block_stepper is not None:
                self.block_stepper.release(state)  # finished or aborted
            if self.batch.remove(req_id) is not None:
                self.host_sampler.forget(req_id)
        for req_id in so.preempted_req_ids or ():
            state = self.batch.requests.get(req_id)
            if state is not None:
                if self.block_stepper is not None:
                    self.block_stepper.release(state)
                self.batch.release_slot(state)
                self.host_sampler.forget(req_id)
        for new_req in so.scheduled_new_reqs:
            lane = so.lane_of(new_req.req_id)
            state = make_request_state(new_req, lane)
            state.host_feature = row_feature(self.plan, state.sampling_params)
            self.batch.add(state)
            self.rec.admitted(lane)
        resumed = self.batch.apply_cached_updates(so)
        if so.finished_req_ids or so.preempted_req_ids or so.scheduled_new_reqs or resumed:
            self._decode_cache = None  # slots change: the next decode derives its rows again
        for req_id in resumed:
            # A resumed request replays its tokens and is placed again.
            state = self.batch.requests[req_id]
            self.batch.release_slot(state)
            state.lane = so.lane_of(req_id, state.lane)

    def page_tables(
        self, states: Sequence[TTRequestState | None], width: int
    ) -> list[torch.Tensor]:
        """Each KV group's page table of these rows, ``width`` blocks wide (the block stepper
        calls it too)."""
        return [self.batch.page_table(states, g, width) for g in range(self.num_kv_groups)]

    def _penalty_history(
        self, states: list[TTRequestState | None]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        prompts = [[] if s is None else s.prompt_token_ids for s in states]
        outputs = [[] if s is None else list(s.output_token_ids) for s in states]
        return padded_token_lists(prompts), padded_token_lists(outputs)

    def sampling_params(self, states: Sequence[TTRequestState | None]) -> TTSamplingParams:
        """The device sampling parameters of these rows (the block stepper calls it too)."""
        return TTSamplingParams.encode(device_rows(states), self.vocab_size)

    # --- prefill ------------------------------------------------------------------------------
    def _run_prefill(
        self,
        rows: list[_ScheduledRow],
        so: SchedulerOutput,
        grammar_output: GrammarOutput | None,
    ) -> ModelRunnerOutput:
        """Place the rows, choose the sampling route, build the call, call the model, sample
        the rows whose prompt ends here, emit their tokens."""
        rec = self.rec
        step = self._place_prefill(rows)
        rec.mark(Phase.SAMPLING_ROUTE)
        self._route_prefill(step)
        rec.mark(Phase.INPUT_BUILD)
        call = self._prefill_call(step)
        rec.mark(Phase.MODEL_SUBMIT)
        out = self._call_prefill(step, call)
        rec.mark(Phase.OUTPUT_BUILD)
        self._accept_prefill(step, out)
        if step.on_device:
            self._device_prefill_tokens(step, out)
        elif step.sampling:
            self._host_prefill_tokens(step, out, so, grammar_output)
        output = self._emit_prefill(step)
        rec.close_step()
        return output

    def _place_prefill(self, rows: list[_ScheduledRow]) -> _PrefillStep:
        self._decode_cache = None
        states = [r.state for r in rows]
        new_slots = [s for s in states if s.slot is None]
        empty_slots = [self.batch.ensure_slot(s) for s in states]
        completing = [r.end >= r.state.num_tokens for r in rows]
        return _PrefillStep(
            rows=rows,
            states=states,
            new_slots=new_slots,
            empty_slots=empty_slots,
            completing=completing,
            sampling=[r.state for r, done in zip(rows, completing, strict=True) if done],
            sampled=[None] * len(rows),
            logprob_rows=[None] * len(rows),
        )

    def _route_prefill(self, step: _PrefillStep) -> None:
        step.decision = decide_route(
            self.plan,
            StepKind.PREFILL,
            [s.host_feature for s in step.sampling],
            self.host_sampler.has_custom_logitsprocs,
            intermediate_chunk=not all(step.completing),
        )
        step.on_device = step.decision.on_device and bool(step.sampling)

    def _prefill_call(self, step: _PrefillStep) -> PrefillCall:
        rows, states = step.rows, step.states
        width = max(math.ceil(r.end / self.block_size) for r in rows)
        # The whole sequence from position 0 to the chunk's end: the model slices
        # tokens[row, start_pos:prompt_lens] (a prefix hit, a chunk, a resumed request).
        tokens = torch.zeros((len(rows), max(r.end for r in rows)), dtype=torch.int32)
        for i, r in enumerate(rows):
            tokens[i, : r.end] = torch.tensor(r.state.token_slice(0, r.end), dtype=torch.int32)
        on_device = step.on_device
        return PrefillCall(
            tokens=tokens,
            page_tables=self.page_tables(states, width),
            kv_cache=self.kv_cache,
            enable_trace=self.prefill_trace,
            prompt_lens=[r.end for r in rows],
            start_pos=[r.start for r in rows],
            empty_slots=step.empty_slots,
            sampling_params=self.sampling_params(states) if on_device else None,
            want_logprobs=on_device and any(s.sampling_params.logprobs is not None for s in states),
            multimodal=prefill_multimodal_kwargs(rows),
            uses_mrope=self.uses_mrope,
            layer_groups=self.layer_groups,
        )

    def _call_prefill(self, step: _PrefillStep, call: PrefillCall) -> ModelOutput:
        try:
            return self.adapter.prefill(call)
        except Exception:
            for state in step.new_slots:  # not accepted: the slots taken are not owned yet
                self.batch.release_slot(state)
            raise

    def _accept_prefill(self, step: _PrefillStep, out: ModelOutput) -> None:
        if out.rope_deltas is not None:
            for state, delta in zip(step.states, out.rope_deltas, strict=True):
                state.rope_delta = delta
        self.planner.commit_prefill()
        decision = step.decision if step.sampling else None
        found = prefill_situations((r.start for r in step.rows), self.block_size)
        self.rec.prefill_done(decision, len(step.sampling), step.completing.count(False), found)
        if decision is not None:
            self.last_route[StepKind.PREFILL] = decision

    def _device_prefill_tokens(self, step: _PrefillStep, out: ModelOutput) -> None:
        assert out.tokens is not None
        index = step.sample_index()
        for i in index:
            step.sampled[i] = out.tokens[i]
        if out.logprobs is not None:
            step.logprobs = logprobs_rows_from_device(
                out.logprobs,
                index,
                [out.tokens[i] for i in index],
                [step.states[i].sampling_params.logprobs or 0 for i in index],
            )
            for k, i in enumerate(index):
                step.logprob_rows[i] = k

    def _host_prefill_tokens(
        self,
        step: _PrefillStep,
        out: ModelOutput,
        so: SchedulerOutput,
        grammar_output: GrammarOutput | None,
    ) -> None:
        assert out.logits is not None
        index = step.sample_index()
        result = self.host_sampler.sample(step.sampling, out.logits[index], so, grammar_output)
        for k, i in enumerate(index):
            step.sampled[i] = result.token_ids[k]
            step.logprob_rows[i] = k
        step.logprobs = result.logprobs

    def _emit_prefill(self, step: _PrefillStep) -> ModelRunnerOutput:
        for state, token in zip(step.states, step.sampled, strict=True):
            if token is not None:
                state.output_token_ids.append(token)
        req_ids = [s.req_id for s in step.states]
        return build_output(req_ids, step.sampled, step.logprobs, step.logprob_rows)

    # --- decode -------------------------------------------------------------------------------
    def _plan_remap(self, idle: set[str]) -> tuple[int, ...] | None:
        if not self.served.remaps_slots:
            return None  # legacy models never see their slots move
        remap: list[int] = []
        moved = False
        for lane, lane_slots in enumerate(self.batch.slots):
            base = lane * self.seqs_per_lane
            local = lane_slots.compaction(idle)
            moved |= local is not None
            remap.extend(base + j for j in (local or range(lane_slots.capacity)))
        return tuple(remap) if moved else None

    def _steady_decode(self, so: TTSchedulerOutput) -> _DecodeBatch | None:
        """The last decode's rows, when this step decodes exactly the same requests, one token
        each, and no slot changed since (``_update_states`` drops the cache otherwise)."""
        cache = self._decode_cache
        if (
            cache is None
            or self.block_stepper is not None
            or so.step_kind is not StepKind.DECODE
            or so.total_num_scheduled_tokens != len(cache.ids)
            or so.num_scheduled_tokens.keys() != cache.ids
        ):
            return None
        return cache

    def _decode_states(self, so: SchedulerOutput) -> list[TTRequestState] | None:
        """The step's request states in scheduler order when every row decodes (one token whose
        input is a generated token: ``is_decode_row``), else None. No per-row objects: on a step
        whose rows changed this runs over the whole batch."""
        scheduled = so.num_scheduled_tokens
        if so.total_num_scheduled_tokens != len(scheduled):
            return None  # some row has more than one token
        states = list(map(self.batch.requests.__getitem__, scheduled))
        for state in states:
            if state.num_computed_tokens < len(state.prompt_token_ids):
                return None
        return states

    def _decode_batch(self, states: list[TTRequestState]) -> _DecodeBatch:
        """Place the rows in their slots and plan a compaction when the layout changed."""
        req_ids = [s.req_id for s in states]
        scheduled = set(req_ids)
        new_slots = [s for s in states if s.slot is None]
        for state in new_slots:
            self.batch.ensure_slot(state)
        current = self.batch.slot_states()
        layout = tuple(
            [s.req_id if s is not None and s.req_id in scheduled else None for s in current]
        )
        remap = None
        if layout != self.planner.view.layout:
            # Owners left out of a decode step after their prompt: done decoding, not yet
            # freed (LaneSlots.compaction). One still prefilling keeps its slot.
            idle = {
                s.req_id
                for s in current
                if s is not None
                and s.req_id not in scheduled
                and s.num_computed_tokens >= s.num_prompt_tokens
            }
            remap = self._plan_remap(idle)
        if remap is not None:
            moved = [current[j] for j in remap]
            layout = tuple(
                [s.req_id if s is not None and s.req_id in scheduled else None for s in moved]
            )
            current = moved
        active = [None if req_id is None else s for s, req_id in zip(current, layout, strict=True)]
        slot_of = {req_id: i for i, req_id in enumerate(layout) if req_id is not None}
        slots = list(map(slot_of.__getitem__, req_ids))
        return _DecodeBatch(
            ids=scheduled,
            active=active,
            layout=layout,
            req_ids=req_ids,
            slots=slots,
            index=dict(zip(req_ids, range(len(req_ids)), strict=True)),
            in_slot_order=slots == list(range(len(slots))),
            states=states,
            lanes={s.lane for s in states},
            want_logprobs=any(s.sampling_params.logprobs is not None for s in states),
            remap=remap,
            new_slots=new_slots,
        )

    def _run_decode(
        self,
        batch: _DecodeBatch,
        so: SchedulerOutput,
        grammar_output: GrammarOutput | None,
    ) -> ModelRunnerOutput | TTAsyncModelRunnerOutput:
        """Choose the sampling route, plan the reload command, submit the call, accept the
        step; its output is finished now, or (overlapped) when vLLM asks for it."""
        rec = self.rec
        rec.mark(Phase.SAMPLING_ROUTE)
        decision = self._route_decode(batch)
        rec.mark(Phase.INPUT_BUILD)
        layout_changed = batch.layout != self.planner.view.layout
        step = DecodeStep(
            layout=batch.layout,
            route=decision.route,
            block_counts=(self.batch.blocks_version,),
            slot_remap=batch.remap,
        )
        command = self.planner.plan(step)
        if command.reload_inputs or not self.served.reload_commands:
            # The host must know every slot's latest token before it sends inputs.
            self.drain()
        overlap = self.async_decode and decision.on_device
        handle = self._call_decode(batch, command, decision, layout_changed, overlap)
        rec.model_call(handle.submit_ns, handle.call_ns)
        self._accept_decode(batch, step, command, decision, overlap)

        def finish() -> ModelRunnerOutput:
            return self._finish_decode(handle, batch, decision, overlap, so, grammar_output)

        pending = PendingStep(self._step_id, cpu_counted(finish) if overlap else finish)
        rec.close_step()
        if overlap:
            self._unread = handle
            self.inflight.push(pending)
            return TTAsyncModelRunnerOutput(self.inflight, pending)
        return pending.complete()

    def _route_decode(self, batch: _DecodeBatch) -> RouteDecision:
        if batch.decision is None:
            batch.decision = decide_route(
                self.plan,
                StepKind.DECODE,
                [s.host_feature for s in batch.states],
                self.host_sampler.has_custom_logitsprocs,
            )
        return batch.decision

    def _call_decode(
        self,
        batch: _DecodeBatch,
        command: ReloadCommand,
        decision: RouteDecision,
        layout_changed: bool,
        overlap: bool,
    ) -> DecodeSubmission:
        # An overlapped step still in flight is read back inside this step's device call.
        previous = self._unread if overlap else None
        try:
            return self._submit_decode(
                batch, command, decision, layout_changed, not overlap, previous
            )
        except Exception:
            # Not accepted: slots taken for this step are not owned yet.
            for state in batch.new_slots:
                self.batch.release_slot(state)
            self._decode_cache = None
            self.inputs.forget_layout()
            raise

    def _accept_decode(
        self,
        batch: _DecodeBatch,
        step: DecodeStep,
        command: ReloadCommand,
        decision: RouteDecision,
        overlap: bool,
    ) -> None:
        """The device now holds this layout."""
        found = decode_situations(
            (s.num_computed_tokens for s in batch.states),
            self.block_size,
            decision.on_device,
            self.inputs.penalties,
            batch.want_logprobs,
        )
        self.rec.decode_done(command, decision, overlap, batch.lanes, found)
        self.planner.commit_decode(step)
        if batch.remap is not None:
            # The inputs already hold the rows in their new slots (written by occupant).
            self._apply_remap(batch.remap)
        # The slots now hold exactly batch.active: the next step of the same requests reuses it.
        self._decode_cache = (
            replace(batch, remap=None, new_slots=[])
            if batch.remap is not None or batch.new_slots
            else batch
        )
        self.last_route[StepKind.DECODE] = decision

    def _submit_decode(
        self,
        batch: _DecodeBatch,
        command: ReloadCommand,
        decision: RouteDecision,
        layout_changed: bool,
        read_in_call: bool,
        previous: DecodeSubmission | None,
    ) -> DecodeSubmission:
        active = batch.active
        inputs = self.inputs
        # Tokens and positions only when the model loads them (resident otherwise); padding
        # rows: token 0, position -1, zero page-table row, neutral sampling values.
        if command.reload_inputs or not self.served.reload_commands:
            inputs.load_tokens(active)
        inputs.update_tables(active, batch.layout, self.batch.blocks_dirty)
        params = inputs.sampling_params(active, batch.layout) if decision.on_device else None
        history = None
        if params is not None and inputs.penalties:
            history = self._penalty_history(active)
        rope_deltas = None
        if self.uses_mrope and layout_changed:
            rope_deltas = decode_rope_deltas([None if s is None else s.rope_delta for s in active])
        remap = command.slot_remap
        call = DecodeCall(
            tokens=inputs.tokens,
            start_pos=inputs.positions,
            page_tables=inputs.tables,
            kv_cache=self.kv_cache,
            enable_trace=self.decode_trace,
            command=command,
            slot_remap=None if remap is None else torch.tensor(remap, dtype=torch.int64),
            sampling_params=params,
            want_logprobs=params is not None and batch.want_logprobs,
            prompt_tokens=None if history is None else history[0],
            output_tokens=None if history is None else history[1],
            uses_mrope=self.uses_mrope,
            rope_deltas=rope_deltas,
            layer_groups=self.layer_groups,
            rows=len(batch.req_ids),
        )
        return self.adapter.submit_decode(call, read_in_call, previous)

    def _apply_remap(self, remap: tuple[int, ...]) -> None:
        requests = self.batch.requests
        for lane, lane_slots in enumerate(self.batch.slots):
            base = lane * self.seqs_per_lane
            local = [j - base for j in remap[base : base + lane_slots.capacity]]
            lane_slots.apply(local)
            for slot, src in enumerate(local):
                owner = lane_slots.owner[slot]
                if slot != src and owner is not None and owner in requests:
                    requests[owner].slot = slot

    def _finish_decode(
        self,
        handle: DecodeSubmission,
        batch: _DecodeBatch,
        decision: RouteDecision,
        overlapped: bool,
        so: SchedulerOutput,
        grammar_output: GrammarOutput | None,
    ) -> ModelRunnerOutput:
        """Read the step back, take its tokens, emit them. Finishes run one at a time on the
        engine thread (in order, through the inflight queue): they share one set of marks."""
        marks = self.rec.finish
        marks.open(StepKind.DECODE, Phase.READ_BACK)
        if self._unread is handle:
            self._unread = None
        raw = self.adapter.read_decode_host(handle, overlapped)
        marks.mark(Phase.OUTPUT_BUILD)
        # The model's output form -> tokens / logits / logprobs: the plugin's output building.
        out: ModelOutput = self.adapter.normalise_decode(handle, raw)
        if decision.on_device:
            sampled, logprobs = self._device_decode_tokens(batch, out)
        else:
            assert out.logits is not None
            result = self.host_sampler.sample(
                batch.states, out.logits[batch.slots], so, grammar_output
            )
            sampled, logprobs = list(result.token_ids), result.logprobs
        requests = self.batch.requests
        for state, token in zip(batch.states, sampled, strict=True):
            if requests.get(state.req_id) is state:  # not finished meanwhile
                state.output_token_ids.append(token)
        output = build_output(batch.req_ids, sampled, logprobs, req_id_to_index=batch.index)
        marks.close()
        return output

    @staticmethod
    def _device_decode_tokens(
        batch: _DecodeBatch, out: ModelOutput
    ) -> tuple[list[int], LogprobsTensors | None]:
        """The device's tokens (and logprobs) of the batch's rows, in output order."""
        assert out.tokens is not None
        slots, tokens = batch.slots, out.tokens
        sampled: list[int] = (
            tokens[: len(slots)] if batch.in_slot_order else [tokens[s] for s in slots]
        )
        if out.logprobs is None:
            return sampled, None
        wanted = [s.sampling_params.logprobs or 0 for s in batch.states]
        return sampled, logprobs_rows_from_device(out.logprobs, slots, sampled, wanted)
