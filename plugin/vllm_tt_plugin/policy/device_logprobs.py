"""What device logprobs a launch can give, and which requests they cannot serve (pure).

A leaf: the launch plan records a ``DeviceLogprobSupport`` and the per-batch sampling route asks
it, so both import it from here rather than from each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm.sampling_params import SamplingParams

# vLLM's threshold below which a temperature means greedy; width of GPT-OSS device logprobs.
SAMPLING_EPS = 1e-5
TOP_K_LOGPROBS = 32


def has_penalties(params: SamplingParams) -> bool:
    return bool(
        params.presence_penalty != 0.0
        or params.frequency_penalty != 0.0
        or params.repetition_penalty != 1.0
    )


@dataclass(frozen=True)
class DeviceLogprobSupport:
    """What device logprobs this model and mesh can give (docs/TT_MODEL_CONTRACT.md)."""

    top_k: bool = False  # GPT-OSS: top-32 (values, indices)
    flat: bool = False  # the sampled token's logprob (8 or 32 devices per DP rank)

    def refusal(self, params: SamplingParams, max_device_top_k: int | None) -> str | None:
        k = params.logprobs
        if k is None:
            return None
        if self.top_k:
            stochastic = params.temperature >= SAMPLING_EPS
            limit = max_device_top_k or TOP_K_LOGPROBS
            if stochastic and not 1 <= params.top_k <= min(limit, TOP_K_LOGPROBS):
                return "logprobs (sampled token may fall outside the device's top-32)"
            if has_penalties(params):
                return "logprobs (penalised token may fall outside the device's top-32)"
            return None if 0 <= k <= TOP_K_LOGPROBS else "logprobs"
        if self.flat and k == 0:
            return None
        return "logprobs"


NO_DEVICE_LOGPROBS = DeviceLogprobSupport()  # a mesh and class that give none
