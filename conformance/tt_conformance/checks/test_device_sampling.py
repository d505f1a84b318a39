"""Device sampling against vLLM's sampling semantics, with the host path as the reference.

The device samples (and computes the sampled token's logprob) itself; a check that compares
device outputs only with other device outputs cannot see a fault that is consistent (a nucleus
never applied, a top-k off by one, a logprob of the wrong token). Here every device-sampled token
is checked against an independent reference: vLLM's host path on the same server.

1. A batch of device-eligible requests (greedy; top-k; top-p; top-k + top-p at another
   temperature; frequency and presence penalties) is generated on the device (the plugin's path
   counters must show device-sampled decode steps).
2. Each generated position is teacher-forced through the host path: the prompt plus the tokens
   generated before it, ``max_tokens=1``, ``logprobs=20``. Top-k logprobs are beyond the TT
   device sampler, so vLLM's host sampler serves these requests (the counters must show the
   fallback), and its raw logprobs are those of the model's next-token distribution.
3. Every device token must lie in the set vLLM's documented semantics allow, computed from those
   logprobs: penalties subtract ``frequency * count + presence * [count > 0]`` over the tokens
   the request generated so far; greedy takes the most likely token; top-k keeps the k most
   likely; top-p keeps the smallest set whose probability reaches p (after temperature and
   top-k). Only 20 logprobs are known, so the test counts the tokens *certainly* ranked above the
   device's token (a lower bound): it never fails a correct device, and a token it calls outside
   the set is outside it (up to ``RANK_TOLERANCE`` nats of device/host numeric difference).
4. The device's own logprob of each sampled token (``logprobs=0``: the flat sampled-token logprob
   where the device computes it) must equal the host's teacher-forced value within
   ``LOGPROB_TOLERANCE`` nats.
5. Greedy decoding with a repetition penalty (which scales logits by their sign, so logprobs
   cannot reconstruct it) is compared token for token with the same request on the host path
   (``logprobs=1`` routes it there): greedy is deterministic on both.

No statistics: every verdict is exact up to the stated numeric tolerances (no false alarms on
a correct device as long as its logits agree with the host path's to within them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    VARIED_PROMPT,
    Body,
    Output,
    body,
    complete_all,
    describe_body,
)
from tt_conformance.checks.reference import (
    HOST_REASONS,
    LOGPROB_TOLERANCE,
    TOP,
    Step,
    check_tokens,
    device_outputs,
    prompt_ids,
    teacher_forced,
)
from tt_conformance.ttmetrics import host_fallback

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo
    from tt_conformance.ttpath import TTPath

# Exclusive: a host-only request of another check in the same batch would move the device phase
# to the host sampler.
pytestmark = [pytest.mark.device_sampling, pytest.mark.xdist_group("exclusive")]

MAX_TOKENS = 10
# (label, prompt, sampling parameters). Prompts with many continuations make the allowed sets
# small against the distribution, so a sampler that ignores a parameter leaves them quickly.
CASES: tuple[tuple[str, str, Body], ...] = (
    ("greedy", PLAIN_PROMPTS[4], {"temperature": 0.0}),
    ("top_k3", VARIED_PROMPT, {"temperature": 1.0, "top_k": 3, "seed": 11}),
    ("top_k8_t0.7", PLAIN_PROMPTS[7], {"temperature": 0.7, "top_k": 8, "seed": 12}),
    ("top_p0.3", VARIED_PROMPT, {"temperature": 1.0, "top_p": 0.3, "seed": 13}),
    (
        "top_k10_top_p0.6_t1.3",
        PLAIN_PROMPTS[7],
        {"temperature": 1.3, "top_k": 10, "top_p": 0.6, "seed": 14},
    ),
    # Below temperature 1 the nucleus shrinks: a sampler that ignores (or inverts) the
    # temperature draws from a wider one, outside the allowed set.
    (
        "top_k10_top_p0.5_t0.5",
        VARIED_PROMPT,
        {"temperature": 0.5, "top_k": 10, "top_p": 0.5, "seed": 16},
    ),
    ("frequency_greedy", PLAIN_PROMPTS[6], {"temperature": 0.0, "frequency_penalty": 1.0}),
    ("presence_greedy", PLAIN_PROMPTS[0], {"temperature": 0.0, "presence_penalty": 1.0}),
    (
        "frequency_top_k5",
        VARIED_PROMPT,
        {"temperature": 1.0, "top_k": 5, "seed": 15, "frequency_penalty": 0.8},
    ),
)


# Each sampled case is drawn with three seeds: more draws, more chances for a sampler that
# ignores a parameter to leave the allowed set.
SEED_OFFSETS = (0, 100, 200)


def sequences() -> list[tuple[str, str, Body]]:
    out = []
    for label, prompt, params in CASES:
        if "seed" not in params:
            out.append((label, prompt, params))
            continue
        for extra in SEED_OFFSETS:
            seed = int(params["seed"]) + extra
            out.append((f"{label}/seed{seed}", prompt, {**params, "seed": seed}))
    return out


def host_steps(
    client: AsyncOpenAI,
    model: str,
    tt_raw_http: RawHttp,
    cases: Sequence[tuple[str, str, Body]],
    outputs: Sequence[Output],
) -> list[list[Step]]:
    """The host path's view of every position the device generated, all in one batch."""
    sequences = [
        (prompt_ids(tt_raw_http, prompt), out.token_ids)
        for (_, prompt, _), out in zip(cases, outputs, strict=True)
    ]
    return teacher_forced(client, model, sequences)


