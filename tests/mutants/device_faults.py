"""Model-side mutants: plausible tt-metal faults planted in the bundled reference model.

Test data, not a product. Each class is the shipped ``ReferenceLlamaForCausalLM`` with one
device-side method changed the way a tt-metal release could get it wrong (a sampling parameter
dropped, a penalty misapplied, logprobs for the wrong token, RoPE wrapping past a position...).
The plugin is unchanged: a mutant is served through ``TT_MODEL_CLASS_OVERRIDES`` exactly as a
TT engineer would serve a patched tt-metal class. Every fault is deterministic and serves without
errors; it only changes outputs. ``catalog.py`` lists them with the concern each one targets.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM
from vllm_tt_plugin.test_models.sampling import (
    PenaltyHistory,
    SamplingTensors,
    device_sample,
    flat_logprobs,
)


def _with(params: SamplingTensors, **changes: torch.Tensor) -> SamplingTensors:
    return dataclasses.replace(params, **changes)


class _Mutant(ReferenceLlamaForCausalLM):
    """Base of every mutant: the device sampler sees what ``mutate`` makes of its inputs."""

    def mutate(
        self,
        logits: torch.Tensor,
        params: SamplingTensors,
        history: PenaltyHistory | None,
        positions: torch.Tensor,
    ) -> tuple[SamplingTensors, PenaltyHistory | None, torch.Tensor]:
        return params, history, positions

    def sample_tokens(
        self,
        logits: torch.Tensor,
        params: SamplingTensors,
        history: PenaltyHistory | None,
        positions: torch.Tensor,
    ) -> torch.Tensor:
        # The shipped sampler seam, on what the fault made of its inputs.
        return super().sample_tokens(logits, *self.mutate(logits, params, history, positions))


# --- sampling parameters on the device --------------------------------------------------------
class TopPIgnored(_Mutant):
    """The nucleus is never applied: top_p reads as 1."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        return _with(params, top_p=torch.ones_like(params.top_p)), history, positions


class TopPComplement(_Mutant):
    """top_p is applied as 1 - top_p (the kept mass is the complement)."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        p = params.top_p
        return (
            _with(params, top_p=torch.where(p < 1.0, (1.0 - p).clamp(min=0.01), p)),
            history,
            positions,
        )


class TopKOffByOne(_Mutant):
    """top_k keeps one token too many."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        k = params.top_k
        return _with(params, top_k=torch.where(k > 0, k + 1, k)), history, positions


class TopKIgnored(_Mutant):
    """top_k is never applied."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        return _with(params, top_k=torch.zeros_like(params.top_k)), history, positions


class TemperatureIgnored(_Mutant):
    """Sampled rows draw at temperature 1 whatever they asked for."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        t = params.temperature
        return (
            _with(params, temperature=torch.where(t > 0, torch.ones_like(t), t)),
            history,
            positions,
        )


class TemperatureInverted(_Mutant):
    """Logits are multiplied by the temperature instead of divided."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        t = params.temperature
        return _with(params, temperature=torch.where(t > 0, 1.0 / t, t)), history, positions


class TemperatureSquared(_Mutant):
    """The temperature is applied twice (logits / t / t): below 1 the draws are too sharp, with
    the same support (only the draw frequencies show it)."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        t = params.temperature
        return _with(params, temperature=t * t), history, positions


def _first_row(params: SamplingTensors, fields: tuple[str, ...], first: int) -> SamplingTensors:
    rows = params.batch_size
    return _with(params, **{f: getattr(params, f)[first].expand(rows).clone() for f in fields})


class FirstRowParams(_Mutant):
    """Every row samples with the first active row's temperature, top-k and top-p (per-row
    parameters lost)."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        active = (logits != 0).any(dim=1).nonzero().flatten()
        first = int(active[0]) if active.numel() else 0
        return _first_row(params, ("temperature", "top_k", "top_p"), first), history, positions


# --- penalties --------------------------------------------------------------------------------
class RepetitionPromptIgnored(_Mutant):
    """The repetition penalty covers only generated tokens, not the prompt's."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        if history is not None:
            history = PenaltyHistory(torch.zeros_like(history.prompt_mask), history.output_counts)
        return params, history, positions


