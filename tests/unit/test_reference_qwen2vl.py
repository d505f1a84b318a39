"""The reference Qwen2-VL model (no engine), driven with contract calls on an emulated mesh:
image features are transformers' Qwen2-VL features, a batched prefill returns each row's rope
delta, decode rotates with the per-slot deltas it was sent (moved by ``slot_remap`` when none
are sent), greedy tokens equal transformers' ``generate``, and misuse is refused by name."""

from __future__ import annotations

import functools
import inspect
import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

from tests.checkpoint_files import assert_same_checkpoint
from tests.conftest import REPO
from tests.tool_modules import load_tool
from vllm_tt_plugin.emulation.mesh import EmulatedMeshDevice
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.launch.mesh_spec import NAMED_MESHES
from vllm_tt_plugin.test_models.core import ReferenceModelError
from vllm_tt_plugin.test_models.reference_qwen2vl import (
    ReferenceQwen2VLChunkedPrefill,
    ReferenceQwen2VLForConditionalGeneration,
)

MODEL = REPO / "fixtures" / "models" / "tt-reference-qwen2vl"
BS, WIDTH, NUM_BLOCKS, SLOTS = 16, 8, 40, 4
STEPS = 8
NO_RELOAD = dict(
    reload_inputs=False, reload_page_table=False, reload_sampling_params=False,
    reset_sampling_state=False,
)  # fmt: skip
FULL_RELOAD = {**NO_RELOAD, "reload_inputs": True}
# Contract v2: int32 ids; prefill tokens from position 0, decode tokens [pad, 1].
IDS = torch.int32


@functools.cache
def hf_model() -> Any:
    from transformers import Qwen2VLForConditionalGeneration

    return Qwen2VLForConditionalGeneration.from_pretrained(MODEL, dtype=torch.float32).eval()


@functools.cache
def image_processor() -> Any:
    return AutoImageProcessor.from_pretrained(MODEL)


@functools.cache
def special(name: str) -> int:
    """A chat marker's id, from the bundled tokenizer (the markers sit at the vocab's top)."""
    ids = AutoTokenizer.from_pretrained(MODEL).convert_tokens_to_ids([f"<|{name}|>"])
    assert ids[0] is not None, name
    return int(ids[0])


def picture(seed: int) -> Any:
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    size = (rng.randint(24, 80), rng.randint(24, 80))
    image = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    for _ in range(3):
        x0, y0 = rng.randrange(size[0]), rng.randrange(size[1])
        draw.rectangle(
            (x0, y0, x0 + rng.randint(4, 30), y0 + rng.randint(4, 30)),
            fill=tuple(rng.randrange(256) for _ in range(3)),
        )
    return image


def request(seeds: list[int], text: list[int]) -> tuple[list[int], dict[str, torch.Tensor]]:
    """Prompt ids (bos, user, each image: vision start, its placeholders, vision end, the text,
    end, assistant) and its pixels."""
    config = hf_model().config
    ids: list[int] = [special("bos"), special("user")]
    pixels: dict[str, torch.Tensor] = {}
    if seeds:
        pixels = dict(image_processor()([picture(s) for s in seeds], return_tensors="pt"))
        for grid in pixels["image_grid_thw"]:
            count = int(grid.prod()) // 4
            ids += [config.vision_start_token_id] + [config.image_token_id] * count
            ids += [config.vision_end_token_id]
    return ids + text + [special("end"), special("assistant")], pixels


def per_image(pixels: dict[str, torch.Tensor]) -> tuple[Any, Any]:
    """The runner's form of a row's images: one pixel tensor and one grid per image."""
    if not pixels:
        return None, None
    grids = list(pixels["image_grid_thw"])
    sizes = [int(g.prod()) for g in grids]
    return list(pixels["pixel_values"].split(sizes)), grids


def hf_greedy(ids: list[int], pixels: dict[str, torch.Tensor]) -> list[int]:
    model = hf_model()
    input_ids = torch.tensor([ids])
    extra: dict[str, Any] = dict(pixels)
    if pixels:
        extra["mm_token_type_ids"] = (input_ids == model.config.image_token_id).int()
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, max_new_tokens=STEPS, do_sample=False, **extra)
    return out[0, len(ids) :].tolist()  # up to and with EOS


