"""The step the lane coordinator hands the worker: vLLM's SchedulerOutput plus each row's lane.

A typed subclass instead of an attribute set on vLLM's object: the runner reads ``req_lanes``
only from a ``LaneSchedulerOutput`` (lane-DP); a plain SchedulerOutput has every row in lane 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.v1.core.sched.output import SchedulerOutput


@dataclass
class LaneSchedulerOutput(SchedulerOutput):  # type: ignore[misc]
    # The lane of every scheduled request (new and resumed rows are placed by it).
    req_lanes: dict[str, int] = field(default_factory=dict)


def request_lanes(scheduler_output: SchedulerOutput) -> dict[str, int]:
    """Each scheduled request's lane (empty when the step is not a lane-DP step)."""
    if isinstance(scheduler_output, LaneSchedulerOutput):
        return scheduler_output.req_lanes
    return {}
