"""Per-slot device sampling parameters and the device logprobs layout (docs/TT_MODEL_CONTRACT.md).

Pure data: the runner builds these from vLLM SamplingParams; TT models consume them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

# Neutral values: what an empty slot (or an unset parameter) carries.
NEUTRAL_TEMPERATURE = 0.0
NEUTRAL_TOP_K = 0
NEUTRAL_TOP_P = 1.0
NEUTRAL_PRESENCE = 0.0
NEUTRAL_FREQUENCY = 0.0
NEUTRAL_REPETITION = 1.0
NO_LOGPROBS = -1


@dataclass(frozen=True)
class DeviceSamplingRow:
    """One request's device sampling settings."""

    temperature: float = NEUTRAL_TEMPERATURE
    top_k: int = NEUTRAL_TOP_K
    top_p: float = NEUTRAL_TOP_P
    presence_penalty: float = NEUTRAL_PRESENCE
    frequency_penalty: float = NEUTRAL_FREQUENCY
    repetition_penalty: float = NEUTRAL_REPETITION
    seed: int = 0
    num_logprobs: int = NO_LOGPROBS

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != NEUTRAL_PRESENCE
            or self.frequency_penalty != NEUTRAL_FREQUENCY
            or self.repetition_penalty != NEUTRAL_REPETITION
        )


EMPTY_ROW = DeviceSamplingRow()


@dataclass
class TTSamplingParams:
    """Per-row tensors; row i is batch row i (prefill) or slot i (decode)."""

    temperature: torch.Tensor  # float32 [N], 0 = greedy
    top_k: torch.Tensor  # int32 [N], 0 = off
    top_p: torch.Tensor  # float32 [N], 1 = off
    presence_penalty: torch.Tensor  # float32 [N]
    frequency_penalty: torch.Tensor  # float32 [N]
    repetition_penalty: torch.Tensor  # float32 [N]
    seed: torch.Tensor  # int64 [N]
    num_logprobs: torch.Tensor  # int32 [N], -1 = none

    @classmethod
    def from_rows(cls, rows: list[DeviceSamplingRow]) -> TTSamplingParams:
        return cls(
            temperature=torch.tensor([r.temperature for r in rows], dtype=torch.float32),
            top_k=torch.tensor([r.top_k for r in rows], dtype=torch.int32),
            top_p=torch.tensor([r.top_p for r in rows], dtype=torch.float32),
            presence_penalty=torch.tensor([r.presence_penalty for r in rows], dtype=torch.float32),
            frequency_penalty=torch.tensor(
                [r.frequency_penalty for r in rows], dtype=torch.float32
            ),
            repetition_penalty=torch.tensor(
                [r.repetition_penalty for r in rows], dtype=torch.float32
            ),
            seed=torch.tensor([r.seed for r in rows], dtype=torch.int64),
            num_logprobs=torch.tensor([r.num_logprobs for r in rows], dtype=torch.int32),
        )

    @property
    def batch_size(self) -> int:
        return int(self.temperature.shape[0])

    @property
    def max_num_logprobs(self) -> int:
        return int(self.num_logprobs.max().item()) if self.batch_size else NO_LOGPROBS

    @property
    def any_penalties(self) -> bool:
        return bool(
            (self.presence_penalty != NEUTRAL_PRESENCE).any()
            or (self.frequency_penalty != NEUTRAL_FREQUENCY).any()
            or (self.repetition_penalty != NEUTRAL_REPETITION).any()
        )


_MASK64 = (1 << 64) - 1


def seeded_draw_seed(seed: int, position: int) -> int:
    """The generator seed of a seeded request's draw after the token at ``position``.

    The TT seeding convention (docs/TT_MODEL_CONTRACT.md): a random row draws vLLM's
    exponential race ``argmax(probs / q)`` with ``q`` from ``torch.Tensor.exponential_`` on a
    generator seeded with this value (two splitmix64 rounds of seed and position). The plugin's
    host sampler reseeds each seeded request's generator the same way every step, so a seeded
    request gets the same tokens whether its batch samples on the device or on the host, and
    regardless of batch composition, slot, reloads or preemption.
    """

    def splitmix(x: int) -> int:
        x = (x + 0x9E3779B97F4A7C15) & _MASK64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
        return x ^ (x >> 31)

    return splitmix(splitmix(seed & _MASK64) ^ (position & _MASK64))


class TTLogprobs(NamedTuple):
    """Device logprobs in vLLM's layout: sampled token in column 0, then the top K."""

    token_ids: torch.Tensor  # int64 [B, K+1]
    logprobs: torch.Tensor  # float32 [B, K+1]
    ranks: torch.Tensor  # int64 [B], 1-based rank of the sampled token