def test_device_tokens_lie_in_the_allowed_set(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_raw_http: RawHttp,
    tt_path: TTPath,
) -> None:
    cases = sequences()
    requests = [body(prompt, MAX_TOKENS, ignore_eos=True, **params) for _, prompt, params in cases]
    outputs = device_outputs(tt_async_openai_client, tt_server.model, tt_path, requests)
    tt_path.start()
    problems: list[str] = []
    forced = host_steps(tt_async_openai_client, tt_server.model, tt_raw_http, cases, outputs)
    for (label, _, params), out, steps in zip(cases, outputs, forced, strict=True):
        problems += check_tokens(f"{label} ({describe_body(params)})", params, out.token_ids, steps)
    tt_path.conclude(host_fallback(HOST_REASONS))
    assert not problems, "device tokens vLLM's sampling would not draw:\n  " + "\n  ".join(problems)


def test_device_logprobs_match_the_host_path(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_raw_http: RawHttp,
    tt_path: TTPath,
) -> None:
    """The device's logprob of each token it sampled equals the host path's teacher-forced
    logprob of that token (logprobs=0: the flat sampled-token form)."""
    cases = [c for c in CASES if not c[2].get("frequency_penalty") and not c[2].get("top_p")]
    requests = [
        body(prompt, MAX_TOKENS, ignore_eos=True, logprobs=0, **params)
        for _, prompt, params in cases
    ]
    outputs = device_outputs(tt_async_openai_client, tt_server.model, tt_path, requests)
    problems: list[str] = []
    forced = host_steps(tt_async_openai_client, tt_server.model, tt_raw_http, cases, outputs)
    for (label, _, _), out, steps in zip(cases, outputs, forced, strict=True):
        reported = out.logprobs.token_logprobs if out.logprobs is not None else None
        assert reported is not None, f"{label}: no logprobs in the device response"
        for pos, (token, value, step) in enumerate(
            zip(out.token_ids, reported, steps, strict=True)
        ):
            want = step.top.get(token)
            if want is None:
                problems.append(f"{label} token {pos} = {token}: not in the host's top {TOP}")
            elif not abs(float(value) - want) <= LOGPROB_TOLERANCE:
                problems.append(
                    f"{label} token {pos} = {token}: device {value:.4f}, host {want:.4f}"
                )
    assert not problems, "device logprobs disagree with the host path:\n  " + "\n  ".join(problems)


def test_repetition_penalty_greedy_matches_the_host_path(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, tt_path: TTPath
) -> None:
    prompts = (PLAIN_PROMPTS[6], PLAIN_PROMPTS[0], PLAIN_PROMPTS[3])
    params: Any = {"temperature": 0.0, "repetition_penalty": 1.5, "ignore_eos": True}
    device = device_outputs(
        tt_async_openai_client,
        tt_server.model,
        tt_path,
        [body(p, MAX_TOKENS, **params) for p in prompts],
    )
    tt_path.start()
    host = complete_all(
        tt_async_openai_client,
        tt_server.model,
        [body(p, MAX_TOKENS, logprobs=1, min_p=0.01, **params) for p in prompts],
    )
    tt_path.conclude(host_fallback(HOST_REASONS))
    for prompt, d, h in zip(prompts, device, host, strict=True):
        assert d.token_ids == h.token_ids, (
            f"repetition_penalty=1.5 greedy on {prompt!r}: device {d.describe()}, host path "
            f"{h.describe()}"
        )
