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

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from vllm_tt_plugin.test_models.calls import CallRecord, DecodeHandle, wait_event
from vllm_tt_plugin.test_models.core import (
    DEFAULT_MAX_SEQ_LEN,
    ReferenceLlamaCore,
    ReferenceModelError,
)
from vllm_tt_plugin.test_models.hybrid import (
    HybridLayers,
    check_zero_attention_biases,
    vllm_layer_groups,
)
from vllm_tt_plugin.test_models.inputs import FLAG_NAMES
from vllm_tt_plugin.test_models.llama import ReferenceModelConfigError, checkpoint_dir
from vllm_tt_plugin.test_models.paged_kv import KVCacheError, LayerLayout, ReferenceKVCache
from vllm_tt_plugin.test_models.sampling import TOP_K_LOGPROBS, top_k_logprobs

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheSpec


class WithPerLayerKVAllocation(ReferenceLlamaCore):
    """The preferred KV allocation: ``per_layer_specs``, one ``(shape, dtype, tensor_idx)`` per
    attention layer in layer order (``shape`` = blocks, KV heads per device, block, head)."""

    def layer_group(self, layer: int) -> int:
        """Hook: the KV cache group (page table) of ``layer``; one group unless hybrid."""
        return 0

    def allocate_kv_cache_per_layer(self, per_layer_specs: Sequence[Any]) -> ReferenceKVCache:
        what = "allocate_kv_cache_per_layer"
        specs = list(per_layer_specs)
        if len(specs) != self.dims.num_layers:
            raise KVCacheError(
                f"{what}: got {len(specs)} layer specs, the model has {self.dims.num_layers} layers"
            )
        layouts: list[LayerLayout] = []
        group_blocks: dict[int, tuple[int, int]] = {}
        buffers: dict[int, tuple[tuple[int, ...], set[int]]] = {}
        dtypes = set()
        for index, spec in enumerate(specs):
            where = f"{what}: layer {index}"
            if not (isinstance(spec, tuple) and len(spec) == 3):
                raise KVCacheError(
                    f"{where}: expected a (shape, dtype, tensor_idx) tuple, got {spec!r}"
                )
            shape, dtype, tensor_idx = spec
            shape = tuple(shape)
            if len(shape) != 4 or any(isinstance(x, bool) or not isinstance(x, int) for x in shape):
                raise KVCacheError(
                    f"{where}: shape={shape!r} must be (num_blocks, kv_heads_per_device, "
                    "block_size, head_size)"
                )
            if isinstance(tensor_idx, bool) or not isinstance(tensor_idx, int):
                raise KVCacheError(f"{where}: tensor_idx={tensor_idx!r} must be an int")
            num_blocks, heads, block_size, head_size = shape
            self._check_layer_shape(where, heads, head_size, num_blocks, block_size)
            dtypes.add(dtype)
            group = self.layer_group(index)
            if group_blocks.setdefault(group, (num_blocks, block_size)) != (num_blocks, block_size):
                raise KVCacheError(
                    f"{where}: KV group {group} layers disagree on (num_blocks, block_size)"
                )
            shared_shape, groups = buffers.setdefault(tensor_idx, (shape, set()))
            if shared_shape != shape or group in groups:
                raise KVCacheError(
                    f"{where}: tensor_idx={tensor_idx} is shared with a layer of "
                    f"{'another shape' if shared_shape != shape else 'the same KV group'}"
                )
            groups.add(group)
            window = self.layer_sliding_window(index)
            layouts.append(LayerLayout(group, num_blocks, block_size, window))
        if len(group_blocks) == 1 and sorted(buffers) != list(range(len(specs))):
            raise KVCacheError(
                f"{what}: with one KV cache group tensor_idx must be the layer index, got "
                f"{[spec[2] for spec in specs]}"
            )
        if len(dtypes) != 1:
            raise KVCacheError(f"{what}: layers disagree on dtype: {sorted(map(str, dtypes))}")
        if len({bs for _, bs in group_blocks.values()}) != 1:
            raise KVCacheError(f"{what}: all KV cache groups must share one block_size")
        return self._allocate(layouts, specs[0][1], what)


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
        """Host ``(values, logprobs)`` of a decode step. On the synchronous path it takes the
        raw device output (no ``read_decode_output`` first) and reads it itself."""
        what = "process_decode_output_host"
        handle = self._handle(tt_out, what)
        if not handle.read:
            handle.read = True  # synchronous read-back of the raw device output
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


class WithoutReadback(ReferenceLlamaCore):
    """No ``read_decode_output``: decode returns host tensors even with
    ``read_from_device=False`` (a bare tensor: logits [B, 1, V] or tokens [B])."""

    def device_output(self, handle: DecodeHandle) -> Any:
        wait_event(handle.event)
        return handle.output

    def decode_result(self, values: torch.Tensor, logprobs: Any) -> Any:
        if logprobs is None:
            return values if values.dim() == 3 else values[:, 0]
        return values[:, 0], logprobs


