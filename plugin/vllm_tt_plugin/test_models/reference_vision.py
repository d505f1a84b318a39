"""The reference vision-language model: a LLaVA-style TT model class on the reference Llama.

``ReferenceLlavaForConditionalGeneration`` serves a Hugging Face ``LlavaForConditionalGeneration``
checkpoint (``fixtures/models/tt-reference-llava``: a small CLIP vision tower, a two-layer
projector, and the bundled reference Llama as language model) the way a tt-metal vision class
does: vLLM's own LLaVA processor expands each image into its placeholder tokens in the API
server; the plugin hands the processed ``pixel_values`` of the images a prefill chunk covers to
``prefill_forward`` (``**multimodal_kwargs``, one list per row); the model runs its vision
encoder and puts the image features in place of the placeholder embeddings. Decode is the
reference Llama's, unchanged.

The vision encoder is transformers' CLIP vision model (the device side of a real class is
tt-metal code; here only the language model is the plugin's own torch decoder), so greedy
outputs equal transformers' LLaVA token for token. vLLM's LLaVA module needs torchvision, so
the prompt processing comes from ``llava_processing.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn

import torch
from vllm.multimodal import MULTIMODAL_REGISTRY

from vllm_tt_plugin.test_models.core import ReferenceModelError
from vllm_tt_plugin.test_models.inputs import PrefillRow
from vllm_tt_plugin.test_models.llama import (
    COMPUTE_DTYPE,
    LlamaDecoder,
    LlamaDims,
    ReferenceModelConfigError,
    checkpoint_dir,
    load_weights,
)
from vllm_tt_plugin.test_models.llava_processing import (
    ReferenceLlavaDummyInputs,
    ReferenceLlavaProcessingInfo,
    ReferenceLlavaProcessor,
)
from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM

# Where transformers keeps each part, in its current and its older checkpoint layout.
_TEXT_PREFIXES = ("model.language_model.", "language_model.model.")
_LM_HEADS = ("lm_head.weight", "language_model.lm_head.weight")
_VISION_PREFIXES = (
    "model.vision_tower.vision_model.",
    "vision_tower.vision_model.",
    "model.vision_tower.",
    "vision_tower.",
)
_PROJECTOR_PREFIXES = ("model.multi_modal_projector.", "multi_modal_projector.")


def _first_present(raw: dict[str, torch.Tensor], candidates: tuple[str, ...], probe: str) -> str:
    for candidate in candidates:
        if candidate + probe in raw:
            return candidate
    raise ReferenceModelConfigError(
        f"checkpoint has no {probe!r} under any of {candidates}: not a LLaVA checkpoint"
    )


def _subdict(raw: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v.to(COMPUTE_DTYPE) for k, v in raw.items() if k.startswith(prefix)}


class LlavaImageEncoder:
    """pixel_values [N, 3, H, W] -> image features [N, tokens per image, text hidden]."""

    def __init__(self, hf_config: Any, raw: dict[str, torch.Tensor]) -> None:
        from transformers import CLIPVisionConfig, CLIPVisionModel

        vision_config = hf_config.vision_config
        if not isinstance(vision_config, CLIPVisionConfig):
            raise ReferenceModelConfigError(
                f"vision_config is a {type(vision_config).__name__}; the reference LLaVA model "
                "takes a CLIP vision tower"
            )
        if hf_config.vision_feature_select_strategy not in ("default", "full"):
            raise ReferenceModelConfigError(
                f"vision_feature_select_strategy={hf_config.vision_feature_select_strategy!r}"
            )
        self.feature_layer = int(hf_config.vision_feature_layer)
        self.drop_cls = hf_config.vision_feature_select_strategy == "default"
        self.tower = CLIPVisionModel(vision_config).to(COMPUTE_DTYPE).eval()
        prefix = _first_present(raw, _VISION_PREFIXES, "embeddings.patch_embedding.weight")
        self.tower.load_state_dict(_subdict(raw, prefix), strict=True)
        projector = _subdict(raw, _first_present(raw, _PROJECTOR_PREFIXES, "linear_1.weight"))
        self.linear_1 = (projector["linear_1.weight"], projector["linear_1.bias"])
        self.linear_2 = (projector["linear_2.weight"], projector["linear_2.bias"])
        act = getattr(hf_config, "projector_hidden_act", "gelu")
        if act != "gelu":
            raise ReferenceModelConfigError(f"projector_hidden_act={act!r}; expected 'gelu'")

    @torch.no_grad()  # type: ignore[untyped-decorator]
    def __call__(self, pixel_values: torch.Tensor) -> torch.Tensor:
        out = self.tower(pixel_values.to(COMPUTE_DTYPE), output_hidden_states=True)
        selected = out.hidden_states[self.feature_layer]
        if self.drop_cls:
            selected = selected[:, 1:]
        (w1, b1), (w2, b2) = self.linear_1, self.linear_2
        hidden = torch.nn.functional.gelu(selected @ w1.T + b1)
        return hidden @ w2.T + b2


@MULTIMODAL_REGISTRY.register_processor(
    ReferenceLlavaProcessor,
    info=ReferenceLlavaProcessingInfo,
    dummy_inputs=ReferenceLlavaDummyInputs,
)
class ReferenceLlavaForConditionalGeneration(ReferenceLlamaForCausalLM):
    """Registered as TTReferenceLlavaForConditionalGeneration (``register_test_models``)."""

    # What vLLM reads from a multimodal model class (vllm.model_executor.models.interfaces).
    supports_multimodal: ClassVar[bool] = True
    supports_multimodal_raw_input_only: ClassVar[bool] = False
    requires_raw_input_tokens: ClassVar[bool] = False

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        if modality.startswith("image"):
            return "<image>"
        raise ValueError(f"{cls.__name__} takes images only, not {modality!r}")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.image_encoder: LlavaImageEncoder | None = None
        self.image_token_id = -1
        self._pending_features: dict[int, torch.Tensor] = {}  # row -> [images, rows, hidden]
        self.images_encoded = 0  # tests read it

    @classmethod
    def decoder_from_checkpoint(cls, hf_config: Any, raw: dict[str, torch.Tensor]) -> LlamaDecoder:
        """The language model: the Llama under the LLaVA checkpoint's text prefix."""
        dims = LlamaDims.from_hf_config(hf_config.text_config)
        prefix = _first_present(raw, _TEXT_PREFIXES, "embed_tokens.weight")
        head = next((name for name in _LM_HEADS if name in raw), _LM_HEADS[0])
        path = checkpoint_dir(hf_config)
        return LlamaDecoder(dims, load_weights(path, dims, raw, prefix=prefix, lm_head_name=head))

    def attach_checkpoint(self, hf_config: Any, raw: dict[str, torch.Tensor]) -> None:
        self.image_encoder = LlavaImageEncoder(hf_config, raw)
        self.image_token_id = int(hf_config.image_token_index)

    def prefill_forward(self, *args: Any, pixel_values: Any = None, **kwargs: Any) -> Any:
        """``pixel_values``: one entry per row, that row's image tensors in prompt order (or
        None); the images' features replace the placeholder embeddings of the chunk."""
        features: dict[int, torch.Tensor] = {}
        if pixel_values is not None:
            for row, images in enumerate(pixel_values):
                if images:
                    batch = torch.stack([torch.as_tensor(image) for image in images])
                    assert self.image_encoder is not None, "initialize_vllm_model builds it"
                    features[row] = self.image_encoder(batch)  # [images, rows, hidden]
                    self.images_encoded += len(images)
        self._pending_features = features
        try:
            return super().prefill_forward(*args, **kwargs)
        finally:
            self._pending_features = {}

    def _prefill_embeds(self, row: PrefillRow) -> torch.Tensor | None:
        placeholders = row.tokens == self.image_token_id
        count = int(placeholders.sum())
        images = self._pending_features.get(row.index)
        if images is None:
            if count:
                raise ReferenceModelError(
                    f"prefill_forward row {row.index}: {count} image placeholder(s) in "
                    f"[{row.start}, {row.end}) but no pixel_values for them"
                )
            return None
        # Every image handed to the chunk overlaps it, and the chunk may start or end inside
        # one: a prefix-cache hit can end inside an image, and vLLM's disable_chunked_mm_input cuts
        # an image whose first token starts the chunk when the step's budget is short
        # (docs/SCHEDULING.md). Each image has the same number of placeholders, so the
        # placeholders already in the KV cache, modulo that number, are the rows of the first
        # image that an earlier chunk (or the cache) placed.
        per_image = int(images.shape[1])
        before = 0 if row.before is None else int((row.before == self.image_token_id).sum())
        skip = before % per_image
        features = images.flatten(0, 1)
        if skip + count > features.shape[0]:
            raise ReferenceModelError(
                f"prefill_forward row {row.index}: {count} image placeholders from image row "
                f"{skip} on, but features for {features.shape[0]} rows"
            )
        embeds = self.decoder.weights.embed[row.tokens].clone()
        embeds[placeholders] = features[skip : skip + count].to(embeds.dtype)
        return embeds


@MULTIMODAL_REGISTRY.register_processor(
    ReferenceLlavaProcessor,
    info=ReferenceLlavaProcessingInfo,
    dummy_inputs=ReferenceLlavaDummyInputs,
)
class ReferenceLlavaInspection:
    """What vLLM's ModelConfig inspects for the checkpoint's own architecture name, before the
    platform rewrites it to the TT one (``model_registry.TEST_CHECKPOINT_ALIASES``): a
    multimodal text-generation model. The other reference checkpoints alias vLLM's own class of
    the same architecture; vLLM's LLaVA cannot be imported without torchvision. Never built."""

    supports_multimodal: ClassVar[bool] = True

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        return ReferenceLlavaForConditionalGeneration.get_placeholder_str(modality, i)

    # vLLM's protocol check looks for these methods; the TT class serves, so none ever runs.
    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        _inspection_only()

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return _inspection_only()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return _inspection_only()

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return _inspection_only()


def _inspection_only() -> NoReturn:
    raise ReferenceModelError(
        "ReferenceLlavaInspection only answers vLLM's model inspection; "
        "TTReferenceLlavaForConditionalGeneration serves the checkpoint"
    )
