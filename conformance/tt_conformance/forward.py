"""The forward-pass reference: served top logprobs against transformers' forward on the same
tokens (check ``forward_reference``, ``checks/test_forward_reference.py``).

The host-path references (``checks/reference.py``) teacher-force tokens through vLLM's host
sampler, which reads the *device's* logits: a fault in the forward pass itself (paged-KV
addressing, masks across batched rows, a reused prefix block, a chunk boundary) moves that
reference with it. This module compares with an independent forward instead, in the spirit of
vLLM's own model tests (``tests/models/utils.py``: ``HfRunner`` runs transformers on the same
prompts, ``check_logprobs_close`` accepts two greedy outputs when, wherever they differ, each
side's token is among the other's top logprobs; read at vllm-project/vllm commit
``002b4cf80b730f384dbc7d5f85db8a10b14af56a``). Here the reference is teacher-forced on the served
sequence, so every generated position is compared, not only the prefix before a divergence, and
on float32-vs-float32 runs the logprob values are compared too.

Data and decisions only; torch and transformers are imported by ``load_reference`` alone, so the
hardware environment (no torch) imports this module and the check skips with a stated reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "EMULATED_TOLERANCE",
    "HARDWARE_TOLERANCE",
    "TOP_K",
    "PositionVerdict",
    "ReferenceForward",
    "ReferenceRow",
    "ServedStep",
    "compare_position",
    "load_reference",
    "served_steps",
    "vocab_problems",
]

TOP_K = 5  # the served top logprobs asked for at every generated position
# float32 on both sides (the emulated device computes and stores KV in float32, transformers runs
# float32 on the CPU): only summation order differs (paged attention over blocks against one
# matmul, the host's log_softmax against torch's). The unmutated bundled model differs by at most
# ~2e-5 nats; 0.01 leaves a 500x margin and is still far below what a KV, mask or position fault
# moves (tenths of a nat to several nats on the mutants).
EMULATED_TOLERANCE = 0.01
# A TT device computes in bfloat16 / block-float with its own reductions; vLLM's model tests
# compare no values across such numerics, only token membership. 0.5 nats still refuses a
# distribution that moved wholesale while allowing low-precision noise.
HARDWARE_TOLERANCE = 0.5


@dataclass(frozen=True)
class ServedStep:
    """One generated position as the server answered it."""

    token: int
    top: dict[int, float]  # the served top logprobs, token id -> logprob


@dataclass(frozen=True)
class ReferenceRow:
    """transformers' log-softmax at one position: its top-k, and its logprob of every token the
    server listed (or sampled) there."""

    top: dict[int, float]
    of_served: dict[int, float]

    @property
    def best(self) -> float:
        return max(self.top.values())


@dataclass(frozen=True)
class PositionVerdict:
    """What the comparison found at one position; ``problems`` empty means it agrees."""

    problems: tuple[str, ...]
    max_abs_diff: float  # the largest |served - reference| over the served top tokens


class ReferenceForward(Protocol):
    """Log-probabilities of the reference forward over a token sequence."""

    vocab_size: int

    def rows(
        self, ids: Sequence[int], first: int, wanted: Sequence[Sequence[int]], k: int
    ) -> list[ReferenceRow]:
        """Rows for positions ``first .. len(ids) - 1`` (the distribution after each of those
        tokens); ``wanted[i]`` are the token ids whose logprob row ``i`` must carry."""
        ...


def _token_id(key: str) -> int:
    prefix, sep, number = key.partition(":")
    if prefix != "token_id" or not sep:
        raise AssertionError(
            f"top logprob key {key!r} is not 'token_id:N' (the request set "
            "return_tokens_as_token_ids=true)"
        )
    return int(number)


def served_steps(token_ids: Sequence[int], logprobs: Any, k: int) -> list[ServedStep]:
    """The served positions of one choice, refusing partial or malformed logprobs: every
    generated token needs its top-``k`` (vLLM lists k, or k + 1 when the sampled token is not
    among them), finite values, and the sampled token's own logprob."""
    if logprobs is None:
        raise AssertionError("the server returned no logprobs although the request asked for them")
    tops = getattr(logprobs, "top_logprobs", None)
    own = getattr(logprobs, "token_logprobs", None)
    if tops is None or own is None:
        raise AssertionError("the server's logprobs lack top_logprobs or token_logprobs")
    if not (len(tops) == len(own) == len(token_ids)):
        raise AssertionError(
            f"{len(token_ids)} generated tokens but {len(tops)} top_logprobs entries and "
            f"{len(own)} token_logprobs: partial logprobs are refused"
        )
    steps = []
    for pos, (token, top, value) in enumerate(zip(token_ids, tops, own, strict=True)):
        if not top:
            raise AssertionError(f"position {pos}: no top logprobs")
        parsed = {_token_id(key): float(lp) for key, lp in top.items()}
        if not (k <= len(parsed) <= k + 1):
            raise AssertionError(
                f"position {pos}: {len(parsed)} top logprobs, asked for {k} (k or k + 1 expected)"
            )
        if value is None or not all(math.isfinite(v) for v in (*parsed.values(), value)):
            raise AssertionError(f"position {pos}: a logprob is missing or not finite")
        if token not in parsed or abs(parsed[token] - float(value)) > 1e-6:
            raise AssertionError(
                f"position {pos}: the sampled token {token} is not listed with its own logprob "
                f"{value} among the top logprobs {parsed}"
            )
        steps.append(ServedStep(int(token), parsed))
    return steps