class WithLegacyDecode(ReferenceLlamaCore):
    """tt_transformers' pre-contract ``decode_forward`` (contract v0): ``reset_batch``, no
    reload commands, no ``slot_remap`` in practice."""

    decode_input_update_contract: ClassVar[int] = 0

    def decode_forward(  # type: ignore[override]
        self,
        tokens: torch.Tensor,
        start_pos: torch.Tensor,
        page_table: torch.Tensor | None = None,
        kv_cache: Any = None,
        enable_trace: bool = False,
        read_from_device: bool = True,
        sampling_params: Any = None,
        reset_batch: bool = False,
        prompt_tokens: torch.Tensor | None = None,
        output_tokens: torch.Tensor | None = None,
        slot_remap: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        started = time.perf_counter()  # the timing-only device's step starts here
        flags = dict.fromkeys(FLAG_NAMES)
        # A host-sampled (logits) decode always copies its inputs; reset_batch is about the
        # device-sampling state, and the plugin sends it on device-sampled calls only.
        reset_batch = reset_batch or sampling_params is None
        return self._decode(
            tokens,
            start_pos,
            page_table,
            kv_cache,
            enable_trace,
            read_from_device,
            sampling_params,
            prompt_tokens,
            output_tokens,
            slot_remap,
            flags,
            {**kwargs, "reset_batch": reset_batch},
            started,
        )


class WithTopKLogprobs(ReferenceLlamaCore):
    """GPT-OSS's device logprobs: ``(values [B, 32], indices [B, 32])``, sorted descending."""

    model_capabilities: ClassVar[dict[str, Any]] = {
        **ReferenceLlamaCore.model_capabilities,
        "max_device_top_k": TOP_K_LOGPROBS,
    }

    def device_logprobs(self, logits: torch.Tensor, tokens: torch.Tensor) -> Any:
        return top_k_logprobs(logits)


def synthetic_rope_delta(prompt_len: int) -> int:
    """The delta the mRoPE variant reports: distinct per prompt length, never 0."""
    return -(prompt_len % 97) - 1


class WithMRoPEDeltas(ReferenceLlamaCore):
    """The mRoPE surface (Qwen2.5-VL, Qwen3-VL, Qwen 3.5/3.6) on the text model: prefill returns
    ``(output, rope_deltas)``; decode takes ``rope_deltas_all_users`` (int64 per slot) when the
    layout changed or a request joined, else None. The deltas are synthetic (never 0) and do not
    move positions, so outputs stay the text model's; the class checks that each request that
    joined gets its own delta back on the next decode that carries deltas, and refuses a decode
    without them while a joined request has not had its delta yet."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending_deltas: set[int] = set()

    def prefill_output(self, result: Any, batch: Any) -> Any:
        deltas = [synthetic_rope_delta(row.end) for row in batch.rows]
        self._pending_deltas.update(deltas)
        return result, torch.tensor(deltas, dtype=torch.int64)

    def take_decode_kwargs(self, kwargs: dict[str, Any]) -> None:
        what = "decode_forward"
        deltas = kwargs.pop("rope_deltas_all_users", None)
        if deltas is None:
            if self._pending_deltas:
                raise ReferenceModelError(
                    f"{what}: rope_deltas_all_users=None, but requests joined since the last "
                    f"deltas (expected {sorted(self._pending_deltas)})"
                )
            return
        if (
            not isinstance(deltas, torch.Tensor)
            or deltas.dtype != torch.int64
            or tuple(deltas.shape) != (self.num_slots,)
        ):
            raise ReferenceModelError(
                f"{what}: rope_deltas_all_users must be int64 [{self.num_slots}], got {deltas!r}"
            )
        missing = self._pending_deltas - set(deltas.tolist())
        if missing:
            raise ReferenceModelError(
                f"{what}: rope_deltas_all_users {deltas.tolist()} lacks the deltas "
                f"{sorted(missing)} of requests that joined"
            )
        self._pending_deltas.clear()


class ReferenceHybridForCausalLM(ReferenceLlamaForCausalLM):
    """Mixed sliding-window / full attention from ``hf_config.layer_types`` (a Qwen2 checkpoint
    with zero q/k/v biases), registered as TTReferenceHybridForCausalLM.

    Each layer attends through its own group's page table (``page_tables_per_group``); the core
    already keeps KV, token records, page-table checks and masks per group, so this class only
    names the windows, the per-layer specs, and checks that the checkpoint is Llama math.
    """

    hybrid_layers: HybridLayers
    # Sliding-window groups hold only their window: the plugin adds that block headroom.
    _HYBRID_KV_CACHE_GROUPS_ENABLED: ClassVar[bool] = True
    layer_groups: tuple[int, ...] = ()

    @classmethod
    def get_kv_cache_spec(cls, vllm_config: VllmConfig) -> dict[str, KVCacheSpec]:
        layers = HybridLayers.from_hf_config(vllm_config.model_config.hf_config)
        return layers.kv_cache_spec(vllm_config)

    @classmethod
    def initialize_vllm_model(
        cls,
        hf_config: Any,
        mesh_device: Any,
        max_batch_size: int,
        max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
        tt_data_parallel: int = 1,
        optimizations: str | None = None,
        vllm_config: VllmConfig | None = None,
    ) -> ReferenceHybridForCausalLM:
        """Also takes ``vllm_config`` (the plugin passes it because this signature names it):
        the model groups its layers as vLLM's KV cache manager will, to read
        ``page_tables_per_group``. Without it every layer is in one group."""
        model = super().initialize_vllm_model(
            hf_config,
            mesh_device,
            max_batch_size,
            max_seq_len=max_seq_len,
            tt_data_parallel=tt_data_parallel,
            optimizations=optimizations,
        )
        assert isinstance(model, ReferenceHybridForCausalLM)
        layers = model.hybrid_layers
        if vllm_config is None:
            model.layer_groups = (0,) * layers.num_layers
        else:
            model.layer_groups = vllm_layer_groups(vllm_config, layers.kv_cache_spec(vllm_config))
        return model

    def layer_group(self, layer: int) -> int:
        return self.layer_groups[layer] if self.layer_groups else 0

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
