"""Decode overlap: submit now, read back later, finalise exactly once.

With ``--async-scheduling`` and a model declaring ``supports_async_decode``, a device-sampled
decode step is submitted with ``read_from_device=False``; vLLM schedules the next step while the
device runs. The step's outputs are read back when the engine asks for them
(``AsyncModelRunnerOutput.get_output``) or earlier, when the runner must drain because the batch
layout or sampling route changes. Either way each step is finalised once, in submission order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput


def wait_events(events: Any) -> None:
    """Wait on read events: objects with ``synchronize()``, callables, or lists of them."""
    if events is None:
        return
    if isinstance(events, list | tuple):
        for event in events:
            wait_events(event)
        return
    synchronize = getattr(events, "synchronize", None)  # ttnn.event_synchronize analogue
    if callable(synchronize):
        synchronize()
    elif callable(events):
        events()
    else:
        raise TypeError(f"cannot wait on read event of type {type(events).__name__}")


class PendingStep:
    """One submitted step whose output is not built yet."""

    def __init__(self, step_id: int, finish: Callable[[], ModelRunnerOutput]) -> None:
        self.step_id = step_id
        self._finish: Callable[[], ModelRunnerOutput] | None = finish
        self._output: ModelRunnerOutput | None = None

    @property
    def done(self) -> bool:
        return self._output is not None

    def complete(self) -> ModelRunnerOutput:
        if self._output is None:
            finish, self._finish = self._finish, None
            if finish is None:  # a previous attempt raised; do not run it twice
                raise RuntimeError(f"decode step {self.step_id} failed to finalise earlier")
            self._output = finish()
        return self._output


class InflightQueue:
    """Submitted steps in order; completing one completes everything before it first."""

    def __init__(self) -> None:
        self._steps: deque[PendingStep] = deque()

    def __len__(self) -> int:
        return len(self._steps)

    def push(self, step: PendingStep) -> None:
        self._steps.append(step)

    def complete_through(self, step: PendingStep) -> ModelRunnerOutput:
        while self._steps and self._steps[0].step_id <= step.step_id:
            self._steps.popleft().complete()
        return step.complete()

    def drain(self) -> None:
        while self._steps:
            self._steps.popleft().complete()


class TTAsyncModelRunnerOutput(AsyncModelRunnerOutput):  # type: ignore[misc]
    def __init__(self, queue: InflightQueue, step: PendingStep) -> None:
        self._queue = queue
        self._step = step

    def get_output(self) -> ModelRunnerOutput:
        return self._queue.complete_through(self._step)
