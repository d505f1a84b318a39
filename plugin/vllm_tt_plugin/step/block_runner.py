"""Block-output steps (DiffusionGemma): one committed canvas per request per step.

Prefill writes the prompt's KV and returns block 0; each decode returns the next block. The
runner hands vLLM every token of the canvas as the request's sampled tokens (a list per request,
as spec decode does); vLLM's scheduler appends them one by one and trims at EOS, stop tokens and
max_tokens. Decode is the version-0 call (``reset_batch``), the model owning its positions. The
model is called only through ``model_adapter``; the release hook is called from here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch
from vllm.v1.outputs import ModelRunnerOutput

from vllm_tt_plugin.contract.call_types import DecodeCall, PrefillCall
from vllm_tt_plugin.contract.reload_contract import DecodeStep
from vllm_tt_plugin.contract.sampling_params import TTSamplingParams
from vllm_tt_plugin.observability.block_metrics import BlockMetrics
from vllm_tt_plugin.policy.sampling_route import Route

if TYPE_CHECKING:
    from vllm_tt_plugin.adapter.model_adapter import ModelAdapter
    from vllm_tt_plugin.contract.reload_contract import ReloadPlanner
    from vllm_tt_plugin.input_batch import TTInputBatch, TTRequestState


class BlockHost(Protocol):
    """What a block step may use of the runner that owns it (``TTModelRunner`` is one): its
    slots, the adapter, the reload planner, the KV cache and traces, and two input builders.
    Step counters stay the runner's: it counts the steps it hands to ``BlockStepper.run``."""

    @property
    def batch(self) -> TTInputBatch: ...
    @property
    def adapter(self) -> ModelAdapter: ...
    @property
    def planner(self) -> ReloadPlanner: ...
    @property
    def kv_cache(self) -> Any: ...
    @property
    def layer_groups(self) -> tuple[int, ...] | None: ...
    @property
    def prefill_trace(self) -> bool: ...
    @property
    def decode_trace(self) -> bool: ...

    def sampling_params(self, states: Sequence[TTRequestState | None]) -> TTSamplingParams: ...

    def page_tables(
        self, states: Sequence[TTRequestState | None], width: int
    ) -> list[torch.Tensor]: ...


@dataclass
class BlockStats:
    """What block steps did (logged at shutdown, published as block metrics)."""

    blocks: int = 0
    committed_tokens: int = 0
    block_seconds: float = 0.0
    released: list[int] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"blocks={self.blocks}, committed_tokens={self.committed_tokens}, "
            f"block_seconds={self.block_seconds:.3f}, released={len(self.released)}"
        )


@dataclass(frozen=True)
class BlockResult:
    """One step's canvases, per scheduled request, and when the model returned them."""

    tokens: list[list[int]]
    finished_at: float  # time.perf_counter() once the canvases were on the host


def committed_length(block: list[int], stop_ids: set[int]) -> int:
    """Tokens of a canvas up to and including its first stop id (the rest is EOS fill)."""
    for i, token in enumerate(block):
        if token in stop_ids:
            return i + 1
    return len(block)


class BlockStepper:
    """Runs the prefill and decode steps of a block-output model for its host runner."""

    def __init__(self, runner: BlockHost, canvas: int) -> None:
        self.runner = runner
        self.canvas = canvas
        self.stats = BlockStats()
        self.metrics = BlockMetrics()

    def release(self, state: TTRequestState) -> None:
        """A finished, aborted or preempted request: the model frees its slot's canvas."""
        if state.slot is None:
            return
        slot = self.runner.batch.global_slot(state)
        self.runner.adapter.release_request(slot)
        self.stats.released.append(slot)

    def _params(self, states: list[TTRequestState | None]) -> TTSamplingParams:
        # The contract passes device sampling settings; the denoiser ignores them.
        return self.runner.sampling_params(states)

    def run(self, states: list[TTRequestState], decode: bool) -> ModelRunnerOutput:
        runner = self.runner
        new_slots = [s for s in states if s.slot is None]
        for state in states:
            runner.batch.ensure_slot(state)
        start = time.perf_counter()
        try:
            result = self._decode(states) if decode else self._prefill(states)
        except Exception:
            for state in new_slots:
                runner.batch.release_slot(state)
            raise
        stats = self.stats
        seconds = result.finished_at - start
        committed = 0
        for state, block in zip(states, result.tokens, strict=True):
            stop_ids = set(state.sampling_params.all_stop_token_ids or ())
            committed += committed_length(block, stop_ids)
            state.output_token_ids.extend(block)
        stats.blocks += len(states)
        stats.block_seconds += seconds
        stats.committed_tokens += committed
        self.metrics.record(len(states), committed, seconds, self.canvas)
        req_ids = [s.req_id for s in states]
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=result.tokens,
        )

    def _prefill(self, states: list[TTRequestState]) -> BlockResult:
        runner = self.runner
        ends = [s.num_prompt_tokens for s in states]
        tokens = torch.zeros((len(states), max(ends)), dtype=torch.int32)
        for i, state in enumerate(states):
            tokens[i, : ends[i]] = torch.tensor(state.prompt_token_ids, dtype=torch.int32)
        width = runner.batch.max_blocks_per_req
        out = runner.adapter.prefill(
            PrefillCall(
                tokens=tokens,
                page_tables=runner.page_tables(list(states), width),
                kv_cache=runner.kv_cache,
                enable_trace=runner.prefill_trace,
                prompt_lens=ends,
                start_pos=[s.num_computed_tokens for s in states],
                empty_slots=[runner.batch.global_slot(s) for s in states],
                sampling_params=self._params(list(states)),
                layer_groups=runner.layer_groups,
            )
        )
        runner.planner.commit_prefill()
        assert out.blocks is not None
        return BlockResult(
            [out.blocks[i].tolist() for i in range(len(states))], time.perf_counter()
        )

    def _decode(self, states: list[TTRequestState]) -> BlockResult:
        runner = self.runner
        scheduled = {s.req_id for s in states}
        active = [
            s if s is not None and s.req_id in scheduled else None
            for s in runner.batch.slot_states()
        ]
        n = len(active)
        # Advisory inputs: the model owns its positions (docs/BLOCK_SERVING.md).
        tokens = torch.zeros((n, 1), dtype=torch.int32)
        start_pos = torch.full((n,), -1, dtype=torch.int32)
        for slot, state in enumerate(active):
            if state is not None:
                tokens[slot, 0] = state.last_token()
                start_pos[slot] = state.num_computed_tokens
        step = DecodeStep(
            layout=tuple(None if s is None else s.req_id for s in active),
            route=Route.DEVICE,
            block_counts=tuple(0 if s is None else len(s.block_ids[0]) for s in active),
        )
        command = runner.planner.plan(step)
        submission = runner.adapter.submit_decode(
            DecodeCall(
                tokens=tokens,
                start_pos=start_pos,
                page_tables=runner.page_tables(active, runner.batch.max_blocks_per_req),
                kv_cache=runner.kv_cache,
                enable_trace=runner.decode_trace,
                command=command,
                sampling_params=self._params(active),
                layer_groups=runner.layer_groups,
            )
        )
        runner.planner.commit_decode(step)
        out = runner.adapter.read_decode(submission, overlapped=False)
        assert out.blocks is not None
        slot_of = {s.req_id: i for i, s in enumerate(active) if s is not None}
        return BlockResult(
            [out.blocks[slot_of[s.req_id]].tolist() for s in states], time.perf_counter()
        )