class FrequencyAsPresence(_Mutant):
    """The frequency penalty is applied once per token, like the presence penalty."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        if history is not None:
            once = (history.output_counts > 0).to(history.output_counts.dtype)
            history = PenaltyHistory(history.prompt_mask, once)
        return params, history, positions


class PresenceIgnored(_Mutant):
    """The presence penalty is dropped."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        zero = torch.zeros_like(params.presence_penalty)
        return _with(params, presence_penalty=zero), history, positions


class RepetitionInverted(_Mutant):
    """The repetition penalty multiplies positive logits (boosting repeats) instead of
    dividing them."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        return _with(params, repetition_penalty=1.0 / params.repetition_penalty), history, positions


class PenaltyOnGreedyRows(_Mutant):
    """Greedy rows in a batch that uses penalties get a repetition penalty of 1.3 too (a batch
    parameter leaking into rows that did not ask for it)."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        if history is not None:
            rep = params.repetition_penalty
            greedy = params.temperature <= 0
            leaked = torch.where(greedy, rep.new_full(rep.shape, 1.3), rep)
            params = _with(params, repetition_penalty=leaked)
        return params, history, positions


class PenaltiesFromPromptOnly(_Mutant):
    """Decode forgets the generated tokens: frequency and presence see only the prompt."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        if history is not None:
            history = PenaltyHistory(history.prompt_mask, torch.zeros_like(history.output_counts))
        return params, history, positions


# --- seeds ------------------------------------------------------------------------------------
class SeedIgnored(_Mutant):
    """The draw's noise depends on the position only: every seed gives the same tokens."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        return _with(params, seed=torch.zeros_like(params.seed)), history, positions


class SeedFromSlot(_Mutant):
    """The draw is seeded by the row (slot) it runs in, not by the request's seed: a seeded
    request gives other tokens in another slot."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        slots = torch.arange(params.batch_size, dtype=params.seed.dtype) + 1
        return _with(params, seed=slots), history, positions


# --- device logprobs --------------------------------------------------------------------------
class LogprobsScaled(_Mutant):
    """The sampled token's logprob is computed from logits scaled by 0.8 (a plausible dtype or
    temperature slip): right token, wrong value."""

    def device_logprobs(self, logits: torch.Tensor, tokens: torch.Tensor) -> Any:
        value = super().device_logprobs(logits, tokens)
        if isinstance(value, torch.Tensor) and not value.isnan().all():
            return flat_logprobs(logits * 0.8, tokens)
        return value


class LogprobsOfArgmax(_Mutant):
    """The logprob returned is the most likely token's, not the sampled token's."""

    def device_logprobs(self, logits: torch.Tensor, tokens: torch.Tensor) -> Any:
        value = super().device_logprobs(logits, tokens)
        if isinstance(value, torch.Tensor) and not value.isnan().all():
            return flat_logprobs(logits, logits.argmax(dim=1))
        return value


# --- long context -----------------------------------------------------------------------------
class _DecoderWith:
    """A decoder whose positions are rewritten before RoPE (attention is unchanged)."""

    def __init__(self, base: Any, rewrite: Any) -> None:
        self._base, self._rewrite = base, rewrite

    def hidden_states(self, tokens, positions, attend, embeds=None):  # type: ignore[no-untyped-def]
        return self._base.hidden_states(tokens, self._rewrite(positions), attend, embeds)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._base.logits(hidden)


class _RopeFault(_Mutant):
    decode_only = False  # True: only decode steps see the rewritten positions

    def attach_checkpoint(self, hf_config: Any, raw: dict[str, torch.Tensor]) -> None:
        super().attach_checkpoint(hf_config, raw)
        self.decoder = _DecoderWith(self.decoder, self._positions)  # type: ignore[assignment]

    def _decode_logits(self, kv, state, allow_null):  # type: ignore[no-untyped-def]
        self._in_decode = True
        try:
            return super()._decode_logits(kv, state, allow_null)
        finally:
            self._in_decode = False

    def _positions(self, positions: torch.Tensor) -> torch.Tensor:
        if self.decode_only and not getattr(self, "_in_decode", False):
            return positions
        return self.rope_positions(positions)

    @staticmethod
    def rope_positions(positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class RopeWrapsAt384(_RopeFault):
    """RoPE positions wrap at 384 (a cos/sin table sized for a shorter context)."""

    @staticmethod
    def rope_positions(positions: torch.Tensor) -> torch.Tensor:
        return positions % 384


class DecodeRopeFrozen(_RopeFault):
    """Decode rotates every token past position 256 as if it were at 256 (a position clamp in
    the decode program only; prefill is right)."""

    decode_only = True

    @staticmethod
    def rope_positions(positions: torch.Tensor) -> torch.Tensor:
        return positions.clamp(max=256)


# --- batched prefill --------------------------------------------------------------------------
class _PrefillFault(_Mutant):
    """A fault only in prefill calls that carry several rows."""

    def _prefill_step(self, kv, batch):  # type: ignore[no-untyped-def]
        self._in_prefill = True
        try:
            return super()._prefill_step(kv, batch)
        finally:
            self._in_prefill = False

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        if getattr(self, "_in_prefill", False) and params.batch_size > 1:
            return self.mutate_prefill(params, history, positions)
        return params, history, positions

    def mutate_prefill(self, params, history, positions):  # type: ignore[no-untyped-def]
        raise NotImplementedError


class PrefillRowsShareFirstParams(_PrefillFault):
    """A prefill carrying several rows samples all of them with the first row's parameters."""

    def mutate_prefill(self, params, history, positions):  # type: ignore[no-untyped-def]
        fields = ("temperature", "top_k", "top_p", "seed")
        return _first_row(params, fields, 0), history, positions


