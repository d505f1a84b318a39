"""Warm-up of the reference model (tt-metal's ``warmup_model_prefill`` /
``warmup_model_decode``): compile-like passes in the null block on scratch state.

The signatures are tt_transformers' Generator's; called by keyword. ``num_blocks`` is the
traced page-table width of one request (checked), and the prefill warm-up runs once until
``already_warmed_up_prefill`` is reset, as on tt-metal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from vllm_tt_plugin.test_models.calls import CallRecord
from vllm_tt_plugin.test_models.inputs import PrefillRow
from vllm_tt_plugin.test_models.resident import ResidentDecodeState
from vllm_tt_plugin.test_models.sampling import PenaltyHistory, SamplingTensors, device_sample


class ReferenceWarmupError(ValueError):
    """A warm-up call outside the contract."""


class ReferenceWarmup:
    """Mixin of ``ReferenceLlamaCore`` (uses its KV checks, decoder paths and limits)."""

    already_warmed_up_prefill: bool = False
    max_batch_size: int
    max_seq_len: int
    num_lanes: int
    dims: Any
    capabilities: Any
    limits: Any

    if TYPE_CHECKING:  # provided by ReferenceLlamaCore

        def _check_kv(self, kv_cache: Any, what: str) -> Any: ...

        def _log(self, record: CallRecord) -> None: ...

        def _prefill_logits(self, kv: Any, rows: Any, allow_null: bool) -> torch.Tensor: ...

        def _decode_logits(self, kv: Any, state: Any, allow_null: bool) -> Any: ...

        def _run_device(self, fn: Any) -> Any: ...

        def device_logprobs(self, logits: torch.Tensor, tokens: torch.Tensor) -> Any: ...

    def warmup_model_prefill(
        self,
        kv_cache: Any,
        enable_trace: bool,
        can_sample_on_device: bool,
        greedy_only: bool = False,
    ) -> None:
        """Runs a prefill per lane in the null block; touches no resident or host bookkeeping.
        Like tt-metal's Generator it runs once: ``already_warmed_up_prefill`` makes a second
        call a no-op until the caller resets it."""
        kv = self._check_kv(kv_cache, "warmup_model_prefill")
        if self.already_warmed_up_prefill:
            return
        self.already_warmed_up_prefill = True
        self._log(
            CallRecord(
                "warmup_model_prefill",
                enable_trace=bool(enable_trace),
                device_sampling=bool(can_sample_on_device),
            )
        )
        length = min(2 * kv.layers[0].block_size, self.max_seq_len)
        tokens = torch.arange(length, dtype=torch.int64) % self.dims.vocab_size

        def run() -> None:
            for lane in range(self.num_lanes):
                width = -(-length // kv.group_layout(0).block_size)
                tables = tuple(torch.zeros(width, dtype=torch.int32) for _ in range(kv.num_groups))
                row = PrefillRow(0, lane, None, 0, length, tokens, tables)
                logits = self._prefill_logits(kv, (row,), allow_null=True)
                if can_sample_on_device:
                    self._warmup_sample(logits, torch.tensor([length - 1]))

        self._run_device(run)

    def warmup_model_decode(
        self,
        kv_cache: Any,
        enable_trace: bool,
        max_batch_size: int,
        num_blocks: int,
        can_sample_on_device: bool,
        greedy_only: bool = False,
    ) -> None:
        """Runs a full-batch decode on scratch state in the null block; resident state stays."""
        what = "warmup_model_decode"
        kv = self._check_kv(kv_cache, what)
        if max_batch_size != self.max_batch_size:
            raise ReferenceWarmupError(
                f"{what}: max_batch_size={max_batch_size} but the model was built for "
                f"{self.max_batch_size}"
            )
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ReferenceWarmupError(f"{what}: num_blocks={num_blocks!r} must be a positive int")
        block_size = kv.group_layout(0).block_size
        width = -(-self.max_seq_len // block_size)
        if num_blocks > width:
            raise ReferenceWarmupError(
                f"{what}: num_blocks={num_blocks} is wider than one request's page table "
                f"(ceil(max_seq_len {self.max_seq_len} / block_size {block_size}) = {width}); "
                "it sizes the traced page table, not the KV pool"
            )
        self._log(
            CallRecord(
                what,
                enable_trace=bool(enable_trace),
                device_sampling=bool(can_sample_on_device),
                rows=max_batch_size,
                num_blocks=num_blocks,
            )
        )
        slots = self.max_batch_size

        def run() -> None:
            scratch = ResidentDecodeState(
                tokens=torch.zeros(slots, dtype=torch.int64),
                positions=torch.zeros(slots, dtype=torch.int64),
                page_tables=tuple(
                    torch.zeros((slots, 1), dtype=torch.int32) for _ in range(kv.num_groups)
                ),
                params=None,
                history=PenaltyHistory.empty(slots, self.dims.vocab_size),
            )
            logits, _ = self._decode_logits(kv, scratch, allow_null=True)
            if can_sample_on_device:
                self._warmup_sample(logits, scratch.positions)

        self._run_device(run)

    def _warmup_sample(self, logits: torch.Tensor, positions: torch.Tensor) -> None:
        """Exercise every sampler path (greedy, random, top-k/p, penalties, logprobs)."""
        if not self.capabilities.supports_sample_on_device:
            return
        rows = logits.shape[0]
        top_k = min(5, self.limits.max_top_k or 5)
        penalty = 1.1 if self.limits.penalties else 1.0
        params = SamplingTensors(
            temperature=torch.tensor([0.0 if i % 2 == 0 else 0.8 for i in range(rows)]),
            top_k=torch.full((rows,), top_k, dtype=torch.int32),
            top_p=torch.full((rows,), 0.9),
            presence_penalty=torch.zeros(rows),
            frequency_penalty=torch.zeros(rows),
            repetition_penalty=torch.full((rows,), penalty),
            seed=torch.arange(rows, dtype=torch.int64),
            num_logprobs=torch.ones(rows, dtype=torch.int32),
        )
        tokens = device_sample(
            logits, params, PenaltyHistory.empty(rows, self.dims.vocab_size), positions
        )
        self.device_logprobs(logits, tokens)
