"""vLLM multimodal processing for the reference Qwen2-VL checkpoint.

vLLM's own Qwen2-VL module cannot be imported on a host without torchvision (it imports
transformers' torchvision image processor), and transformers cannot even build a
``Qwen2VLProcessor`` there (it checks its video processor's class), so the reference model brings
a small processor of its own: the tokenizer encodes the prompt, transformers' PIL Qwen2-VL image
processor (``AutoImageProcessor`` falls back to it) turns each image into ``pixel_values``
(``grid_t * grid_h * grid_w`` patch rows) and its ``image_grid_thw``, and vLLM expands each
``<|image_pad|>`` of the prompt into ``grid_t * grid_h * grid_w / merge**2`` copies. The fields
are Qwen2-VL's: ``pixel_values`` sliced per image by its patch count, ``image_grid_thw`` one row
per image; the TT model receives both through ``prefill_forward``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import BatchFeature, Qwen2VLConfig
from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItems
from vllm.multimodal.parse import ImageSize, MultiModalDataItems
from vllm.multimodal.processing import (
    BaseDummyInputsBuilder,
    BaseMultiModalProcessor,
    BaseProcessingInfo,
    PromptReplacement,
    PromptUpdate,
)
from vllm.transformers_utils.processor import cached_image_processor_from_config

IMAGE_PAD = "<|image_pad|>"
# What vLLM's chat front end writes into the prompt text for each image of a message.
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


class ReferenceQwen2VLProcessingInfo(BaseProcessingInfo):  # type: ignore[misc]
    def get_hf_config(self) -> Qwen2VLConfig:
        return self.ctx.get_hf_config(Qwen2VLConfig)

    def get_image_processor(self) -> Any:
        return cached_image_processor_from_config(self.ctx.model_config)

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": None}

    def merge_size(self) -> int:
        return int(self.get_hf_config().vision_config.spatial_merge_size)

    def tokens_for_grid(self, grid_thw: Sequence[int]) -> int:
        t, h, w = (int(x) for x in grid_thw)
        return t * h * w // self.merge_size() ** 2

    def _factor_and_max_pixels(self) -> tuple[int, int]:
        vision = self.get_hf_config().vision_config
        factor = int(vision.patch_size) * self.merge_size()
        return factor, int(self.get_image_processor().size["longest_edge"])

    def get_image_size_with_most_features(self) -> ImageSize:
        # The processor keeps the area within max_pixels in multiples of ``factor``: the largest
        # square that fits has the most (merged) patches a square can have.
        factor, max_pixels = self._factor_and_max_pixels()
        side = max(factor, math.isqrt(max_pixels) // factor * factor)
        return ImageSize(width=side, height=side)

    def get_mm_max_tokens_per_item(
        self, seq_len: int, mm_counts: Mapping[str, int]
    ) -> Mapping[str, int]:
        factor, max_pixels = self._factor_and_max_pixels()
        return {"image": max(1, max_pixels // factor**2)}


class ReferenceQwen2VLDummyInputs(BaseDummyInputsBuilder[ReferenceQwen2VLProcessingInfo]):  # type: ignore[misc]
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        return IMAGE_PAD * mm_counts.get("image", 0)

    def get_dummy_mm_data(
        self, seq_len: int, mm_counts: Mapping[str, int], mm_options: Mapping[str, Any]
    ) -> dict[str, Any]:
        size = self.info.get_image_size_with_most_features()
        images = self._get_dummy_images(
            width=size.width,
            height=size.height,
            num_images=mm_counts.get("image", 0),
            overrides=mm_options.get("image"),
        )
        return {"image": images}


class ReferenceQwen2VLProcessor(BaseMultiModalProcessor[ReferenceQwen2VLProcessingInfo]):  # type: ignore[misc]
    def _call_hf_processor(
        self,
        prompt: str,
        mm_data: Mapping[str, object],
        mm_kwargs: Mapping[str, object],
        tok_kwargs: Mapping[str, object],
    ) -> BatchFeature:
        ids = self.info.get_tokenizer().encode(prompt, **tok_kwargs)
        out: dict[str, Any] = {"input_ids": torch.tensor([ids])}
        images = mm_data.get("images")
        if images:
            pixels = self.info.ctx.call_hf_processor(
                self.info.get_image_processor(), {"images": images}, mm_kwargs
            )
            out["pixel_values"] = pixels["pixel_values"]
            out["image_grid_thw"] = pixels["image_grid_thw"]
        return BatchFeature(out)

    def _hf_processor_applies_updates(
        self,
        prompt_text: str,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        tokenization_kwargs: Mapping[str, object],
    ) -> bool:
        return False  # the prompt keeps one <|image_pad|> per image; vLLM expands it

    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        grids = hf_inputs.get("image_grid_thw", torch.empty((0, 3), dtype=torch.int64))
        return {
            "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", grids.prod(-1)),
            "image_grid_thw": MultiModalFieldConfig.batched("image", keep_on_cpu=True),
        }

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        pad = int(self.info.get_hf_config().image_token_id)

        def replacement(item_idx: int) -> list[int]:
            grid = out_mm_kwargs["image"][item_idx]["image_grid_thw"].data
            return [pad] * self.info.tokens_for_grid(grid.tolist())

        return [PromptReplacement(modality="image", target=[pad], replacement=replacement)]
