"""The reference Qwen2-VL model: an mRoPE vision-language TT model class on the reference core.

``ReferenceQwen2VLForConditionalGeneration`` serves a Hugging Face
``Qwen2VLForConditionalGeneration`` checkpoint (``fixtures/models/tt-reference-qwen2vl``: a small
Qwen2-VL vision tower in front of the bundled trained LM) the way tt-metal's Qwen2.5-VL adapter
(``models.demos.qwen25_vl.tt.generator_vllm:Qwen2_5_VLForConditionalGeneration``) does:

- ``prefill_forward(tokens, page_table, kv_cache, prompt_lens, enable_trace, **kwargs)`` takes
  ``pixel_values`` and ``image_grid_thw`` (one list per row, that row's images in prompt order,
  or None), runs the vision tower, puts the image features in place of the ``<|image_pad|>``
  embeddings, computes each row's 3D rotary positions from its tokens and grids, and returns
  ``(output, rope_deltas)``; it prefills whole sequences only (``start_pos`` all 0: the class
  declares neither prefix caching nor chunked prefill, as the real one does). The
  ``ReferenceQwen2VLChunkedPrefill`` variant takes chunks: a chunk's positions continue from
  the running rotary position its request's previous chunk ended at.
- ``decode_forward(..., rope_deltas_all_users=...)``: the per-slot deltas are device state. A
  call that sends them replaces them (an authoritative list in the call's slot layout); a call
  with None keeps them, moved by ``slot_remap`` when one is sent. Every decode token at
  sequence position ``p`` rotates at ``p + delta`` of its slot.

The position rule is ``mrope.py`` (pure functions, unit-tested against transformers); the vision
tower is transformers' Qwen2-VL one (device code in a real class), so greedy outputs equal
transformers' Qwen2-VL token for token. vLLM's Qwen2-VL module needs torchvision, so the prompt
processing comes from ``qwen2vl_processing.py``.

Hooks of the core this class relies on: ``decoder_from_checkpoint`` (text weights under the
Qwen2-VL prefix; the decoder's ``rotary`` attribute is replaced by ``MRopeRotary``, whose
``cos_sin(positions)`` the decoder calls once per forward), ``attach_checkpoint`` (vision tower),
``_prefill_embeds(row)`` (called on the device per prefill row right before the decoder runs
``row.tokens`` = the row's tokens ``[row.start, row.end)``: image features and rotary positions;
``row.index``/``row.lane``/``row.page_rows`` name the row and its request), ``prefill_output``
(wraps the result with the rows' deltas), ``_decode_logits(kv, state, allow_null)`` (decode
rotary positions for the ``state.active`` slots at ``state.positions``), ``self.capabilities``,
``self.mesh_device.enqueue`` and ``model_capabilities``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, NoReturn

import torch
from vllm.multimodal import MULTIMODAL_REGISTRY

from vllm_tt_plugin.test_models.core import DEFAULT_MAX_SEQ_LEN, ReferenceModelError
from vllm_tt_plugin.test_models.hybrid import check_zero_attention_biases
from vllm_tt_plugin.test_models.inputs import PrefillBatch, PrefillRow
from vllm_tt_plugin.test_models.llama import (
    COMPUTE_DTYPE,
    LlamaDecoder,
    LlamaDims,
    ReferenceModelConfigError,
    checkpoint_dir,
    load_weights,
)
from vllm_tt_plugin.test_models.mrope import (
    MRopeError,
    MRopeLayout,
    MRopeRotary,
    RopeCursor,
    decode_positions,
    next_position,
    rope_span,
)
from vllm_tt_plugin.test_models.qwen2vl_processing import (
    IMAGE_PLACEHOLDER,
    ReferenceQwen2VLDummyInputs,
    ReferenceQwen2VLProcessingInfo,
    ReferenceQwen2VLProcessor,
)
from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM
from vllm_tt_plugin.test_models.resident import ResidentDecodeState

# transformers' current and older Qwen2-VL checkpoint layouts.
_TEXT_PREFIXES = ("model.language_model.", "model.")
_LM_HEADS = ("lm_head.weight", "model.lm_head.weight")
_VISION_PREFIXES = ("model.visual.", "visual.")


def _first_present(raw: dict[str, torch.Tensor], candidates: tuple[str, ...], probe: str) -> str:
    for candidate in candidates:
        if candidate + probe in raw:
            return candidate
    raise ReferenceModelConfigError(
        f"checkpoint has no {probe!r} under any of {candidates}: not a Qwen2-VL checkpoint"
    )


class Qwen2VLImageEncoder:
    """pixel_values [patches, C*T*P*P] + grids [N, 3] -> merged features [tokens, text hidden]."""

    def __init__(self, hf_config: Any, raw: dict[str, torch.Tensor]) -> None:
        from transformers.models.qwen2_vl.modeling_qwen2_vl import (
            Qwen2VisionTransformerPretrainedModel,
        )

        self.tower = Qwen2VisionTransformerPretrainedModel(hf_config.vision_config)
        self.tower = self.tower.to(COMPUTE_DTYPE).eval()
        prefix = _first_present(raw, _VISION_PREFIXES, "patch_embed.proj.weight")
        weights = {
            k[len(prefix) :]: v.to(COMPUTE_DTYPE) for k, v in raw.items() if k.startswith(prefix)
        }
        self.tower.load_state_dict(weights, strict=True)

    @torch.no_grad()  # type: ignore[untyped-decorator]
    def __call__(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
        out = self.tower(pixel_values.to(COMPUTE_DTYPE), grid_thw=grid_thw)
        return out.pooler_output


def _per_row(value: Any, rows: int, name: str) -> list[list[Any]]:
    """A multimodal kwarg (one entry per row, None for a row without images) as lists."""
    if value is None:
        return [[] for _ in range(rows)]
    entries = list(value)
    if len(entries) != rows:
        raise ReferenceModelError(f"prefill_forward: {name} has {len(entries)} rows, need {rows}")
    return [[] if entry is None else list(entry) for entry in entries]


@MULTIMODAL_REGISTRY.register_processor(
    ReferenceQwen2VLProcessor,
    info=ReferenceQwen2VLProcessingInfo,
    dummy_inputs=ReferenceQwen2VLDummyInputs,
)
class ReferenceQwen2VLForConditionalGeneration(ReferenceLlamaForCausalLM):
    """Registered as TTReferenceQwen2VLForConditionalGeneration (``register_test_models``)."""

    # tt-metal's Qwen2.5-VL: no prefix caching, no chunked prefill, top-k up to 32 on device.
    model_capabilities: ClassVar[dict[str, Any]] = {
        **ReferenceLlamaForCausalLM.model_capabilities,
        "supports_prefix_caching": False,
        "supports_chunked_prefill": False,
        "max_device_top_k": 32,
    }
    # What vLLM reads from a multimodal model class (vllm.model_executor.models.interfaces).
    supports_multimodal: ClassVar[bool] = True
    supports_multimodal_raw_input_only: ClassVar[bool] = False
    requires_raw_input_tokens: ClassVar[bool] = False

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        if modality.startswith("image"):
            return IMAGE_PLACEHOLDER
        raise ValueError(f"{cls.__name__} takes images only, not {modality!r}")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.image_encoder: Qwen2VLImageEncoder | None = None
        self.layout: MRopeLayout | None = None
        self.rotary: MRopeRotary | None = None
        # Per-slot rope deltas: the host's copy (call order) and the device's (queue order).
        self.rope_deltas = torch.zeros(self.max_batch_size, dtype=torch.int64)
        self._device_deltas = self.rope_deltas.clone()
        # One prefill call's rows: image grids and features (host), deltas (device).
        self._pending: dict[int, tuple[list[list[int]], torch.Tensor | None]] = {}
        self._prefill_deltas: dict[int, int] = {}
        # (lane, first block) -> (chunk end, rotary cursor after it): where a chunk continues.
        self._rope_next: dict[tuple[int, int], tuple[int, RopeCursor]] = {}
        self.images_encoded = 0  # tests read it

    @classmethod
    def initialize_vllm_model(
        cls,
        hf_config: Any,
        mesh_device: Any,
        max_batch_size: int,
        max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
        tt_data_parallel: int = 1,
        optimizations: str | None = None,
    ) -> Any:
        if optimizations is not None:  # as tt-metal's Qwen2.5-VL asserts
            raise ReferenceModelError(
                f"{cls.__name__}: optimizations={optimizations!r}; custom optimizations are not "
                "supported for this model (must be None)"
            )
        return super().initialize_vllm_model(
            hf_config,
            mesh_device,
            max_batch_size,
            max_seq_len=max_seq_len,
            tt_data_parallel=tt_data_parallel,
            optimizations=optimizations,
        )

    @classmethod
    def check_hf_config(cls, hf_config: Any) -> None:
        dims = LlamaDims.from_hf_config(hf_config.get_text_config())
        try:
            MRopeLayout.from_hf_config(hf_config, dims.head_dim)
        except MRopeError as exc:
            raise ReferenceModelConfigError(str(exc)) from exc

    @classmethod
    def decoder_from_checkpoint(cls, hf_config: Any, raw: dict[str, torch.Tensor]) -> LlamaDecoder:
        """The language model (Qwen2 layers, zero q/k/v biases) with mRoPE as its rotary."""
        dims = LlamaDims.from_hf_config(hf_config.get_text_config())
        prefix = _first_present(raw, _TEXT_PREFIXES, "embed_tokens.weight")
        head = next((name for name in _LM_HEADS if name in raw), _LM_HEADS[0])
        path = checkpoint_dir(hf_config)
        check_zero_attention_biases(raw, path)
        decoder = LlamaDecoder(
            dims, load_weights(path, dims, raw, prefix=prefix, lm_head_name=head)
        )
        layout = MRopeLayout.from_hf_config(hf_config, dims.head_dim)
        decoder.rotary = MRopeRotary(dims.head_dim, dims.rope_theta, layout.mrope_section)  # type: ignore[assignment]
        return decoder

    def attach_checkpoint(self, hf_config: Any, raw: dict[str, torch.Tensor]) -> None:
        self.image_encoder = Qwen2VLImageEncoder(hf_config, raw)
        self.layout = MRopeLayout.from_hf_config(hf_config, self.dims.head_dim)
        rotary = self.decoder.rotary
        assert isinstance(rotary, MRopeRotary), "decoder_from_checkpoint installs it"
        self.rotary = rotary

    # --- prefill -----------------------------------------------------------------------------
    def prefill_forward(  # type: ignore[override]
        self,
        tokens: torch.Tensor,
        page_table: torch.Tensor,
        kv_cache: Any,
        prompt_lens: Sequence[int] | torch.Tensor,
        enable_trace: bool,
        **kwargs: Any,
    ) -> tuple[Any, torch.Tensor]:
        """Prefill with images. ``tokens`` carry each row's sequence from position 0 (the
        core computes ``tokens[row, start_pos:prompt_lens]``); returns ``(output, rope_deltas
        [rows, 1])`` through ``prefill_output``."""
        rows = int(torch.as_tensor(tokens).shape[0])
        pixels = _per_row(kwargs.pop("pixel_values", None), rows, "pixel_values")
        grids = _per_row(kwargs.pop("image_grid_thw", None), rows, "image_grid_thw")
        start_pos = kwargs.pop("start_pos", None)
        starts = [0] * rows if start_pos is None else [int(s) for s in start_pos]
        if any(starts) and not self.capabilities.supports_chunked_prefill:
            raise ReferenceModelError(
                f"prefill_forward: start_pos={starts}; {type(self).__name__} prefills whole "
                "sequences only (no prefix caching or chunked prefill, as tt-metal's Qwen2.5-VL)"
            )
        self._pending = {
            row: (self._row_grids(grids[row]), self._row_features(row, pixels[row], grids[row]))
            for row in range(rows)
        }
        self._prefill_deltas = {}
        try:
            return super().prefill_forward(  # type: ignore[no-any-return]
                tokens=tokens,
                page_table=page_table,
                kv_cache=kv_cache,
                enable_trace=enable_trace,
                prompt_lens=prompt_lens,
                start_pos=starts,
                **kwargs,
            )
        finally:
            self._pending, self._prefill_deltas = {}, {}

    def prefill_output(self, result: Any, batch: PrefillBatch) -> tuple[Any, torch.Tensor]:
        """``(output, rope_deltas [rows, 1])``: each row's delta after its chunk's end, as
        ``_prefill_embeds`` left it on the device."""
        deltas = [self._prefill_deltas[row.index] for row in batch.rows]
        return result, torch.tensor(deltas, dtype=torch.int64)[:, None]

    @staticmethod
    def _row_grids(grids: list[Any]) -> list[list[int]]:
        return [torch.as_tensor(g).reshape(-1).tolist() for g in grids]

    def _row_features(self, row: int, pixels: list[Any], grids: list[Any]) -> torch.Tensor | None:
        if len(pixels) != len(grids):
            raise ReferenceModelError(
                f"prefill_forward row {row}: {len(pixels)} pixel_values entries but "
                f"{len(grids)} image_grid_thw entries"
            )
        if not pixels:
            return None
        grid = torch.stack([torch.as_tensor(g).reshape(3) for g in grids]).to(torch.int64)
        batch = torch.cat([torch.as_tensor(p) for p in pixels])
        if batch.shape[0] != int(grid.prod(-1).sum()):
            raise ReferenceModelError(
                f"prefill_forward row {row}: pixel_values hold {batch.shape[0]} patches, the "
                f"grids {grid.tolist()} need {int(grid.prod(-1).sum())}"
            )
        assert self.image_encoder is not None, "initialize_vllm_model builds it"
        self.images_encoded += len(pixels)
        return self.image_encoder(batch, grid)

    def _prefill_embeds(self, row: PrefillRow) -> torch.Tensor | None:
        """Called per row on the device, right before the decoder runs the row's tokens
        ``[start, end)``: their rotary positions (continuing the request's earlier chunks) and
        the image features in place of their placeholders."""
        assert self.rotary is not None and self.layout is not None
        pending = self._pending.get(row.index)
        if pending is None:  # warm-up: text positions, token embeddings
            self.rotary.prepare(torch.arange(row.start, row.end).expand(3, -1))
            return None
        grids, features = pending
        key = (row.lane, int(row.page_rows[0][0]))
        cursor = RopeCursor()
        if row.start:
            end, cursor = self._rope_next.get(key, (None, cursor))
            if end != row.start:
                raise ReferenceModelError(
                    f"prefill_forward row {row.index}: start_pos={row.start} does not continue "
                    "a chunk of this request, so its rotary positions are unknown"
                )
        try:
            # vLLM may end a chunk inside an image (docs/SCHEDULING.md): the next chunk is
            # handed that image again and continues inside it from the cursor.
            positions, after = rope_span(row.tokens, grids, self.layout, cursor)
        except MRopeError as exc:
            raise ReferenceModelError(f"prefill_forward row {row.index}: {exc}") from exc
        if after.image_done and not self.capabilities.supports_chunked_prefill:
            # A whole-prompt prefill (tt-metal's Qwen2.5-VL) cannot end inside an image.
            raise ReferenceModelError(
                f"prefill_forward row {row.index}: the prompt ends after {after.image_done} "
                f"placeholders of image {len(grids) - 1} (grid {grids[-1]})"
            )
        self._rope_next[key] = (row.end, after)
        self._prefill_deltas[row.index] = next_position(positions, cursor.position) - row.end
        self.rotary.prepare(positions)
        if features is None:
            return None  # rope_span matched the placeholders to the grids: none here
        placeholders = row.tokens == self.layout.image_token_id
        count = int(placeholders.sum())
        embeds = self.decoder.weights.embed[row.tokens].clone()
        # The handed images' features, less the rows of the first one earlier chunks placed.
        embeds[placeholders] = features[cursor.image_done : cursor.image_done + count].to(
            embeds.dtype
        )
        return embeds

    # --- decode ------------------------------------------------------------------------------
    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        """Pops ``rope_deltas_all_users`` (None = keep the resident deltas, moved by
        ``slot_remap``); the rest is the reference core's decode. Not the core's
        ``take_decode_kwargs`` hook: the deltas depend on ``slot_remap``, which the hook does
        not see, and their load must be queued ahead of the step."""
        deltas = self._next_deltas(
            kwargs.pop("rope_deltas_all_users", None), kwargs.get("slot_remap")
        )

        def load() -> None:
            self._device_deltas = deltas

        # Queued ahead of the step, so an async step already in flight keeps its deltas; a
        # load, not a device step of its own.
        self.mesh_device.enqueue(load, step=False)
        out = super().decode_forward(*args, **kwargs)
        self.rope_deltas = deltas
        return out

    def _next_deltas(self, sent: Any, slot_remap: Any) -> torch.Tensor:
        if sent is not None:
            deltas = torch.as_tensor(sent).to(torch.int64).reshape(-1)
            if deltas.shape[0] != self.max_batch_size:
                raise ReferenceModelError(
                    f"decode_forward: rope_deltas_all_users has {deltas.shape[0]} entries, the "
                    f"batch has {self.max_batch_size} slots"
                )
            return deltas.clone()
        if slot_remap is not None:
            remap = torch.as_tensor(slot_remap).to(torch.int64).reshape(-1)
            if remap.shape[0] == self.max_batch_size:  # the core validates the permutation
                return self.rope_deltas[remap.clamp(0, self.max_batch_size - 1)]
        return self.rope_deltas

    def _decode_logits(
        self, kv: Any, state: ResidentDecodeState, allow_null: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.rotary is not None
        rows = state.active.nonzero().flatten()
        if rows.numel():
            self.rotary.prepare(decode_positions(state.positions[rows], self._device_deltas[rows]))
        return super()._decode_logits(kv, state, allow_null)


class ReferenceQwen2VLChunkedPrefill(ReferenceQwen2VLForConditionalGeneration):
    """Capability variant with token-chunked prefill (tt-metal's Qwen2.5-VL has none), for the
    plugin's chunked mRoPE path: each chunk's rotary positions continue from where the
    request's previous chunk left them (inside an image too: vLLM can cut one), and every
    chunk returns the delta after its end (the final chunk's is the request's). Still no
    prefix caching: a cache hit would start a request at positions that depend on images this
    model never saw. Select it with
    ``TT_MODEL_CLASS_OVERRIDES="TTReferenceQwen2VLForConditionalGeneration=vllm_tt_plugin.
    test_models.reference_qwen2vl:ReferenceQwen2VLChunkedPrefill"``."""

    model_capabilities: ClassVar[dict[str, Any]] = {
        **ReferenceQwen2VLForConditionalGeneration.model_capabilities,
        "supports_chunked_prefill": True,
    }


@MULTIMODAL_REGISTRY.register_processor(
    ReferenceQwen2VLProcessor,
    info=ReferenceQwen2VLProcessingInfo,
    dummy_inputs=ReferenceQwen2VLDummyInputs,
)
class ReferenceQwen2VLInspection:
    """What vLLM's ModelConfig inspects for the checkpoint's own architecture name, before the
    platform rewrites it to the TT one (``model_registry.TEST_CHECKPOINT_ALIASES``): a
    multimodal text-generation model. vLLM's Qwen2-VL cannot be imported without torchvision.
    Never built."""

    supports_multimodal: ClassVar[bool] = True

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        return ReferenceQwen2VLForConditionalGeneration.get_placeholder_str(modality, i)

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
        "ReferenceQwen2VLInspection only answers vLLM's model inspection; "
        "TTReferenceQwen2VLForConditionalGeneration serves the checkpoint"
    )
