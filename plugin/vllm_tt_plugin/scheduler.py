"""The TT schedulers: vLLM's scheduler, constrained to prefill-only or decode-only steps.

vLLM's scheduler mixes prefill chunks and decodes in one step; TT executes them as different
programs. Each step, a pure policy (policy/step_policy.py) picks the step kind; the requests of the
other kind are hidden from vLLM's scheduling pass, which then runs unchanged (KV allocation,
preemption, prefix caching, chunking, structured output, stats). A prefill step that admits
nothing (no KV room, blocked grammar) falls back to a decode step.

The policy is ``TTSchedulerBase``, a vLLM ``Scheduler``; the launch plan picks one of its two
classes (``scheduler_class``): ``TTAsyncScheduler`` is also vLLM's ``AsyncScheduler`` (output
placeholders) and serves launches whose async scheduling overlaps decode, ``TTScheduler`` keeps
the plain ``Scheduler`` bookkeeping. The lane coordinator (lane_scheduler.py) drives one of them
per lane through the lane API below. See docs/SCHEDULING.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.request_queue import RequestQueue, create_request_queue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutputs
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request

from vllm_tt_plugin.launch.launch_plan import LaunchPlan, read_plan
from vllm_tt_plugin.loader import register_served_model
from vllm_tt_plugin.observability import host_phases, tt_metrics
from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.policy.step_output import TTSchedulerOutput, tt_step
from vllm_tt_plugin.policy.step_policy import DECODE_ONLY, StepPolicy, WorkFacts
from vllm_tt_plugin.utils.log import get_logger

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = get_logger(__name__)


def remaining_tokens(request: Request) -> int:
    remaining: int = (
        request.num_tokens_with_spec + request.num_output_placeholders - request.num_computed_tokens
    )
    return remaining


def is_decode_ready(request: Request, block_output: bool = False) -> bool:
    """A running request whose only uncomputed token is a generated one. A block-output
    model's decode input is its whole last committed canvas: every prompt token computed."""
    prompt_done: bool = request.num_computed_tokens >= request.num_prompt_tokens
    if block_output:
        return prompt_done
    return prompt_done and remaining_tokens(request) <= 1


def scheduled_kind(
    chosen: StepKind, output: SchedulerOutput, requests: Mapping[str, Request], block: bool
) -> StepKind:
    """The kind of the step a pass scheduled: the policy's choice, except that a prefill pass
    that admitted only requests resumed after preemption with all but their last token cached
    scheduled decode-shaped rows only (one token after the prompt; a block-output model: any
    tokens after it), and that step decodes: the runner places them in slots, as a decode step
    does for any row that has none. ``requests``: the scheduler's, by id (num_computed_tokens
    already advanced by the pass)."""
    if chosen is not StepKind.PREFILL or output.total_num_scheduled_tokens == 0:
        return chosen
    for req_id, n in output.num_scheduled_tokens.items():
        request = requests[req_id]
        if request.num_computed_tokens - n < request.num_prompt_tokens or (n != 1 and not block):
            return chosen
    return StepKind.DECODE


def force_compact_json(vllm_config: VllmConfig) -> None:
    """Structured output on TT is compact JSON (``disable_any_whitespace``), so greedy guided
    JSON cannot loop on whitespace (docs/TT_MODEL_CONTRACT.md).

    Set in the engine core, on the config the grammar backends read, after vLLM validated it:
    vLLM's config validator refuses the flag with the default backend "auto" (although auto only
    picks xgrammar or guidance, which both honour it), and API-server processes re-validate the
    config, so setting it in the platform hook breaks multi-API-server launches
    (docs/VLLM_PATCHES.md, W14)."""
    vllm_config.structured_outputs_config.disable_any_whitespace = True


class SchedulerClassError(RuntimeError):
    """A TT scheduler class built under a launch plan it does not serve."""


