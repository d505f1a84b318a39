"""Block-output serving end to end: the reference block model (256-token canvases) through the
real vLLM engine and OpenAI server on the emulated mesh (docs/BLOCK_SERVING.md).

The reference commits the reference Llama's greedy continuation, EOS-filled after an EOS, so
every output is checked against Hugging Face greedy decoding of the same weights.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.engine.harness import MODEL_DIR, hf_greedy, log_lines, serve, settled_log_count
from vllm_tt_plugin.emulation.server import EmulatedServer

# One server for the module: its tests stay on one xdist worker (tests/engine/conftest.py).
pytestmark = pytest.mark.xdist_group("block_serving")

CANVAS = 256
MAX_MODEL_LEN = 1024
BLOCK_ARGS = [
    "--hf-overrides",
    json.dumps({"architectures": ["ReferenceBlockForCausalLM"]}),
    "--max-num-seqs",
    "1",
    "--no-async-scheduling",
    "--max-model-len",
    str(MAX_MODEL_LEN),
]
# Greedy continuations of the bundled checkpoint: no EOS in the first 320 tokens (spans two
# canvases), and an EOS inside the first canvas. Preconditions are asserted, not assumed.
LONG_PROMPT = [49, 315, 23, 785, 872, 467, 346, 890, 172, 827, 160]
# The chat-templated "Explain quantum physics.": its answer ends with EOS at the 12th token.
EOS_PROMPT = [1018, 1021, 198, 36, 87, 793, 957, 486, 84, 414, 678, 303, 71, 88, 82, 72, 66, 82,
              13, 1023, 198, 1022, 198]  # fmt: skip


def _eos_id() -> int:
    return int(json.loads((MODEL_DIR / "config.json").read_text())["eos_token_id"])


@pytest.fixture(scope="module")
def server() -> Iterator[EmulatedServer]:
    with serve(tt={"sample_on_device_mode": "all"}, vllm_args=BLOCK_ARGS, mesh="N150") as s:
        yield s


def _complete(url: str, prompt: list[int], **params: Any) -> requests.Response:
    body = {"model": "ref", "prompt": prompt, "return_token_ids": True, **params}
    return requests.post(f"{url}/v1/completions", json=body, timeout=600)


def _ids(resp: requests.Response) -> list[int]:
    assert resp.status_code == 200, resp.text
    return list(resp.json()["choices"][0]["token_ids"])


def test_two_canvases_match_greedy_and_trim_at_max_tokens(server: EmulatedServer) -> None:
    want = hf_greedy(LONG_PROMPT, 300)
    assert _eos_id() not in want, "precondition: refresh LONG_PROMPT (EOS in its greedy run)"
    # 300 tokens: block 0 from prefill, block 1 from one decode, trimmed to max_tokens.
    resp = _complete(server.url, LONG_PROMPT, max_tokens=300)
    assert _ids(resp) == want
    assert resp.json()["choices"][0]["finish_reason"] == "length"
    assert resp.json()["usage"]["completion_tokens"] == 300
    # Inside one canvas: trimmed at max_tokens.
    assert _ids(_complete(server.url, LONG_PROMPT, max_tokens=20)) == want[:20]


def test_trimmed_at_eos_and_eos_fill_with_ignore_eos(server: EmulatedServer) -> None:
    eos = _eos_id()
    want = hf_greedy(EOS_PROMPT, 40)
    assert eos in want, "precondition: refresh EOS_PROMPT (no EOS in its greedy run)"
    first = want.index(eos)
    resp = _complete(server.url, EOS_PROMPT, max_tokens=200)
    assert _ids(resp) == want[: first + 1]
    assert resp.json()["choices"][0]["finish_reason"] == "stop"
    # ignore_eos: the model commits EOS for the rest of its canvas.
    got = _ids(_complete(server.url, EOS_PROMPT, max_tokens=40, ignore_eos=True))
    assert got == want[: first + 1] + [eos] * (40 - first - 1)


def test_trimmed_at_stop_tokens_and_stop_strings(server: EmulatedServer) -> None:
    want = hf_greedy(LONG_PROMPT, 60)
    stop = want[30]
    cut = want.index(stop)
    got = _ids(_complete(server.url, LONG_PROMPT, max_tokens=60, stop_token_ids=[stop]))
    assert got == want[: cut + 1]
    full = _complete(server.url, LONG_PROMPT, max_tokens=60).json()["choices"][0]["text"]
    needle = full[len(full) // 2 : len(full) // 2 + 3]
    text = _complete(server.url, LONG_PROMPT, max_tokens=60, stop=[needle]).json()
    assert text["choices"][0]["text"] == full[: full.index(needle)]


def test_chat_default_output_is_capped_to_whole_canvases(server: EmulatedServer) -> None:
    body = {"model": "ref", "messages": [{"role": "user", "content": "hello there"}]}
    resp = requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=600)
    assert resp.status_code == 200, resp.text
    usage = resp.json()["usage"]
    # The chat default (max_model_len - prompt) is capped to the whole-canvas capacity.
    capacity = ((MAX_MODEL_LEN // 32) * 32 - -(-usage["prompt_tokens"] // 32) * 32) // CANVAS
    assert 0 < usage["completion_tokens"] <= capacity * CANVAS


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": 1}, "logprobs"),
        ({"prompt_logprobs": 1}, "prompt_logprobs"),
        ({"structured_outputs": {"regex": "a+"}}, "structured_outputs"),
        ({"bad_words": ["x"]}, "bad_words"),
        ({"logit_bias": {"5": 1.0}}, "logit_bias"),
        ({"allowed_token_ids": [5, 6]}, "allowed_token_ids"),
        ({"min_tokens": 2}, "min_tokens"),
        ({"vllm_xargs": {"custom": 1}}, "extra_args"),
    ],
)
def test_unsupported_fields_are_400_naming_them(
    server: EmulatedServer, params: dict[str, Any], field: str
) -> None:
    resp = _complete(server.url, LONG_PROMPT, max_tokens=8, **params)
    assert resp.status_code == 400, resp.text
    assert f"'{field}' is not supported by the block-output model" in resp.text


def test_sampling_fields_ignored_with_one_warning(server: EmulatedServer) -> None:
    want = hf_greedy(LONG_PROMPT, 16)
    for _ in range(2):
        got = _ids(_complete(server.url, LONG_PROMPT, max_tokens=16, temperature=0.9, seed=7))
        assert got == want  # the canvas is the model's, whatever the sampling fields say
    assert len(log_lines(server, "'temperature' is accepted but ignored")) == 1
    assert len(log_lines(server, "'seed' is accepted but ignored")) == 1


def test_release_hooks_are_called(server: EmulatedServer) -> None:
    released = "reference block model: release_request(0)"
    # Counted once the log is quiet: an earlier test's release may still be on its way.
    before = settled_log_count(server, released)
    _ids(_complete(server.url, LONG_PROMPT, max_tokens=8))
    _ids(_complete(server.url, LONG_PROMPT, max_tokens=300))
    assert settled_log_count(server, released) == before + 2


def test_release_persistent_capture_at_shutdown() -> None:
    with serve(tt={"sample_on_device_mode": "all"}, vllm_args=BLOCK_ARGS, mesh="N150") as s:
        _ids(_complete(s.url, LONG_PROMPT, max_tokens=4))
    assert log_lines(s, "reference block model: release_persistent_capture()")


def test_conformance_block_output_concern_passes(server: EmulatedServer, tmp_path: Any) -> None:
    """The harness's block-output concern runs (none skipped) and passes against this server."""
    import subprocess
    import sys

    from tests.conftest import REPO

    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "tt_conformance.checks.test_block_output",
        "--tt-server-url", server.url, "--tt-device", "emulated", "--tt-max-num-seqs", "1",
        "--tt-report-dir", str(tmp_path), "--tt-baselines-dir", str(tmp_path / "none"),
        "-q", "-n", "0", "-rs",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]


def test_block_metrics_on_metrics_endpoint(server: EmulatedServer) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    def samples() -> dict[str, float]:
        text = requests.get(f"{server.url}/metrics", timeout=60).text
        return {
            s.name: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith("tt_block_")
        }

    before = samples()
    _ids(_complete(server.url, LONG_PROMPT, max_tokens=300))  # two canvases, no EOS
    after = samples()
    assert after["tt_block_canvases_total"] - before.get("tt_block_canvases_total", 0) == 2
    committed = after["tt_block_committed_tokens_total"] - before.get(
        "tt_block_committed_tokens_total", 0
    )
    assert committed == 2 * CANVAS
    latency = after["tt_block_latency_seconds"]
    assert latency > 0
    assert after["tt_block_throughput_tokens_per_second"] == pytest.approx(CANVAS / latency)
    assert after["tt_block_seconds_total"] > before.get("tt_block_seconds_total", 0)
