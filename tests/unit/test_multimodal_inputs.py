"""Multimodal prefill inputs and mRoPE deltas: the pure helpers, then the real runner.

The runner test drives TTScheduler (vLLM's scheduler) and TTWorker (the reference model on the
emulated mesh) in-process, step by step as vLLM's engine core does, with requests that carry
image items. It checks that each item's processed tensors reach ``prefill_forward`` exactly
once, in the chunk that covers its placeholder, and that an mRoPE model's rope deltas come back
on every decode step, per slot.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from vllm.multimodal.inputs import (
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    MultiModalSharedField,
    PlaceholderRange,
)
from vllm.sampling_params import SamplingParams
from vllm.v1.core.encoder_cache_manager import EncoderCacheManager
from vllm.v1.request import Request

from tests.unit.fakes.multimodal_models import RecordingVisionModel, rope_delta_of
from tests.unit.tiny_checkpoint import (
    BLOCK_HASHER,
    start_worker_and_scheduler,
    write_tiny_checkpoint,
)
from vllm_tt_plugin.adapter.model_adapter import ModelContractError, _split_mrope
from vllm_tt_plugin.step.multimodal import (
    decode_rope_deltas,
    prefill_multimodal_kwargs,
)

_ids = itertools.count()


def image(req_id: str, index: int, offset: int, length: int, fill: float) -> MultiModalFeatureSpec:
    elem = MultiModalFieldElem(
        data=torch.full((3, 4, 4), fill), field=MultiModalSharedField(batch_size=1)
    )
    return MultiModalFeatureSpec(
        data=MultiModalKwargsItem({"pixel_values": elem}),
        modality="image",
        identifier=f"{req_id}-img{index}",
        mm_position=PlaceholderRange(offset=offset, length=length),
    )


@dataclass
class Row:
    req_id: str
    mm_features: list[Any]
    start: int
    end: int


def pixel_fills(rows: list[Any] | None) -> list[list[float] | None]:
    return [None if items is None else [float(t[0, 0, 0]) for t in items] for items in rows or []]


def test_kwargs_carry_the_items_whose_placeholders_the_chunk_covers() -> None:
    a_items = [image("a", 0, 5, 10, 1.0), image("a", 1, 30, 10, 2.0)]
    c_items = [image("c", 0, 0, 8, 3.0)]
    # Chunks past every image (c's image is [0, 8), a's [5, 15) and [30, 40)): nothing sent.
    rows = [Row("a", a_items, 40, 64), Row("b", [], 0, 30), Row("c", c_items, 8, 40)]
    assert prefill_multimodal_kwargs(rows) == {}
    # a's chunk [20, 64) covers only its second image; b has none; c's covers its image.
    rows = [Row("a", a_items, 20, 64), Row("b", [], 0, 30), Row("c", c_items, 0, 40)]
    kwargs = prefill_multimodal_kwargs(rows)
    assert list(kwargs) == ["pixel_values"]
    assert pixel_fills(kwargs["pixel_values"]) == [[2.0], None, [3.0]]
    # A whole prompt in one chunk: both images, in prompt order.
    both = prefill_multimodal_kwargs([Row("a", a_items, 0, 64)])["pixel_values"]
    assert pixel_fills(both) == [[1.0, 2.0]]
    # A prefix-cache hit ending inside the first image still sends that image.
    inside = prefill_multimodal_kwargs([Row("a", a_items, 12, 20)])["pixel_values"]
    assert pixel_fills(inside) == [[1.0]]


def test_item_without_data_is_refused_by_name() -> None:
    feature = image("x", 0, 0, 4, 1.0)
    feature.data = None
    with pytest.raises(ValueError, match="request x: image item 0 .* without its processed data"):
        prefill_multimodal_kwargs([Row("x", [feature], 0, 4)])


def test_mrope_output_split() -> None:
    out, deltas = _split_mrope(("logits", torch.tensor([[3], [-2]])), 2)
    assert out == "logits" and deltas == [3, -2]
    with pytest.raises(ModelContractError, match=r"must return \(out, rope_deltas\)"):
        _split_mrope(torch.zeros(2, 5), 2)
    with pytest.raises(ModelContractError, match="1 rope_deltas for 2 rows"):
        _split_mrope(("x", torch.tensor([1])), 2)
    assert decode_rope_deltas([None, 4, None]).tolist() == [0, 4, 0]


# --- the real runner ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mrope_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # vLLM reads mrope_section as "this model uses mRoPE" (model_config.uses_mrope).
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    return write_tiny_checkpoint(tmp_path_factory.mktemp("ref-mrope"), rope_parameters=rope)


def request(prompt_len: int, images: list[tuple[int, int]], max_tokens: int) -> Request:
    rid = f"r{next(_ids)}"
    return Request(
        request_id=rid,
        prompt_token_ids=[(7 * i + prompt_len) % 100 + 5 for i in range(prompt_len)],
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0),
        pooling_params=None,
        mm_features=[
            image(rid, i, offset, length, float(10 * len(rid) + i))
            for i, (offset, length) in enumerate(images)
        ],
        block_hasher=BLOCK_HASHER,
    )


def test_runner_sends_each_image_once_and_rope_deltas_when_the_layout_changes(
    make_config: Any, mrope_checkpoint: Path
) -> None:
    config = make_config(
        model=mrope_checkpoint,
        model_class="tests.unit.fakes.multimodal_models:RecordingVisionModel",
        tt={"emulated_mesh": True},
        max_num_seqs=4,
        max_model_len=256,
        max_num_batched_tokens=64,
    )
    assert config.model_config.uses_mrope
    worker, sched = start_worker_and_scheduler(config, warm_up=False)
    try:
        # A text-only checkpoint gives the scheduler no encoder budget; a vision model would.
        sched.max_num_encoder_input_tokens = 256
        sched.encoder_cache_manager = EncoderCacheManager(cache_size=256)
        with_images = request(150, [(40, 30), (100, 20)], max_tokens=4)
        plain = request(20, [], max_tokens=4)
        for r in (with_images, plain):
            sched.add_request(r)
        model = worker.get_model()
        assert isinstance(model, RecordingVisionModel)
        slot_of: dict[str, int] = {}
        decodes = 0
        while sched.has_requests():
            out = sched.schedule()
            result = worker.execute_model(out)
            if result is None:  # a step with work: the model runs in sample_tokens
                result = worker.sample_tokens(None)
            sched.update_from_output(out, result)
            runner = worker.model_runner
            assert runner is not None
            for req_id in out.num_scheduled_tokens:
                state = runner.batch.requests.get(req_id)
                if state is not None and state.slot is not None:
                    slot_of[req_id] = state.slot
            decodes = len(model.decode_rope_deltas)
    finally:
        worker.shutdown()

    # Each image reached prefill exactly once, in the row of its request, in its own chunk.
    delivered = [
        [float(t[0, 0, 0]) for items in rows if items is not None for t in items]
        for rows in (call.get("pixel_values") for call in model.prefill_mm)
        if rows is not None
    ]
    base = 10 * len(with_images.request_id)
    assert sorted(v for step in delivered for v in step) == [base, base + 1]
    assert all(len(step) == 1 for step in delivered), delivered
    # rope_deltas_all_users: each live slot's delta (0 for empty slots) when the layout
    # changed or a request joined, None on steady steps.
    assert decodes >= 3
    want = {rope_delta_of(150): slot_of[with_images.request_id]}
    want[rope_delta_of(20)] = slot_of[plain.request_id]
    sent = [step for step in model.decode_rope_deltas if step is not None]
    assert model.decode_rope_deltas[0] is not None
    assert None in model.decode_rope_deltas  # steady steps send no deltas
    for step in sent:
        live = {d: i for i, d in enumerate(step) if d != 0}
        assert set(live) <= set(want) and all(live[d] == want[d] for d in live), step
    assert any(len([d for d in s if d]) == 2 for s in sent)


def test_mrope_variant_gets_each_joining_request_its_delta(
    make_config: Any, mrope_checkpoint: Path
) -> None:
    """The MRoPEDeltas reference variant refuses a decode that lacks the delta of a request
    that joined; serving requests that join at different steps runs clean, with the same
    greedy tokens as each request served alone."""
    from vllm_tt_plugin.test_models.reference_llama import WithMRoPEDeltas

    config = make_config(
        model=mrope_checkpoint,
        model_class="vllm_tt_plugin.test_models.variants:MRoPEDeltas",
        tt={"emulated_mesh": True, "sample_on_device_mode": "all"},
        max_num_seqs=4,
        max_model_len=256,
    )
    worker, sched = start_worker_and_scheduler(config, warm_up=False)

    def serve(requests: list[tuple[int, Request]]) -> dict[str, list[int]]:
        pending = sorted(requests, key=lambda x: x[0])
        step = 0
        while pending or sched.has_requests():
            while pending and pending[0][0] <= step:
                sched.add_request(pending.pop(0)[1])
            out = sched.schedule()
            result = worker.execute_model(out)
            if result is None:
                result = worker.sample_tokens(None)
            if hasattr(result, "get_output"):
                result = result.get_output()
            sched.update_from_output(out, result)
            step += 1
        return {r.request_id: list(r.output_token_ids) for _, r in requests}

    try:
        assert isinstance(worker.get_model(), WithMRoPEDeltas)
        lens = (30, 12, 45)
        together = serve([(3 * i, request(n, [], max_tokens=6)) for i, n in enumerate(lens)])
        alone = [serve([(0, request(n, [], max_tokens=6))]) for n in lens]
    finally:
        worker.shutdown()
    assert list(together.values()) == [next(iter(a.values())) for a in alone]
