"""Engine tests: the two examples, run as a user runs them on a machine without a TT card.

Both must default to the bundled reference model on the host-emulated mesh; the offline one is
the README's main job (`tox -e demo`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass

import requests

from tests.conftest import BUNDLED_MODEL, REPO
from vllm_tt_plugin.emulation.server import EmulatedServer

EXAMPLES = REPO / "examples"
OUTPUT_RE = re.compile(r"^'(?P<prompt>.*)' -> '(?P<text>.*)'$")
PERF_RE = re.compile(r"^perf: (\d+) prompts, (\d+) tokens in [\d.]+ s = ([\d.]+) tok/s")


def user_env() -> dict[str, str]:
    """The caller's environment minus what would pick the mesh or the model for the example."""
    env = {k: v for k, v in os.environ.items() if k not in ("MESH_DEVICE", "VLLM_PLUGINS")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"})
    return env


def run_offline(*args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "offline_inference_tt.py"), *args],
        capture_output=True,
        text=True,
        env=user_env(),
        timeout=timeout,
        cwd=REPO,
    )


def test_offline_example_generates_with_the_bundled_model_and_measures_perf() -> None:
    proc = run_offline(
        "--num_repeat_prompts", "2", "--max_seqs_in_batch", "4", "--max_model_len", "512",
        "--max_tokens", "8", "--measure_perf",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert f"serving {BUNDLED_MODEL} on a host-emulated N300 mesh" in lines[0]

    texts: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        if match := OUTPUT_RE.match(line):
            texts[match["prompt"]].append(match["text"])
    prompts = json.loads((EXAMPLES / "prompts.json").read_text())
    assert sorted(texts) == sorted(prompts)
    # Each prompt ran twice in one batch of 16 over 4 slots: greedy, so both copies agree.
    assert all(len(t) == 2 and t[0] == t[1] and t[0].strip() for t in texts.values()), texts
    # It is a (tiny) language model: repetition and counting continue.
    assert texts["a a a a a a"][0].split()[:3] == ["a", "a", "a"], texts["a a a a a a"]
    assert texts["1 2 3 4 5"][0].split()[0] == "6", texts["1 2 3 4 5"]

    [perf] = [m for m in map(PERF_RE.match, lines) if m]
    n_prompts, n_tokens, tok_s = int(perf[1]), int(perf[2]), float(perf[3])
    assert n_prompts == 2 * len(prompts) and 0 < n_tokens <= 8 * n_prompts and tok_s > 0


def test_offline_example_runs_the_vision_flags_on_the_bundled_llava() -> None:
    llava = REPO / "fixtures" / "models" / "tt-reference-llava"
    proc = run_offline(
        "--model", str(llava), "--multi_image", "--max_seqs_in_batch", "4",
        "--max_model_len", "512", "--max_tokens", "6",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    prompts = json.loads((EXAMPLES / "prompts.json").read_text())
    outputs = [m for m in map(OUTPUT_RE.match, proc.stdout.splitlines()) if m]
    assert len(outputs) == len(prompts)
    # Chat prompts, each with two image placeholders before the text.
    assert all(m["prompt"].count("<image>") == 2 for m in outputs), outputs[0]["prompt"]


def test_offline_example_runs_the_vision_flags_on_the_bundled_qwen2vl() -> None:
    """The Qwen-VL path (mRoPE, image_grid_thw) through the example's --multi_modal."""
    qwen2vl = REPO / "fixtures" / "models" / "tt-reference-qwen2vl"
    proc = run_offline(
        "--model", str(qwen2vl), "--multi_modal", "--max_seqs_in_batch", "4",
        "--max_model_len", "512", "--max_tokens", "6",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    outputs = [m for m in map(OUTPUT_RE.match, proc.stdout.splitlines()) if m]
    assert len(outputs) == len(json.loads((EXAMPLES / "prompts.json").read_text()))
    image = "<|vision_start|><|image_pad|><|vision_end|>"
    assert all(m["prompt"].count(image) == 1 for m in outputs), outputs[0]["prompt"]


def test_offline_example_refuses_multimodal_flags_before_starting_an_engine() -> None:
    proc = run_offline("--multi_modal", timeout=60)
    assert proc.returncode != 0
    assert "--multi_modal" in proc.stderr and "text-only" in proc.stderr
    assert "No TT hardware found" not in proc.stdout  # refused before any launch was resolved


@dataclass
class ServerExample(EmulatedServer):
    """examples/server_example_tt.py instead of `vllm serve`: it must pick the emulated mesh
    and the bundled model by itself, so neither is passed."""

    def command(self) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(self.port), "--shutdown-timeout", "15"]
        return [sys.executable, str(EXAMPLES / "server_example_tt.py"), *host, *self.vllm_args]

    def child_env(self) -> dict[str, str]:
        return user_env()


def test_server_example_serves_the_bundled_model() -> None:
    with ServerExample(vllm_args=["--max-num-seqs", "4", "--max-model-len", "512"]) as server:
        models = requests.get(f"{server.url}/v1/models", timeout=10).json()
        [model] = [m["id"] for m in models["data"]]
        assert model == str(BUNDLED_MODEL)
        body = {"model": model, "prompt": "a a a a a a", "max_tokens": 6, "temperature": 0}
        r = requests.post(f"{server.url}/v1/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"].split()[:3] == ["a", "a", "a"]
        chat = {"model": model, "max_tokens": 12, "messages": [{"role": "user", "content": "Hi"}]}
        r = requests.post(f"{server.url}/v1/chat/completions", json=chat, timeout=120)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].strip()
    assert server.log_path is not None
    log = server.log_path.read_text(errors="replace")
    assert "host-emulated N300 mesh" in log
