"""The host path as the reference for device-sampled tokens (checks ``device_sampling`` and
``long_context``): teacher-forced host logprobs and vLLM's sampling semantics applied to them.

A device token is checked against vLLM's documented semantics (penalties, greedy, top-k, top-p
after temperature and top-k) computed from the raw logprobs vLLM's host sampler returns for the
same position. Only the 20 most likely tokens are known, so the test counts the tokens
*certainly* ranked above the device's token (a lower bound): it never fails a correct device,
and a token it calls outside the allowed set is outside it (up to ``RANK_TOLERANCE`` nats of
device/host numeric difference).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tt_conformance.checks._support import Body, Output, body, complete_all
from tt_conformance.ttmetrics import device_decode

__all__ = [
    "HOST_ONLY",
    "HOST_REASONS",
    "LOGPROB_TOLERANCE",
    "RANK_TOLERANCE",
    "REST",
    "TAIL_TOLERANCE",
    "TOP",
    "Step",
    "check_tokens",
    "device_outputs",
    "draw_distribution",
    "prompt_ids",
    "teacher_forced",
    "violation",
]

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.ttpath import TTPath

TOP = 20  # the host logprobs asked for (the server's maximum)
RANK_TOLERANCE = 0.1  # nats: device (decode) and host (prefill) logits may differ this much
LOGPROB_TOLERANCE = 0.05  # nats, for the device's sampled-token logprob
# Greedy, with two features the TT device sampler does not take (top-k logprobs, min_p): vLLM's
# host sampler serves every batch holding such a request. min_p does not touch raw logprobs.
HOST_ONLY: Body = {"temperature": 0.0, "min_p": 0.01}
HOST_REASONS = ("logprobs", "min_p")


@dataclass(frozen=True)
class Step:
    """The host's view of one generated position: raw logprobs of the 20 most likely tokens."""

    top: dict[int, float]

    @property
    def floor(self) -> float:
        """Every token not listed has a logprob at most this."""
        return min(self.top.values())


def prompt_ids(tt_raw_http: RawHttp, prompt: str) -> list[int]:
    """The ids the server serves for a text prompt (with its BOS, as a completion adds it)."""
    return tt_raw_http.tokenize(prompt, add_special_tokens=True)


def teacher_forced(
    client: AsyncOpenAI, model: str, sequences: Sequence[tuple[Sequence[int], Sequence[int]]]
) -> list[list[Step]]:
    """For each ``(prompt_ids, tokens)``, the host path's next-token logprobs at every generated
    position of ``tokens``. All positions of all sequences go out at once (one concurrent batch:
    the server batches the prefills)."""
    requests = [
        body(
            list(prompt) + list(tokens[:j]),
            1,
            **HOST_ONLY,
            logprobs=TOP,
            return_tokens_as_token_ids=True,
        )
        for prompt, tokens in sequences
        for j in range(len(tokens))
    ]
    steps = []
    for out in complete_all(client, model, requests):
        assert out.logprobs is not None and out.logprobs.top_logprobs, "no host logprobs"
        first = out.logprobs.top_logprobs[0]
        steps.append(Step({int(k.split(":", 1)[1]): float(v) for k, v in first.items()}))
    per_sequence, at = [], 0
    for _, tokens in sequences:
        per_sequence.append(steps[at : at + len(tokens)])
        at += len(tokens)
    return per_sequence


def penalised(params: Body) -> bool:
    return bool(params.get("frequency_penalty") or params.get("presence_penalty"))


def adjusted(step: Step, params: Body, counts: Counter[int]) -> dict[int, float]:
    """vLLM's frequency / presence penalties over the tokens generated so far (additive on the
    logits, so on the logprobs too)."""
    freq = float(params.get("frequency_penalty", 0.0))
    pres = float(params.get("presence_penalty", 0.0))
    return {t: lp - freq * counts[t] - pres * (counts[t] > 0) for t, lp in step.top.items()}


