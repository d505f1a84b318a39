"""Device sampling emulation with vLLM's sampler semantics (docs/TT_MODEL_CONTRACT.md).

Order, as in vLLM's v1 sampler: raw logprobs from the raw logits; penalties on the raw logits
(repetition over prompt and output tokens: positive logits divided, negative multiplied;
frequency and presence over output tokens, OpenAI style); greedy rows (temperature < 1e-5) take
the argmax of the penalised logits; the others divide by temperature, apply top-k (keep values >=
the k-th largest) then top-p (drop the low tail whose cumulative probability is <= 1 - p, always
keeping the top token), and draw with exponential noise: ``argmax(probs / q)``, q ~ Exp(1)
(the Gumbel-max trick vLLM uses, so the draw follows ``probs`` exactly).

Randomness is a pure function of (seed, position of the input token): each random row gets a
fresh generator seeded from both (``seeded_draw_seed``, the TT seeding convention) and draws its
noise with ``exponential_`` as vLLM's sampler does, so a draw does not depend on batch
composition, slot, reloads or preemption, and equals the plugin's host-route draw.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from vllm_tt_plugin.adapter.model_adapter import FLAT_LOGPROB_DEVICES
from vllm_tt_plugin.contract.sampling_params import TTSamplingParams, seeded_draw_seed

SAMPLING_EPS = 1e-5  # vLLM's threshold below which a temperature means greedy

_DTYPES: dict[str, torch.dtype] = {
    "temperature": torch.float32,
    "top_k": torch.int32,
    "top_p": torch.float32,
    "presence_penalty": torch.float32,
    "frequency_penalty": torch.float32,
    "repetition_penalty": torch.float32,
    "seed": torch.int64,
    "num_logprobs": torch.int32,
}


class SamplingParamsError(ValueError):
    """Device sampling parameters the reference model cannot or must not take."""


@dataclass(frozen=True)
class SamplerLimits:
    """What the model declared in ``model_capabilities``."""

    max_top_k: int | None
    penalties: bool


@dataclass(frozen=True)
class SamplingTensors:
    """The device's copy of ``sampling_params``: per-row tensors (top_k 0 = off, seeds drawn for
    unseeded rows, num_logprobs -1 where ``enable_log_probs`` is False)."""

    temperature: torch.Tensor  # float32 [N], 0 = greedy
    top_k: torch.Tensor  # int32 [N], 0 = off
    top_p: torch.Tensor  # float32 [N], 1 = off
    presence_penalty: torch.Tensor  # float32 [N]
    frequency_penalty: torch.Tensor  # float32 [N]
    repetition_penalty: torch.Tensor  # float32 [N]
    seed: torch.Tensor  # int64 [N]
    num_logprobs: torch.Tensor  # int32 [N], -1 = none

    @property
    def batch_size(self) -> int:
        return int(self.temperature.shape[0])

    @property
    def max_num_logprobs(self) -> int:
        return int(self.num_logprobs.max().item()) if self.batch_size else -1

    @property
    def any_penalties(self) -> bool:
        return bool(
            (self.presence_penalty != 0.0).any()
            or (self.frequency_penalty != 0.0).any()
            or (self.repetition_penalty != 1.0).any()
        )


_SEED_BOUND = 2**31 - 1


def tensors_from_params(params: Any, rows: int, vocab: int, what: str) -> SamplingTensors:
    """Check a ``sampling_params`` argument field by field, as tt-metal's SamplingParams is
    consumed (per-row lists), and copy it into device tensors."""
    if not isinstance(params, TTSamplingParams):
        raise SamplingParamsError(
            f"{what}: sampling_params must be a TTSamplingParams, got {type(params).__name__}"
        )
    for name, length in params.lengths().items():
        value = getattr(params, name)
        if not isinstance(value, list):
            raise SamplingParamsError(
                f"{what}: sampling_params.{name} must be a per-row list, got {type(value).__name__}"
            )
        if length != rows:
            raise SamplingParamsError(
                f"{what}: sampling_params.{name} has {length} entries, expected {rows}"
            )
    for k in params.top_k:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= vocab:
            raise SamplingParamsError(
                f"{what}: sampling_params.top_k={k!r}: tt-metal takes 1..{vocab} (the vocab "
                "size means off)"
            )
    for seed in params.seed:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise SamplingParamsError(f"{what}: sampling_params.seed={seed!r} must be int or None")
    for on, k in zip(params.enable_log_probs, params.num_logprobs, strict=True):
        if bool(on) != (k >= 0):
            raise SamplingParamsError(
                f"{what}: sampling_params.enable_log_probs={on} disagrees with num_logprobs={k}"
            )
    seeds = [
        int(torch.randint(0, _SEED_BOUND, (1,)).item()) if s is None else s for s in params.seed
    ]
    return SamplingTensors(
        temperature=torch.tensor(params.temperature, dtype=torch.float32),
        top_k=torch.tensor([0 if k >= vocab else k for k in params.top_k], dtype=torch.int32),
        top_p=torch.tensor(params.top_p, dtype=torch.float32),
        presence_penalty=torch.tensor(params.presence_penalty, dtype=torch.float32),
        frequency_penalty=torch.tensor(params.frequency_penalty, dtype=torch.float32),
        repetition_penalty=torch.tensor(params.repetition_penalty, dtype=torch.float32),
        seed=torch.tensor(seeds, dtype=torch.int64),
        num_logprobs=torch.tensor(params.num_logprobs, dtype=torch.int32),
    )


def copy_params(params: SamplingTensors) -> SamplingTensors:
    return SamplingTensors(**{f.name: getattr(params, f.name).clone() for f in fields(params)})


def select_params(params: SamplingTensors, index: torch.Tensor) -> SamplingTensors:
    return SamplingTensors(**{f.name: getattr(params, f.name)[index] for f in fields(params)})


def validate_params(params: SamplingTensors, rows: int, limits: SamplerLimits, what: str) -> None:
    """Host-side check of the decoded ``sampling_params`` before they reach the device."""
    for name, dtype in _DTYPES.items():
        tensor = getattr(params, name)
        if tensor.dtype != dtype or tuple(tensor.shape) != (rows,):
            raise SamplingParamsError(f"{what}: sampling_params.{name} must be {dtype} [{rows}]")
    if bool((params.temperature < 0).any()) or not bool(params.temperature.isfinite().all()):
        raise SamplingParamsError(f"{what}: sampling_params.temperature must be finite and >= 0")
    if bool((params.top_k < 0).any()):
        raise SamplingParamsError(f"{what}: sampling_params.top_k must be >= 0 (0 = off)")
    if bool(((params.top_p <= 0) | (params.top_p > 1)).any()):
        raise SamplingParamsError(f"{what}: sampling_params.top_p must be in (0, 1]")
    if bool((params.repetition_penalty <= 0).any()):
        raise SamplingParamsError(f"{what}: sampling_params.repetition_penalty must be > 0")
    if limits.max_top_k is not None and int(params.top_k.max()) > limits.max_top_k:
        raise SamplingParamsError(
            f"{what}: sampling_params.top_k={int(params.top_k.max())} exceeds this model's "
            f"max_device_top_k={limits.max_top_k}"
        )
    if not limits.penalties and params.any_penalties:
        raise SamplingParamsError(
            f"{what}: sampling_params carry penalties but this model declares "
            "supports_device_penalties=False"
        )


# Generated tokens a PenaltyHistory holds unfolded at most (see PenaltyHistory).
MAX_PENDING_STEPS = 256


@dataclass(frozen=True)
class PenaltyHistory:
    """Per-row penalty state: which tokens the prompt holds, how often each was generated.

    The tokens generated since the counts were last built stay ``pending`` (one small
    (rows, tokens) pair per decode step) and are folded in when the counts are first read, so a
    decode step that samples without penalties copies no [R, V] tensor. The value is immutable:
    folding only memoises ``output_counts``."""

    prompt_mask: torch.Tensor  # bool [R, V]
    counts: torch.Tensor  # int32 [R, V], without the pending tokens
    pending: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()

    @classmethod
    def empty(cls, rows: int, vocab: int) -> PenaltyHistory:
        return cls(
            torch.zeros((rows, vocab), dtype=torch.bool),
            torch.zeros((rows, vocab), dtype=torch.int32),
        )

    @property
    def output_counts(self) -> torch.Tensor:  # int32 [R, V]
        if self.pending:
            rows = torch.cat([r for r, _ in self.pending])
            tokens = torch.cat([t for _, t in self.pending])
            ones = torch.ones(rows.shape, dtype=self.counts.dtype)
            folded = self.counts.index_put((rows, tokens), ones, accumulate=True)
            object.__setattr__(self, "counts", folded)
            object.__setattr__(self, "pending", ())
        return self.counts

    @classmethod
    def from_padded(
        cls,
        prompt_tokens: torch.Tensor | None,
        output_tokens: torch.Tensor | None,
        rows: int,
        vocab: int,
    ) -> PenaltyHistory:
        """Build from int64 [R, L] token tensors padded with -1 (either may be absent)."""
        history = cls.empty(rows, vocab)
        if prompt_tokens is not None and prompt_tokens.numel():
            valid = prompt_tokens >= 0
            row_idx = torch.arange(rows)[:, None].expand_as(prompt_tokens)
            history.prompt_mask[row_idx[valid], prompt_tokens[valid]] = True
        if output_tokens is not None and output_tokens.numel():
            valid = output_tokens >= 0
            ids = torch.where(valid, output_tokens, 0)
            history.counts.scatter_add_(1, ids, valid.to(torch.int32))
        return history

    def select(self, index: torch.Tensor) -> PenaltyHistory:
        return PenaltyHistory(self.prompt_mask[index], self.output_counts[index])

    def with_outputs(self, rows: torch.Tensor, tokens: torch.Tensor) -> PenaltyHistory:
        """A copy where each of ``rows`` (distinct) also generated its token in ``tokens``."""
        if len(self.pending) >= MAX_PENDING_STEPS:
            return PenaltyHistory(self.prompt_mask, self.output_counts, ((rows, tokens),))
        return PenaltyHistory(self.prompt_mask, self.counts, (*self.pending, (rows, tokens)))


def check_token_ids(tokens: torch.Tensor | None, vocab: int, name: str, what: str) -> None:
    if tokens is None or tokens.numel() == 0:
        return
    if bool((tokens >= vocab).any()) or bool((tokens < -1).any()):
        raise SamplingParamsError(
            f"{what}: {name} holds ids outside [0, {vocab}) other than the -1 padding"
        )


def apply_penalties(
    logits: torch.Tensor, params: SamplingTensors, history: PenaltyHistory
) -> torch.Tensor:
    rep = params.repetition_penalty[:, None]
    seen = history.prompt_mask | (history.output_counts > 0)
    penalty = torch.where(seen, rep, torch.ones_like(rep))
    logits = torch.where(logits > 0, logits / penalty, logits * penalty)
    counts = history.output_counts.to(logits.dtype)
    logits = logits - params.frequency_penalty[:, None] * counts
    return logits - params.presence_penalty[:, None] * (counts > 0).to(logits.dtype)


def _apply_top_k(logits: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    vocab = logits.shape[1]
    k = top_k.to(torch.int64)
    active = (k > 0) & (k < vocab)
    if not bool(active.any()):
        return logits
    k = torch.where(active, k, 1)
    kth = logits.topk(int(k.max()), dim=1).values.gather(1, (k - 1)[:, None])
    drop = (logits < kth) & active[:, None]
    return logits.masked_fill(drop, float("-inf"))


def _apply_top_p(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    if not bool((top_p < 1.0).any()):
        return logits
    ascending, order = logits.sort(dim=1)
    cumulative = ascending.softmax(dim=1).cumsum(dim=1)
    drop = cumulative <= (1.0 - top_p)[:, None]
    drop[:, -1] = False  # the most likely token always survives
    drop &= (top_p < 1.0)[:, None]
    ascending = ascending.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, ascending)


def sample(
    raw_logits: torch.Tensor,
    params: SamplingTensors,
    history: PenaltyHistory | None,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Sample one token per row. positions: int64 [R], the position of each row's input token."""
    logits = raw_logits
    if history is not None and params.any_penalties:
        logits = apply_penalties(logits, params, history)
    tokens = logits.argmax(dim=1)
    random_rows = (params.temperature >= SAMPLING_EPS).nonzero().flatten()
    if random_rows.numel() == 0:
        return tokens
    sub = logits[random_rows] / params.temperature[random_rows, None]
    sub = _apply_top_k(sub, params.top_k[random_rows])
    sub = _apply_top_p(sub, params.top_p[random_rows])
    probs = sub.softmax(dim=1)
    vocab = probs.shape[1]
    noise = torch.stack(
        [
            exponential_noise(int(params.seed[row]), int(positions[row]), vocab)
            for row in random_rows.tolist()
        ]
    )
    tokens[random_rows] = (probs / noise).argmax(dim=1)
    return tokens


