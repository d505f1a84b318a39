"""Lanes: a lane data-parallel server (``--data_parallel_size N`` served as N in-process TT lanes,
``--max-num-seqs`` per lane) runs N x max_num_seqs requests at once, and every lane computes the
same thing.

Promises:
- lanes x max_num_seqs concurrent requests all finish with their full length;
- the same greedy prompt sent lanes x max_num_seqs times at once gives the solo output in every
  copy, whichever lane and slot it lands in; the same holds for a seeded sampled prompt.
Why: each lane has its own KV cache and slot range inside one global decode batch; a lane offset
applied wrongly sends a request to another lane's cache or sampling row.
Runs only against servers started with lanes (``--tt-lanes N``); the checks fill the server, so
they run alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    VARIED_PROMPT,
    Body,
    body,
    capacity,
    complete_all,
    complete_each,
    greedy,
)
from tt_conformance.ttmetrics import lanes_carry_rows

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.server import ServerInfo
    from tt_conformance.ttpath import TTPath

pytestmark = [
    pytest.mark.lanes,
    pytest.mark.tt_path,
    pytest.mark.requires_lanes(2),
    pytest.mark.xdist_group("exclusive"),
]

MAX_TOKENS = 24


def test_every_lane_slot_finishes(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, tt_path: TTPath
) -> None:
    n = capacity(tt_server)
    requests = [
        greedy(PLAIN_PROMPTS[i % len(PLAIN_PROMPTS)], MAX_TOKENS, ignore_eos=True) for i in range(n)
    ]
    tt_path.start()
    outputs = complete_all(tt_async_openai_client, tt_server.model, requests)
    short = [i for i, out in enumerate(outputs) if len(out.token_ids) != MAX_TOKENS]
    assert not short, (
        f"{len(short)} of {n} requests on {tt_server.lanes} lanes ended early: {short}"
    )
    tt_path.conclude(lanes_carry_rows(tt_server.lanes))


@pytest.mark.parametrize(
    "request_body",
    [
        pytest.param(greedy(PLAIN_PROMPTS[2], MAX_TOKENS, ignore_eos=True), id="greedy"),
        pytest.param(
            body(VARIED_PROMPT, MAX_TOKENS, temperature=1.0, seed=31, ignore_eos=True), id="seeded"
        ),
    ],
)
def test_same_output_on_every_lane(
    tt_server: ServerInfo, tt_async_openai_client: AsyncOpenAI, tt_path: TTPath, request_body: Body
) -> None:
    solo = complete_each(tt_async_openai_client, tt_server.model, [request_body])[0]
    tt_path.start()
    outputs = complete_all(
        tt_async_openai_client, tt_server.model, [request_body] * capacity(tt_server)
    )
    differing = [i for i, out in enumerate(outputs) if out.token_ids != solo.token_ids]
    assert not differing, (
        f"{len(differing)} of {len(outputs)} copies across {tt_server.lanes} lanes differ from the "
        f"solo output {solo.describe()}; e.g. {outputs[differing[0]].describe()}"
    )
    tt_path.conclude(lanes_carry_rows(tt_server.lanes))