class PrefillLastRowOffByOne(_PrefillFault):
    """In a prefill of several rows, the last row's first token is drawn with the noise of the
    position before its last prompt token (a per-row offset slip)."""

    def mutate_prefill(self, params, history, positions):  # type: ignore[no-untyped-def]
        positions = positions.clone()
        positions[-1] -= 1
        return params, history, positions


# --- accuracy ---------------------------------------------------------------------------------
class GreedyRunnerUp(_Mutant):
    """Greedy rows take the runner-up token whenever it is within 0.5 of the best logit (a
    reduction that breaks ties the wrong way in low precision)."""

    def sample_tokens(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        tokens = device_sample(logits, params, history, positions)
        top = logits.topk(2, dim=1)
        close = (top.values[:, 0] - top.values[:, 1]) < 0.5
        swap = (params.temperature <= 0) & close & (logits != 0).any(dim=1)
        return torch.where(swap, top.indices[:, 1], tokens)


# --- the forward pass: paged KV, prefix reuse, chunk boundaries, rows, vocabulary -----------
class _ForwardHooks:
    """The decoder as a forward fault sees it: positions and logits pass through the model's
    ``forward_positions`` / ``forward_logits`` hooks (attention and KV are unchanged)."""

    def __init__(self, base: Any, model: _ForwardFault) -> None:
        self._base, self._model = base, model

    def hidden_states(self, tokens, positions, attend, embeds=None):  # type: ignore[no-untyped-def]
        positions = self._model.forward_positions(positions)
        return self._base.hidden_states(tokens, positions, attend, embeds)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._model.forward_logits(self._base.logits(hidden))


class _ForwardFault(_Mutant):
    """Knows which prefill row is running and whether it continues a cached prefix (a
    prefix-cache hit) or its own earlier chunk (chunked prefill)."""

    _row: Any = None
    _prefix_hits: frozenset[int] = frozenset()

    def attach_checkpoint(self, hf_config: Any, raw: dict[str, torch.Tensor]) -> None:
        super().attach_checkpoint(hf_config, raw)
        self.decoder = _ForwardHooks(self.decoder, self)  # type: ignore[assignment]

    def _check_prefill_starts(self, kv, batch):  # type: ignore[no-untyped-def]
        group = kv.history_group()
        self._block_size = kv.group_layout(group).block_size
        hits = set()
        for row in batch.rows:
            first_block = int(row.page_rows[group][0])
            if row.start > 0 and self._chunk_ends[row.lane].get(first_block) != row.start:
                hits.add(row.index)
        self._prefix_hits = frozenset(hits)
        super()._check_prefill_starts(kv, batch)

    def _prefill_logits(self, kv, rows, allow_null):  # type: ignore[no-untyped-def]
        try:
            return super()._prefill_logits(kv, rows, allow_null)
        finally:
            self._row = None

    def _prefill_embeds(self, row):  # type: ignore[no-untyped-def]
        self._row = row  # called once per row, right before its forward
        return super()._prefill_embeds(row)

    def forward_positions(self, positions: torch.Tensor) -> torch.Tensor:
        return positions

    def forward_logits(self, logits: torch.Tensor) -> torch.Tensor:
        return logits


class PrefixHitPositionsFromZero(_ForwardFault):
    """A prefill that continues a cached prefix (a prefix-cache hit) rotates its tokens from
    position 0, as if nothing were cached; KV slots and the mask use the right positions."""

    def forward_positions(self, positions: torch.Tensor) -> torch.Tensor:
        row = self._row
        if row is not None and row.index in self._prefix_hits:
            return positions - row.start
        return positions


class ChunkStartRoundedToBlock(_ForwardFault):
    """A prefill chunk continuing its own request from inside a KV block rotates its tokens as
    if the chunk started at that block's first slot (the offset within the block dropped)."""

    def forward_positions(self, positions: torch.Tensor) -> torch.Tensor:
        row = self._row
        if row is not None and row.start > 0 and row.index not in self._prefix_hits:
            return positions - row.start % self._block_size
        return positions


class VocabTailMasked(_ForwardFault):
    """The pad mask of a vocabulary padded to a tile multiple starts one 32-id tile early: the
    last real tile (here ids 992..1023, numbers and the special tokens) can never be served."""

    def forward_logits(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone()
        logits[..., -32:] = float("-inf")
        return logits


class PrefillRowsRotated(_Mutant):
    """A prefill carrying several rows returns its last-token logits rotated by one row (row i
    reads row i + 1's output): the output row order of a batched prefill."""

    def _prefill_logits(self, kv, rows, allow_null):  # type: ignore[no-untyped-def]
        logits = super()._prefill_logits(kv, rows, allow_null)
        return logits.roll(-1, dims=0) if len(rows) > 1 else logits


class DecodeKVToPreviousBlock(_Mutant):
    """A decode token that opens a new KV block has its K/V land in the previous page-table
    column's block (over that block's first slot): the block id read one column early at a
    block boundary. The step itself attends correctly; every later position reads the damage."""

    def _decode_logits(self, kv, state, allow_null):  # type: ignore[no-untyped-def]
        out = super()._decode_logits(kv, state, allow_null)
        rows = state.active.nonzero().flatten()
        for layer, layout in enumerate(kv.layers):
            bs, table = layout.block_size, state.page_tables[layout.group_id]
            for slot in rows.tolist():
                pos = int(state.positions[slot])
                if pos < bs or pos % bs:
                    continue
                col = pos // bs
                cur, prev = int(table[slot, col]), int(table[slot, col - 1])
                lane = kv.lanes[slot // self.slots_per_lane]
                for cache in (lane.keys[layer], lane.values[layer]):
                    for shard in cache:
                        shard[prev, :, 0] = shard[cur, :, 0]
                        shard[cur, :, 0] = 0.0
        return out


class DecodeLastRowStale(_Mutant):
    """In a decode step carrying several rows, the last active row's logits are read back from
    the previous step's output buffer (the host reads before the device wrote that row)."""

    _previous: torch.Tensor | None = None

    def _decode_logits(self, kv, state, allow_null):  # type: ignore[no-untyped-def]
        logits, rows = super()._decode_logits(kv, state, allow_null)
        fresh = logits.clone()
        if rows.numel() > 1 and self._previous is not None:
            last = int(rows[-1])
            logits[last] = self._previous[last]
        self._previous = fresh
        return logits, rows


# --- faults the outside red team rt46b planted (issue 46): narrow ones the matrices must reach ---
class ChunkLateInBlockOffByOne(_ForwardFault):
    """A chunked-prefill continuation (not a prefix hit) whose chunk starts in the last quarter of
    a KV block rotates its tokens one position early: an off-by-one in the chunk offset that only
    a chunk start late in a block shows."""

    def forward_positions(self, positions: torch.Tensor) -> torch.Tensor:
        row = self._row
        if row is None or row.start == 0 or row.index in self._prefix_hits:
            return positions
        late = row.start % self._block_size >= (3 * self._block_size) // 4
        return positions - 1 if late else positions


class RepetitionPromptDroppedWithLogprobs(_Mutant):
    """Rows that ask for logprobs lose their prompt from the repetition penalty (a logprobs
    variant of the penalty kernel reusing a buffer that holds only the generated tokens)."""

    def mutate(self, logits, params, history, positions):  # type: ignore[no-untyped-def]
        if history is None:
            return params, history, positions
        asks = (params.num_logprobs >= 0)[:, None]
        prompt = history.prompt_mask
        if prompt.shape[0] == asks.shape[0]:
            history = PenaltyHistory(prompt & ~asks, history.output_counts)
        return params, history, positions
