"""Deliberately broken reference models: each breaks one promise of the TT model contract the way
a real tt-metal model class could, so that tests/engine/test_conformance_catches_faults.py can
show the conformance suite notices.

Served through the registry exactly as an operator would swap a model class:

    TT_MODEL_CLASS_OVERRIDES="TTReferenceLlamaForCausalLM=tests.engine.broken_models:<Class>"

(the vLLM worker must be able to import ``tests.engine``: put the repository root on PYTHONPATH).
Every fault goes through the public contract surface (``prefill_forward`` / ``decode_forward``
arguments), so the reference model's own validation still runs on what it receives.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import torch

from vllm_tt_plugin.contract.sampling_params import (
    NEUTRAL_FREQUENCY,
    NEUTRAL_PRESENCE,
    NEUTRAL_REPETITION,
    TTSamplingParams,
)
from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM


def _without_penalties(params: TTSamplingParams | None) -> TTSamplingParams | None:
    if params is None:
        return None
    rows = params.batch_size
    return replace(
        params,
        presence_penalty=[NEUTRAL_PRESENCE] * rows,
        frequency_penalty=[NEUTRAL_FREQUENCY] * rows,
        repetition_penalty=[NEUTRAL_REPETITION] * rows,
    )


class IgnoresPenalties(ReferenceLlamaForCausalLM):
    """Declares device penalties but samples as if every penalty were neutral (a device sampler
    that never reads the penalty tensors)."""

    def prefill_forward(self, *args: Any, sampling_params: Any = None, **kwargs: Any) -> Any:
        return super().prefill_forward(
            *args, sampling_params=_without_penalties(sampling_params), **kwargs
        )

    def decode_forward(self, *args: Any, sampling_params: Any = None, **kwargs: Any) -> Any:
        return super().decode_forward(
            *args, sampling_params=_without_penalties(sampling_params), **kwargs
        )


class KeepsStaleTokens(ReferenceLlamaForCausalLM):
    """Half-applies ``reload_inputs`` between two decode steps: positions and page tables are
    reloaded, but the input tokens stay the resident ones (a device that skips the token copy).
    Harmless while the device samples (its resident tokens are current), wrong after host-sampled
    steps, which return logits and leave the resident tokens behind.

    (Dropping the whole reload instead also gets caught, but less instructively: the stale page
    table soon addresses the null block and the engine dies.)"""

    _last_call: str = "none"

    def prefill_forward(self, *args: Any, **kwargs: Any) -> Any:
        out = super().prefill_forward(*args, **kwargs)
        self._last_call = "prefill"
        return out

    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._last_call == "decode" and kwargs.get("reload_inputs"):
            stale = self.resident_snapshot().tokens
            remap = kwargs.get("slot_remap")
            stale = stale if remap is None else stale[remap]
            kwargs["tokens"] = stale.to(torch.int32)[:, None].clone()
        out = super().decode_forward(*args, **kwargs)
        self._last_call = "decode"
        return out


class SwapsSlotRows(ReferenceLlamaForCausalLM):
    """Loads reloaded inputs into the wrong slots: when slots 0 and 1 are both live, their
    tokens, positions and page-table rows trade places (a row-order slip in a host->device copy).
    A request alone is unaffected; two requests in one batch continue each other's text."""

    def decode_forward(self, **kwargs: Any) -> Any:  # type: ignore[override]
        start_pos = kwargs["start_pos"]
        if (
            kwargs.get("reload_inputs")
            and start_pos.numel() >= 2
            and bool((start_pos[:2] >= 0).all())
        ):
            order = torch.arange(start_pos.numel())
            order[0], order[1] = 1, 0
            for name in ("tokens", "page_table", "start_pos"):
                kwargs[name] = kwargs[name][order]
        return super().decode_forward(**kwargs)


class SkipsPenaltyReset(ReferenceLlamaForCausalLM):
    """Ignores ``reset_sampling_state``: the per-slot penalty history is never rebuilt from the
    ``prompt_tokens`` / ``output_tokens`` the plugin sends, so a request inherits the history of
    whatever occupied its slot before and misses tokens sampled on the host."""

    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("reset_sampling_state"):
            kwargs = {**kwargs, "reset_sampling_state": False}
        return super().decode_forward(*args, **kwargs)


# --- a failing or hung device (tests/engine/test_device_watchdog.py) -------------------------
# The faults strike on a serving call, never during warm-up (which has its own methods), after
# ``fault_after`` calls of the faulty method, so that requests are in flight and have streamed.


def _hang() -> None:
    threading.Event().wait()  # a tt-metal call that never returns


class _CountsCalls(ReferenceLlamaForCausalLM):
    fault_after = 20
    _calls: int = 0

    def _strikes(self) -> bool:
        self._calls += 1
        return self._calls > self.fault_after


class HangsInDecode(_CountsCalls):
    """decode_forward never returns (a wedged device or a dispatch deadlock)."""

    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._strikes():
            _hang()
        return super().decode_forward(*args, **kwargs)


class HangsInPrefill(_CountsCalls):
    """prefill_forward never returns (from the third prefill call on)."""

    fault_after = 2

    def prefill_forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._strikes():
            _hang()
        return super().prefill_forward(*args, **kwargs)


class HangsInReadBack(_CountsCalls):
    """The async device->host copy of a decode step never completes: its read event never
    fires."""

    def read_decode_output(self, tt_out: Any, async_read: bool = True) -> Any:
        handle, events = super().read_decode_output(tt_out, async_read)
        if async_read and self._strikes():
            return handle, [_hang]
        return handle, events


class HangsInWarmup(ReferenceLlamaForCausalLM):
    """Trace capture of the decode warm-up never returns."""

    def warmup_model_decode(self, *args: Any, enable_trace: bool = False, **kwargs: Any) -> Any:
        if enable_trace:
            _hang()
        return super().warmup_model_decode(*args, enable_trace=enable_trace, **kwargs)


class RaisesInDecode(_CountsCalls):
    """decode_forward raises, as a device error surfaces through ttnn."""

    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._strikes():
            raise RuntimeError("TT_THROW: emulated device error in decode (broken_models)")
        return super().decode_forward(*args, **kwargs)
