"""Long context: device decode far into the context window agrees with the host path there.

Promises, for prompts ending at a quarter, half, three quarters of ``max_model_len`` and right
before it:
- greedy decoding on the device gives, at every generated position, the token vLLM's host path
  ranks first for the same prefix (teacher-forced: the prompt plus the tokens generated before
  it, one host-sampled prefill each), and seeded top-k sampling stays inside the host's top k;
- the request at the edge generates its last token at position ``max_model_len - 1``;
- answers known in advance: a passage repeated to the prompt's length is continued as written,
  and a passkey hidden at needle depths 0, 1/4, 1/2, 3/4 and 1 of the filler is retrieved
  (``tt_conformance.longtasks``); at least ``PASSKEY_BAR`` of the passkeys, recorded in the
  report's accuracy section as task ``passkey``.
Why: decode far into the context exercises what short prompts never reach: RoPE angles and any
table sized for a shorter context, KV pages deep in the page table, attention over long
histories. The host path's prefill computes the same positions through another device program
(prefill, not decode) and samples on the host, so a fault of the decode path at long positions
shows up as a disagreement. A fault that prefill and decode share (a RoPE table both read) makes
the host path agree; the known answers catch it, as the model cannot find the far tokens.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest

from tt_conformance.accuracy import item_id, item_outcomes, verdict, wilson_interval
from tt_conformance.checks._support import PLAIN_PROMPTS, Body, body, greedy
from tt_conformance.checks.reference import (
    HOST_REASONS,
    check_tokens,
    device_outputs,
    prompt_ids,
    teacher_forced,
)
from tt_conformance.expectations import AccuracyExpectation
from tt_conformance.longtasks import PASSKEY_FILLER, PASSKEY_TASK, Passkey, passkey_answer
from tt_conformance.ttmetrics import host_fallback

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.fixtures import RecordAccuracy
    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo
    from tt_conformance.ttpath import TTPath

pytestmark = [pytest.mark.long_context, pytest.mark.xdist_group("exclusive")]

MAX_TOKENS = 8
DEPTHS = (0.25, 0.5, 0.75, 1.0)
# At most this many prompt tokens, whatever max_model_len is: the teacher-forced prefills cost
# MAX_TOKENS x the prompt each; on hardware 32k-token prompts stay affordable in one batch.
LONGEST = 32768
NEEDLE_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
PASSKEY_BAR = 0.9  # of the passkeys retrieved; a model that reads its whole window finds all
PASSKEY_TOKENS = 6  # " 12345." is at most six tokens in any tokenizer worth serving
COPY_TOKENS = 8
PARAMS: tuple[Body, ...] = (
    {"temperature": 0.0},
    {"temperature": 1.0, "top_k": 3, "seed": 41},
)


def long_ids(tt_raw_http: RawHttp, length: int) -> list[int]:
    """``length`` prompt ids: BOS, then the plain prompts repeated (text any model continues)."""
    text = " ".join(PLAIN_PROMPTS)
    ids = prompt_ids(tt_raw_http, text)[:1]  # the BOS a completion adds
    rest = tt_raw_http.tokenize(" " + text, add_special_tokens=False)
    while len(ids) < length:
        ids += rest
    return ids[:length]


def prompt_lengths(tt_server: ServerInfo, generated: int) -> list[int]:
    """Prompt lengths ending at the depths of the window, the last leaving room for
    ``generated`` tokens."""
    if tt_server.max_model_len is None:
        pytest.skip("the server does not advertise max_model_len")
    edge = min(tt_server.max_model_len, LONGEST + generated) - generated
    return sorted({max(16, int(edge * d)) for d in DEPTHS})


def test_decode_deep_in_the_context_agrees_with_the_host_path(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_raw_http: RawHttp,
    tt_path: TTPath,
) -> None:
    lengths = prompt_lengths(tt_server, MAX_TOKENS)
    cases = [(n, params) for n in lengths for params in PARAMS]
    prompts = {n: long_ids(tt_raw_http, n) for n in lengths}
    requests = [body(prompts[n], MAX_TOKENS, ignore_eos=True, **p) for n, p in cases]
    outputs = device_outputs(tt_async_openai_client, tt_server.model, tt_path, requests)
    for (n, _), out in zip(cases, outputs, strict=True):
        assert len(out.token_ids) == MAX_TOKENS, (
            f"prompt of {n} tokens: {len(out.token_ids)} generated, expected {MAX_TOKENS} (the "
            f"last at position {n + MAX_TOKENS - 1} of max_model_len {tt_server.max_model_len})"
        )
    tt_path.start()
    problems: list[str] = []
    forced = teacher_forced(
        tt_async_openai_client,
        tt_server.model,
        [(prompts[n], out.token_ids) for (n, _), out in zip(cases, outputs, strict=True)],
    )
    for (n, params), out, steps in zip(cases, outputs, forced, strict=True):
        label = f"prompt of {n} tokens, {params}, positions {n}..{n + MAX_TOKENS - 1}"
        problems += check_tokens(label, params, out.token_ids, steps)
    tt_path.conclude(host_fallback(HOST_REASONS))
    assert not problems, "device decode deep in the context disagrees with the host path:\n  " + (
        "\n  ".join(problems)
    )


def test_repeated_passage_is_continued_at_every_depth(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_raw_http: RawHttp,
    tt_path: TTPath,
) -> None:
    """The long prompts repeat one passage: greedy decoding continues it as written."""
    lengths = prompt_lengths(tt_server, COPY_TOKENS)
    stream = long_ids(tt_raw_http, lengths[-1] + 4 * COPY_TOKENS)
    outputs = device_outputs(
        tt_async_openai_client,
        tt_server.model,
        tt_path,
        [body(stream[:n], COPY_TOKENS, temperature=0.0, ignore_eos=True) for n in lengths],
    )
    problems = []
    for n, out in zip(lengths, outputs, strict=True):
        written = tt_raw_http.detokenize(stream[n : n + 4 * COPY_TOKENS])
        if not out.text or not written.startswith(out.text):
            problems.append(
                f"prompt of {n} tokens: generated {out.text!r}, the passage goes on {written!r}"
            )
    assert not problems, "the repeated passage was not continued:\n  " + "\n  ".join(problems)


def passkeys(tt_raw_http: RawHttp, lengths: list[int]) -> list[tuple[int, Passkey]]:
    """A passkey prompt per (length, needle depth), each at most that many tokens."""
    bare = len(tt_raw_http.tokenize(Passkey(10000, 0, 0).prompt, add_special_tokens=True))
    per_filler = len(tt_raw_http.tokenize(PASSKEY_FILLER, add_special_tokens=False))
    rng = random.Random(2023)  # the keys are known in advance, and the same in every run
    out = []
    for n in lengths:
        fillers = max(0, (n - bare) // per_filler)
        for depth in NEEDLE_DEPTHS:
            before = round(fillers * depth)
            out.append((n, Passkey(rng.randint(10000, 99999), before, fillers - before)))
    return out


def test_passkey_is_retrieved_at_every_depth(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_raw_http: RawHttp,
    tt_path: TTPath,
    tt_record_accuracy: RecordAccuracy,
) -> None:
    tasks = passkeys(tt_raw_http, prompt_lengths(tt_server, PASSKEY_TOKENS))
    outputs = device_outputs(
        tt_async_openai_client,
        tt_server.model,
        tt_path,
        [greedy(task.prompt, PASSKEY_TOKENS) for _, task in tasks],
    )
    misses = [
        f"prompt of ~{n} tokens, needle at depth {task.depth:.2f}: key {task.key}, "
        f"generated {out.text!r}"
        for (n, task), out in zip(tasks, outputs, strict=True)
        if passkey_answer(out.text) != task.key
    ]
    outcomes = item_outcomes(
        (item_id(task.prompt, task.key), passkey_answer(out.text) == task.key)
        for (_, task), out in zip(tasks, outputs, strict=True)
    )
    correct = sum(o.correct for o in outcomes)
    result = verdict(
        AccuracyExpectation(task=PASSKEY_TASK, threshold=PASSKEY_BAR),
        correct / len(tasks),
        len(tasks),
        wilson_interval(correct, len(tasks)),
        correct,
        outcomes,
    )
    tt_record_accuracy(result)
    assert result.verdict == "pass", (
        f"passkey retrieval: {result.reason}; missed:\n  " + "\n  ".join(misses)
    )
