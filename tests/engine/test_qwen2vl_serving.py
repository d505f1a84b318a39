"""Engine tests: an mRoPE vision-language model through the OpenAI server on the emulated mesh.

The server serves `fixtures/models/tt-reference-qwen2vl` (HF Qwen2-VL: a small vision tower in
front of the bundled trained LM) as `ReferenceQwen2VLForConditionalGeneration`. Chat requests
carry zero, one or two images of different aspect ratios as data URLs; the reference processor
expands each `<|image_pad|>` into the image's grid of placeholders, the TT runner hands prefill
`pixel_values` and `image_grid_thw`, the model returns each request's `rope_deltas`, and every
decode step rotates with the per-slot deltas the runner sends (`rope_deltas_all_users`), through
slot moves as requests finish and join. Greedy tokens must equal transformers'
`Qwen2VLForConditionalGeneration.generate` token for token: with device sampling and async
decode, with the same image in concurrent requests, after preemption (a resumed request is
prefilled again with its generated tokens, so its positions come from the whole sequence), and
with the chunked-prefill capability variant under a 32-token budget (each chunk's positions
continue the request's earlier chunks, also across a cut inside an image).
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
from tests.engine.harness import Stream, live_stats, metric, serve
from tests.engine.images import data_url, image

MODEL = REPO / "fixtures" / "models" / "tt-reference-qwen2vl"
MAX_TOKENS = 12
TEXTS = [
    "What is this?",
    "Describe the picture in a few words.",
    "Count: one two three",
    "Tell me a story about a cat and a dog who live in a small house near the sea.",
]
ARGS = ["--max-num-seqs", "4", "--max-model-len", "512", "--limit-mm-per-prompt", '{"image": 2}']


def chat(
    url: str,
    model: str,
    images: list[int],
    text: str,
    max_tokens: int = MAX_TOKENS,
    **params: Any,
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": data_url(image(seed))}} for seed in images
    ]
    content.append({"type": "text", "text": text})
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "return_token_ids": True,
        **params,
    }
    r = requests.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    return {"prompt": out["prompt_token_ids"], "tokens": out["choices"][0]["token_ids"]}


@functools.cache
def hf() -> tuple[Any, Any]:
    from transformers import AutoImageProcessor, Qwen2VLForConditionalGeneration

    processor = AutoImageProcessor.from_pretrained(MODEL)
    model = Qwen2VLForConditionalGeneration.from_pretrained(MODEL, dtype=torch.float32).eval()
    return processor, model


def hf_inputs(prompt_ids: list[int], images: list[int]) -> dict[str, Any]:
    processor, model = hf()
    input_ids = torch.tensor([prompt_ids])
    inputs: dict[str, Any] = {"input_ids": input_ids}
    if images:
        inputs.update(processor([image(s) for s in images], return_tensors="pt"))
        inputs["mm_token_type_ids"] = (input_ids == model.config.image_token_id).int()
    return inputs


def hf_greedy(
    prompt_ids: list[int], images: list[int], max_tokens: int, ignore_eos: bool = False
) -> list[int]:
    """transformers' Qwen2-VL on the prompt ids vLLM built (placeholders already expanded)."""
    _, model = hf()
    eos = model.generation_config.eos_token_id
    with torch.no_grad():
        out = model.generate(
            **hf_inputs(prompt_ids, images),
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=None if ignore_eos else eos,
        )
    generated = out[0, len(prompt_ids) :].tolist()
    if ignore_eos or eos not in generated:
        return generated
    return generated[: generated.index(eos) + 1]


def hf_rope_delta(prompt_ids: list[int], images: list[int]) -> int:
    inputs = hf_inputs(prompt_ids, images)
    if not images:
        return 0
    _, model = hf()
    _, delta = model.model.get_rope_index(
        inputs["input_ids"],
        mm_token_type_ids=inputs["mm_token_type_ids"],
        image_grid_thw=inputs["image_grid_thw"],
    )
    return int(delta)


def plan() -> list[tuple[list[int], str]]:
    out: list[tuple[list[int], str]] = []
    for i in range(12):
        images = [[], [i], [i, 100 + i]][i % 3]
        out.append((images, TEXTS[i % len(TEXTS)]))
    out.append(([3], TEXTS[1]))  # image 3 again, another text: the same image concurrently
    return out