def compare_position(
    served: ServedStep, reference: ReferenceRow, tolerance: float, greedy: bool = True
) -> PositionVerdict:
    """check_logprobs_close's membership rule, both ways, plus values within ``tolerance``:

    - the served token is among the reference's top-k (greedy: within ``tolerance`` of the
      reference's best, a tie at most);
    - the reference's best token is among the served top logprobs, unless the served token ties
      with it within ``tolerance``;
    - every served top logprob is within ``tolerance`` of the reference's.
    """
    problems = []
    ref_best = max(reference.top, key=lambda t: reference.top[t])
    mine = reference.of_served.get(served.token)
    if mine is None:
        raise ValueError(f"the reference row lacks the served token {served.token}")
    if greedy and mine < reference.best - tolerance:
        problems.append(
            f"greedy token {served.token} has reference logprob {mine:.4f}, "
            f"{reference.best - mine:.4f} below the reference's best {ref_best} "
            f"({reference.best:.4f})"
        )
    elif served.token not in reference.top and mine < min(reference.top.values()) - tolerance:
        problems.append(f"served token {served.token} is not in the reference's top-k")
    if ref_best not in served.top and mine < reference.best - tolerance:
        problems.append(f"the reference's best token {ref_best} is not in the served top logprobs")
    # The served list must not skip a token the reference ranks above the served k-th: a token
    # masked or moved on the device leaves the served top-k.
    kth = sorted(served.top.values(), reverse=True)[min(len(reference.top), len(served.top)) - 1]
    for token, value in sorted(reference.top.items(), key=lambda kv: -kv[1]):
        if token not in served.top and value > kth + tolerance:
            problems.append(
                f"reference token {token} ({value:.4f}) is missing from the served top logprobs, "
                f"whose k-th is {kth:.4f}"
            )
    worst = 0.0
    for token, value in served.top.items():
        ref = reference.of_served.get(token)
        if ref is None:
            raise ValueError(f"the reference row lacks served top token {token}")
        worst = max(worst, abs(value - ref))
    if worst > tolerance:
        pairs = ", ".join(
            f"{t}: {v:.4f} vs {reference.of_served[t]:.4f}"
            for t, v in sorted(served.top.items(), key=lambda kv: -kv[1])
        )
        problems.append(
            f"served top logprobs differ from the reference by up to {worst:.4f} nats "
            f"(tolerance {tolerance}): {pairs}"
        )
    return PositionVerdict(tuple(problems), worst)


class _TransformersForward:
    """transformers' causal LM in float32 on the CPU (``HfRunner``'s role in vLLM's tests)."""

    def __init__(self, model: Any, torch: Any, vocab_size: int) -> None:
        self._model, self._torch, self.vocab_size = model, torch, vocab_size

    def rows(
        self, ids: Sequence[int], first: int, wanted: Sequence[Sequence[int]], k: int
    ) -> list[ReferenceRow]:
        torch = self._torch
        with torch.no_grad():
            tensor = torch.tensor([list(ids)], dtype=torch.long)
            logits = self._model(input_ids=tensor).logits[0, first:].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            top = logprobs.topk(k, dim=-1)
        out = []
        for i, tokens in enumerate(wanted):
            row = logprobs[i]
            out.append(
                ReferenceRow(
                    top=dict(zip(top.indices[i].tolist(), top.values[i].tolist(), strict=True)),
                    of_served={int(t): float(row[int(t)]) for t in tokens},
                )
            )
        return out


def load_reference(checkpoint: Path) -> ReferenceForward:
    """transformers' forward on ``checkpoint``; raises ImportError without torch/transformers."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(checkpoint)
    # A vision-language checkpoint is no causal LM to transformers; its language model answers
    # text-only prompts (as tools/measure_accuracy_reference.py loads it).
    vision = getattr(config, "vision_config", None) is not None
    auto = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    model = auto.from_pretrained(checkpoint, dtype=torch.float32).eval()
    text = getattr(config, "text_config", None) or config
    return _TransformersForward(model, torch, int(text.vocab_size))


def vocab_problems(steps: Mapping[str, Sequence[ServedStep]], vocab_size: int) -> list[str]:
    """Served token ids outside the reference's vocabulary (another checkpoint, or padding
    columns served as tokens)."""
    bad = []
    for label, seq in steps.items():
        for pos, step in enumerate(seq):
            outside = sorted(t for t in (step.token, *step.top) if not 0 <= t < vocab_size)
            if outside:
                bad.append(f"{label} position {pos}: token ids {outside} >= vocab {vocab_size}")
    return bad
