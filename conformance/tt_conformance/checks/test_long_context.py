"""Long context: device decode far into the context window agrees with the host path there.

Promises, for prompts ending at a quarter, half, three quarters of ``max_model_len`` and right
before it:
- greedy decoding on the device gives, at every generated position, the token vLLM's host path
  ranks first for the same prefix (teacher-forced: the prompt plus the tokens generated before
  it, one host-sampled prefill each), and seeded top-k sampling stays inside the host's top k;
- the request at the edge generates its last token at position ``max_model_len - 1``.
Why: decode far into the context exercises what short prompts never reach: RoPE angles and any
table sized for a shorter context, KV pages deep in the page table, attention over long
histories. The host path's prefill computes the same positions through another device program
(prefill, not decode) and samples on the host, so a fault of the decode path at long positions
shows up as a disagreement. Its blind spot: a fault that prefill and decode share (a RoPE table
both read); answers known in advance (a retrieval task the bundled model is trained for) are
the planned reference for that (docs/CONFORMANCE.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tt_conformance.checks._support import PLAIN_PROMPTS, Body, body
from tt_conformance.checks.reference import (
    HOST_REASONS,
    check_tokens,
    device_outputs,
    prompt_ids,
    teacher_forced,
)
from tt_conformance.ttpath import host_fallback

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo
    from tt_conformance.ttpath import TTPath

pytestmark = [pytest.mark.long_context, pytest.mark.xdist_group("exclusive")]

MAX_TOKENS = 8
DEPTHS = (0.25, 0.5, 0.75, 1.0)
# At most this many prompt tokens, whatever max_model_len is: the teacher-forced prefills cost
# MAX_TOKENS x the prompt each; on hardware 32k-token prompts stay affordable in one batch.
LONGEST = 32768
PARAMS: tuple[Body, ...] = (
    {"temperature": 0.0},
    {"temperature": 1.0, "top_k": 3, "seed": 41},
)


def long_ids(raw_http: RawHttp, length: int) -> list[int]:
    """``length`` prompt ids: BOS, then the plain prompts repeated (text any model continues)."""
    text = " ".join(PLAIN_PROMPTS)
    ids = prompt_ids(raw_http, text)[:1]  # the BOS a completion adds
    rest = raw_http.tokenize(" " + text, add_special_tokens=False)
    while len(ids) < length:
        ids += rest
    return ids[:length]


def test_decode_deep_in_the_context_agrees_with_the_host_path(
    server: ServerInfo, async_openai_client: AsyncOpenAI, raw_http: RawHttp, tt_path: TTPath
) -> None:
    if server.max_model_len is None:
        pytest.skip("the server does not advertise max_model_len")
    edge = min(server.max_model_len, LONGEST + MAX_TOKENS) - MAX_TOKENS
    lengths = sorted({max(16, int(edge * d)) for d in DEPTHS})
    cases = [(n, params) for n in lengths for params in PARAMS]
    prompts = {n: long_ids(raw_http, n) for n in lengths}
    requests = [body(prompts[n], MAX_TOKENS, ignore_eos=True, **p) for n, p in cases]
    outputs = device_outputs(async_openai_client, server.model, tt_path, requests)
    for (n, _), out in zip(cases, outputs, strict=True):
        assert len(out.token_ids) == MAX_TOKENS, (
            f"prompt of {n} tokens: {len(out.token_ids)} generated, expected {MAX_TOKENS} (the "
            f"last at position {n + MAX_TOKENS - 1} of max_model_len {server.max_model_len})"
        )
    tt_path.start()
    problems: list[str] = []
    forced = teacher_forced(
        async_openai_client,
        server.model,
        [(prompts[n], out.token_ids) for (n, _), out in zip(cases, outputs, strict=True)],
    )
    for (n, params), out, steps in zip(cases, outputs, forced, strict=True):
        label = f"prompt of {n} tokens, {params}, positions {n}..{n + MAX_TOKENS - 1}"
        problems += check_tokens(label, params, out.token_ids, steps)
    tt_path.conclude(host_fallback(HOST_REASONS))
    assert not problems, "device decode deep in the context disagrees with the host path:\n  " + (
        "\n  ".join(problems)
    )
