"""The step the TT schedulers hand the worker: vLLM's SchedulerOutput plus its kind and lanes.

A typed subclass that both schedulers always produce (``TTScheduler`` and the lane
coordinator), instead of attributes set on vLLM's object: the runner reads the step's kind and a
row's lane from it, and refuses any other scheduler output (``tt_step``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from vllm.v1.core.sched.output import SchedulerOutput

from vllm_tt_plugin.policy.step_kind import StepKind

__all__ = ["TTSchedulerOutput", "UnscheduledStepError", "tt_step"]

# vLLM's fields, copied by reference when a scheduler's output is typed (no list is copied).
_VLLM_FIELDS = tuple(f.name for f in dataclasses.fields(SchedulerOutput) if f.init)


class UnscheduledStepError(TypeError):
    """A scheduler output that no TT scheduler made reached the TT runner."""


@dataclass
class TTSchedulerOutput(SchedulerOutput):  # type: ignore[misc]
    step_kind: StepKind = StepKind.IDLE
    # Each lane's scheduled rows (its own output's num_scheduled_tokens, by lane index); empty
    # for a single-lane step, whose rows are all in lane 0. A row's lane is looked up here on
    # demand: only new and resumed rows need it (to be placed), so no per-row lane map is built
    # on the steady decode step.
    lane_scheduled: list[dict[str, int]] = field(default_factory=list)

    @classmethod
    def of(cls, output: SchedulerOutput, kind: StepKind) -> TTSchedulerOutput:
        """vLLM's ``output`` typed, with the kind its scheduler chose (fields shared)."""
        return cls(**{name: getattr(output, name) for name in _VLLM_FIELDS}, step_kind=kind)

    def lane_of(self, req_id: str, default: int = 0) -> int:
        """A scheduled request's lane (``default`` when the step is not a lane-DP step)."""
        for lane, scheduled in enumerate(self.lane_scheduled):
            if req_id in scheduled:
                return lane
        return default

    @property
    def req_lanes(self) -> dict[str, int]:
        """Every scheduled row's lane (for inspection; the runner uses ``lane_of``)."""
        return {r: lane for lane, rows in enumerate(self.lane_scheduled) for r in rows}


def tt_step(scheduler_output: SchedulerOutput) -> TTSchedulerOutput:
    """The step as a TT scheduler made it; a scheduler output of another scheduler is refused."""
    if not isinstance(scheduler_output, TTSchedulerOutput):
        raise UnscheduledStepError(
            f"the TT runner got a {type(scheduler_output).__name__}, not a TTSchedulerOutput: "
            "steps must come from the TT platform's scheduler (TTScheduler or the lane "
            "coordinator), which chooses each step's kind"
        )
    return scheduler_output
