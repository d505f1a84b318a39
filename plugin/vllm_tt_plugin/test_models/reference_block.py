"""A reference block-output model: commits 256-token canvases, as DiffusionGemma does.

It is not a diffusion model: each canvas is the reference Llama decoder's greedy continuation,
256 tokens computed inside one call. What it shares with tt-metal's DiffusionGemma adapter is the
serving surface the plugin sees (docs/BLOCK_SERVING.md):

- ``model_capabilities``: ``output_tokens_per_step`` 256, device sampling, no async decode, no
  prefix caching; no ``decode_input_update_contract`` (the version-0 decode with ``reset_batch``);
- ``prefill_forward`` writes the prompt's KV and returns block 0, int64 ``[num_reqs, 256]``;
  ``decode_forward`` returns the next block of every active request, ``[num_active, 256]``. The
  per-token ``tokens``/``start_pos`` inputs are advisory: the model owns its positions;
- after an EOS the rest of the canvas is EOS, and a released (finished) slot yields a whole block
  of EOS; more than one active sequence raises; ``get_max_tokens_all_users`` returns
  ``max_model_len`` (or ``TT_REFERENCE_MAX_TOKENS_ALL_USERS``) and requires ``max_num_seqs == 1``;
- ``release_request(row)`` and ``release_persistent_capture()``.

The KV lives in the paged cache the plugin allocates (``allocate_kv_cache_per_layer``), written
and read through the page table, so a canvas the scheduler did not reserve fails loudly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.test_models.llama import (
    LlamaDecoder,
    LlamaDims,
    checkpoint_dir,
    load_weights,
    read_safetensors,
)
from vllm_tt_plugin.utils.log import get_logger

logger = get_logger(__name__)

CANVAS = 256
DEFAULT_MAX_SEQ_LEN = 262144


class ReferenceBlockError(ValueError):
    """A call the block-output contract does not allow (names what is wrong)."""


@dataclass
class _Row:
    """What the model keeps for one slot between calls: the tokens whose KV it holds, the next
    token to feed, and whether the request emitted EOS."""

    length: int  # positions with KV written
    next_token: int  # the greedy choice after them
    pending: int | None = None  # the last committed token, its KV not yet written
    finished: bool = False


@dataclass
class BlockCallLog:
    """Every contract call, for tests (kind, slot, detail)."""

    calls: list[tuple[str, int, Any]] = field(default_factory=list)

    def of(self, kind: str) -> list[tuple[str, int, Any]]:
        return [c for c in self.calls if c[0] == kind]


class ReferenceBlockForCausalLM:
    model_capabilities: ClassVar[dict[str, Any]] = {
        "output_tokens_per_step": CANVAS,
        "supports_sample_on_device": True,
        "supports_async_decode": False,
        "supports_prefix_caching": False,
    }

    def __init__(
        self, decoder: LlamaDecoder, mesh_device: Any, max_batch_size: int, eos_id: int
    ) -> None:
        if max_batch_size != 1:
            raise ReferenceBlockError(
                f"max_batch_size={max_batch_size}: the block-output model serves one sequence"
            )
        self.decoder = decoder
        self.mesh_device = mesh_device
        self.max_batch_size = max_batch_size
        self.eos_id = eos_id
        self.rows: dict[int, _Row] = {}
        self.kv: list[torch.Tensor] | None = None
        self.log = BlockCallLog()
        self.captured = True  # the persistent trace capture, until released

    # --- class level ---------------------------------------------------------------------------
    @classmethod
    def initialize_vllm_model(
        cls,
        hf_config: Any,
        mesh_device: Any,
        max_batch_size: int,
        max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
        n_layers: int | None = None,
        tt_data_parallel: int = 1,
        optimizations: str | None = None,
    ) -> ReferenceBlockForCausalLM:
        if tt_data_parallel != 1:
            raise ReferenceBlockError(f"tt_data_parallel={tt_data_parallel}: must be 1")
        if optimizations not in (None, "performance"):
            raise ReferenceBlockError(f"optimizations={optimizations!r}: None or 'performance'")
        path = checkpoint_dir(hf_config)
        dims = LlamaDims.from_hf_config(hf_config)
        decoder = LlamaDecoder(dims, load_weights(path, dims, read_safetensors(path)))
        eos = hf_config.eos_token_id
        eos_id = int(eos[0] if isinstance(eos, (list, tuple)) else eos)
        return cls(decoder, mesh_device, max_batch_size, eos_id)

    @classmethod
    def get_max_tokens_all_users(
        cls, *, max_model_len: int, max_num_seqs: int | None = None, **kwargs: Any
    ) -> int:
        if max_num_seqs != 1:
            raise ReferenceBlockError(f"max_num_seqs={max_num_seqs}: block serving requires 1")
        budget = envs.TT_REFERENCE_MAX_TOKENS_ALL_USERS
        return budget.get() if budget.raw() is not None else max_model_len

    # --- KV cache ------------------------------------------------------------------------------
    def allocate_kv_cache_per_layer(self, per_layer_specs: Sequence[Any]) -> list[torch.Tensor]:
        dims = self.decoder.dims
        if len(per_layer_specs) != dims.num_layers:
            raise ReferenceBlockError(
                f"{len(per_layer_specs)} per_layer_specs for {dims.num_layers} layers"
            )
        caches = []
        for shape, _dtype, _idx in per_layer_specs:
            num_blocks, _heads, block_size, head_size = shape
            if head_size != dims.head_dim:
                raise ReferenceBlockError(f"head size {head_size} != {dims.head_dim}")
            # K and V, all KV heads (the device shards them; the reference keeps them together).
            caches.append(torch.zeros((2, num_blocks, dims.num_kv_heads, block_size, head_size)))
        self.kv = caches
        return caches

    def warmup_model_prefill(
        self,
        kv_cache: Any,
        enable_trace: bool,
        can_sample_on_device: bool,
        greedy_only: bool = False,
    ) -> None:
        self.log.calls.append(("warmup_prefill", -1, enable_trace))

    def warmup_model_decode(self, *args: Any, **kwargs: Any) -> None:
        self.log.calls.append(("warmup_decode", -1, kwargs.get("enable_trace")))

    # --- the canvas -----------------------------------------------------------------------------
    def _run(
        self, kv: list[torch.Tensor], table: torch.Tensor, tokens: list[int], start: int
    ) -> torch.Tensor:
        """Feed ``tokens`` at positions ``start..``: write their KV through the page table and
        return the logits of the last one."""
        dims = self.decoder.dims
        block_size = kv[0].shape[3]
        positions = torch.arange(start, start + len(tokens))
        end = start + len(tokens)
        pages = positions // block_size
        if int(pages.max()) >= table.shape[0] or bool((table[pages] <= 0).any()):
            raise ReferenceBlockError(
                f"positions {start}..{end - 1} are not all covered by the page table "
                f"{table.tolist()}: the canvas KV was not reserved"
            )
        blocks = table[pages].long()
        offsets = positions % block_size
        rep = dims.num_heads // dims.num_kv_heads
        all_pos = torch.arange(end)
        all_blocks = table[all_pos // block_size].long()
        all_offsets = all_pos % block_size
        causal = all_pos[None, :] <= positions[:, None]

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache = kv[layer]
            cache[0, blocks, :, offsets] = k
            cache[1, blocks, :, offsets] = v
            keys = cache[0, all_blocks, :, all_offsets].repeat_interleave(rep, dim=1)
            values = cache[1, all_blocks, :, all_offsets].repeat_interleave(rep, dim=1)
            scores = torch.einsum("thd,shd->hts", q, keys) / dims.head_dim**0.5
            scores = scores.masked_fill(~causal[None], float("-inf"))
            out = torch.einsum("hts,shd->thd", scores.softmax(-1), values)
            return out.reshape(len(tokens), -1)

        hidden = self.decoder.hidden_states(torch.tensor(tokens), positions, attend)
        return self.decoder.logits(hidden[-1:])[0]

    def _canvas(self, kv: list[torch.Tensor], table: torch.Tensor, row: _Row) -> list[int]:
        """The next 256 committed tokens of ``row`` (greedy); EOS-filled after an EOS."""
        out: list[int] = []
        while len(out) < CANVAS:
            if row.finished:
                out.append(self.eos_id)
                continue
            if row.pending is not None:
                logits = self._run(kv, table, [row.pending], row.length)
                row.length += 1
                row.next_token = int(logits.argmax())
            token = row.pending = row.next_token
            out.append(token)
            row.finished = token == self.eos_id
        return out

    def _kv(self, kv_cache: Any) -> list[torch.Tensor]:
        kv = self.kv
        if kv is None or kv_cache is not kv:
            raise ReferenceBlockError("kv_cache is not the cache allocate_kv_cache_per_layer made")
        return kv

    def prefill_forward(
        self,
        tokens: torch.Tensor,
        page_table: torch.Tensor | None = None,
        kv_cache: Any = None,
        prompt_lens: Sequence[int] | None = None,
        start_pos: Sequence[int] | None = None,
        page_tables_per_layer: Any = None,
        sampling_params: Any = None,
        empty_slots: Sequence[int] | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        kv = self._kv(kv_cache)
        if prompt_lens is None or empty_slots is None or page_table is None:
            raise ReferenceBlockError("prefill_forward needs prompt_lens, empty_slots, page_table")
        if len(self.rows) + len(prompt_lens) > self.max_batch_size:
            raise ReferenceBlockError("more than one active sequence")
        blocks = []
        for i, (length, slot) in enumerate(zip(prompt_lens, empty_slots, strict=True)):
            if start_pos is not None and int(start_pos[i]) != 0:
                raise ReferenceBlockError(f"start_pos={start_pos[i]}: prefill starts at 0 here")
            prompt = [int(t) for t in tokens[i, :length]]
            logits = self._run(kv, page_table[i], prompt, 0)
            row = _Row(length=len(prompt), next_token=int(logits.argmax()))
            self.rows[int(slot)] = row
            blocks.append(self._canvas(kv, page_table[i], row))
            self.log.calls.append(("prefill", int(slot), len(prompt)))
        return torch.tensor(blocks, dtype=torch.int64)

    def decode_forward(
        self,
        tokens: torch.Tensor | None = None,
        start_pos: torch.Tensor | None = None,
        page_table: torch.Tensor | None = None,
        kv_cache: Any = None,
        enable_trace: bool = False,
        read_from_device: bool = True,
        sampling_params: Any = None,
        page_tables_per_layer: Any = None,
        reset_batch: bool = False,
        slot_remap: Any = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        kv = self._kv(kv_cache)
        if page_table is None or start_pos is None:
            raise ReferenceBlockError("decode_forward needs page_table and start_pos")
        if slot_remap is not None:
            raise ReferenceBlockError("slot_remap is a v1 argument; this model is version 0")
        active = [i for i in range(int(start_pos.shape[0])) if int(start_pos[i]) >= 0]
        if len(active) > 1:
            raise ReferenceBlockError(f"{len(active)} active sequences; the model serves one")
        blocks = []
        for slot in active:
            row = self.rows.get(slot)
            if row is None:  # released or never prefilled: a finished request
                blocks.append([self.eos_id] * CANVAS)
            else:
                blocks.append(self._canvas(kv, page_table[slot], row))
            self.log.calls.append(("decode", slot, bool(reset_batch)))
        return torch.tensor(blocks, dtype=torch.int64).reshape(len(active), CANVAS)

    # --- hooks ---------------------------------------------------------------------------------
    def release_request(self, row: int) -> None:
        self.rows.pop(int(row), None)
        self.log.calls.append(("release_request", int(row), None))
        logger.info("reference block model: release_request(%d)", int(row))

    def release_persistent_capture(self) -> None:
        self.captured = False
        self.log.calls.append(("release_persistent_capture", -1, None))
        logger.info("reference block model: release_persistent_capture()")
