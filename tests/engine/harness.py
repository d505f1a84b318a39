"""Engine-test helpers: serve on the emulated mesh, query token ids, compute HF references.

Engine tests run the real vLLM OpenAI server with the plugin's real platform, worker, runner
and scheduler over the host-emulated mesh. Correctness is judged against Hugging Face
transformers' greedy decoding of the same weights (float32), token for token.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import functools
import itertools
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import torch

from tests.conftest import BUNDLED_MODEL, REPO
from tt_conformance.report import Report, load_report
from vllm_tt_plugin.emulation.server import EmulatedServer

# Engine tests may point at another checkpoint (same architecture) while developing.
MODEL_DIR = Path(os.environ.get("TT_ENGINE_TEST_MODEL", str(BUNDLED_MODEL)))


@dataclass
class Served:
    server: EmulatedServer
    log_text: str = ""
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url


def serve(
    tt: dict[str, Any] | None = None,
    vllm_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    mesh: str = "N300",
    model: Path = MODEL_DIR,
) -> EmulatedServer:
    """An (unstarted) emulated server; use it as a context manager."""
    return EmulatedServer(
        model=model,
        mesh_device=mesh,
        tt_options=tt or {},
        vllm_args=list(vllm_args),
        env={
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            # The assertions read the plugin's INFO lines (runner stats, DP groups, KV groups),
            # whatever level the calling environment sets (tox sets WARNING).
            "VLLM_LOGGING_LEVEL": "INFO",
            **(env or {}),
        },
        served_model_name="ref",
    )


def complete_ids(url: str, prompt_ids: list[int], max_tokens: int, **params: Any) -> list[int]:
    body = {
        "model": "ref",
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "return_token_ids": True,
        **params,
    }
    resp = requests.post(f"{url}/v1/completions", json=body, timeout=600)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["choices"][0]["token_ids"])


def complete_many(
    url: str, prompts: Sequence[list[int]], max_tokens: int, workers: int = 32, **params: Any
) -> list[list[int]]:
    """All prompts concurrently (so the server batches them), results in prompt order."""
    with cf.ThreadPoolExecutor(min(workers, len(prompts))) as pool:
        return list(pool.map(lambda p: complete_ids(url, p, max_tokens, **params), prompts))


def metric(url: str, name: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=30).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


_STATS_RE = re.compile(r"TT runner stats: (.*)$")


def runner_stats(server: EmulatedServer) -> list[dict[str, Any]]:
    """The 'TT runner stats' lines the workers log at shutdown (one per engine/rank)."""
    assert server.log_path is not None
    lines = server.log_path.read_text(errors="replace").splitlines()
    out = []
    for line in lines:
        match = _STATS_RE.search(line)
        if match:
            stats: dict[str, Any] = {}
            for part in re.findall(r"(\w+)=(\[[^\]]*\]|\{[^}]*\}|[^,]+)", match.group(1)):
                key, value = part
                stats[key] = ast.literal_eval(value.strip())
            out.append(stats)
    if not out:
        # TTWorker.shutdown logs them: the engine core never reached its teardown (killed at the
        # API server's shutdown timeout, or dead before). Say what the log shows.
        words = ("shutdown", "Shutting", "Error", "Traceback", "TT: ")
        telling = [line[:300] for line in lines if any(w in line for w in words)]
        raise AssertionError(
            f"no 'TT runner stats' line in {server.log_path}; its telling lines:\n"
            + "\n".join(telling[-30:])
        )
    return out


def live_stats(server: EmulatedServer) -> dict[str, float]:
    """The runner's step counters as the server's /metrics shows them now, under the names of
    its shutdown stats (runner_stats). Read while the server runs, so a test does not depend on
    the engine core reaching its teardown; test_tt_path_checks asserts the two agree."""
    from tt_conformance.ttmetrics import parse_metrics

    _, counters = parse_metrics(requests.get(f"{server.url}/metrics", timeout=30).text)
    return {
        "prefill_steps": counters.value("tt_steps_total", kind="prefill"),
        "decode_steps": counters.value("tt_steps_total", kind="decode"),
        "device_sampled_steps": counters.value("tt_steps_total", route="device"),
        "host_sampled_steps": counters.value("tt_steps_total", route="host"),
        "overlapped_decodes": counters.value("tt_async_overlapped_decodes_total"),
        "prefill_chunks": counters.value("tt_prefill_chunks_total"),
    }


def log_lines(server: EmulatedServer, needle: str) -> list[str]:
    assert server.log_path is not None
    lines = server.log_path.read_text(errors="replace").splitlines()
    return [line for line in lines if needle in line]


def settled_log_count(server: EmulatedServer, needle: str, quiet_s: float = 1.0) -> int:
    """How many log lines contain ``needle`` once the count has stopped changing for
    ``quiet_s`` (the engine process writes its log asynchronously: a line of an earlier
    request may land after the response that followed it; at most 30 s)."""
    deadline = time.monotonic() + 30.0
    count = len(log_lines(server, needle))
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = len(log_lines(server, needle))
        if now != count:
            count, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= quiet_s:
            break
    return count


# --- streaming requests into a failing or stopping server ------------------------------


@dataclass
class Stream:
    """One completion (streaming unless ``stream=False``) read on its own thread."""

    url: str
    prompt: list[int]
    max_tokens: int = 400
    stream: bool = True
    tokens: int = 0
    first_token: threading.Event = field(default_factory=threading.Event)
    outcome: str = "running"  # done | error | dropped
    error: str = ""
    events: list[float] = field(default_factory=list)
    ended_at: float = 0.0
    thread: threading.Thread | None = None

    def start(self) -> Stream:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        body = {
            "model": "ref",
            "prompt": self.prompt,
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": self.stream,
        }
        try:
            with requests.post(
                f"{self.url}/v1/completions", json=body, stream=self.stream, timeout=120
            ) as resp:
                if not self.stream and resp.status_code == 200:
                    self.outcome = "done"
                    return
                if resp.status_code != 200:
                    self.outcome, self.error = "error", f"HTTP {resp.status_code}: {resp.text}"
                    return
                for raw in resp.iter_lines(chunk_size=None):  # as it arrives
                    line = raw.decode(errors="replace")
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: ") :]
                    if data == "[DONE]":
                        self.outcome = "done" if self.outcome == "running" else self.outcome
                        return
                    event = json.loads(data)
                    if "error" in event:
                        self.outcome, self.error = "error", json.dumps(event["error"])
                        continue
                    self.tokens += 1
                    self.events.append(time.monotonic())
                    self.first_token.set()
            if self.outcome == "running":
                self.outcome = "dropped"
        except requests.RequestException as exc:
            self.outcome, self.error = "dropped", repr(exc)
        finally:
            self.ended_at = time.monotonic()

    @property
    def stalled_at(self) -> float:
        """When the device stopped: the event before the longest gap (vLLM flushes chunks as the
        engine dies, so the last event is not the fault's time)."""
        times = [*self.events, self.ended_at]
        gaps = [(b - a, a) for a, b in itertools.pairwise(times)]
        return max(gaps)[1] if gaps else self.ended_at

    def join(self, timeout: float) -> None:
        assert self.thread is not None
        self.thread.join(timeout)


def health_non_200_at(url: str, deadline: float) -> float | None:
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/health", timeout=2).status_code != 200:
                return time.monotonic()
        except requests.RequestException:
            return time.monotonic()  # the server is gone: certainly not healthy
        time.sleep(0.2)
    return None


# --- the conformance suite against a server --------------------------------------------------

CHECKS = "tt_conformance.checks"
SUITE_TIMEOUT_S = 900


@dataclass(frozen=True)
class SuiteRun:
    returncode: int
    stdout: str
    stderr: str
    report: Report | None

    @property
    def outcomes(self) -> dict[str, str]:
        assert self.report is not None, (
            f"no report (exit {self.returncode}):\n{self.stdout[-3000:]}"
        )
        return {c.id: c.outcome for c in self.report.checks}

    @property
    def reasons(self) -> dict[str, str]:
        assert self.report is not None
        return {c.id: c.reason for c in self.report.checks}


def run_suite(
    url: str, selection: Sequence[str], report_dir: Path, *options: str, device: str = "emulated"
) -> SuiteRun:
    """Run check modules/ids (``<module>::<test>`` under CHECKS) in a pytest subprocess, as a
    user does, without expectations; the run's report (if one was written) comes back."""
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", *(f"{CHECKS}.{s}" for s in selection),
        "--tt-server-url", url,
        "--tt-device", device,
        "--tt-report-dir", str(report_dir),
        "--tt-baselines-dir", str(report_dir / "no-baselines"),  # no expectations apply
        "-q", "-n", "0", "-p", "no:cacheprovider", *options,
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S, check=False
    )
    latest = report_dir / "latest.json"
    report = load_report(latest) if latest.is_file() else None
    return SuiteRun(proc.returncode, proc.stdout, proc.stderr, report)


