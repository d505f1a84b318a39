"""Device sampling parameters as the plugin sends them, and the seeding convention
(docs/TT_MODEL_CONTRACT.md, "Sampling on the device versus the host").

Pure data. ``DeviceSamplingRow`` is one request's settings in vLLM's terms; ``TTSamplingParams``
is what ``prefill_forward``/``decode_forward`` receive as ``sampling_params``: the fields of
tt-metal's ``models.common.sampling.SamplingParams``, each a per-row Python list, encoded as
tt-metal expects (unseeded -> None, top_k off -> vocab size, ``enable_log_probs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

# Neutral values: what an unset parameter carries.
NEUTRAL_TEMPERATURE = 0.0
NEUTRAL_TOP_P = 1.0
NEUTRAL_PRESENCE = 0.0
NEUTRAL_FREQUENCY = 0.0
NEUTRAL_REPETITION = 1.0
NO_LOGPROBS = -1
# vLLM's "top_k off" (0 or -1); encoded as the vocab size for the device.
TOP_K_OFF = 0
# What a padding row carries: greedy, top_k 1, top_p 1.0, no penalties.
PADDING_TOP_K = 1


@dataclass(frozen=True)
class DeviceSamplingRow:
    """One row's device sampling settings, in vLLM's terms (top_k <= 0 = off)."""

    temperature: float = NEUTRAL_TEMPERATURE
    top_k: int = TOP_K_OFF
    top_p: float = NEUTRAL_TOP_P
    presence_penalty: float = NEUTRAL_PRESENCE
    frequency_penalty: float = NEUTRAL_FREQUENCY
    repetition_penalty: float = NEUTRAL_REPETITION
    seed: int | None = None
    num_logprobs: int = NO_LOGPROBS

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != NEUTRAL_PRESENCE
            or self.frequency_penalty != NEUTRAL_FREQUENCY
            or self.repetition_penalty != NEUTRAL_REPETITION
        )


# A padding row (empty decode slot): neutral sampling values.
EMPTY_ROW = DeviceSamplingRow(top_k=PADDING_TOP_K)


# One row as ``TTSamplingParams`` carries it, in its field order (``encode_row``).
EncodedRow = tuple[float, int, float, float, float, float, int | None, bool, int]


def encode_row(row: DeviceSamplingRow, vocab_size: int) -> EncodedRow:
    """One row encoded as tt-metal takes it: top_k <= 0 or >= vocab -> vocab size."""
    top_k = vocab_size if row.top_k <= 0 or row.top_k >= vocab_size else row.top_k
    return (
        float(row.temperature),
        top_k,
        float(row.top_p),
        float(row.presence_penalty),
        float(row.frequency_penalty),
        float(row.repetition_penalty),
        row.seed,
        row.num_logprobs >= 0,
        int(row.num_logprobs),
    )


def encoded_has_penalties(row: EncodedRow) -> bool:
    """An encoded row with a presence, frequency or repetition penalty (fields 3-5)."""
    return row[3] != NEUTRAL_PRESENCE or row[4] != NEUTRAL_FREQUENCY or row[5] != NEUTRAL_REPETITION


@dataclass(frozen=True)
class TTSamplingParams:
    """The ``sampling_params`` object of a TT model call: tt-metal's SamplingParams fields, one
    list entry per row (prefill: batch row; decode: slot)."""

    temperature: list[float]
    top_k: list[int]
    top_p: list[float]
    presence_penalty: list[float]
    frequency_penalty: list[float]
    repetition_penalty: list[float]
    seed: list[int | None]
    enable_log_probs: list[bool]
    num_logprobs: list[int]

    @classmethod
    def encode(cls, rows: Sequence[DeviceSamplingRow], vocab_size: int) -> TTSamplingParams:
        """Encode rows as tt-metal takes them (``encode_row``)."""
        if vocab_size < 1:
            raise ValueError(f"vocab_size={vocab_size} must be positive")
        encoded = [encode_row(r, vocab_size) for r in rows]
        return cls.from_columns([list(column) for column in zip(*encoded, strict=True)])

    @classmethod
    def from_columns(cls, columns: Sequence[list[Any]]) -> TTSamplingParams:
        """From one list per field, in field order (encoded rows transposed); no rows -> empty
        lists."""
        names = [f.name for f in fields(cls)]
        if not columns:
            columns = [[] for _ in names]
        if len(columns) != len(names):
            raise ValueError(f"{len(columns)} columns for the {len(names)} sampling fields")
        return cls(**dict(zip(names, columns, strict=True)))

    @property
    def batch_size(self) -> int:
        return len(self.temperature)

    @property
    def any_penalties(self) -> bool:
        return (
            any(v != NEUTRAL_PRESENCE for v in self.presence_penalty)
            or any(v != NEUTRAL_FREQUENCY for v in self.frequency_penalty)
            or any(v != NEUTRAL_REPETITION for v in self.repetition_penalty)
        )

    @property
    def any_logprobs(self) -> bool:
        return any(self.enable_log_probs)

    def lengths(self) -> dict[str, int]:
        return {f.name: len(getattr(self, f.name)) for f in fields(self)}


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
