"""Engine tests: a vision-language model through the OpenAI server on the emulated mesh.

The server serves `fixtures/models/tt-reference-llava` (HF LLaVA: CLIP tower + projector + the
bundled Llama) as `ReferenceLlavaForConditionalGeneration`. Chat requests carry zero, one or two
images as data URLs; vLLM's API server expands each image into 16 placeholder tokens, the TT
runner hands each prefill chunk the pixels of the images it covers, and the model puts the image
features in place of the placeholders. Greedy tokens must equal transformers' LLaVA on the same
prompt ids and images, token for token, with chunked prefill (a 32-token budget: chunks end
right before images, or inside one that starts the chunk when the budget is short), device
sampling with async decode, prefix-cache hits past an image, and
the same image in concurrent requests (vLLM's encoder cache would share it; a TT model re-runs
its encoder per request).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import json
from typing import Any

import pytest
import requests
import torch

from tests.conftest import REPO
from tests.engine.harness import live_stats, metric, serve
from tests.engine.images import data_url, image

MODEL = REPO / "fixtures" / "models" / "tt-reference-llava"
MAX_TOKENS = 12
TEXTS = [
    "What is this?",
    "Describe the picture in a few words.",
    "Count: one two three",
    "Tell me a story about a cat and a dog who live in a small house near the sea.",
]
# Two images and a long question: more than one 64-token KV block, so a repeat hits the cache.
LONG = ([21, 121], " ".join(TEXTS) + " " + TEXTS[3])


def chat(url: str, model: str, images: list[int], text: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": data_url(image(seed))}} for seed in images
    ]
    content.append({"type": "text", "text": text})
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "return_token_ids": True,
    }
    r = requests.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    return {"prompt": out["prompt_token_ids"], "tokens": out["choices"][0]["token_ids"]}


@functools.cache
def hf_model() -> tuple[Any, Any]:
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    processor = AutoProcessor.from_pretrained(MODEL)
    model = LlavaForConditionalGeneration.from_pretrained(MODEL, dtype=torch.float32).eval()
    return processor, model


def hf_greedy(prompt_ids: list[int], images: list[int]) -> list[int]:
    """transformers' LLaVA on the prompt ids vLLM built (placeholders already expanded)."""
    processor, model = hf_model()
    inputs: dict[str, Any] = {"input_ids": torch.tensor([prompt_ids])}
    if images:
        pixels = processor.image_processor([image(s) for s in images], return_tensors="pt")
        inputs["pixel_values"] = pixels["pixel_values"]
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=MAX_TOKENS, do_sample=False)
    generated = out[0, len(prompt_ids) :].tolist()
    eos = model.generation_config.eos_token_id
    return generated[: generated.index(eos) + 1] if eos in generated else generated


@pytest.fixture(scope="module")
def requests_plan() -> list[tuple[list[int], str]]:
    plan: list[tuple[list[int], str]] = []
    for i in range(12):
        images = [[], [i], [i, 100 + i]][i % 3]
        plan.append((images, TEXTS[i % len(TEXTS)]))
    plan.append(([3], TEXTS[1]))  # image 3 again, another text: the same image concurrently
    plan.append(LONG)
    return plan


def test_vision_parity_chunked_device_sampling_async_prefix_cache(
    requests_plan: list[tuple[list[int], str]],
) -> None:
    if not (MODEL / "config.json").is_file():
        pytest.fail(f"{MODEL} is missing: run `python tools/make_llava_checkpoint.py`")
    args = ["--max-num-seqs", "4", "--max-model-len", "512", "--async-scheduling"]
    args += ["--max-num-batched-tokens", "32", "--limit-mm-per-prompt", '{"image": 2}']
    with serve(model=MODEL, tt={"sample_on_device_mode": "all"}, vllm_args=args) as server:
        model = server.model_name
        with cf.ThreadPoolExecutor(max_workers=8) as pool:
            jobs = [pool.submit(chat, server.url, model, im, text) for im, text in requests_plan]
            results = [job.result() for job in jobs]
        # The long request again: its first blocks (images included) are in the prefix cache.
        hits_before = metric(server.url, "vllm:prefix_cache_hits_total")
        again = chat(server.url, model, *LONG)
        hits = metric(server.url, "vllm:prefix_cache_hits_total") - hits_before
        stats = live_stats(server)
    assert len(again["prompt"]) > 64 and again == results[-1]
    assert hits > 0, "the repeated image prompt got no prefix-cache hit"

    bad = []
    for i, ((images, _), got) in enumerate(zip(requests_plan, results, strict=True)):
        want = hf_greedy(got["prompt"], images)
        if got["tokens"] != want:
            bad.append(f"request {i} ({len(images)} image(s)): {got['tokens']} != HF {want}")
    assert not bad, "vision outputs differ from transformers' LLaVA:\n" + "\n".join(bad)

    # vLLM expanded every image into its placeholders (16 per image for this checkpoint).
    config = json.loads((MODEL / "config.json").read_text())
    image_id, per_image = config["image_token_index"], config["image_seq_length"]
    counts = [r["prompt"].count(image_id) for r in results]
    assert counts == [per_image * len(im) for im, _ in requests_plan]
    assert stats["prefill_chunks"] > 0, "prompts were not chunked"
    assert stats["device_sampled_steps"] > 0


def test_image_request_to_a_text_only_model_is_a_clear_400() -> None:
    bundled = REPO / "fixtures" / "models" / "tt-reference-llama"
    with serve(model=bundled, vllm_args=["--max-num-seqs", "2", "--max-model-len", "256"]) as s:
        content = [
            {"type": "image_url", "image_url": {"url": data_url(image(0))}},
            {"type": "text", "text": "What is this?"},
        ]
        body = {"model": s.model_name, "messages": [{"role": "user", "content": content}]}
        r = requests.post(f"{s.url}/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 400, r.text
        assert "not a multimodal model" in r.json()["error"]["message"]
        assert requests.get(f"{s.url}/health", timeout=10).status_code == 200
