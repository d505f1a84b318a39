"""The kind of a TT step: prefill, decode or idle (a leaf module: it imports nothing of ours).

A TT step is prefill-only or decode-only. The scheduler chooses the kind (``step_policy``), the
step carries it to the runner (``step_output.TTSchedulerOutput.step_kind``), the launch plan
and the sampling route decide per kind, and the host-time metrics are labelled by it: one enum
for all of them.
"""

from __future__ import annotations

import enum

__all__ = ["StepKind"]


class StepKind(str, enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"
    IDLE = "idle"  # nothing scheduled: an empty step (no model call)
