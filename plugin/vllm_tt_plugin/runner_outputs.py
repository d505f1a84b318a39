"""Turning sampled tokens and logprobs from either sampling route into vLLM's output format."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from vllm.v1.outputs import LogprobsLists, LogprobsTensors, ModelRunnerOutput

from vllm_tt_plugin.sampling_params import TTLogprobs


def logprobs_rows_from_device(logprobs: TTLogprobs, rows: Sequence[int]) -> LogprobsTensors:
    """Select device logprob rows (batch rows or slots) into a LogprobsTensors."""
    index = torch.tensor(list(rows), dtype=torch.long)
    return LogprobsTensors(
        logprobs.token_ids[index].to(torch.int32),
        logprobs.logprobs[index].to(torch.float32),
        logprobs.ranks[index].to(torch.int32),
    )


def build_output(
    req_ids: Sequence[str],
    sampled: Sequence[int | None],
    logprobs: LogprobsTensors | None,
    logprob_rows: Sequence[int | None] | None = None,
) -> ModelRunnerOutput:
    """One ModelRunnerOutput row per scheduled request, in ``req_ids`` order.

    ``sampled[i]`` is None for a request that produced no token this step (an intermediate
    prefill chunk). ``logprob_rows[i]`` is the row of ``logprobs`` for request i, or None.
    vLLM slices logprobs by request index, so every request gets a row (sampled token first);
    rows of requests that did not ask for logprobs are never read.
    """
    sampled_token_ids = [[] if tok is None else [int(tok)] for tok in sampled]
    lists = None
    if logprobs is not None:
        rows = logprob_rows if logprob_rows is not None else list(range(len(req_ids)))
        width = (
            int(logprobs.logprob_token_ids.shape[1]) if logprobs.logprob_token_ids.ndim == 2 else 1
        )
        token_ids = np.zeros((len(req_ids), width), dtype=np.int32)
        values = np.zeros((len(req_ids), width), dtype=np.float32)
        ranks = np.zeros((len(req_ids),), dtype=np.int32)
        src_ids = logprobs.logprob_token_ids.numpy()
        src_vals = logprobs.logprobs.numpy()
        src_ranks = logprobs.selected_token_ranks.numpy()
        for i, row in enumerate(rows):
            if row is None:
                continue
            token_ids[i] = src_ids[row]
            values[i] = src_vals[row]
            ranks[i] = src_ranks[row]
        lists = LogprobsLists(token_ids, values, ranks)
    return ModelRunnerOutput(
        req_ids=list(req_ids),
        req_id_to_index={req_id: i for i, req_id in enumerate(req_ids)},
        sampled_token_ids=sampled_token_ids,
        logprobs=lists,
    )


def split_device_output(out: object) -> tuple[torch.Tensor, TTLogprobs | None]:
    """A device-sampled model output: tokens, or (tokens, logprobs)."""
    if isinstance(out, tuple) and not isinstance(out, TTLogprobs):
        tokens, logprobs = out
        if logprobs is not None and not isinstance(logprobs, TTLogprobs):
            logprobs = TTLogprobs(*logprobs)
        return torch.as_tensor(tokens).reshape(-1), logprobs
    return torch.as_tensor(out).reshape(-1), None