def violation(step: Step, params: Body, counts: Counter[int], token: int) -> str | None:
    """Why ``token`` cannot be vLLM's draw at this step under ``params``, or None when it may be.
    Sound: only tokens certainly ranked above ``token`` are counted."""
    scores = adjusted(step, params, counts)
    # A token outside the host's top 20 scores at most the floor (penalties only lower scores).
    mine = scores.get(token, step.floor)
    above = sorted(
        (s for t, s in scores.items() if t != token and s > mine + RANK_TOLERANCE), reverse=True
    )
    temperature = float(params.get("temperature", 1.0))
    top_k = int(params.get("top_k", 0) or 0)
    top_p = float(params.get("top_p", 1.0))
    if temperature == 0.0:
        return f"greedy, but {len(above)} token(s) score higher" if above else None
    if top_k > 0 and len(above) >= top_k:
        return f"top_k={top_k}, but {len(above)} token(s) certainly rank above it"
    if top_p < 1.0:
        # The mass of the tokens certainly above it, among what survives top-k, at temperature.
        if top_k > 0:
            kept = sorted(scores.values(), reverse=True)[:top_k]
            if len(kept) < top_k:
                return None  # the top-k set is not fully known
            norm = sum(math.exp(s / temperature) for s in kept)
            mass = sum(math.exp(s / temperature) for s in above) / norm
        elif temperature == 1.0 and not penalised(params):
            mass = sum(math.exp(s) for s in above)  # raw logprobs are the probabilities
        else:
            return None  # the normaliser needs the whole distribution
        if mass >= top_p:
            return f"top_p={top_p}, but the tokens certainly above it hold {mass:.3f}"
    return None


TAIL_TOLERANCE = 1e-4  # the most probability the unlisted tokens may hold for an exact answer
REST = -1  # stands for every token outside the host's top 20 in a draw distribution


def draw_distribution(step: Step, params: Body, counts: Counter[int]) -> dict[int, float] | None:
    """The probabilities vLLM's sampler draws this step's token with under ``params`` (after
    penalties, temperature, then top-k), ``REST`` standing for the unlisted tokens; or None when
    the 20 known logprobs do not determine them: greedy, top-p, a top-k boundary within
    ``RANK_TOLERANCE``, or (without a top-k below 20) a temperature of 1 or more, or unlisted
    tokens that may hold more than ``TAIL_TOLERANCE``."""
    temperature = float(params.get("temperature", 1.0))
    top_k = int(params.get("top_k", 0) or 0)
    if temperature == 0.0 or float(params.get("top_p", 1.0)) < 1.0:
        return None
    ranked = sorted(adjusted(step, params, counts).items(), key=lambda kv: -kv[1])
    best = ranked[0][1]
    tail = 0.0
    if 0 < top_k < len(ranked):
        kth, runner_up = ranked[top_k - 1][1], ranked[top_k][1]
        # Unlisted tokens score at most the floor: the k kept must clear it and the runner-up.
        if kth - max(runner_up, step.floor) < RANK_TOLERANCE:
            return None
        ranked = ranked[:top_k]
    elif temperature < 1.0:
        # The unlisted tokens' weight: sum of p^(1/t) over them <= their mass x floor^(1/t - 1)
        # (penalties only lower it, top-k only removes some).
        unlisted = max(0.0, 1.0 - sum(math.exp(lp) for lp in step.top.values()))
        tail = unlisted * math.exp(step.floor * (1.0 / temperature - 1.0) - best / temperature)
    else:
        return None
    weights = {t: math.exp((s - best) / temperature) for t, s in ranked}
    norm = sum(weights.values()) + tail
    if tail / norm > TAIL_TOLERANCE:
        return None
    probs = {t: w / norm for t, w in weights.items()}
    if tail:
        probs[REST] = tail / norm
    return probs


def check_tokens(
    label: str, params: Body, tokens: Sequence[int], steps: Sequence[Step]
) -> list[str]:
    """A line per token of ``tokens`` that vLLM's sampling under ``params`` would not draw."""
    problems = []
    counts: Counter[int] = Counter()
    for pos, (token, step) in enumerate(zip(tokens, steps, strict=True)):
        why = violation(step, params, counts, token)
        if why:
            best = sorted(step.top.items(), key=lambda kv: -kv[1])[:6]
            problems.append(f"{label}, token {pos} = {token}: {why}; host top: {best}")
        counts[token] += 1
    return problems


def device_outputs(
    client: AsyncOpenAI, model: str, tt_path: TTPath, requests: list[Body]
) -> list[Output]:
    """Send ``requests`` at once; the counters must show device-sampled decode steps."""
    tt_path.start()
    outputs = complete_all(client, model, requests)
    tt_path.conclude(device_decode())
    return outputs