@pytest.fixture(params=[ReferenceQwen2VLForConditionalGeneration])
def qwen(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    config = AutoConfig.from_pretrained(MODEL)
    mesh = EmulatedMeshDevice(NAMED_MESHES["N300"], step_time_s=0.0)
    model = request.param.initialize_vllm_model(config, mesh, SLOTS, max_seq_len=BS * WIDTH)
    heads = model.sharding.kv_heads_per_shard
    specs = [
        ((NUM_BLOCKS, heads, BS, model.dims.head_dim), torch.float32, i)
        for i in range(model.dims.num_layers)
    ]
    kv = model.allocate_kv_cache_per_layer(specs)
    yield model, kv
    mesh.close()


def table(first_block: int) -> torch.Tensor:
    return torch.arange(first_block, first_block + WIDTH, dtype=torch.int32)


def test_capabilities_and_prefill_signature_are_tt_metal_qwen25_vl_ones() -> None:
    """models/demos/qwen25_vl/tt/generator_vllm.py: its declared capabilities, and
    ``prefill_forward(tokens, page_table, kv_cache, prompt_lens, enable_trace, **kwargs)``."""
    cls = ReferenceQwen2VLForConditionalGeneration
    caps = ModelCapabilities.from_model_class(cls)
    assert not caps.supports_prefix_caching and not caps.supports_chunked_prefill
    assert caps.supports_async_decode and caps.supports_sample_on_device
    assert caps.max_device_top_k == 32
    params = list(inspect.signature(cls.prefill_forward).parameters.values())
    names = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert names == ["self", "tokens", "page_table", "kv_cache", "prompt_lens", "enable_trace"]
    assert params[-1].kind is inspect.Parameter.VAR_KEYWORD


def test_the_tool_rebuilds_the_bundled_checkpoint(tmp_path: Path) -> None:
    """Fixed seed: the bundled checkpoint is exactly what tools/make_qwen2vl_checkpoint.py
    makes."""
    tool = load_tool("make_qwen2vl_checkpoint")
    tool.build(tool.DEFAULT_SRC, tmp_path / "out")
    # Every file and weight exactly, not what transformers stamps in on its own (its release, how
    # the tokenizer's source was found): tests/checkpoint_files.py.
    assert_same_checkpoint(tmp_path / "out", MODEL)


def test_image_features_equal_transformers(qwen: tuple[Any, Any]) -> None:
    model, _ = qwen
    pixels = image_processor()([picture(0), picture(1)], return_tensors="pt")
    with torch.no_grad():
        want = torch.cat(hf_model().model.get_image_features(**pixels).pooler_output)
    got = model.image_encoder(pixels["pixel_values"], pixels["image_grid_thw"])
    assert got.shape == (int(pixels["image_grid_thw"].prod(-1).sum()) // 4, 128)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_greedy_prefill_and_decode_equal_transformers(qwen: tuple[Any, Any]) -> None:
    """Three requests in one prefill (two images, none, one), then decode with the per-slot
    deltas; midway the slots are permuted with ``slot_remap`` and no deltas sent."""
    model, kv = qwen
    # Warm-up runs on scratch state (text positions) and must leave nothing behind.
    model.warmup_model_prefill(kv_cache=kv, enable_trace=False, can_sample_on_device=True)
    model.warmup_model_decode(
        kv_cache=kv, enable_trace=False, max_batch_size=SLOTS, num_blocks=WIDTH,
        can_sample_on_device=True,
    )  # fmt: skip
    plans = [([3, 4], [200, 201, 203]), ([], [300, 301]), ([7], [200])]  # none stops early
    prompts = [request(seeds, text) for seeds, text in plans]
    want = [hf_greedy(ids, pixels) for ids, pixels in prompts]
    lens = [len(ids) for ids, _ in prompts]
    tokens = torch.zeros((3, max(lens)), dtype=IDS)
    for row, (ids, _) in enumerate(prompts):
        tokens[row, : len(ids)] = torch.tensor(ids)
    slots = [2, 0, 3]  # slot 1 stays empty
    tables = torch.stack([table(1 + WIDTH * r) for r in range(3)])
    logits, deltas = model.prefill_forward(
        tokens=tokens,
        page_table=tables,
        kv_cache=kv,
        prompt_lens=lens,
        enable_trace=False,
        start_pos=[0, 0, 0],
        empty_slots=slots,
        pixel_values=[per_image(p)[0] for _, p in prompts],
        image_grid_thw=[per_image(p)[1] for _, p in prompts],
    )
    hf_deltas = []
    for ids, pixels in prompts:
        input_ids = torch.tensor([ids])
        if pixels:
            _, d = hf_model().model.get_rope_index(
                input_ids,
                mm_token_type_ids=(input_ids == hf_model().config.image_token_id).int(),
                image_grid_thw=pixels["image_grid_thw"],
            )
            hf_deltas.append(int(d))
        else:
            hf_deltas.append(0)
    assert deltas.reshape(-1).tolist() == hf_deltas and hf_deltas[0] != 0
    got: list[list[int]] = [[int(t)] for t in logits.argmax(-1)]
    assert model.images_encoded == 3

    slot_of = dict(enumerate(slots))  # request -> slot
    for step in range(1, STEPS):
        remap = None
        if step == 4:  # move every request: slot i takes what slot remap[i] held
            remap = torch.tensor([3, 2, 1, 0])
            slot_of = {r: int((remap == s).nonzero()) for r, s in slot_of.items()}
        tok = torch.zeros((SLOTS, 1), dtype=IDS)
        pos = torch.full((SLOTS,), -1, dtype=IDS)
        page = torch.zeros((SLOTS, WIDTH), dtype=torch.int32)
        sent = torch.zeros(SLOTS, dtype=torch.int64)
        for r, s in slot_of.items():
            tok[s, 0], pos[s] = got[r][-1], lens[r] + step - 1
            page[s] = tables[r]
            sent[s] = hf_deltas[r]
        out, _ = model.decode_forward(  # (logits [slots, 1, V], logprobs placeholder)
            tokens=tok,
            page_table=page,
            kv_cache=kv,
            start_pos=pos,
            enable_trace=False,
            read_from_device=True,
            slot_remap=remap,
            rope_deltas_all_users=None if step >= 4 else sent,
            **FULL_RELOAD,
        )
        for r, s in slot_of.items():
            got[r].append(int(out[s, 0].argmax()))
    assert [g[: len(w)] for g, w in zip(got, want, strict=True)] == want
    assert min(len(w) for w in want) > 4  # every request decoded past the slot move
    assert model.rope_deltas.tolist() == [hf_deltas[r] if r is not None else 0 for r in (
        {s: r for r, s in slot_of.items()}.get(i) for i in range(SLOTS)
    )]  # fmt: skip


def test_decode_uses_the_deltas_it_was_sent(qwen: tuple[Any, Any]) -> None:
    """Wrong deltas change the logits: the position rule is live in decode."""
    model, kv = qwen
    ids, pixels = request([3], [40, 41])
    tokens = torch.tensor([ids], dtype=IDS)
    logits, deltas = model.prefill_forward(
        tokens=tokens, page_table=table(1)[None], kv_cache=kv, prompt_lens=[len(ids)],
        enable_trace=False, empty_slots=[0], pixel_values=[per_image(pixels)[0]],
        image_grid_thw=[per_image(pixels)[1]],
    )  # fmt: skip
    assert int(deltas) != 0
    outs = []
    for sent in (int(deltas), 0):
        out, _ = model.decode_forward(
            tokens=torch.tensor([[int(logits.argmax())], [0], [0], [0]], dtype=IDS),
            page_table=torch.cat([table(1)[None], torch.zeros((3, WIDTH), dtype=torch.int32)]),
            kv_cache=kv, start_pos=torch.tensor([len(ids), -1, -1, -1], dtype=IDS),
            enable_trace=False, read_from_device=True,
            rope_deltas_all_users=torch.tensor([sent, 0, 0, 0]), **FULL_RELOAD,
        )  # fmt: skip
        outs.append(out[0, 0])
    assert not torch.allclose(outs[0], outs[1])


def test_misuse_is_refused(qwen: tuple[Any, Any]) -> None:
    model, kv = qwen
    ids, pixels = request([3], [40])
    call = dict(
        tokens=torch.tensor([ids], dtype=IDS), page_table=table(1)[None], kv_cache=kv,
        prompt_lens=[len(ids)], enable_trace=False,
    )  # fmt: skip
    with pytest.raises(ReferenceModelError, match=r"start_pos=\[16\].*whole sequences"):
        model.prefill_forward(**call, start_pos=[16])
    with pytest.raises(ReferenceModelError, match="row 0: image placeholder at position 3"):
        model.prefill_forward(**call)
    cut = ids.index(hf_model().config.vision_end_token_id) - 2  # inside the image
    with pytest.raises(ReferenceModelError, match="the prompt ends after .* placeholders of"):
        model.prefill_forward(
            **{**call, "tokens": torch.tensor([ids[:cut]], dtype=IDS), "prompt_lens": [cut]},
            pixel_values=[per_image(pixels)[0]],
            image_grid_thw=[per_image(pixels)[1]],
        )
    with pytest.raises(ReferenceModelError, match="1 pixel_values entries but 0 image_grid_thw"):
        model.prefill_forward(**call, pixel_values=[per_image(pixels)[0]])
    with pytest.raises(ReferenceModelError, match="pixel_values hold .* patches"):
        model.prefill_forward(
            **call,
            pixel_values=[[pixels["pixel_values"][:-4]]],
            image_grid_thw=[per_image(pixels)[1]],
        )
    with pytest.raises(ReferenceModelError, match="rope_deltas_all_users has 2 entries"):
        model.decode_forward(
            tokens=torch.zeros((SLOTS, 1), dtype=IDS),
            page_table=torch.zeros((SLOTS, WIDTH), dtype=torch.int32), kv_cache=kv,
            start_pos=torch.full((SLOTS,), -1, dtype=IDS), enable_trace=False,
            rope_deltas_all_users=[0, 0], **FULL_RELOAD,
        )  # fmt: skip
    config = AutoConfig.from_pretrained(MODEL)
    with pytest.raises(ReferenceModelError, match="optimizations='performance'.*must be None"):
        ReferenceQwen2VLForConditionalGeneration.initialize_vllm_model(
            config, model.mesh_device, SLOTS, optimizations="performance"
        )


def image_spans(ids: list[int]) -> list[tuple[int, int]]:
    """``[start, end)`` of each image's placeholders in a prompt."""
    image = hf_model().config.image_token_id
    starts = [i for i, t in enumerate(ids) if t == image and (i == 0 or ids[i - 1] != image)]
    return [(a, next(j for j in range(a, len(ids) + 1) if j == len(ids) or ids[j] != image))
            for a in starts]  # fmt: skip


# Where the chunks of a two-image prompt end, as fractions of the way through each image
# ("b" = before, "a" = after it): outside the images, inside the first (vLLM cuts an image that
# starts a chunk when the step's budget is short, docs/SCHEDULING.md), at and inside both.
CHUNK_CUTS = [("a0", "a1"), ("0.5", "a0", "1.25"), ("b0", "0.75", "1.5"), ("0.25", "0.5", "1.75")]


def cut_points(ids: list[int], cuts: tuple[str, ...]) -> list[int]:
    spans = image_spans(ids)
    points = []
    for cut in cuts:
        if cut[0] in "ab":
            lo, hi = spans[int(cut[1:])]
            points.append(lo - 1 if cut[0] == "b" else hi + 1)
        else:
            image, fraction = divmod(float(cut), 1.0)
            lo, hi = spans[int(image)]
            points.append(lo + max(1, int((hi - lo) * fraction)))
    return [*points, len(ids) - 3, len(ids)]


@pytest.mark.parametrize("cuts", CHUNK_CUTS, ids="-".join)
@pytest.mark.parametrize("qwen", [ReferenceQwen2VLChunkedPrefill], indirect=True)
def test_chunked_variant_continues_positions_across_chunks(
    qwen: tuple[Any, Any], cuts: tuple[str, ...]
) -> None:
    """Chunks cut outside and inside the images, each handed every image it overlaps (as the
    runner does): each returns the delta after its end, the last one the request's, and greedy
    decode equals transformers'."""
    model, kv = qwen
    ids, pixels = request([3, 4], [200, 201, 202, 203])
    images, grids = per_image(pixels)
    spans = image_spans(ids)
    assert len(spans) == 2 and all(hi - lo > 4 for lo, hi in spans)
    points = cut_points(ids, cuts)
    assert points == sorted(set(points)), points
    deltas = []
    for start, end in itertools.pairwise([0, *points]):
        items = [i for i, (lo, hi) in enumerate(spans) if lo < end and start < hi]
        logits, delta = model.prefill_forward(
            tokens=torch.tensor([ids[:end]], dtype=IDS),  # from position 0, as v2 sends
            page_table=table(1)[None], kv_cache=kv, prompt_lens=[end], enable_trace=False,
            start_pos=[start], empty_slots=[0],
            pixel_values=[[images[i] for i in items] or None],
            image_grid_thw=[[grids[i] for i in items] or None],
        )  # fmt: skip
        deltas.append(int(delta))
    input_ids = torch.tensor([ids])
    _, want_delta = hf_model().model.get_rope_index(
        input_ids,
        mm_token_type_ids=(input_ids == hf_model().config.image_token_id).int(),
        image_grid_thw=pixels["image_grid_thw"],
    )
    assert deltas[-2] == deltas[-1] == int(want_delta) != 0
    got = [int(logits.argmax())]
    for step in range(1, STEPS):
        out, _ = model.decode_forward(
            tokens=torch.tensor([[got[-1]], [0], [0], [0]], dtype=IDS),
            page_table=torch.cat([table(1)[None], torch.zeros((3, WIDTH), dtype=torch.int32)]),
            kv_cache=kv, start_pos=torch.tensor([len(ids) + step - 1, -1, -1, -1], dtype=IDS),
            enable_trace=False, read_from_device=True,
            rope_deltas_all_users=torch.tensor([deltas[-1], 0, 0, 0]), **FULL_RELOAD,
        )  # fmt: skip
        got.append(int(out[0, 0].argmax()))
    want = hf_greedy(ids, pixels)
    assert got[: len(want)] == want and len(want) > 4


def test_a_decode_is_one_device_step_and_its_deltas_load_is_not_one(
    qwen: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deltas load is queued ahead of the step as a load (``step=False``), so an emulated
    decode costs one configured step time, not two."""
    model, kv = qwen
    steps: list[bool] = []
    enqueue = model.mesh_device.enqueue

    def spy(fn: Any, started: float | None = None, step: bool = True) -> Any:
        steps.append(step)
        return enqueue(fn, started, step)

    monkeypatch.setattr(model.mesh_device, "enqueue", spy)
    ids, pixels = request([3], [40, 41])
    logits, deltas = model.prefill_forward(
        tokens=torch.tensor([ids], dtype=IDS), page_table=table(1)[None], kv_cache=kv,
        prompt_lens=[len(ids)], enable_trace=False, empty_slots=[0],
        pixel_values=[per_image(pixels)[0]], image_grid_thw=[per_image(pixels)[1]],
    )  # fmt: skip
    steps.clear()
    model.decode_forward(
        tokens=torch.tensor([[int(logits.argmax())], [0], [0], [0]], dtype=IDS),
        page_table=torch.cat([table(1)[None], torch.zeros((3, WIDTH), dtype=torch.int32)]),
        kv_cache=kv, start_pos=torch.tensor([len(ids), -1, -1, -1], dtype=IDS),
        enable_trace=False, read_from_device=True,
        rope_deltas_all_users=torch.tensor([int(deltas), 0, 0, 0]), **FULL_RELOAD,
    )  # fmt: skip
    assert steps == [False, True]  # the load, then the one step
