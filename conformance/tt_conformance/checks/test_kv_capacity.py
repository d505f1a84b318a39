"""KV capacity: the advertised context length holds exactly, and a full or oversubscribed server
finishes every request correctly.

Promises:
- /v1/models advertises ``max_model_len``;
- a request whose prompt plus ``max_tokens`` exceeds it is rejected with a 400 that names the
  limit, and one exactly at the limit runs to its last token;
- ``max_num_seqs`` (x lanes) concurrent requests all finish with their full length;
- three times that many at once (the scheduler queues and, when KV blocks run short, preempts)
  all finish, each with the tokens the same prompt gives alone.
Why: TT servers size their KV cache from the model's ``get_max_tokens_all_users`` and pad decode
batches to ``max_num_seqs``; an off-by-one in either shows up at exactly these edges.
These checks fill the server, so they run alone (xdist group "exclusive").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    capacity,
    complete_all,
    complete_each,
    greedy,
    mismatches,
    token_ids_of,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo

pytestmark = [pytest.mark.kv_capacity, pytest.mark.xdist_group("exclusive")]

AT_LIMIT_NEW_TOKENS = 8


def max_model_len(tt_server: ServerInfo) -> int:
    assert tt_server.max_model_len is not None, (
        "GET /v1/models does not advertise max_model_len for the model under test"
    )
    return int(tt_server.max_model_len)


def prompt_of_length(tt_raw_http: RawHttp, length: int) -> list[int]:
    """Exactly ``length`` prompt token ids: BOS (when the model adds one) + repeated text."""
    text = " 1 2 3 4 5 6 7 8 9 10"
    bare = token_ids_of(tt_raw_http, text)
    with_special = tt_raw_http.tokenize(text)
    prefix = with_special[: len(with_special) - len(bare)]  # BOS etc., if the model adds them
    ids = list(prefix)
    while len(ids) < length:
        ids += bare
    return ids[:length]


def test_max_model_len_advertised(tt_server: ServerInfo) -> None:
    assert max_model_len(tt_server) > 0


def test_request_over_the_limit_rejected(tt_server: ServerInfo, tt_raw_http: RawHttp) -> None:
    limit = max_model_len(tt_server)
    prompt = prompt_of_length(tt_raw_http, limit - AT_LIMIT_NEW_TOKENS)
    resp = tt_raw_http.completions(
        {"prompt": prompt, "max_tokens": AT_LIMIT_NEW_TOKENS + 1, "temperature": 0.0}
    )
    error = tt_raw_http.error_of(resp)
    assert resp.status_code == 400, (
        f"prompt {len(prompt)} + max_tokens {AT_LIMIT_NEW_TOKENS + 1} = {limit + 1} tokens "
        f"(max_model_len {limit}): expected 400, got {resp.status_code}"
    )
    text = error.message.lower()
    assert str(limit) in text and ("context length" in text or "max_model_len" in text), (
        f"the 400 does not name the limit ({limit}): {error.message!r}"
    )


def test_prompt_longer_than_the_limit_rejected(tt_server: ServerInfo, tt_raw_http: RawHttp) -> None:
    limit = max_model_len(tt_server)
    resp = tt_raw_http.completions(
        {"prompt": prompt_of_length(tt_raw_http, limit + 1), "max_tokens": 1, "temperature": 0.0}
    )
    error = tt_raw_http.error_of(resp)
    assert resp.status_code == 400, f"a {limit + 1}-token prompt: got {resp.status_code}"
    assert str(limit) in error.message, f"the 400 does not name the limit: {error.message!r}"


def test_request_exactly_at_the_limit(tt_server: ServerInfo, tt_raw_http: RawHttp) -> None:
    limit = max_model_len(tt_server)
    prompt = prompt_of_length(tt_raw_http, limit - AT_LIMIT_NEW_TOKENS)
    resp = tt_raw_http.completions(
        {
            "prompt": prompt,
            "max_tokens": AT_LIMIT_NEW_TOKENS,
            "temperature": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
    )
    assert resp.status_code == 200, (
        f"prompt {len(prompt)} + max_tokens {AT_LIMIT_NEW_TOKENS} = max_model_len {limit}: "
        f"HTTP {resp.status_code} {resp.text[:300]}"
    )
    data = resp.json()
    choice = data["choices"][0]
    assert data["usage"]["prompt_tokens"] == len(prompt), data["usage"]
    assert (
        len(choice["token_ids"]) == AT_LIMIT_NEW_TOKENS and choice["finish_reason"] == "length"
    ), f"expected {AT_LIMIT_NEW_TOKENS} tokens ending at the limit, got {choice}"


def test_full_batch_finishes(tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI) -> None:
    n = capacity(tt_server)
    requests = [
        greedy(PLAIN_PROMPTS[i % len(PLAIN_PROMPTS)], 32, ignore_eos=True) for i in range(n)
    ]
    outputs = complete_all(tt_async_openai_client, tt_server.model, requests)
    short = [i for i, out in enumerate(outputs) if len(out.token_ids) != 32]
    assert not short, f"{len(short)} of {n} requests did not produce 32 tokens: {short}"


def test_oversubscription_matches_solo(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI
) -> None:
    """3x capacity at once: all finish, each equal to its prompt's solo output."""
    n = 3 * capacity(tt_server)
    prompts = PLAIN_PROMPTS[:6]
    requests = [greedy(prompts[i % len(prompts)], 48, ignore_eos=True) for i in range(n)]
    solo = dict(
        zip(
            prompts,
            complete_each(
                tt_async_openai_client,
                tt_server.model,
                [greedy(p, 48, ignore_eos=True) for p in prompts],
            ),
            strict=True,
        )
    )
    outputs = complete_all(tt_async_openai_client, tt_server.model, requests)
    problems = mismatches(
        [f"#{i} {r['prompt']!r}" for i, r in enumerate(requests)],
        [solo[r["prompt"]] for r in requests],
        outputs,
    )
    assert not problems, (
        f"{len(problems)} of {n} oversubscribed requests differ from their solo output:\n"
        + "\n".join(problems[:8])
    )
