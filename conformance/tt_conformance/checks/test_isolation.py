"""Request isolation: a request's output does not depend on what else is in the batch.

Promise: a greedy request, and a seeded sampled request, produce the same tokens whether they
run alone, in a full batch of unrelated requests with other sampling settings (temperatures,
top-k/top-p, penalties, logprobs, unseeded sampling), or in the same batch submitted in another
order (so they land in other slots). Why: TT models run the batch as one padded device tensor
with per-slot sampling parameters and penalty state; a wrong slot index, a parameter applied to
the wrong row or state leaking between slots shows up as a changed output here.

Every request of the mixed batch is eligible for device sampling (logprobs <= 5, top-k <= 20),
so the batch stays on the device path (on a TT server the plugin's counters must show it did);
host fallback is covered by test_sampling_fallback.
Requests end at different lengths, so the batch layout changes while the compared ones decode.
The batch arrives at once, so prefill calls carry several rows, each with its own sampling
parameters: the counters must show a device-sampled multi-row prefill, and every compared row's
first token (sampled by that call) must be its solo first token; first the check shows, serving
each row alone over several seeds, that each row's first token depends on its draw (otherwise a
row drawn with another row's noise would look right).
The sampling fields' value ranges (top_k, top_p, temperature, min_p) come from the situation
matrix (tt_conformance.situation_matrix.SAMPLING_FIELDS): in the batched-prefill check every
cell, seeded, is batched with the others and compared with itself alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    VARIED_PROMPT,
    Body,
    Output,
    capacity,
    complete_all,
    complete_each,
    describe_body,
    fill,
    greedy,
    mismatches,
    shuffled,
    unshuffle,
)
from tt_conformance.checks.draw_premise import rows_whose_first_token_ignores_the_draw
from tt_conformance.situation_matrix import SAMPLING_FIELDS, Cell, cells
from tt_conformance.ttmetrics import multi_row_prefill, stays_on_device

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.fixtures import RecordCell
    from tt_conformance.server import ServerInfo
    from tt_conformance.ttpath import TTPath

pytestmark = pytest.mark.isolation

MAX_TOKENS = 24

# (template, compared): compared requests are deterministic (greedy or seeded); the others are
# unseeded companions whose outputs are free but whose presence must not matter.
MIXED: tuple[tuple[Body, bool], ...] = (
    ({"temperature": 0.0, "max_tokens": MAX_TOKENS}, True),
    ({"temperature": 1.0, "max_tokens": 8}, False),
    ({"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 1234, "max_tokens": MAX_TOKENS}, True),
    ({"temperature": 0.0, "repetition_penalty": 1.3, "max_tokens": MAX_TOKENS}, True),
    ({"temperature": 0.5, "top_p": 0.5, "max_tokens": 40}, False),
    # No logprobs here: a TT device returns at most the sampled token's logprob (on 8 or 32
    # devices per rank), so one logprobs request would move the batch off the device path this
    # check claims. Logprob isolation: test_logprobs::test_logprobs_same_alone_and_batched.
    ({"temperature": 0.0, "top_k": 5, "max_tokens": MAX_TOKENS}, True),
    (
        {
            "temperature": 1.2,
            "top_k": 5,
            "seed": 7,
            "presence_penalty": 0.5,
            "max_tokens": MAX_TOKENS,
        },
        True,
    ),
    ({"temperature": 0.7, "top_k": 3, "frequency_penalty": 0.4, "max_tokens": 16}, False),
)


def mixed_batch(size: int) -> tuple[list[Body], list[bool]]:
    templates = [{**t, "ignore_eos": True} for t, _ in MIXED]
    requests = fill(templates, size)
    compared = [MIXED[i % len(MIXED)][1] for i in range(size)]
    return requests, compared


@pytest.mark.xdist_group("exclusive")
def test_mixed_batch_matches_solo(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, tt_path: TTPath
) -> None:
    """Greedy and seeded requests give their solo tokens in a full mixed batch, in two orders.

    Runs alone: a host-only request from another check in the batch would move the seeded
    requests to the host sampler (see test_sampling_fallback::test_seeded_companion_*)."""
    requests, compared = mixed_batch(capacity(tt_server))
    picked = [i for i, c in enumerate(compared) if c]
    solo = complete_each(tt_async_openai_client, tt_server.model, [requests[i] for i in picked])
    tt_path.start(required=False)  # generic check: TT-path claim only on a TT server
    batched = complete_all(tt_async_openai_client, tt_server.model, requests)
    reordered, order = shuffled(requests)
    again = unshuffle(complete_all(tt_async_openai_client, tt_server.model, reordered), order)
    labels = [f"#{i} ({describe_body(requests[i])})" for i in picked]
    problems = mismatches(labels, solo, [batched[i] for i in picked])
    problems += [
        line.replace("batched:", "shuffled:")
        for line in mismatches(labels, solo, [again[i] for i in picked])
    ]
    assert not problems, (
        f"{len(problems)} deterministic request(s) changed output when batched with "
        f"{len(requests) - 1} others:\n" + "\n".join(problems)
    )
    for i, out in enumerate(batched + again):
        req = requests[i % len(requests)]
        assert out.finish_reason == "length" and len(out.token_ids) == req["max_tokens"], (
            f"request {describe_body(req)} ended early: {out.describe()}"
        )
    # Simultaneous arrivals: at least one prefill call carried several rows with their own
    # sampling parameters, each compared above with the request served alone.
    tt_path.conclude(stays_on_device(), multi_row_prefill())


def test_same_prompt_in_every_slot(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI
) -> None:
    """One greedy prompt sent to every slot at once gives the solo output in each slot."""
    request = greedy(PLAIN_PROMPTS[1], MAX_TOKENS, ignore_eos=True)
    solo = complete_each(tt_async_openai_client, tt_server.model, [request])[0]
    outputs = complete_all(tt_async_openai_client, tt_server.model, [request] * capacity(tt_server))
    differing = [i for i, out in enumerate(outputs) if out.token_ids != solo.token_ids]
    assert not differing, (
        f"{len(differing)} of {len(outputs)} copies differ from the solo output "
        f"{solo.describe()}; first: {outputs[differing[0]].describe()}"
    )


@pytest.mark.parametrize("fraction", ["half", "full"])
def test_distinct_greedy_prompts_batched(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, fraction: str
) -> None:
    """Distinct greedy prompts batched together each give their solo output."""
    size = capacity(tt_server) if fraction == "full" else max(2, capacity(tt_server) // 2)
    requests = [greedy(PLAIN_PROMPTS[i % len(PLAIN_PROMPTS)], MAX_TOKENS) for i in range(size)]
    distinct = list({r["prompt"]: r for r in requests}.values())
    solo = dict(
        zip(
            [r["prompt"] for r in distinct],
            complete_each(tt_async_openai_client, tt_server.model, distinct),
            strict=True,
        )
    )
    batched = complete_all(tt_async_openai_client, tt_server.model, requests)
    labels = [f"#{i} prompt {r['prompt']!r}" for i, r in enumerate(requests)]
    problems = mismatches(labels, [solo[r["prompt"]] for r in requests], batched)
    assert not problems, "greedy outputs changed when batched:\n" + "\n".join(problems)


# Every row sampled with a seed and parameters of its own, on prompts with many continuations and
# at temperatures that keep the first token uncertain, so whichever row a prefill call puts first
# or last, its first token (drawn by that call) is compared and depends on the row's own draw.
# The check measures that premise on the server (_first_draw_precondition): a model whose first
# token is near certain on a prompt (the bundled llama on "Once upon a time" after its 2026-12-07
# retraining) would let a row-offset fault in the prefill sampler pass unseen.
PREFILL_ROWS: tuple[Body, ...] = (
    {"prompt": "My favourite colour is", "temperature": 1.5, "seed": 21},
    {"prompt": "Once upon a time there was a", "temperature": 1.3, "top_k": 8, "seed": 22},
    {"prompt": "The cat sat on the", "temperature": 1.6, "top_p": 0.95, "seed": 23},
    {
        "prompt": "Here is a list of words:",
        "temperature": 1.4,
        "top_k": 20,
        "top_p": 0.9,
        "seed": 24,
    },
)
# Seeds per row for the premise: the first token must take at least two values over them (a
# row whose likeliest first token has probability q shows one value for all ten with probability
# at most q**9: 0.0002 for the bundled models' least uncertain row, q = 0.39).
PRECONDITION_SEEDS = range(900, 910)


def _first_draw_precondition(tt_async_openai_client: AsyncOpenAI, model: str) -> list[str]:
    """The rows whose first token ignores the draw (draw_premise): on those a fault that draws a
    row with another row's (or position's) noise changes nothing."""
    return rows_whose_first_token_ignores_the_draw(
        PREFILL_ROWS,
        PRECONDITION_SEEDS,
        lambda bodies: complete_each(tt_async_openai_client, model, bodies),
    )


@pytest.mark.xdist_group("exclusive")
def test_batched_prefill_rows_match_solo(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_path: TTPath,
    tt_record_cell: RecordCell,
) -> None:
    """Requests arriving at once are prefilled several to a device call, each row with its own
    sampling parameters; each row gives the tokens its request gives alone. Then the same over
    the sampling-fields matrix, after the path claims are concluded (whatever they conclude; its
    min_p cells are host-only): run first, it left the claimed multi-row prefill unobserved in a
    loaded CI run, so the claimed requests see the server as they did before the matrix."""
    certain = _first_draw_precondition(tt_async_openai_client, tt_server.model)
    assert not certain, (
        "precondition: a prefill row's first token does not depend on its draw, so a row-offset "
        "fault in the prefill sampler cannot show here:\n" + "\n".join(certain)
    )
    requests = [
        {**PREFILL_ROWS[i % len(PREFILL_ROWS)], "seed": 21 + i, "max_tokens": 4, "ignore_eos": True}
        for i in range(capacity(tt_server))
    ]
    solo = complete_each(tt_async_openai_client, tt_server.model, requests)
    tt_path.start(required=False)
    batched = complete_all(tt_async_openai_client, tt_server.model, requests)
    labels = [f"#{i} ({describe_body(r)})" for i, r in enumerate(requests)]
    problems = mismatches(labels, solo, batched)
    assert not problems, "rows of a batched prefill changed output:\n" + "\n".join(problems)
    try:
        tt_path.conclude(stays_on_device(), multi_row_prefill())
    finally:  # also when the claims skip as "not exercised": the matrix is not a path claim
        matrix_problems = _sampling_matrix(tt_server, tt_async_openai_client, tt_record_cell)
        assert not matrix_problems, "sampling-matrix rows changed output when batched:\n" + (
            "\n".join(matrix_problems)
        )


SAMPLED_PROMPTS = (VARIED_PROMPT, "Once upon a time there was a", "The cat sat on the")


def _sampling_body(index: int, cell: Cell) -> Body:
    fields = {k: v for k, v in cell.as_dict().items() if v is not None}
    prompt = SAMPLED_PROMPTS[index % len(SAMPLED_PROMPTS)]
    return {"prompt": prompt, **fields, "seed": 300 + index, "max_tokens": 8, "ignore_eos": True}


def _sampling_matrix(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, tt_record_cell: RecordCell
) -> list[str]:
    """Every cell of the sampling-fields matrix (situation_matrix.SAMPLING_FIELDS: top_k,
    top_p, temperature and min_p over their ranges), seeded, gives its solo tokens in full
    batches of other cells. Cells with min_p (host-only) are batched among themselves, so
    each batch stays on one sampling path, the one its requests take alone. Returns the
    mismatches."""
    matrix = cells(SAMPLING_FIELDS)
    requests = [_sampling_body(i, c) for i, c in enumerate(matrix)]
    solo = complete_each(tt_async_openai_client, tt_server.model, requests)
    size = capacity(tt_server)
    batched: dict[int, Output] = {}
    for host_only in (False, True):
        picked = [i for i, c in enumerate(matrix) if bool(c["min_p"]) == host_only]
        for start in range(0, len(picked), size):
            chunk = picked[start : start + size]
            outs = complete_all(
                tt_async_openai_client, tt_server.model, [requests[i] for i in chunk]
            )
            batched.update(zip(chunk, outs, strict=True))
    labels = [c.label for c in matrix]
    problems = mismatches(labels, solo, [batched[i] for i in range(len(matrix))])
    for cell in matrix:
        tt_record_cell(SAMPLING_FIELDS.name, cell.label)
    return problems
