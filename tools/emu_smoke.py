"""Smoke run of the emulated TT server: start, health, completions (plain, streaming, chat), stop.

    python tools/emu_smoke.py [--model DIR] [--mesh N300]

Prints the engine start-up time to healthy and the tokens/s of a concurrent batch, and exits
non-zero on the first failure. The server is stopped in every case.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import sys
import time
from pathlib import Path

import requests

from vllm_tt_plugin.emulation.server import BUNDLED_MODEL, EmulatedServer


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"emu-smoke FAILED: {what}")
    print(f"  ok  {what}")


def run(server: EmulatedServer) -> None:
    url, model = server.url, server.model_name
    r = requests.get(f"{url}/health", timeout=10)
    check(r.status_code == 200, "GET /health is 200")
    models = requests.get(f"{url}/v1/models", timeout=10).json()
    check(models["data"][0]["id"] == model, f"/v1/models lists {model}")

    body = {"model": model, "prompt": "1 2 3 4 5", "max_tokens": 8, "temperature": 0}
    r = requests.post(f"{url}/v1/completions", json=body, timeout=120)
    check(r.status_code == 200 and r.json()["choices"][0]["text"] != "", "plain completion")
    print(f"      '1 2 3 4 5' -> {r.json()['choices'][0]['text']!r}")

    chunks = []
    with requests.post(
        f"{url}/v1/completions", json={**body, "stream": True}, stream=True, timeout=120
    ) as r:
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                chunks.append(json.loads(line[6:])["choices"][0]["text"])
    streamed = "".join(chunks)
    check(len(chunks) >= 2, f"streaming completion ({len(chunks)} chunks)")
    plain = requests.post(f"{url}/v1/completions", json=body, timeout=120).json()
    check(streamed == plain["choices"][0]["text"], "streamed text equals the plain greedy text")

    chat = {
        "model": model,
        "messages": [{"role": "user", "content": "What day comes after Monday?"}],
        "max_tokens": 24,
        "temperature": 0,
    }
    r = requests.post(f"{url}/v1/chat/completions", json=chat, timeout=120)
    check(r.status_code == 200, "chat completion")
    print(f"      chat -> {r.json()['choices'][0]['message']['content']!r}")

    prompts = [f"{i} {i + 1} {i + 2}" for i in range(16)]
    start = time.perf_counter()

    def one(prompt: str) -> int:
        resp = requests.post(
            f"{url}/v1/completions",
            json={
                "model": model,
                "prompt": prompt,
                "max_tokens": 32,
                "temperature": 0,
                "ignore_eos": True,
            },
            timeout=300,
        )
        resp.raise_for_status()
        return int(resp.json()["usage"]["completion_tokens"])

    with cf.ThreadPoolExecutor(len(prompts)) as pool:
        tokens = sum(pool.map(one, prompts))
    elapsed = time.perf_counter() - start
    check(tokens == 32 * len(prompts), f"{len(prompts)} concurrent requests completed")
    print(f"  throughput: {tokens} tokens in {elapsed:.2f} s = {tokens / elapsed:.1f} tok/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, default=BUNDLED_MODEL)
    parser.add_argument("--mesh", default="N300")
    args = parser.parse_args()
    server = EmulatedServer(
        model=args.model,
        mesh_device=args.mesh,
        vllm_args=["--max-num-seqs", "16", "--max-model-len", "1024"],
    )
    started = time.perf_counter()
    with server:
        print(
            f"emu-smoke: server healthy after {time.perf_counter() - started:.1f} s ({server.url})"
        )
        run(server)
    print("emu-smoke: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
