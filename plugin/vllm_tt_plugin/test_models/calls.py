"""What a reference-model contract call leaves behind for the host: the call record tests read
(``model.call_log``), and the handle an async decode submit returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallRecord:
    """One accepted contract call, as tests inspect it (``model.call_log``)."""

    method: str
    enable_trace: bool | None = None
    read_from_device: bool | None = None
    device_sampling: bool | None = None
    rows: int | None = None
    start_pos: tuple[int, ...] | None = None
    reload_inputs: bool | None = None
    reload_page_table: bool | None = None
    reload_sampling_params: bool | None = None
    reset_sampling_state: bool | None = None
    reset_batch: bool | None = None
    slot_remap: tuple[int, ...] | None = None
    num_blocks: int | None = None  # warmup_model_decode


class DecodeHandle:
    """What an async decode submit returns in place of device output tensors."""

    def __init__(self, owner: int, step: int, is_tokens: bool) -> None:
        self.owner = owner
        self.step = step
        self.is_tokens = is_tokens
        self.event: Any = None
        self.output: Any = None
        self.read = False
        self.processed = False

    def __repr__(self) -> str:
        return f"DecodeHandle(step={self.step}, is_tokens={self.is_tokens})"


def wait_event(event: Any) -> None:
    if hasattr(event, "synchronize"):
        event.synchronize()
    elif callable(event):
        event()
