"""The reference Llama with failure injection, for runner tests of refused model calls.

A test arms ``fail_next_prefill`` / ``fail_next_decode`` on the loaded model; the next call of
that kind raises :class:`InjectedModelFailure` before the reference model sees it (so nothing is
recorded in ``call_log`` and no device state changes), and the flag disarms itself.
"""

from __future__ import annotations

from typing import Any

from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM


class InjectedModelFailure(RuntimeError):
    """Raised by an armed model call."""


class FailOnDemandModel(ReferenceLlamaForCausalLM):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail_next_prefill = False
        self.fail_next_decode = False

    def prefill_forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail_next_prefill:
            self.fail_next_prefill = False
            raise InjectedModelFailure("injected prefill_forward failure")
        return super().prefill_forward(*args, **kwargs)

    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail_next_decode:
            self.fail_next_decode = False
            raise InjectedModelFailure("injected decode_forward failure")
        return super().decode_forward(*args, **kwargs)
