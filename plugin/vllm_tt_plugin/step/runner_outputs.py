"""Turning sampled tokens and logprobs from either sampling route into vLLM's output format."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from vllm.v1.outputs import LogprobsLists, LogprobsTensors, ModelRunnerOutput

from vllm_tt_plugin.contract.call_types import DeviceLogprobs

# The rank reported for a flat device logprob: the device does not compute one. vLLM's own
# Logprob.rank is None for an unknown rank, but its LogprobsLists carry ranks as an integer
# array (None cannot cross its serialisation), and the OpenAI API does not return ranks; -1 is
# never a real (1-based) rank, so it reads as "unknown" to any consumer that checks.
UNKNOWN_RANK = -1


def logprobs_rows_from_device(
    logprobs: DeviceLogprobs,
    rows: Sequence[int],
    sampled: Sequence[int],
    num_logprobs: Sequence[int],
) -> LogprobsTensors:
    """vLLM logprobs rows (sampled token first) for ``rows`` of a device result.

    Flat form: the sampled token's logprob, rank unknown. Top-k form (GPT-OSS): trimmed to the
    largest requested k; the sampled token's rank is its position among the sorted indices
    (device 0-based -> vLLM 1-based).
    """
    index = torch.tensor(list(rows), dtype=torch.long)
    tokens = torch.tensor(list(sampled), dtype=torch.int64)
    if logprobs.flat is not None:
        return LogprobsTensors(
            tokens[:, None].to(torch.int32),
            logprobs.flat[index][:, None].to(torch.float32),
            torch.full((len(rows),), UNKNOWN_RANK, dtype=torch.int32),
        )
    assert logprobs.top_values is not None and logprobs.top_indices is not None
    k = max([0, *num_logprobs])
    values = logprobs.top_values[index]
    indices = logprobs.top_indices[index]
    hit = indices == tokens[:, None]
    if not bool(hit.any(dim=1).all()):
        missing = [int(t) for t, found in zip(tokens, hit.any(dim=1), strict=True) if not found]
        raise ValueError(
            f"device top-k logprobs do not contain the sampled token(s) {missing}; the "
            "contract says the sampled token is among them"
        )
    position = hit.to(torch.int64).argmax(dim=1)
    sampled_lp = values.gather(1, position[:, None])
    return LogprobsTensors(
        torch.cat((tokens[:, None], indices[:, :k]), dim=1).to(torch.int32),
        torch.cat((sampled_lp, values[:, :k]), dim=1).to(torch.float32),
        (position + 1).to(torch.int32),
    )


def build_output(
    req_ids: Sequence[str],
    sampled: Sequence[int | None],
    logprobs: LogprobsTensors | None,
    logprob_rows: Sequence[int | None] | None = None,
    req_id_to_index: dict[str, int] | None = None,
) -> ModelRunnerOutput:
    """One ModelRunnerOutput row per scheduled request, in ``req_ids`` order.

    ``sampled[i]`` is None for a request that produced no token this step (an intermediate
    prefill chunk). ``logprob_rows[i]`` is the row of ``logprobs`` for request i, or None.
    vLLM slices logprobs by request index, so every request gets a row (sampled token first);
    rows of requests that did not ask for logprobs are never read. ``req_id_to_index``: the
    index of ``req_ids`` when the caller keeps one (vLLM only reads it).
    """
    sampled_token_ids = [[] if tok is None else [tok] for tok in sampled]  # Python ints
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
        req_id_to_index=(
            {req_id: i for i, req_id in enumerate(req_ids)}
            if req_id_to_index is None
            else req_id_to_index
        ),
        sampled_token_ids=sampled_token_ids,
        logprobs=lists,
    )
