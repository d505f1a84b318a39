"""The reference LLaVA model (no engine): its image features are transformers' LLaVA features,
they land exactly on the placeholder embeddings a prefill chunk holds, and misuse is refused; the
bundled checkpoint is what its tool makes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoConfig

from tests.checkpoint_files import assert_same_checkpoint
from tests.conftest import REPO
from tests.tool_modules import load_tool
from vllm_tt_plugin.emulation.mesh import EmulatedMeshDevice
from vllm_tt_plugin.launch.mesh_spec import NAMED_MESHES
from vllm_tt_plugin.test_models.core import ReferenceModelError
from vllm_tt_plugin.test_models.inputs import PrefillRow
from vllm_tt_plugin.test_models.reference_vision import ReferenceLlavaForConditionalGeneration

MODEL = REPO / "fixtures" / "models" / "tt-reference-llava"


@pytest.fixture(scope="module")
def llava() -> Iterator[tuple[ReferenceLlavaForConditionalGeneration, Any]]:
    config = AutoConfig.from_pretrained(MODEL)
    mesh = EmulatedMeshDevice(NAMED_MESHES["N150"], step_time_s=0.0)
    model = ReferenceLlavaForConditionalGeneration.initialize_vllm_model(config, mesh, 2)
    yield model, config
    mesh.close()


def pixels(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn((n, 3, 32, 32), generator=torch.Generator().manual_seed(seed))


def row(
    tokens: list[int], start: int = 0, index: int = 0, before: list[int] | None = None
) -> PrefillRow:
    """A prefill row of ``tokens`` at ``start``; ``before``: the sequence's tokens ahead of it
    (what parse_prefill hands the model), when the test gives them."""
    ids = torch.tensor(tokens, dtype=torch.int64)
    prefix = None if before is None else torch.tensor(before, dtype=torch.int64)
    return PrefillRow(index, 0, None, start, start + len(tokens), ids, (), prefix)


def test_the_tool_rebuilds_the_bundled_checkpoint(tmp_path: Path) -> None:
    """Fixed seed: the bundled checkpoint is exactly what tools/make_llava_checkpoint.py makes,
    but for what transformers stamps in on its own (tests/checkpoint_files.py)."""
    tool = load_tool("make_llava_checkpoint")
    tool.build(tool.DEFAULT_SRC, tmp_path / "out")
    assert_same_checkpoint(tmp_path / "out", MODEL)


def test_image_features_equal_transformers(llava: tuple[Any, Any]) -> None:
    from transformers import LlavaForConditionalGeneration

    model, _ = llava
    hf = LlavaForConditionalGeneration.from_pretrained(MODEL, dtype=torch.float32).eval()
    with torch.no_grad():
        # transformers 5.x: the projected features per image, in pooler_output.
        want = torch.cat(hf.get_image_features(pixel_values=pixels(2)).pooler_output)
    got = model.image_encoder(pixels(2)).flatten(0, 1)
    assert got.shape == (32, model.dims.hidden_size)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_features_replace_exactly_the_placeholders(llava: tuple[Any, Any]) -> None:
    model, config = llava
    image = config.image_token_index
    tokens = [5, 6] + [image] * 16 + [7, 8]
    encoded = model.image_encoder(pixels(1))
    features = encoded.flatten(0, 1)
    model._pending_features = {0: encoded}
    try:
        embeds = model._prefill_embeds(row(tokens))
        # A prefix-cache hit inside the image: the chunk holds its last 6 placeholders.
        tail = model._prefill_embeds(row(tokens[12:], start=12, before=tokens[:12]))
    finally:
        model._pending_features = {}
    text = model.decoder.weights.embed
    assert embeds is not None and tail is not None
    torch.testing.assert_close(embeds[2:18], features)
    torch.testing.assert_close(embeds[[0, 1, 18, 19]], text[[5, 6, 7, 8]])
    torch.testing.assert_close(tail[:6], features[10:])
    assert model._prefill_embeds(row([5, 6, 7])) is None  # text rows keep token embeddings


@pytest.mark.parametrize("cut", [3, 9, 17, 18, 25])
def test_chunks_cut_inside_images_place_every_feature_row_once(
    llava: tuple[Any, Any], cut: int
) -> None:
    """vLLM can end a chunk inside an image (its disable_chunked_mm_input leaves an image cut
    when the chunk starts at it and the step's budget is short), and the next chunk starts
    there. Two chunks, each handed every image it overlaps, embed exactly as the whole prompt."""
    model, config = llava
    image = config.image_token_index
    tokens = [5] + [image] * 16 + [7] + [image] * 16 + [8]
    spans = [(1, 17), (18, 34)]
    encoded = model.image_encoder(pixels(2))

    def overlapping(start: int, end: int) -> torch.Tensor:  # what the runner hands a chunk
        return encoded[[i for i, (lo, hi) in enumerate(spans) if lo < end and start < hi]]

    try:
        model._pending_features = {0: encoded}
        whole = model._prefill_embeds(row(tokens))
        model._pending_features = {0: overlapping(0, cut)}
        head = model._prefill_embeds(row(tokens[:cut]))
        model._pending_features = {0: overlapping(cut, len(tokens))}
        rest = model._prefill_embeds(row(tokens[cut:], start=cut, before=tokens[:cut]))
    finally:
        model._pending_features = {}
    assert whole is not None and rest is not None
    torch.testing.assert_close(torch.cat([head, rest]), whole)


def test_placeholders_without_pixels_are_refused(llava: tuple[Any, Any]) -> None:
    model, config = llava
    with pytest.raises(ReferenceModelError, match="2 image placeholder.* no pixel_values"):
        model._prefill_embeds(row([5, config.image_token_index, config.image_token_index]))
    model._pending_features = {0: torch.zeros(1, 1, model.dims.hidden_size)}
    try:
        with pytest.raises(
            ReferenceModelError,
            match="2 image placeholders from image row 0 on, but features for 1",
        ):
            model._prefill_embeds(row([config.image_token_index] * 2))
    finally:
        model._pending_features = {}
