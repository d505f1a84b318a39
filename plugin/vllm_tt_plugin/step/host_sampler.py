"""vLLM's host sampling path for TT batches (the compat route).

TT models return logits; this module runs them through vLLM's own machinery: its InputBatch for
sampling metadata and logits processors (min_p, logit_bias, min_tokens, custom processors), the
grammar bitmask for structured output, and vLLM's Sampler (penalties, allowed/bad words,
temperature, top-k/top-p, seeded generators, logprobs). The InputBatch holds exactly the
requests sampled in the current step, in the order it chooses; logits are permuted to match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from vllm.config import VllmConfig
from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput
from vllm.v1.outputs import LogprobsTensors
from vllm.v1.sample.logits_processor import build_logitsprocs
from vllm.v1.sample.sampler import Sampler
from vllm.v1.structured_output.utils import apply_grammar_bitmask
from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch

from vllm_tt_plugin.contract.sampling_params import seeded_draw_seed
from vllm_tt_plugin.input_batch import TTRequestState


@dataclass
class HostSampleResult:
    token_ids: list[int]  # one per row, in the caller's order
    logprobs: LogprobsTensors | None  # rows in the caller's order


class HostSampler:
    def __init__(self, vllm_config: VllmConfig, max_num_reqs: int, block_size: int) -> None:
        model_config = vllm_config.model_config
        self.vocab_size = model_config.get_vocab_size()
        max_model_len = model_config.max_model_len
        device = torch.device("cpu")
        custom = model_config.logits_processors or ()
        self.has_custom_logitsprocs = bool(custom)
        logitsprocs = build_logitsprocs(vllm_config, device, False, False, custom)
        self.batch = InputBatch(
            max_num_reqs=max_num_reqs,
            max_model_len=max_model_len,
            max_num_batched_tokens=vllm_config.scheduler_config.max_num_batched_tokens,
            device=device,
            vocab_size=self.vocab_size,
            block_sizes=[block_size],
            kernel_block_sizes=[block_size],
            max_num_blocks_per_req=[1],
            logitsprocs=logitsprocs,
            logitsprocs_need_output_token_ids=bool(custom),
        )
        self.sampler = Sampler(logprobs_mode=model_config.logprobs_mode)

    def _sync(self, states: Sequence[TTRequestState]) -> None:
        """Make the InputBatch hold exactly ``states`` (kept ones keep their rows)."""
        wanted = {s.req_id for s in states}
        for req_id in list(self.batch.req_id_to_index):
            if req_id not in wanted:
                self.batch.remove_request(req_id)
        for state in states:
            index = self.batch.req_id_to_index.get(state.req_id)
            if index is None:
                index = self.batch.add_request(
                    CachedRequestState(
                        req_id=state.req_id,
                        prompt_token_ids=state.prompt_token_ids,
                        mm_features=[],
                        sampling_params=state.sampling_params,
                        generator=state.generator,
                        block_ids=([0],),
                        num_computed_tokens=0,
                        output_token_ids=state.output_token_ids,
                    )
                )
                mask = self.batch.allowed_token_ids_mask_cpu_tensor
                if mask is not None and not state.sampling_params.allowed_token_ids:
                    # vLLM's condense() copies a moved row's mask but never clears the row it
                    # vacates, and add_request only writes masks for requests that have one:
                    # without this, a reused row restricts an unrelated request (ledger W10).
                    mask[index].fill_(False)
            else:
                # Penalties read the shared output list; condense() copies token_ids_cpu rows
                # up to num_tokens_no_spec, so keep that count current.
                self.batch.num_tokens_no_spec[index] = state.num_tokens
        self.batch.condense()
        self.batch.refresh_metadata()

    def forget(self, req_id: str) -> None:
        if self.batch.remove_request(req_id) is not None:
            self.batch.condense()
            self.batch.refresh_metadata()

    def sample(
        self,
        states: Sequence[TTRequestState],
        logits: torch.Tensor,
        scheduler_output: SchedulerOutput,
        grammar_output: GrammarOutput | None,
    ) -> HostSampleResult:
        """Sample one token for each of ``states``; ``logits`` row i belongs to ``states[i]``."""
        if not states:
            return HostSampleResult([], None)
        self._sync(states)
        for state in states:
            if state.generator is not None:
                # The TT seeding convention: the draw depends on (seed, position) only, so it
                # matches the device sampler's and survives route switches and preemption.
                state.generator.manual_seed(
                    seeded_draw_seed(state.device_seed, state.num_tokens - 1)
                )
        order = [self.batch.req_id_to_index[s.req_id] for s in states]  # caller row -> batch row
        batch_logits = torch.empty((len(states), logits.shape[-1]), dtype=torch.float32)
        batch_logits[order] = logits.to(torch.float32)
        if batch_logits.shape[-1] > self.vocab_size:
            batch_logits = batch_logits[:, : self.vocab_size]
        if grammar_output is not None and grammar_output.structured_output_request_ids:
            apply_grammar_bitmask(scheduler_output, grammar_output, self.batch, batch_logits)
        out = self.sampler(batch_logits, self.batch.sampling_metadata)
        sampled = out.sampled_token_ids[:, 0]
        token_ids = [int(sampled[i]) for i in order]
        logprobs = None
        if out.logprobs_tensors is not None:
            index = torch.tensor(order, dtype=torch.long)
            lp = out.logprobs_tensors
            logprobs = LogprobsTensors(
                lp.logprob_token_ids[index], lp.logprobs[index], lp.selected_token_ranks[index]
            )
        return HostSampleResult(token_ids, logprobs)