def check_parity(
    requests_plan: list[tuple[list[int], str]],
    results: list[dict[str, Any]],
    max_tokens: int = MAX_TOKENS,
    ignore_eos: bool = False,
) -> list[int]:
    """Every result equals transformers; returns each request's rope delta."""
    config = json.loads((MODEL / "config.json").read_text())
    processor, _ = hf()
    bad, deltas = [], []
    for i, ((images, _), got) in enumerate(zip(requests_plan, results, strict=True)):
        grids = processor([image(s) for s in images])["image_grid_thw"] if images else []
        placeholders = sum(int(torch.as_tensor(g).prod()) // 4 for g in grids)
        assert got["prompt"].count(config["image_token_id"]) == placeholders, f"request {i}"
        want = hf_greedy(got["prompt"], images, max_tokens, ignore_eos)
        if got["tokens"] != want:
            bad.append(f"request {i} ({len(images)} image(s)): {got['tokens']} != HF {want}")
        deltas.append(hf_rope_delta(got["prompt"], images))
    assert not bad, "Qwen2-VL outputs differ from transformers:\n" + "\n".join(bad)
    return deltas


def run_all(
    url: str,
    model: str,
    requests_plan: list[tuple[list[int], str]],
    max_tokens: int = MAX_TOKENS,
    **params: Any,
) -> list[Any]:
    with cf.ThreadPoolExecutor(max_workers=8) as pool:
        jobs = [pool.submit(chat, url, model, *job, max_tokens, **params) for job in requests_plan]
        return [job.result() for job in jobs]


# The slot move: a text request decodes in slot 0, the two-image request joins in slot 1 and
# outlives it, so the runner compacts it into slot 0 and its rope delta must move with it.
# `ignore_eos` (here and in HF) keeps EOS from ending the image request first; `min_tokens`
# would not do: it samples on the host, whose steps reload every slot instead of moving them.
FIRST_TOKENS, MOVED_TOKENS = 96, 240


def run_slot_move(url: str, model: str) -> tuple[dict[str, Any], Stream]:
    first = Stream(url, prompt=list(range(3, 40)), max_tokens=FIRST_TOKENS).start()
    assert first.first_token.wait(120), f"the slot-0 request never streamed: {first.error}"
    moved = chat(url, model, [5, 105], TEXTS[0], MOVED_TOKENS, ignore_eos=True)
    first.join(120)
    assert first.outcome == "done", (first.outcome, first.error)
    return moved, first


def test_qwen2vl_parity_device_sampling_async_concurrent() -> None:
    if not (MODEL / "config.json").is_file():
        pytest.fail(f"{MODEL} is missing: run `python tools/make_qwen2vl_checkpoint.py`")
    requests_plan = plan()
    args = [*ARGS, "--async-scheduling"]
    with serve(model=MODEL, tt={"sample_on_device_mode": "all"}, vllm_args=args) as server:
        results = run_all(server.url, server.model_name, requests_plan)
        remaps_before = metric(server.url, "tt_slot_remaps_total")
        moved, first = run_slot_move(server.url, server.model_name)
        remaps_after = metric(server.url, "tt_slot_remaps_total")
        stats = live_stats(server)
    deltas = check_parity(requests_plan, results)
    # The images' grids give several distinct nonzero deltas: decode positions depend on them.
    assert len({d for d in deltas if d}) >= 3, deltas
    assert stats["device_sampled_steps"] > 0 and stats["overlapped_decodes"] > 0
    # The move is only certain if the image request was decoding before the first one ended.
    assert remaps_after > remaps_before, (
        "no decode slot moved when the slot-0 request ended "
        f"({first.ended_at - first.events[0]:.2f} s after its first token; the image request "
        "must have been decoding beside it by then)"
    )
    move_plan = [([5, 105], TEXTS[0])]
    (delta,) = check_parity(move_plan, [moved], MOVED_TOKENS, ignore_eos=True)
    assert delta != 0, "the moved request's delta is 0: a wrong delta would go unseen"


def test_qwen2vl_parity_after_preemption() -> None:
    """A KV pool too small for four concurrent two-image requests to grow: some are preempted
    and resumed, prefilled again from position 0 with their generated tokens (host sampling).
    ``ignore_eos`` (here and in HF): every request must grow, whatever length the checkpoint's
    own answer has."""
    requests_plan = [([i, 50 + i], TEXTS[3]) for i in range(4)]
    max_tokens = 48
    # A 64-token budget leaves 5 usable 64-token blocks; each request grows to 2 blocks.
    env = {"TT_REFERENCE_MAX_TOKENS_ALL_USERS": "64"}
    args = [*ARGS[:2], "--max-model-len", "256", *ARGS[4:]]
    with serve(model=MODEL, vllm_args=args, env=env) as server:
        results = run_all(server.url, server.model_name, requests_plan, max_tokens, ignore_eos=True)
        preemptions = metric(server.url, "vllm:num_preemptions_total")
    check_parity(requests_plan, results, max_tokens, ignore_eos=True)
    assert preemptions > 0, "the small KV pool never preempted a request"


def test_qwen2vl_chunked_prefill_variant_parity() -> None:
    """tt-metal's Qwen2.5-VL prefills whole prompts; the chunked variant proves the plugin's
    chunked mRoPE path: each chunk continues the positions (inside an image too) and returns
    the delta after it."""
    requests_plan = plan()[:9]
    override = (
        "TTReferenceQwen2VLForConditionalGeneration="
        "vllm_tt_plugin.test_models.reference_qwen2vl:ReferenceQwen2VLChunkedPrefill"
    )
    args = [*ARGS, "--max-num-batched-tokens", "32"]
    env = {"TT_MODEL_CLASS_OVERRIDES": override}
    with serve(model=MODEL, vllm_args=args, env=env) as server:
        results = run_all(server.url, server.model_name, requests_plan)
        stats = live_stats(server)
    check_parity(requests_plan, results)
    longest = max(len(r["prompt"]) for r in results)
    # Counted per row: a step may batch several requests, so step counts cannot tell.
    assert longest > 32 and stats["prefill_chunks"] > 0, "nothing was chunked"