class TTSchedulerBase(Scheduler):  # type: ignore[misc]
    """The TT step policy over vLLM's scheduler. Not installed itself: the platform installs
    ``scheduler_class(plan)``, which fixes vLLM's bookkeeping for the launch."""

    # vLLM's AsyncScheduler bookkeeping (output placeholders): the plan's async_overlap.
    async_overlap: ClassVar[bool]
    # The base's state this class reshuffles per step (vLLM's types are not seen by the lint).
    running: list[Request]
    waiting: RequestQueue
    skipped_waiting: RequestQueue
    max_num_running_reqs: int

    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        plan = read_plan(vllm_config)
        check_scheduler_class(type(self), plan)  # before vLLM allocates anything
        super().__init__(vllm_config, *args, **kwargs)
        force_compact_json(self.structured_output_manager.vllm_config)
        self.step_policy = StepPolicy(plan.interleave)
        self.last_step_kind = StepKind.IDLE
        register_served_model(plan)
        # vLLM's passes within the current step against the policy around them; the lane
        # coordinator clears and absorbs each lane's instead (host_phases.ScheduleTimer).
        self.timer = host_phases.ScheduleTimer()
        # Running requests found decode-ready, with their num_preemptions then (readiness()).
        self._known_ready: dict[Request, int] = {}
        # Every running request was found ready and no pass admitted one since (readiness()).
        self._all_ready = False
        # A block-output model emits a whole canvas per step: every scheduled step reserves the
        # KV of the canvas it will commit (vLLM's lookahead slots, as spec decode reserves its
        # drafts), i.e. the rest of the physical block (docs/BLOCK_SERVING.md).
        self.canvas = plan.canvas_tokens
        if self.canvas:
            self.num_lookahead_tokens = self.canvas

    @property
    def block_output(self) -> bool:
        return self.canvas > 0

    # --- step kind ----------------------------------------------------------------------------
    def readiness(self) -> list[bool]:
        """``is_decode_ready`` of each running request, in order (derived once per pass).

        Readiness only goes one way while a request stays running: once every prompt token is
        computed it decodes one token per step until it finishes, and it can only become a
        prefill again through preemption, which bumps ``num_preemptions``. So a request found
        ready is not derived again while its preemption count is unchanged (a dict lookup per
        row instead of four properties: this runs every step over every running request).

        And once every running request is ready, none is looked at again until a pass admits
        one: only an admission (a new or resumed request in a pass's output, ``vllm_pass``)
        adds to ``running``; a finish or a preemption only takes requests out of it."""
        running = self.running
        if self._all_ready:
            return [True] * len(running)
        known = self._known_ready
        hits = [known.get(r) == r.num_preemptions for r in running]
        if len(known) == len(running) and all(hits):
            self._all_ready = True
            return hits
        block = self.block_output
        ready = [h or is_decode_ready(r, block) for h, r in zip(hits, running, strict=True)]
        self._known_ready = {
            r: r.num_preemptions for r, ok in zip(running, ready, strict=True) if ok
        }
        self._all_ready = all(ready)
        return ready

    def steady_decode(self) -> bool:
        """The steady decode pass: every running request was found ready (``readiness()``), no
        pass admitted one since, and nothing waits. Its facts are ``DECODE_ONLY`` and vLLM's
        pass runs over the whole running list with nothing hidden (``schedule_only``'s first
        case), so neither is derived again."""
        return self._all_ready and bool(self.running) and not (self.waiting or self.skipped_waiting)

    def work_facts(self, ready: list[bool] | None = None) -> WorkFacts:
        ready = self.readiness() if ready is None else ready
        decode_ready = any(ready)
        continuing = not all(ready)
        has_room = len(self.running) < self.max_num_running_reqs
        admissible = has_room and (bool(self.waiting) or bool(self.skipped_waiting))
        return WorkFacts(prefill_ready=continuing or admissible, decode_ready=decode_ready)

    def schedule(self, throttle_prefills: bool = False) -> TTSchedulerOutput:
        self.timer.begin()
        vllm_output = self._schedule_step(throttle_prefills)  # sets last_step_kind
        output = TTSchedulerOutput.of(vllm_output, self.last_step_kind)
        self.timer.finish(output.step_kind)
        return output

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        self.timer.begin()
        outputs = self.vllm_update(scheduler_output, model_runner_output)
        self.timer.finish_vllm_output(tt_step(scheduler_output).step_kind)
        if self.finished_req_ids:
            # A request finished: its client may scrape /metrics as soon as it has the output.
            tt_metrics.flush()
        return outputs

    # --- the lane API: TTLaneCoordinator (lane_scheduler.py) drives its lanes through these ----
    # Its own step (schedule / update_from_output) uses them too; the coordinator times and
    # merges its lanes' work itself (``timer``: it clears each lane's before a step and absorbs
    # them after), so none of them reports to host_phases.
    def vllm_pass(self, throttle_prefills: bool) -> SchedulerOutput:
        """vLLM's scheduling pass over every request, untimed: the coordinator calls it on each
        lane in its steady decode step (every lane ``steady_decode()`` or empty), timed as one
        block."""
        output: SchedulerOutput = super().schedule(throttle_prefills)
        if output.scheduled_new_reqs or output.scheduled_cached_reqs.resumed_req_ids:
            self._all_ready = False  # admitted: readiness() derives the running list again
        return output

    def schedule_only(
        self, mode: StepKind, throttle_prefills: bool, ready: list[bool] | None = None
    ) -> SchedulerOutput:
        """vLLM's scheduling pass over the requests of one step kind only, timed into
        ``timer`` (``ready``: this pass's ``readiness()``, when already derived). The
        coordinator calls it on every lane with the step kind it chose for all of them."""
        want_decode = mode is StepKind.DECODE
        ready = self.readiness() if ready is None else ready
        if (
            all(ready) and not (self.waiting or self.skipped_waiting)
            if want_decode
            else not any(ready)
        ):
            # Nothing to hide (the steady decode step): vLLM only pops and appends running
            # requests, so its list already has the order the general path below restores.
            return self._vllm_schedule(throttle_prefills)
        original = list(self.running)
        visible = [r for r, d in zip(original, ready, strict=True) if d == want_decode]
        hidden = [r for r, d in zip(original, ready, strict=True) if d != want_decode]
        saved_waiting: tuple[RequestQueue, RequestQueue] | None = None
        saved_limit = self.max_num_running_reqs
        self.running = visible
        if want_decode:
            saved_waiting = (self.waiting, self.skipped_waiting)
            self.waiting = create_request_queue(self.policy)
            self.skipped_waiting = create_request_queue(self.policy)
        else:
            # Admission counts every running request, hidden ones included.
            self.max_num_running_reqs = saved_limit - len(hidden)
        try:
            output = self._vllm_schedule(throttle_prefills)
        finally:
            self.max_num_running_reqs = saved_limit
            # Survivors keep their original order (it is the preemption order); hidden requests
            # come back where they were, newly admitted ones go last.
            keep = set(self.running) | set(hidden)
            before = set(original)
            self.running = [r for r in original if r in keep] + [
                r for r in self.running if r not in before
            ]
            if saved_waiting is not None:
                preempted: list[Request] = []
                while self.waiting:
                    preempted.append(self.waiting.pop_request())
                self.waiting, self.skipped_waiting = saved_waiting
                # Requests preempted by this pass go to the front, as vLLM does.
                for request in reversed(preempted):
                    self.waiting.prepend_request(request)
        return output

    def rollback_empty_pass(self, output: SchedulerOutput) -> None:
        """Hand the finished/preempted id sets an empty pass consumed to the next pass: the
        coordinator calls it on every lane when a forced prefill admitted nothing anywhere and
        the step falls back to decode."""
        self.finished_req_ids |= output.finished_req_ids
        if output.preempted_req_ids:
            self.reset_preempted_req_ids |= output.preempted_req_ids

    def vllm_update(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        """vLLM's ``update_from_output``, untimed: the coordinator calls it on each lane with
        that lane's own output of the step, and times the lanes' updates as one block."""
        outputs: dict[int, EngineCoreOutputs] = super().update_from_output(
            scheduler_output, model_runner_output
        )
        return outputs

    # --- one scheduler's step -----------------------------------------------------------------
    def _vllm_schedule(self, throttle_prefills: bool) -> SchedulerOutput:
        return self.timer.vllm(self.vllm_pass, throttle_prefills)

    def _schedule_step(self, throttle_prefills: bool) -> SchedulerOutput:
        if self.steady_decode():
            facts = DECODE_ONLY
            mode = self.step_policy.choose(facts)
            output = self._vllm_schedule(throttle_prefills)
        else:
            ready = self.readiness()
            facts = self.work_facts(ready)
            mode = self.step_policy.choose(facts)
            if mode is StepKind.PREFILL:
                output = self.schedule_only(StepKind.PREFILL, throttle_prefills, ready)
                if output.total_num_scheduled_tokens == 0 and facts.decode_ready:
                    # A forced prefill that admits nothing falls back to decode.
                    self.rollback_empty_pass(output)
                    mode, facts = StepKind.DECODE, DECODE_ONLY
                    output = self.schedule_only(StepKind.DECODE, throttle_prefills)
            elif mode is StepKind.DECODE:
                output = self.schedule_only(StepKind.DECODE, throttle_prefills, ready)
            else:
                output = self._vllm_schedule(throttle_prefills)
        if output.total_num_scheduled_tokens == 0:
            mode = StepKind.IDLE
        mode = scheduled_kind(mode, output, self.requests, self.block_output)
        self.step_policy.record(mode, facts)
        self.last_step_kind = mode
        return output


class TTScheduler(TTSchedulerBase):
    """The TT scheduler with vLLM's plain Scheduler bookkeeping (no async overlap)."""

    async_overlap = False


class TTAsyncScheduler(TTSchedulerBase, AsyncScheduler):  # type: ignore[misc]
    """The TT scheduler with vLLM's AsyncScheduler bookkeeping: output placeholders for the
    decode the runner has submitted but not read back (async overlap)."""

    async_overlap = True


def scheduler_class(plan: LaunchPlan) -> type[TTSchedulerBase]:
    """The TT scheduler class of a launch (of each of its lanes, with lane DP): the one place
    the choice is made; the platform installs it and the lane coordinator builds its lanes with
    it. The platform turned vLLM's async scheduling off unless the model splits decode submit
    and read-back, so the plan's async_overlap is exactly vLLM's async_scheduling."""
    return TTAsyncScheduler if plan.async_overlap else TTScheduler


def check_scheduler_class(cls: type[TTSchedulerBase], plan: LaunchPlan) -> None:
    """Refuse a TT scheduler class whose bookkeeping disagrees with the plan's async_overlap."""
    wanted = scheduler_class(plan)
    if not issubclass(cls, wanted):
        raise SchedulerClassError(
            f"{cls.__name__} cannot serve this launch: its plan has "
            f"async_overlap={plan.async_overlap}, which takes {wanted.__name__} (vLLM's "
            f"{'AsyncScheduler' if plan.async_overlap else 'plain Scheduler'} bookkeeping); "
            "build scheduler.scheduler_class(plan), the class the platform installs"
        )
