"""The step the lane coordinator hands the worker: vLLM's SchedulerOutput plus each row's lane.

A typed subclass instead of an attribute set on vLLM's object: the runner reads a row's lane
only from a ``LaneSchedulerOutput`` (lane-DP); a plain SchedulerOutput has every row in lane 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.v1.core.sched.output import SchedulerOutput


@dataclass
class LaneSchedulerOutput(SchedulerOutput):  # type: ignore[misc]
    # Each lane's scheduled rows (its own output's num_scheduled_tokens, by lane index). A row's
    # lane is looked up here on demand: only new and resumed rows need it (to be placed), so no
    # per-row lane map is built on the steady decode step.
    lane_scheduled: list[dict[str, int]] = field(default_factory=list)

    def lane_of(self, req_id: str, default: int = 0) -> int:
        for lane, scheduled in enumerate(self.lane_scheduled):
            if req_id in scheduled:
                return lane
        return default

    @property
    def req_lanes(self) -> dict[str, int]:
        """Every scheduled row's lane (for inspection; the runner uses ``lane_of``)."""
        return {r: lane for lane, rows in enumerate(self.lane_scheduled) for r in rows}


def request_lane(scheduler_output: SchedulerOutput, req_id: str, default: int = 0) -> int:
    """A scheduled request's lane (``default`` when the step is not a lane-DP step)."""
    if isinstance(scheduler_output, LaneSchedulerOutput):
        return scheduler_output.lane_of(req_id, default)
    return default
