"""The registered reference test models (``model_registry._TEST_MODELS`` targets).

``ReferenceLlamaForCausalLM`` is the full-featured class: every capability, decode reload
contract v1, per-layer KV allocation, split async read-back. The optional surfaces are mixins
over ``ReferenceLlamaCore`` so variants (``variants.py``) can leave them out, as real tt-metal
classes that predate them do: the plugin probes them with ``hasattr``.

``ReferenceHybridForCausalLM`` adds mixed sliding-window / full attention (``hybrid.py``): it
exposes ``get_kv_cache_spec``, so vLLM's hybrid KV cache manager gives it one KV cache group per
attention type and the plugin sends ``page_tables_per_group``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from vllm_tt_plugin.contract import TTLayerKVSpec
from vllm_tt_plugin.test_models.calls import CallRecord, DecodeHandle, wait_event
from vllm_tt_plugin.test_models.core import ReferenceLlamaCore, ReferenceModelError
from vllm_tt_plugin.test_models.hybrid import HybridLayers, check_zero_attention_biases
from vllm_tt_plugin.test_models.llama import ReferenceModelConfigError, checkpoint_dir
from vllm_tt_plugin.test_models.paged_kv import KVCacheError, LayerLayout, ReferenceKVCache

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheSpec


class WithPerLayerKVAllocation(ReferenceLlamaCore):
    """The preferred KV allocation: one ``TTLayerKVSpec`` per layer, in layer order."""

    def allocate_kv_cache_per_layer(
        self, per_layer_specs: Sequence[TTLayerKVSpec]
    ) -> ReferenceKVCache:
        what = "allocate_kv_cache_per_layer"
        specs = list(per_layer_specs)
        if len(specs) != self.dims.num_layers:
            raise KVCacheError(
                f"{what}: got {len(specs)} layer specs, the model has {self.dims.num_layers} layers"
            )
        layouts: list[LayerLayout] = []
        group_blocks: dict[int, tuple[int, int]] = {}
        for index, spec in enumerate(specs):
            if not isinstance(spec, TTLayerKVSpec):
                raise KVCacheError(
                    f"{what}: entry {index} is a {type(spec).__name__}, expected TTLayerKVSpec"
                )
            where = f"{what}: layer {index} ({spec.layer_name})"
            self._check_layer_shape(
                where, spec.num_kv_heads, spec.head_size, spec.num_blocks, spec.block_size
            )
            if spec.dtype != specs[0].dtype:
                raise KVCacheError(f"{where}: dtype {spec.dtype} differs from layer 0's")
            expected_window = self.layer_sliding_window(index)
            if spec.sliding_window != expected_window:
                raise KVCacheError(
                    f"{where}: sliding_window={spec.sliding_window}, but this layer's window is "
                    f"{expected_window}"
                )
            blocks = (spec.num_blocks, spec.block_size)
            if group_blocks.setdefault(spec.group_id, blocks) != blocks:
                raise KVCacheError(
                    f"{where}: group {spec.group_id} layers disagree on (num_blocks, block_size)"
                )
            layouts.append(
                LayerLayout(spec.group_id, spec.num_blocks, spec.block_size, spec.sliding_window)
            )
        if sorted(group_blocks) != list(range(len(group_blocks))):
            raise KVCacheError(
                f"{what}: group ids {sorted(group_blocks)} must be 0..{len(group_blocks) - 1}"
            )
        if len({bs for _, bs in group_blocks.values()}) != 1:
            raise KVCacheError(f"{what}: all KV cache groups must share one block_size")
        return self._allocate(layouts, specs[0].dtype, what)


class WithAsyncReadback(ReferenceLlamaCore):
    """Split read-back of an async decode submit (``read_from_device=False``)."""

    def _handle(self, tt_out: Any, what: str) -> DecodeHandle:
        if not isinstance(tt_out, DecodeHandle) or tt_out.owner != id(self):
            raise ReferenceModelError(
                f"{what}: expected the handle decode_forward(read_from_device=False) returned, "
                f"got {type(tt_out).__name__}"
            )
        return tt_out

    def read_decode_output(
        self, tt_out: Any, async_read: bool = True
    ) -> tuple[DecodeHandle, list[Any]]:
        """Start the device->host copy; returns ``(tt_out, read_events)``.

        With ``async_read=False`` the copy is waited for here and no events are returned.
        """
        handle = self._handle(tt_out, "read_decode_output")
        if handle.read:
            raise ReferenceModelError(
                f"read_decode_output: decode step {handle.step} was already read"
            )
        handle.read = True
        self._log(CallRecord("read_decode_output", device_sampling=handle.is_tokens))
        if not async_read:
            wait_event(handle.event)
            return handle, []
        return handle, [handle.event]

    def process_decode_output_host(self, tt_out: Any, is_tokens: bool = False) -> Any:
        """Host tensors of a read step: logits, tokens, or ``(tokens, logprobs)``."""
        what = "process_decode_output_host"
        handle = self._handle(tt_out, what)
        if not handle.read:
            raise ReferenceModelError(f"{what}: decode step {handle.step} was not read first")
        if handle.processed:
            raise ReferenceModelError(f"{what}: decode step {handle.step} was already finalised")
        if bool(is_tokens) != handle.is_tokens:
            raise ReferenceModelError(
                f"{what}: is_tokens={is_tokens} but decode step {handle.step} "
                f"{'sampled on the device' if handle.is_tokens else 'returned logits'}"
            )
        wait_event(handle.event)  # re-raises a failure of the device step
        handle.processed = True
        self._log(CallRecord(what, device_sampling=handle.is_tokens))
        return handle.output


class ReferenceLlamaForCausalLM(WithPerLayerKVAllocation, WithAsyncReadback):
    """The reference Llama with every capability (registered as TTReferenceLlamaForCausalLM)."""


class ReferenceLlamaLanesForCausalLM(ReferenceLlamaForCausalLM):
    """Serves ``--data_parallel_size`` as in-process lanes (TTReferenceLlamaLanesForCausalLM)."""

    model_capabilities: ClassVar[dict[str, Any]] = {
        **ReferenceLlamaForCausalLM.model_capabilities,
        "supports_lane_data_parallel": True,
    }


class ReferenceHybridForCausalLM(ReferenceLlamaForCausalLM):
    """Mixed sliding-window / full attention from ``hf_config.layer_types`` (a Qwen2 checkpoint
    with zero q/k/v biases), registered as TTReferenceHybridForCausalLM.

    Each layer attends through its own group's page table (``page_tables_per_group``); the core
    already keeps KV, token records, page-table checks and masks per group, so this class only
    names the windows, the per-layer specs, and checks that the checkpoint is Llama math.
    """

    hybrid_layers: HybridLayers

    @classmethod
    def get_kv_cache_spec(cls, vllm_config: VllmConfig) -> dict[str, KVCacheSpec]:
        layers = HybridLayers.from_hf_config(vllm_config.model_config.hf_config)
        return layers.kv_cache_spec(vllm_config)

    @classmethod
    def check_hf_config(cls, hf_config: Any) -> None:
        HybridLayers.from_hf_config(hf_config)

    def attach_checkpoint(self, hf_config: Any, raw: dict[str, torch.Tensor]) -> None:
        layers = HybridLayers.from_hf_config(hf_config)
        check_zero_attention_biases(raw, checkpoint_dir(hf_config))
        if layers.num_layers != self.dims.num_layers:
            raise ReferenceModelConfigError(
                f"layer_types lists {layers.num_layers} layers, the checkpoint has "
                f"{self.dims.num_layers}"
            )
        self.hybrid_layers = layers

    def layer_sliding_window(self, layer: int) -> int | None:
        return self.hybrid_layers.windows[layer]

    def allocate_kv_cache_per_layer(
        self, per_layer_specs: Sequence[TTLayerKVSpec]
    ) -> ReferenceKVCache:
        """Also accepts ``sliding_window=None`` for a sliding layer: vLLM without its hybrid
        manager (``--disable-hybrid-kv-cache-manager``) gives every layer full-length blocks;
        the layer still attends within its own window, as HF does."""
        specs = list(per_layer_specs)
        for index, spec in enumerate(specs[: self.dims.num_layers]):
            window = self.layer_sliding_window(index)
            if isinstance(spec, TTLayerKVSpec) and spec.sliding_window is None and window:
                specs[index] = dataclasses.replace(spec, sliding_window=window)
        return super().allocate_kv_cache_per_layer(specs)
