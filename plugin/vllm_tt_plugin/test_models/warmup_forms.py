"""The reference Llama with the warm-up signatures of older tt-metal releases.

Each class changes only its warm-up methods' signatures, as the real adapters do, so the plugin
must negotiate the keywords from the signature it finds (``call_plan.negotiate_warmup``). Python
itself refuses a wrong call (a missing required argument, an unknown keyword: ``TypeError``);
what each form receives is kept in ``warmup_received`` for the tests. Serve one with::

    TT_MODEL_CLASS_OVERRIDES="TTReferenceLlamaForCausalLM=vllm_tt_plugin.test_models.warmup_forms:OlderWarmupForm"

Forms (docs/TT_MODEL_CONTRACT.md, "Warm-up forms"):

- ``OlderWarmupForm``: ``non_greedy_decoding_on_device`` required in both warm-ups (the Galaxy
  and Qwen3-VL generators' prefill warm-up and ``WarmupForwardMixin.warmup_model_decode`` of
  that time).
- ``Qwen3VLWarmupForm``: ``warmup_model_prefill(kv_cache, enable_trace, sampling_params=None)``,
  which has no ``can_sample_on_device``.
- ``OldestDecodeWarmupForm``: ``DecodeWarmupMixin.warmup_model_decode(kv_cache, enable_trace,
  max_batch_size, num_gpu_blocks, ...)``: a form the plugin refuses.
"""

from __future__ import annotations

from typing import Any

from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM
from vllm_tt_plugin.test_models.warmup import ReferenceWarmupError


def _flag(method: str, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ReferenceWarmupError(f"{method}: {name}={value!r} must be a bool")
    return value


class OlderWarmupForm(ReferenceLlamaForCausalLM):
    """``non_greedy_decoding_on_device`` is the fourth (prefill) / sixth (decode) required
    argument; no ``greedy_only``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.warmup_received: list[tuple[str, dict[str, Any]]] = []

    def _record(self, what: str, can_sample_on_device: bool, non_greedy: bool) -> None:
        """Both flags must be bools, as the real form's type hints require."""
        received = {
            "can_sample_on_device": _flag(what, "can_sample_on_device", can_sample_on_device),
            "non_greedy_decoding_on_device": _flag(
                what, "non_greedy_decoding_on_device", non_greedy
            ),
        }
        self.warmup_received.append((what, received))

    def warmup_model_prefill(  # type: ignore[override]
        self,
        kv_cache: Any,
        enable_trace: bool,
        can_sample_on_device: bool,
        non_greedy_decoding_on_device: bool,
    ) -> None:
        self._record("warmup_model_prefill", can_sample_on_device, non_greedy_decoding_on_device)
        super().warmup_model_prefill(
            kv_cache, enable_trace, can_sample_on_device,
            greedy_only=not non_greedy_decoding_on_device,
        )  # fmt: skip

    def warmup_model_decode(  # type: ignore[override]
        self,
        kv_cache: Any,
        enable_trace: bool,
        max_batch_size: int,
        num_blocks: int,
        can_sample_on_device: bool,
        non_greedy_decoding_on_device: bool,
    ) -> None:
        self._record("warmup_model_decode", can_sample_on_device, non_greedy_decoding_on_device)
        super().warmup_model_decode(
            kv_cache, enable_trace, max_batch_size, num_blocks, can_sample_on_device,
            greedy_only=not non_greedy_decoding_on_device,
        )  # fmt: skip


class Qwen3VLWarmupForm(ReferenceLlamaForCausalLM):
    """Qwen3-VL's prefill warm-up: ``sampling_params`` instead of ``can_sample_on_device``
    (passing that is a ``TypeError``); the decode warm-up is today's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.warmup_received: list[tuple[str, dict[str, Any]]] = []

    def warmup_model_prefill(  # type: ignore[override]
        self, kv_cache: Any, enable_trace: bool, sampling_params: Any = None
    ) -> None:
        self.warmup_received.append(("warmup_model_prefill", {"sampling_params": sampling_params}))
        super().warmup_model_prefill(kv_cache, enable_trace, sampling_params is not None)


class OldestDecodeWarmupForm(ReferenceLlamaForCausalLM):
    """``DecodeWarmupMixin``'s decode warm-up: ``num_gpu_blocks`` (required) and a
    ``sample_on_device_mode`` string; the plugin cannot call it and refuses it at launch."""

    def warmup_model_decode(  # type: ignore[override]
        self,
        kv_cache: Any,
        enable_trace: bool,
        max_batch_size: int,
        num_gpu_blocks: int,
        sample_on_device_mode: str | None = None,
        non_greedy_decoding_on_device: bool = False,
    ) -> None:
        raise ReferenceWarmupError("the plugin refuses this form; it is never called")


__all__ = ["OlderWarmupForm", "OldestDecodeWarmupForm", "Qwen3VLWarmupForm"]