def exponential_noise(seed: int, position: int, vocab: int) -> torch.Tensor:
    """Exp(1) noise [vocab] for the draw after ``position``, exactly as vLLM's sampler draws it
    for a seeded row (``exponential_`` on the row's generator), with the generator seeded by the
    TT seeding convention: device and host draws of a seeded request then agree."""
    generator = torch.Generator().manual_seed(seeded_draw_seed(seed, position))
    return torch.empty(vocab, dtype=torch.float32).exponential_(generator=generator)


# Width of the GPT-OSS-style top-k device logprobs.
TOP_K_LOGPROBS = 32


def flat_logprobs(raw_logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The sampled token's logprob per row, float32 [B] (tt-metal's default device form)."""
    return raw_logits.log_softmax(dim=1).gather(1, tokens[:, None])[:, 0].to(torch.float32)


def top_k_logprobs(raw_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT-OSS form: (values [B, 32] float32, indices [B, 32] int32), sorted descending."""
    logprobs = raw_logits.log_softmax(dim=1)
    top = logprobs.topk(min(TOP_K_LOGPROBS, logprobs.shape[1]), dim=1)
    return top.values.to(torch.float32), top.indices.to(torch.int32)


def placeholder_logprobs(rows: int) -> torch.Tensor:
    """What a device returns when it computed no logprobs (NaN: never a real value)."""
    return torch.full((rows,), float("nan"), dtype=torch.float32)


def device_sample(
    raw_logits: torch.Tensor,
    params: SamplingTensors,
    history: PenaltyHistory | None,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Tokens int64 [B] of one device sampling step."""
    return sample(raw_logits, params, history, positions)


class DeviceSampler:
    """The reference models' device sampling step: the sampler and the logprobs it returns (one
    seam each, so a class can replace them). ``devices_per_lane`` is the model's."""

    devices_per_lane: int

    def sample_tokens(
        self,
        logits: torch.Tensor,
        params: SamplingTensors,
        history: PenaltyHistory | None,
        positions: torch.Tensor,
    ) -> torch.Tensor:
        """The device sampler of prefill and decode."""
        return device_sample(logits, params, history, positions)

    def device_logprobs(self, logits: torch.Tensor, tokens: torch.Tensor) -> Any:
        """tt-metal's default device logprobs: the sampled token's, flat [B], computed only on
        meshes with 8 or 32 devices per lane; elsewhere a placeholder (GPT-OSS overrides)."""
        if self.devices_per_lane in FLAT_LOGPROB_DEVICES:
            return flat_logprobs(logits, tokens)
        return placeholder_logprobs(int(tokens.shape[0]))
