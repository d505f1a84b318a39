"""Malformed requests: a clear 4xx naming the offending field, and a server that keeps serving.

Promises: each request below is rejected with a 4xx status whose error message names the field
(or, for an unknown model, the model), never a 5xx, a hang or a crashed engine; afterwards
/health answers 200 and an ordinary completion works, also after a burst of all of them at once.
Why: the TT plugin adds its own request validation (platform ``validate_request``, device
sampling limits); a bad value that slips through reaches the device sampler and can take the
engine down for every user.
"""

from __future__ import annotations

import concurrent.futures as cf
import re
from typing import TYPE_CHECKING, Any

import pytest

from tt_conformance.checks._support import PLAIN_PROMPTS, assert_healthy

if TYPE_CHECKING:
    import requests

    from tt_conformance.rawhttp import RawHttp
    from tt_conformance.server import ServerInfo

pytestmark = pytest.mark.errors

OK_BODY: dict[str, Any] = {"prompt": PLAIN_PROMPTS[0], "max_tokens": 4}
# (id, endpoint, body overrides, field the message must name)
C, CHAT = "completions", "chat"
CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("temperature_negative", C, {"temperature": -1}, "temperature"),
    ("temperature_string", C, {"temperature": "hot"}, "temperature"),
    ("top_p_above_one", C, {"top_p": 2}, "top_p"),
    ("top_p_zero", C, {"top_p": 0}, "top_p"),
    ("top_k_negative", C, {"top_k": -5}, "top_k"),
    ("max_tokens_string", C, {"max_tokens": "five"}, "max_tokens"),
    ("max_tokens_negative", C, {"max_tokens": -3}, "max_tokens"),
    ("presence_penalty_out_of_range", C, {"presence_penalty": 5}, "presence_penalty"),
    ("frequency_penalty_out_of_range", C, {"frequency_penalty": -3}, "frequency_penalty"),
    ("repetition_penalty_zero", C, {"repetition_penalty": 0}, "repetition_penalty"),
    ("min_p_above_one", C, {"min_p": 2}, "min_p"),
    ("logit_bias_unknown_token", C, {"logit_bias": {"99999999": 10}}, "logit_bias"),
    ("logit_bias_not_a_token_id", C, {"logit_bias": {"abc": 10}}, "logit_bias"),
    ("allowed_token_ids_unknown", C, {"allowed_token_ids": [99999999]}, "allowed_token_ids"),
    ("n_zero", C, {"n": 0}, "n"),
    ("n_too_large", C, {"n": 1_000_000}, "n"),
    ("min_tokens_above_max_tokens", C, {"min_tokens": 10, "max_tokens": 5}, "min_tokens"),
    ("seed_string", C, {"seed": "abc"}, "seed"),
    ("stop_not_a_string", C, {"stop": 123}, "stop"),
    ("empty_prompt", C, {"prompt": ""}, "prompt"),
    ("missing_prompt", C, {"prompt": None}, "prompt"),
    ("unknown_model", C, {"model": "no-such-model-xyz"}, "model"),
    ("chat_messages_not_a_list", CHAT, {"messages": "hello"}, "messages"),
    ("chat_missing_messages", CHAT, {"messages": None}, "messages"),
    ("chat_max_tokens_negative", CHAT, {"max_tokens": -1}, "max_tokens"),
    ("chat_temperature_negative", CHAT, {"temperature": -0.5}, "temperature"),
]  # fmt: skip

# A server that accepted n_too_large would run a million sequences: answer quickly or fail.
REQUEST_TIMEOUT_S = 60.0


def build(endpoint: str, overrides: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if endpoint == "chat":
        base: dict[str, Any] = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
        path = "/v1/chat/completions"
    else:
        base = dict(OK_BODY)
        path = "/v1/completions"
    merged = {**base, **overrides}
    return path, {k: v for k, v in merged.items() if v is not None}


def send(tt_raw_http: RawHttp, endpoint: str, overrides: dict[str, Any]) -> requests.Response:
    path, payload = build(endpoint, overrides)
    payload.setdefault("model", tt_raw_http.model)
    return tt_raw_http.post(path, payload, timeout=REQUEST_TIMEOUT_S)


def names_field(message: str, field: str) -> bool:
    return re.search(rf"(?<![A-Za-z_]){re.escape(field)}(?![A-Za-z_])", message) is not None


@pytest.mark.parametrize(
    ("endpoint", "overrides", "field"),
    [pytest.param(e, o, f, id=i) for i, e, o, f in CASES],
)
def test_malformed_request_rejected(
    tt_server: ServerInfo,
    tt_raw_http: RawHttp,
    endpoint: str,
    overrides: dict[str, Any],
    field: str,
) -> None:
    resp = send(tt_raw_http, endpoint, overrides)
    error = tt_raw_http.error_of(resp)
    assert 400 <= resp.status_code < 500, (
        f"{overrides}: expected a 4xx, got {resp.status_code}: {str(error.body)[:300]}"
    )
    assert names_field(error.message, field), (
        f"{overrides}: the {resp.status_code} error does not name {field!r}: {error.message!r}"
    )
    assert tt_raw_http.health().status_code == 200, f"/health failed right after {overrides}"


def test_server_serves_after_a_burst_of_bad_requests(
    tt_server: ServerInfo, tt_raw_http: RawHttp
) -> None:
    """All malformed requests at once, then /health and a normal completion."""
    with cf.ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda case: _status_of(tt_server, case), CASES))
    bad = [(case[0], s) for case, s in zip(CASES, statuses, strict=True) if not 400 <= s < 500]
    assert not bad, f"malformed requests not answered with a 4xx in a burst: {bad}"
    assert_healthy(tt_raw_http)


def _status_of(tt_server: ServerInfo, case: tuple[str, str, dict[str, Any], str]) -> int:
    # One session per thread: requests.Session is not safe to share between threads.
    from tt_conformance.rawhttp import RawHttp

    http = RawHttp(
        tt_server.base_url, tt_server.model, timeout=REQUEST_TIMEOUT_S, api_key=tt_server.api_key
    )
    try:
        return send(http, case[1], case[2]).status_code
    finally:
        http.close()