# --- references ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def _hf_model(model_dir: str) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return model.eval()


def hf_greedy(prompt_ids: list[int], max_tokens: int, model_dir: Path = MODEL_DIR) -> list[int]:
    """Hugging Face greedy continuation (no EOS stop), float32."""
    model = _hf_model(str(model_dir))
    ids = torch.tensor([prompt_ids])
    out: list[int] = []
    with torch.no_grad():
        result = model(ids, use_cache=True)
        for _ in range(max_tokens):
            token = int(result.logits[0, -1].argmax())
            out.append(token)
            result = model(torch.tensor([[token]]), cache=result.cache, use_cache=True)
    return out


def vocab_size(model_dir: Path = MODEL_DIR) -> int:
    import json

    return int(json.loads((model_dir / "config.json").read_text())["vocab_size"])


def text_id_end(model_dir: Path = MODEL_DIR) -> int:
    """One past the last ordinary (non-special) token id: the special tokens sit on top of the
    vocabulary (as in Llama 3), so ``range(text_id_end())`` is ordinary text."""
    import json

    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    special = [t["id"] for t in tokenizer["added_tokens"] if t.get("special")]
    end = min(special, default=vocab_size(model_dir))
    assert set(special) == set(range(end, end + len(special))), "specials are not on top"
    return end


def mixed_prompts(n: int, seed: int = 0, max_len: int = 200, min_len: int = 1) -> list[list[int]]:
    """Deterministic token-id prompts of mixed lengths (1 token to beyond 3 blocks of 64)."""
    rng = random.Random(seed)
    end = text_id_end()
    lengths = [min_len, 2, 63, 64, 65, 127, 128, 129, max_len]
    while len(lengths) < n:
        lengths.append(rng.randint(min_len, max_len))
    # Ordinary ids only, so prompts look like text to the model.
    return [[rng.randrange(end) for _ in range(length)] for length in lengths[:n]]


def shared_prefix_prompts(n: int, prefix_len: int, seed: int = 1) -> list[list[int]]:
    rng = random.Random(seed)
    end = text_id_end()
    prefix = [rng.randrange(end) for _ in range(prefix_len)]
    return [prefix + [rng.randrange(end) for _ in range(rng.randint(1, 40))] for _ in range(n)]
