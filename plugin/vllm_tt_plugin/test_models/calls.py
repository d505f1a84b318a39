"""What a reference-model contract call leaves behind for the host: the call record tests read
(``model.call_log``), and the handle an async decode submit returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm_tt_plugin.test_models.resident import DecodeUpdate


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

    @classmethod
    def decode(
        cls, legacy: bool, rows: int, enable_trace: bool, read_from_device: bool, sampling: bool,
        update: DecodeUpdate,
    ) -> CallRecord:  # fmt: skip
        """A ``decode_forward`` call; ``legacy``: contract v0 (``reset_batch``, no v1 flags)."""
        remap = update.slot_remap
        return cls(
            "decode_forward",
            enable_trace=bool(enable_trace),
            read_from_device=bool(read_from_device),
            device_sampling=sampling,
            rows=rows,
            reload_inputs=None if legacy else update.reload_inputs,
            reload_page_table=None if legacy else update.reload_page_table,
            reload_sampling_params=None if legacy else update.reload_sampling_params,
            reset_sampling_state=None if legacy else update.reset_sampling_state,
            reset_batch=update.reload_inputs if legacy else None,
            slot_remap=None if remap is None else tuple(remap.tolist()),
        )


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
