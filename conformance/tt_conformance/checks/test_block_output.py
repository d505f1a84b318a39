"""Block output: a block-output server (DiffusionGemma; 256-token canvases per step) serves the
block contract at the API (docs/BLOCK_SERVING.md).

Promises:
- a response is trimmed exactly at max_tokens, also across a canvas boundary, and greedy output
  is deterministic across repeats and lengths (a shorter answer is a prefix of a longer one);
- stop token ids trim the output right after the first stop token;
- fields the block model cannot honour (n > 1, logprobs, logit bias, allowed token ids,
  min_tokens, bad words) are a 400 naming the field, and the server stays healthy;
- sampling fields (temperature, seed) are accepted and do not change the committed canvas;
- an output limit beyond the whole-canvas capacity is capped at the completions endpoint.
Why: the model commits 256 tokens per step; the plugin hands vLLM the whole canvas and relies on
its trimming, and refuses what a committed canvas cannot provide.
Runs only against block-output servers: detected by the server's own refusal of ``n=2`` naming
the block-output model; every other server skips these checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tt_conformance.checks._support import assert_healthy

if TYPE_CHECKING:
    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo

pytestmark = [pytest.mark.block_output]

CANVAS = 256
PROMPT = [49, 315, 23, 785, 872, 467, 346, 890, 172, 827, 160]
BLOCK_REFUSAL = "is not supported by the block-output model"


def _body(tt_server: ServerInfo, **params: Any) -> dict[str, Any]:
    return {"model": tt_server.model, "prompt": PROMPT, "return_token_ids": True, **params}


@pytest.fixture(scope="module")
def block_server(tt_server: ServerInfo, tt_raw_http: RawHttp) -> ServerInfo:
    resp = tt_raw_http.completions(_body(tt_server, max_tokens=4, n=2))
    if resp.status_code == 400 and BLOCK_REFUSAL in resp.text:
        return tt_server
    pytest.skip("not a block-output server (n=2 was not refused as a block-output model)")


def _ids(tt_raw_http: RawHttp, body: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
    resp = tt_raw_http.completions(body)
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    return list(choice["token_ids"]), resp.json()


def test_trimmed_at_max_tokens_across_a_canvas(
    block_server: ServerInfo, tt_raw_http: RawHttp
) -> None:
    long_ids, long_json = _ids(
        tt_raw_http, _body(block_server, max_tokens=CANVAS + 20, ignore_eos=True, temperature=0)
    )
    assert len(long_ids) == CANVAS + 20
    assert long_json["usage"]["completion_tokens"] == CANVAS + 20
    short_ids, _ = _ids(tt_raw_http, _body(block_server, max_tokens=7, ignore_eos=True))
    assert short_ids == long_ids[:7], "greedy canvases differ between a short and a long answer"
    again, _ = _ids(tt_raw_http, _body(block_server, max_tokens=7, ignore_eos=True))
    assert again == short_ids


def test_trimmed_after_the_first_stop_token(block_server: ServerInfo, tt_raw_http: RawHttp) -> None:
    ids, _ = _ids(tt_raw_http, _body(block_server, max_tokens=40, ignore_eos=True))
    stop = ids[20]
    cut = ids.index(stop)
    got, _ = _ids(tt_raw_http, _body(block_server, max_tokens=40, stop_token_ids=[stop]))
    assert got == ids[: cut + 1]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": 1}, "logprobs"),
        ({"logit_bias": {"5": 1.0}}, "logit_bias"),
        ({"allowed_token_ids": [5, 6]}, "allowed_token_ids"),
        ({"min_tokens": 2}, "min_tokens"),
        ({"bad_words": ["x"]}, "bad_words"),
    ],
)
def test_unsupported_fields_are_400_naming_them(
    block_server: ServerInfo, tt_raw_http: RawHttp, params: dict[str, Any], field: str
) -> None:
    resp = tt_raw_http.completions(_body(block_server, max_tokens=4, **params))
    assert resp.status_code == 400, resp.text
    assert f"'{field}'" in resp.text
    assert_healthy(tt_raw_http)


def test_sampling_fields_do_not_change_the_canvas(
    block_server: ServerInfo, tt_raw_http: RawHttp
) -> None:
    plain, _ = _ids(tt_raw_http, _body(block_server, max_tokens=16, ignore_eos=True))
    sampled, _ = _ids(
        tt_raw_http, _body(block_server, max_tokens=16, ignore_eos=True, temperature=1.0, seed=3)
    )
    assert sampled == plain


def test_output_limit_capped_to_whole_canvases(
    block_server: ServerInfo, tt_raw_http: RawHttp
) -> None:
    limit = block_server.max_model_len
    if limit is None:
        pytest.skip("the server does not report max_model_len")
    asked = limit - len(PROMPT)  # what vLLM allows; more than whole canvases can hold
    capacity = ((limit // 32) * 32 - -(-len(PROMPT) // 32) * 32) // CANVAS * CANVAS
    ids, _ = _ids(tt_raw_http, _body(block_server, max_tokens=asked, ignore_eos=True))
    assert len(ids) == capacity
