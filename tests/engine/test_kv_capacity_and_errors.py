"""max_model_len against the TT KV pool (the README's table) and bad input at the server."""

from __future__ import annotations

import pytest
import requests

from tests.engine.harness import complete_ids, serve
from vllm_tt_plugin.emulation.server import ServerStartError

SMALL_POOL = {"TT_REFERENCE_MAX_TOKENS_ALL_USERS": "512"}  # 8 blocks of 64 (+ headroom)


def served_max_model_len(url: str) -> int:
    return int(requests.get(f"{url}/v1/models", timeout=30).json()["data"][0]["max_model_len"])


def test_auto_fit_minus_one_reaches_workers_and_api_server() -> None:
    # pool: ceil(512 / 64) = 8 blocks + 2 sequence headroom = 10 blocks = 640 tokens
    with serve(vllm_args=["--max-model-len", "-1", "--max-num-seqs", "2"], env=SMALL_POOL) as s:
        fitted = served_max_model_len(s.url)
        assert 512 <= fitted <= 640
        # the API server enforces the fitted length ...
        too_long = requests.post(
            f"{s.url}/v1/completions",
            json={"model": "ref", "prompt": [11] * fitted, "max_tokens": 4},
            timeout=60,
        )
        assert too_long.status_code == 400
        # ... and the workers serve right up to it
        assert len(complete_ids(s.url, [11] * (fitted - 4), 4)) == 4


def test_numeric_max_model_len_over_the_pool_fails_with_the_estimate() -> None:
    server = serve(vllm_args=["--max-model-len", "1024", "--max-num-seqs", "2"], env=SMALL_POOL)
    with pytest.raises(ServerStartError) as info:
        server.start()
    assert "estimated maximum model length is" in str(info.value)
    assert not server.running


def test_bad_requests_get_400_naming_the_field_and_the_server_keeps_serving() -> None:
    with serve(vllm_args=["--max-model-len", "256", "--max-num-seqs", "4"]) as s:
        cases = [
            ({"prompt": [11] * 300, "max_tokens": 4}, "maximum context length"),
            ({"prompt": "1 2 3", "max_tokens": 4, "prompt_logprobs": 1}, "prompt_logprobs"),
            ({"prompt": "1 2 3", "max_tokens": 4, "logprobs": 21}, "logprobs"),
            ({"prompt": "1 2 3", "max_tokens": 4, "model": "no-such-model"}, "no-such-model"),
        ]
        for body, fragment in cases:
            resp = requests.post(
                f"{s.url}/v1/completions", json={"model": "ref", **body}, timeout=60
            )
            assert resp.status_code in (400, 404), (body, resp.status_code, resp.text)
            assert fragment in resp.json()["error"]["message"], resp.text
        assert requests.get(f"{s.url}/health", timeout=10).status_code == 200
        assert len(complete_ids(s.url, [11, 12, 13], 4)) == 4
