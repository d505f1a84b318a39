"""vLLM multimodal processing for the reference LLaVA checkpoint.

vLLM's own LLaVA processor module cannot be imported on a host without torchvision (it pulls in
Pixtral's image processor), so the reference model brings a small processor of its own for the
plain CLIP LLaVA layout: transformers' LlavaProcessor prepares the pixels, and every image
becomes ``tokens_per_image`` copies of the image token in the prompt (the CLIP processor
resizes and crops every image to the tower's square input, so the count is fixed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from transformers import BatchFeature, LlavaConfig, LlavaProcessor
from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItems
from vllm.multimodal.parse import ImageSize, MultiModalDataItems
from vllm.multimodal.processing import (
    BaseDummyInputsBuilder,
    BaseMultiModalProcessor,
    BaseProcessingInfo,
    PromptReplacement,
    PromptUpdate,
)


class ReferenceLlavaProcessingInfo(BaseProcessingInfo):  # type: ignore[misc]
    def get_hf_config(self) -> LlavaConfig:
        return self.ctx.get_hf_config(LlavaConfig)

    def get_hf_processor(self, **kwargs: object) -> LlavaProcessor:
        return self.ctx.get_hf_processor(LlavaProcessor, **kwargs)

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": None}

    def tokens_per_image(self) -> int:
        config = self.get_hf_config()
        vision = config.vision_config
        patches: int = (vision.image_size // vision.patch_size) ** 2
        # "default" drops CLIP's class token, "full" keeps it.
        return patches if config.vision_feature_select_strategy == "default" else patches + 1

    def get_image_size_with_most_features(self) -> ImageSize:
        size = self.get_hf_config().vision_config.image_size
        return ImageSize(width=size, height=size)

    def get_mm_max_tokens_per_item(
        self, seq_len: int, mm_counts: Mapping[str, int]
    ) -> Mapping[str, int]:
        return {"image": self.tokens_per_image()}


class ReferenceLlavaDummyInputs(BaseDummyInputsBuilder[ReferenceLlavaProcessingInfo]):  # type: ignore[misc]
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        token: str = self.info.get_hf_processor().image_token
        return token * mm_counts.get("image", 0)

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


class ReferenceLlavaProcessor(BaseMultiModalProcessor[ReferenceLlavaProcessingInfo]):  # type: ignore[misc]
    def _get_mm_fields_config(
        self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        return {"pixel_values": MultiModalFieldConfig.batched("image")}

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        image_token_id = self.info.get_hf_config().image_token_index
        count = self.info.tokens_per_image()
        return [
            PromptReplacement(
                modality="image",
                target=[image_token_id],
                replacement=lambda item_idx: [image_token_id] * count,
            )
        ]
