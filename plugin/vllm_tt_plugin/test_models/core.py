"""The reference model's contract surface: construction, sizing, KV allocation, prefill, decode,
warm-up. ``reference_llama.py`` adds the optional parts (per-layer KV allocation, async
read-back) and names the registered classes; ``variants.py`` builds capability variants.

Device work runs on the mesh's command queue: ``mesh_device.run(fn)`` for synchronous calls,
``mesh_device.enqueue(fn)`` for an async decode submit. All device state (KV cache, resident
decode state) is touched only inside those closures, after the host has validated and copied
the call's inputs, so async submission and read-back are real and ordered.

Readings of the contract this model commits to (docs/TT_MODEL_CONTRACT.md,
docs/DECODE_RELOAD_CONTRACT.md):

- Decode inputs are the full global batch (``lanes x per-lane slots`` rows, slot-indexed);
  prefill rows find their lane from ``empty_slots`` (required when there is more than one lane).
- With device sampling a decode step samples with the *resident* sampling parameters; a
  ``sampling_params`` argument only replaces them when ``reload_sampling_params`` is set. Whether
  a step samples at all is decided by ``sampling_params`` being sent.
- Host-sampled steps (logits returned) do not advance resident tokens/positions: there is no
  sampled token to feed back, and the plugin reloads inputs on every host-sampled step.
- The seeded draw for the token that follows position ``p`` uses ``(seed, p)``: the last prompt
  position for a prefill, ``start_pos`` for a decode, so a preempted-and-replayed request draws
  exactly what it would have drawn.
- Prefill penalties: the history is the row's whole sequence ``[0, prompt_lens)`` (the part
  before ``start_pos`` is read back from the token record of the cached blocks), counted as
  prompt tokens. A caller may send ``prompt_tokens``/``output_tokens`` (decode's format) to
  prefill as well, which then define the history exactly (a replayed request's generated tokens
  count as output for presence/frequency).
- A device-sampled prefill also leaves its token and the position it is consumed at in the
  resident slot named by ``empty_slots`` (the next decode reloads anyway under v1).
- Decode logits cover every slot; empty slots (``start_pos == -1``) get zeros, are never computed
  and never advance. Tokens/positions sent on a call that does not reload inputs are ignored
  (and not validated: the host's copies are stale by design).
- ``reset_sampling_state`` while the resident parameters carry penalties requires
  ``prompt_tokens`` or ``output_tokens``; without penalties the history is simply cleared.
- Contract v0: ``reset_batch=True`` means all of reload_inputs, reload_sampling_params and
  reset_sampling_state; ``reset_batch=False`` means none. v0 models reject the v1 flags and
  ``slot_remap``; v1 models reject ``reset_batch`` and require all four flags on every call.
- Real rows may never address the null block 0 for a position they write or attend to (checked);
  warm-up runs in block 0 and on scratch resident state, so it leaves nothing behind.
- KV storage and all compute are float32 whatever ``dtype`` the allocation asks for (recorded on
  the cache), so greedy output equals Hugging Face float32 output; tt-metal models likewise pick
  their own cache formats.
- Capability declarations are enforced, so a plugin that ignores one fails loudly: sampling
  without ``supports_sample_on_device``, async submit without ``supports_async_decode``,
  penalties/top-k/logprobs beyond the declared limits, ``start_pos > 0`` when neither prefix
  caching nor chunked prefill is declared; without prefix caching a ``start_pos > 0`` must
  continue the previous chunk of the same request (same first block, previous chunk end);
  without chunked prefill it must be block-aligned (a prefix-cache hit).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, TypeVar

import torch

from vllm_tt_plugin.adapter.kv_cache import kv_tp_width
from vllm_tt_plugin.contract.protocols import decode_contract_version
from vllm_tt_plugin.contract.sampling_params import TTSamplingParams
from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.test_models import timing_only
from vllm_tt_plugin.test_models.calls import CallRecord, DecodeHandle
from vllm_tt_plugin.test_models.inputs import (
    FLAG_NAMES,
    ContractInputError,
    Geometry,
    PrefillBatch,
    PrefillRow,
    parse_decode,
    parse_decode_update,
    parse_prefill,
    reject_unknown,
)
from vllm_tt_plugin.test_models.llama import (
    LlamaDecoder,
    LlamaDims,
    checkpoint_dir,
    load_weights,
    read_safetensors,
)
from vllm_tt_plugin.test_models.paged_kv import (
    HeadSharding,
    KVCacheError,
    LayerLayout,
    ReferenceKVCache,
    check_page_rows,
    paged_attention,
    read_tokens,
    write_kv,
    write_tokens,
)
from vllm_tt_plugin.test_models.resident import DecodeInputs, DecodeUpdate, ResidentDecodeState
from vllm_tt_plugin.test_models.sampling import (
    DeviceSampler,
    PenaltyHistory,
    SamplerLimits,
    placeholder_logprobs,
)
from vllm_tt_plugin.test_models.warmup import ReferenceWarmup

T = TypeVar("T")

DEFAULT_MAX_SEQ_LEN = 131072
CALL_LOG_SIZE = 4096
OPTIMIZATIONS = (None, "performance", "accuracy")


class ReferenceModelError(ValueError):
    """The plugin used the reference model outside the contract or its declared capabilities."""


class DeviceQueue(Protocol):
    """What the reference model needs of its ``mesh_device``: the emulated mesh's command queue
    (``emulation.mesh.EmulatedMeshDevice``), checked when the model is built."""

    def get_num_devices(self) -> int: ...

    def run(self, fn: Callable[[], T], started: float | None = None) -> T: ...

    def enqueue(
        self, fn: Callable[[], Any], started: float | None = None, step: bool = True
    ) -> Any: ...


class ReferenceLlamaCore(ReferenceWarmup, DeviceSampler):
    """A tt-metal-style model class in torch; see the module docstring for its contract reading."""

    model_capabilities: ClassVar[dict[str, Any]] = {
        "supports_sample_on_device": True,
        "supports_async_decode": True,
        "supports_prefix_caching": True,
        "supports_chunked_prefill": True,
        "supports_device_penalties": True,
    }
    decode_input_update_contract: ClassVar[int] = 1

    def __init__(
        self,
        decoder: LlamaDecoder,
        mesh_device: Any,
        max_batch_size: int,
        max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
        tt_data_parallel: int = 1,
        optimizations: str | None = None,
    ) -> None:
        name = type(self).__qualname__
        for method in ("get_num_devices", "run", "enqueue"):
            if not callable(getattr(mesh_device, method, None)):
                raise ReferenceModelError(
                    f"{name}: mesh_device {mesh_device!r} has no {method}(); the reference model "
                    "runs only on a host-emulated mesh"
                )
        for label, value in (("max_batch_size", max_batch_size), ("max_seq_len", max_seq_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ReferenceModelError(f"{name}: {label}={value!r} must be a positive integer")
        if isinstance(tt_data_parallel, bool) or not isinstance(tt_data_parallel, int):
            raise ReferenceModelError(
                f"{name}: tt_data_parallel={tt_data_parallel!r} is not an int"
            )
        num_devices = int(mesh_device.get_num_devices())
        if tt_data_parallel < 1 or num_devices % tt_data_parallel:
            raise ReferenceModelError(
                f"{name}: tt_data_parallel={tt_data_parallel} lanes do not divide the mesh's "
                f"{num_devices} devices"
            )
        if max_batch_size % tt_data_parallel:
            raise ReferenceModelError(
                f"{name}: max_batch_size={max_batch_size} is not a multiple of "
                f"tt_data_parallel={tt_data_parallel} (it is lanes x per-lane sequences)"
            )
        if optimizations not in OPTIMIZATIONS:
            raise ReferenceModelError(
                f"{name}: optimizations={optimizations!r} must be one of {OPTIMIZATIONS}"
            )
        self.decoder = decoder
        self.dims = decoder.dims
        self.mesh_device: DeviceQueue = mesh_device
        self.max_batch_size = max_batch_size
        self.max_seq_len = max_seq_len
        self.num_lanes = tt_data_parallel
        self.optimizations = optimizations
        # Timing-only emulated device: the decoder is replaced by a closed form (timing_only.py).
        self.timing_only = bool(getattr(mesh_device, "timing_only", False))
        self._timing = timing_only.TimingCache()  # greedy steps: no logits unless hooked
        self._timing_greedy = self.timing_only and type(self)._decode_logits is _CORE_LOGITS
        self.devices_per_lane = num_devices // tt_data_parallel
        # KV heads are split over the lane's mesh columns (the TP width), not all its devices.
        self.tp_width = kv_tp_width(tuple(mesh_device.shape), tt_data_parallel)
        self.sharding = HeadSharding.for_lane(
            self.tp_width, self.dims.num_kv_heads, self.dims.q_per_kv
        )
        self.capabilities = ModelCapabilities.from_model_class(type(self))
        self.limits = SamplerLimits(
            max_top_k=self.capabilities.max_device_top_k,
            penalties=self.capabilities.supports_device_penalties,
        )
        self.call_log: deque[CallRecord] = deque(maxlen=CALL_LOG_SIZE)
        self.kv_cache: ReferenceKVCache | None = None
        self._scale = self.dims.head_dim**-0.5
        self._steps = itertools.count()
        # Device state: touched only inside mesh closures.
        self._resident = ResidentDecodeState.empty(max_batch_size, 1, self.dims.vocab_size)
        # Host bookkeeping, advanced in call order when a call is accepted.
        self._params_loaded = False
        self._chunk_ends: list[dict[int, int]] = [{} for _ in range(tt_data_parallel)]

    # --- construction and sizing -------------------------------------------------------------
    @classmethod
    def initialize_vllm_model(
        cls,
        hf_config: Any,
        mesh_device: Any,
        max_batch_size: int,
        max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
        tt_data_parallel: int = 1,
        optimizations: str | None = None,
    ) -> ReferenceLlamaCore:
        cls.check_hf_config(hf_config)  # config errors before any weight is read
        raw = read_safetensors(checkpoint_dir(hf_config))  # read once, for every hook
        model = cls(
            cls.decoder_from_checkpoint(hf_config, raw),
            mesh_device,
            max_batch_size,
            max_seq_len=max_seq_len,
            tt_data_parallel=tt_data_parallel,
            optimizations=optimizations,
        )
        model.attach_checkpoint(hf_config, raw)
        return model

    @classmethod
    def check_hf_config(cls, hf_config: Any) -> None:
        """Config-only checks of a subclass (its layer layout, ...)."""

    @classmethod
    def decoder_from_checkpoint(cls, hf_config: Any, raw: dict[str, torch.Tensor]) -> LlamaDecoder:
        dims = LlamaDims.from_hf_config(hf_config)
        return LlamaDecoder(dims, load_weights(checkpoint_dir(hf_config), dims, raw))

    def attach_checkpoint(self, hf_config: Any, raw: dict[str, torch.Tensor]) -> None:
        """Check or read the rest of the checkpoint (hybrid layers, a vision tower) once the
        decoder is loaded."""

    @classmethod
    def get_max_tokens_all_users(
        cls,
        model_name: str,
        num_devices: int,
        tt_data_parallel: int,
        max_model_len: int,
        max_num_seqs: int | None = None,
    ) -> int:
        """Token budget of one lane's KV cache: 32768, or ``TT_REFERENCE_MAX_TOKENS_ALL_USERS``."""
        return envs.TT_REFERENCE_MAX_TOKENS_ALL_USERS.get()

    # --- properties tests and the plugin may read ---------------------------------------------
    @property
    def num_slots(self) -> int:
        return self.max_batch_size

    @property
    def slots_per_lane(self) -> int:
        return self.max_batch_size // self.num_lanes

    def geometry(self, kv: ReferenceKVCache | None = None) -> Geometry:
        groups = kv.num_groups if kv is not None else 1
        return Geometry(
            self.max_batch_size,
            self.num_lanes,
            self.dims.vocab_size,
            groups,
            self.max_seq_len,
            self.limits,
        )

    def resident_snapshot(self) -> ResidentDecodeState:
        """The resident decode state as the device holds it after all queued work (for tests)."""
        return self.mesh_device.run(lambda: self._resident)

    def _log(self, record: CallRecord) -> None:
        self.call_log.append(record)

    # --- KV cache ------------------------------------------------------------------------------
    def layer_sliding_window(self, layer: int) -> int | None:
        """Hook for hybrid variants: the attention window of ``layer`` (None = full)."""
        return None

    def allocate_kv_cache(
        self, kv_cache_shape: tuple[int, ...], dtype: torch.dtype, num_layers: int
    ) -> ReferenceKVCache:
        """Legacy allocation: one uniform shape ``(blocks, kv_heads_per_device, block, head)``."""
        what = "allocate_kv_cache"
        shape = tuple(kv_cache_shape)
        if len(shape) != 4 or any(isinstance(x, bool) or not isinstance(x, int) for x in shape):
            raise KVCacheError(
                f"{what}: kv_cache_shape={kv_cache_shape!r} must be 4 ints "
                "(num_blocks, num_kv_heads_per_device, block_size, head_size)"
            )
        if num_layers != self.dims.num_layers:
            raise KVCacheError(
                f"{what}: num_layers={num_layers} but the model has {self.dims.num_layers}"
            )
        if any(self.layer_sliding_window(i) is not None for i in range(num_layers)):
            raise KVCacheError(f"{what}: sliding-window layers need allocate_kv_cache_per_layer")
        num_blocks, heads, block_size, head_size = shape
        self._check_layer_shape(what, heads, head_size, num_blocks, block_size)
        layouts = [LayerLayout(0, num_blocks, block_size) for _ in range(num_layers)]
        return self._allocate(layouts, dtype, what)

    def _check_layer_shape(
        self, what: str, heads: int, head_size: int, num_blocks: int, block_size: int
    ) -> None:
        if heads != self.sharding.kv_heads_per_shard:
            raise KVCacheError(
                f"{what}: num_kv_heads={heads} per device, but {self.dims.num_kv_heads} KV heads "
                f"over {self.sharding.num_shards} shard(s) (a lane {self.tp_width} mesh columns "
                f"wide) give {self.sharding.kv_heads_per_shard}"
            )
        if head_size != self.dims.head_dim:
            raise KVCacheError(f"{what}: head_size={head_size} but head_dim={self.dims.head_dim}")
        if num_blocks < 2 or block_size < 1:
            raise KVCacheError(
                f"{what}: num_blocks={num_blocks} (need >= 2: block 0 is the null block) and "
                f"block_size={block_size} (need >= 1)"
            )

    def _allocate(
        self, layouts: list[LayerLayout], dtype: torch.dtype, allocated_by: str
    ) -> ReferenceKVCache:
        if not isinstance(dtype, torch.dtype):
            raise KVCacheError(f"{allocated_by}: dtype={dtype!r} is not a torch.dtype")

        def allocate() -> ReferenceKVCache:
            kv = ReferenceKVCache(
                layouts,
                self.sharding,
                self.dims.head_dim,
                self.num_lanes,
                dtype,
                owner=id(self),
                allocated_by=allocated_by,
            )
            self._resident = ResidentDecodeState.empty(
                self.max_batch_size, kv.num_groups, self.dims.vocab_size
            )
            return kv

        kv = self.mesh_device.run(allocate)
        self.kv_cache = kv
        self._params_loaded = False
        self._chunk_ends = [{} for _ in range(self.num_lanes)]
        self._log(CallRecord(allocated_by))
        return kv

    def _check_kv(self, kv_cache: Any, what: str) -> ReferenceKVCache:
        if not isinstance(kv_cache, ReferenceKVCache) or kv_cache.owner != id(self):
            raise ReferenceModelError(
                f"{what}: kv_cache must be the object this model's allocate call returned, got "
                f"{type(kv_cache).__name__}"
            )
        return kv_cache

    # --- prefill -----------------------------------------------------------------------------
    def prefill_forward(
        self,
        tokens: torch.Tensor,
        page_table: torch.Tensor | None = None,
        kv_cache: Any = None,
        prompt_lens: list[int] | torch.Tensor | None = None,
        empty_slots: list[int] | None = None,
        enable_trace: bool = False,
        sampling_params: TTSamplingParams | None = None,
        start_pos: list[int] | torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        """tt_transformers' ``prefill_forward_text`` surface. ``tokens`` carry every row's
        sequence from position 0; row i computes ``tokens[i, start_pos[i]:prompt_lens[i]]``."""
        started = time.perf_counter()  # the timing-only device's step starts here
        what = "prefill_forward"
        kv = self._check_kv(kv_cache, what)
        tables = self._take_group_tables(kwargs, what)
        reject_unknown(kwargs, what)
        if sampling_params is not None and not self.capabilities.supports_sample_on_device:
            raise ReferenceModelError(
                f"{what}: sampling_params sent to a model without supports_sample_on_device"
            )
        if prompt_lens is None or start_pos is None:
            raise ReferenceModelError(f"{what}: prompt_lens and start_pos are required")
        batch = parse_prefill(
            tokens,
            page_table,
            prompt_lens,
            start_pos,
            tables,
            sampling_params,
            empty_slots,
            self.geometry(kv),
        )
        self._check_prefill_starts(kv, batch)
        self._log(
            CallRecord(
                what,
                enable_trace=bool(enable_trace),
                device_sampling=batch.sampling_params is not None,
                rows=len(batch.rows),
                start_pos=tuple(row.start for row in batch.rows),
            )
        )
        result = self.mesh_device.run(lambda: self._prefill_step(kv, batch), started)
        return self.prefill_output(result, batch)

    def prefill_output(self, result: Any, batch: PrefillBatch) -> Any:
        """Hook: what prefill_forward returns (an mRoPE class wraps it as
        ``(result, rope_deltas)``)."""
        return result

    def take_decode_kwargs(self, kwargs: dict[str, Any]) -> None:
        """Hook: pop the decode keywords a subclass's real signature has (an mRoPE class:
        ``rope_deltas_all_users``); what is left is refused as a TypeError."""

    def _take_group_tables(self, kwargs: dict[str, Any], what: str) -> Any:
        """``page_tables_per_group``: only a class with ``get_kv_cache_spec`` takes it."""
        if "page_tables_per_group" in kwargs and hasattr(type(self), "get_kv_cache_spec"):
            return kwargs.pop("page_tables_per_group")
        return None

    def _check_prefill_starts(self, kv: ReferenceKVCache, batch: PrefillBatch) -> None:
        caps = self.capabilities
        group = kv.history_group()
        block_size = kv.group_layout(group).block_size
        for row in batch.rows:
            if row.start == 0:
                continue
            where = f"prefill_forward: row {row.index} start_pos={row.start}"
            if not caps.supports_chunked_prefill and not caps.supports_prefix_caching:
                raise ReferenceModelError(
                    f"{where} > 0, but the model declares neither supports_chunked_prefill nor "
                    "supports_prefix_caching"
                )
            first_block = int(row.page_rows[group][0])
            if not caps.supports_prefix_caching:
                if self._chunk_ends[row.lane].get(first_block) != row.start:
                    raise ReferenceModelError(
                        f"{where} does not continue an earlier chunk of the same request (a "
                        "prefix-cache hit?), but the model declares supports_prefix_caching=False"
                    )
            elif not caps.supports_chunked_prefill and row.start % block_size:
                raise ReferenceModelError(
                    f"{where} is not block-aligned (a chunk continuation?), but the model "
                    "declares supports_chunked_prefill=False"
                )
        for row in batch.rows:
            first_block = int(row.page_rows[group][0])
            if first_block:
                self._chunk_ends[row.lane][first_block] = row.end

    def _prefill_step(self, kv: ReferenceKVCache, batch: PrefillBatch) -> Any:
        logits = self._prefill_logits(kv, batch.rows, allow_null=False)
        params = batch.sampling_params
        if params is None:
            return logits[:, None, :]  # [B, 1, V], input-row order
        history = self._prefill_history(kv, batch) if params.any_penalties else None
        positions = torch.tensor([row.end - 1 for row in batch.rows], dtype=torch.int64)
        tokens = self.sample_tokens(logits, params, history, positions)
        result: Any = tokens[:, None]
        if params.max_num_logprobs >= 0:
            result = (result, self.device_logprobs(logits, tokens))
        placed = [row for row in batch.rows if row.slot is not None]
        if placed:
            index = torch.tensor([row.index for row in placed])
            self._resident = self._resident.with_prefilled(
                torch.tensor([row.slot for row in placed]),
                tokens[index],
                torch.tensor([row.end for row in placed], dtype=torch.int64),
            )
        return result

    def _prefill_logits(
        self, kv: ReferenceKVCache, rows: tuple[PrefillRow, ...], allow_null: bool
    ) -> torch.Tensor:
        if self.timing_only:
            return timing_only.prefill_logits(kv, rows, self.dims.vocab_size, allow_null)
        logits = torch.empty((len(rows), self.dims.vocab_size), dtype=torch.float32)
        for r, row in enumerate(rows):
            lane = kv.lanes[row.lane]
            positions = torch.arange(row.start, row.end, dtype=torch.int64)
            first, last = positions[:1], positions[-1:]
            where: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
            for group in range(kv.num_groups):
                layout = kv.group_layout(group)
                page_row = row.page_rows[group]
                check_page_rows(
                    page_row[None],
                    first,
                    last,
                    layout,
                    f"prefill_forward row {row.index} (KV group {group})",
                    allow_null,
                )
                blocks = page_row.long()[positions // layout.block_size]
                offsets = positions % layout.block_size
                write_tokens(lane, group, blocks, offsets, row.tokens)
                where[group] = (blocks, offsets)

            def attend(
                layer: int,
                q: torch.Tensor,
                k: torch.Tensor,
                v: torch.Tensor,
                row: PrefillRow = row,
                lane: Any = lane,
                positions: torch.Tensor = positions,
                where: dict[int, tuple[torch.Tensor, torch.Tensor]] = where,
            ) -> torch.Tensor:
                layout = kv.layers[layer]
                blocks, offsets = where[layout.group_id]
                write_kv(lane, kv.sharding, layer, blocks, offsets, k, v)
                table = row.page_rows[layout.group_id][None]
                out = paged_attention(
                    lane, kv.sharding, layer, layout, table, q[None], positions[None], self._scale
                )
                return out[0]

            embeds = self._prefill_embeds(row)
            hidden = self.decoder.hidden_states(row.tokens, positions, attend, embeds)
            logits[r] = self.decoder.logits(hidden[-1:])[0]
        return logits

    def _prefill_embeds(self, row: PrefillRow) -> torch.Tensor | None:
        """Input embeddings replacing the row's token embeddings (vision models); None = tokens."""
        return None

    def _prefill_history(self, kv: ReferenceKVCache, batch: PrefillBatch) -> PenaltyHistory:
        """Prefill penalties count the row's whole sequence [0, prompt_lens) as prompt tokens
        (read back from the token record); prefill never receives a history."""
        rows, vocab = len(batch.rows), self.dims.vocab_size
        group = kv.history_group()
        longest = max(row.end for row in batch.rows)
        prompt = torch.full((rows, longest), -1, dtype=torch.int64)
        for row in batch.rows:
            lane = kv.lanes[row.lane]
            prompt[row.index, : row.end] = read_tokens(lane, group, row.page_rows[group], row.end)
        return PenaltyHistory.from_padded(prompt, None, rows, vocab)

    # --- decode ------------------------------------------------------------------------------
    def decode_forward(
        self,
        tokens: torch.Tensor,
        start_pos: torch.Tensor,
        page_table: torch.Tensor | None = None,
        kv_cache: Any = None,
        enable_trace: bool = False,
        read_from_device: bool = True,
        sampling_params: TTSamplingParams | None = None,
        prompt_tokens: torch.Tensor | None = None,
        output_tokens: torch.Tensor | None = None,
        slot_remap: torch.Tensor | None = None,
        *,
        reload_inputs: bool = True,
        reload_page_table: bool = False,
        reload_sampling_params: bool = False,
        reset_sampling_state: bool = False,
        **kwargs: Any,
    ) -> Any:
        """tt_transformers' Generator.decode_forward (decode reload contract v1)."""
        if "reset_batch" in kwargs:
            raise ContractInputError(
                "decode_forward: reset_batch is the legacy (contract v0) argument; this model "
                f"declares decode_input_update_contract={decode_contract_version(self)} and "
                f"takes {', '.join(FLAG_NAMES)} instead"
            )
        flags = (reload_inputs, reload_page_table, reload_sampling_params, reset_sampling_state)
        started = time.perf_counter()  # the timing-only device's step starts here
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
            dict(zip(FLAG_NAMES, flags, strict=True)),
            kwargs,
            started,
        )

    def _decode(
        self,
        tokens: Any,
        start_pos: Any,
        page_table: Any,
        kv_cache: Any,
        enable_trace: bool,
        read_from_device: bool,
        sampling_params: Any,
        prompt_tokens: Any,
        output_tokens: Any,
        slot_remap: Any,
        flags: dict[str, Any],
        kwargs: dict[str, Any],
        started: float | None = None,
    ) -> Any:
        what = "decode_forward"
        kv = self._check_kv(kv_cache, what)
        tables = self._take_group_tables(kwargs, what)
        update = parse_decode_update(
            decode_contract_version(self), flags, slot_remap, kwargs, self.geometry(kv)
        )
        self.take_decode_kwargs(kwargs)
        reject_unknown(kwargs, what)
        if decode_contract_version(self) >= 1 and not update.reload_inputs:
            if not enable_trace:
                raise ReferenceModelError(
                    f"{what}: reload_inputs=False on an untraced decode (tt-metal keeps resident "
                    "inputs only in a captured trace)"
                )
            if not self.capabilities.supports_async_decode:
                raise ReferenceModelError(
                    f"{what}: reload_inputs=False to a model without supports_async_decode"
                )
        device_sampling = sampling_params is not None
        if device_sampling and not self.capabilities.supports_sample_on_device:
            raise ReferenceModelError(
                f"{what}: sampling_params sent to a model without supports_sample_on_device"
            )
        inputs = parse_decode(
            tokens,
            page_table,
            start_pos,
            tables,
            # Timing-only: parameters that are not loaded are not parsed (they are ignored).
            sampling_params if update.reload_sampling_params or not self.timing_only else None,
            prompt_tokens,
            output_tokens,
            self.geometry(kv),
            update,
        )
        if device_sampling and not update.reload_sampling_params and not self._params_loaded:
            raise ReferenceModelError(
                f"{what}: device sampling with reload_sampling_params=False, but no sampling "
                "parameters are resident yet"
            )
        if update.reload_sampling_params:
            self._params_loaded = device_sampling
        legacy = decode_contract_version(self) == 0
        rows = self.max_batch_size
        self._log(
            CallRecord.decode(legacy, rows, enable_trace, read_from_device, device_sampling, update)
        )
        if read_from_device:
            return self.mesh_device.run(
                lambda: self._decode_step(kv, update, inputs, None, device_sampling), started
            )
        handle = DecodeHandle(id(self), next(self._steps), is_tokens=device_sampling)
        handle.event = self.mesh_device.enqueue(
            lambda: self._decode_step(kv, update, inputs, handle, device_sampling), started
        )
        return self.device_output(handle)

    def device_output(self, handle: DecodeHandle) -> Any:
        """What ``read_from_device=False`` returns: the device handle (read back through
        ``process_decode_output_host``). A class without read-back hooks returns host tensors."""
        return handle

    def decode_result(self, values: torch.Tensor, logprobs: Any) -> Any:
        """tt_transformers always returns ``(values, logprobs)``; the logprobs are a placeholder
        when none were asked for (or none computed)."""
        if logprobs is None:
            logprobs = placeholder_logprobs(int(values.shape[0]))
        return values, logprobs

    def _decode_step(
        self,
        kv: ReferenceKVCache,
        update: DecodeUpdate,
        inputs: DecodeInputs,
        handle: DecodeHandle | None,
        sampling: bool | None = None,
    ) -> Any:
        """Device side of one decode call; commits the new resident state only on success."""
        state = self._resident.updated(update, inputs, self.dims.vocab_size)
        if sampling is None:
            sampling = inputs.sampling_params is not None
        if sampling and self._timing_greedy and self._timing.greedy_only(state.params):
            sampled, state = timing_only.greedy_decode(
                kv, state, self.slots_per_lane, self.dims.vocab_size, self._timing
            )  # the full path's tokens, without logits or sampler
            result: Any = self.decode_result(sampled[:, None], None)
        elif not sampling:
            result = self.decode_result(self._decode_logits(kv, state, False)[0][:, None], None)
        else:
            logits, rows = self._decode_logits(kv, state, allow_null=False)
            if state.params is None:
                raise ReferenceModelError("decode_forward: no resident sampling parameters")
            history = state.history if state.params.any_penalties else None
            sampled = self.sample_tokens(logits, state.params, history, state.positions)
            logprobs = None
            if state.params.max_num_logprobs >= 0:
                logprobs = self.device_logprobs(logits, sampled)
            result = self.decode_result(sampled[:, None], logprobs)
            state = state.advanced(rows, sampled[rows])
        self._resident = state
        if handle is not None:
            handle.output = result
        return result

    def _decode_logits(
        self, kv: ReferenceKVCache, state: ResidentDecodeState, allow_null: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [slots, vocab] (zeros in empty slots) and the active slot ids."""
        if self.timing_only:
            return timing_only.decode_logits(
                kv, state, self.max_batch_size, self.slots_per_lane, self.dims.vocab_size,
                allow_null, self._timing,
            )  # fmt: skip
        logits = torch.zeros((self.max_batch_size, self.dims.vocab_size), dtype=torch.float32)
        rows = state.active.nonzero().flatten()
        if rows.numel() == 0:
            return logits, rows
        tokens, positions = state.tokens[rows], state.positions[rows]
        lane_of = rows // self.slots_per_lane
        lanes = [
            (lane, (lane_of == lane).nonzero().flatten()) for lane in lane_of.unique().tolist()
        ]
        tables = [table[rows] for table in state.page_tables]
        where: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for group in range(kv.num_groups):
            layout = kv.group_layout(group)
            for lane, sel in lanes:
                check_page_rows(
                    tables[group][sel],
                    positions[sel],
                    positions[sel],
                    layout,
                    f"decode_forward slots {rows[sel].tolist()} (lane {lane}, KV group {group})",
                    allow_null,
                )
            col = (positions // layout.block_size)[:, None]
            blocks = tables[group].long().gather(1, col)[:, 0]
            offsets = positions % layout.block_size
            for lane, sel in lanes:
                write_tokens(kv.lanes[lane], group, blocks[sel], offsets[sel], tokens[sel])
            where[group] = (blocks, offsets)

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            layout = kv.layers[layer]
            blocks, offsets = where[layout.group_id]
            table = tables[layout.group_id]
            out = q.new_empty((q.shape[0], q.shape[1] * q.shape[2]))
            for lane, sel in lanes:
                cache = kv.lanes[lane]
                write_kv(cache, kv.sharding, layer, blocks[sel], offsets[sel], k[sel], v[sel])
                out[sel] = paged_attention(
                    cache,
                    kv.sharding,
                    layer,
                    layout,
                    table[sel],
                    q[sel][:, None],
                    positions[sel][:, None],
                    self._scale,
                )[:, 0]
            return out

        hidden = self.decoder.hidden_states(tokens, positions, attend)
        logits[rows] = self.decoder.logits(hidden)
        return logits, rows

    def _run_device(self, fn: Callable[[], T]) -> T:
        return self.mesh_device.run(fn)


_CORE_LOGITS = ReferenceLlamaCore._decode_logits  # a subclass hooking it keeps the full path
