"""The forward pass against transformers on the same tokens (concern ``forward_reference``).

Greedy requests ask for the top-5 logprobs at every generated position; transformers' forward
(float32, CPU) on the served sequence (prompt plus the served tokens) must agree at each of them
(``tt_conformance.forward``: each side's best token in the other's top, values within a stated
tolerance). Unlike the host-path references, this one does not read the device's logits, so a
KV, mask or position fault cannot hide behind vLLM's host sampler.

The requests create the situations such faults live in, and the check records how many it made
(perf figures ``forward_reference_*``, stat ``count``: informational, never gated):

- prompts crossing several KV blocks (the block size from vLLM's ``cache_config_info``), each
  ending a few tokens before a block boundary so that decode crosses one;
- a batch of concurrent requests of different lengths (the plugin's multi-row prefill counter);
- more prompt tokens at once than a prefill step takes, so vLLM chunks prompts (chunk ends
  fall off block boundaries; the plugin's ``tt_prefill_chunks_total`` counts them) and the KV pool
  overflows into preemption when the server's pool is small (counted, not required);
- a prompt served again and a shared prefix with a new suffix (vLLM's prefix-cache hit tokens;
  a server that reports none, prefix caching off, gets that check reported not exercised).

Optional: it needs the served checkpoint (``--tt-reference-checkpoint PATH`` or
``TT_REFERENCE_CHECKPOINT``) and torch + transformers. Without them it skips saying so
(``selection.OPTIONAL_NOT_RUN``): the concern is not run and never counted as covered, and the
run's tier says so, but it is not capped (a 70B model's forward does not fit a harness host's
CPU). What stands in then is the host path (device_sampling, long_context): it checks what the
device does with its logits, not the logits themselves.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tt_conformance import envs
from tt_conformance.checks._support import (
    PLAIN_PROMPTS,
    Output,
    acomplete,
    astream,
    complete_all,
    greedy,
)
from tt_conformance.forward import (
    EMULATED_TOLERANCE,
    HARDWARE_TOLERANCE,
    TOP_K,
    ReferenceForward,
    compare_position,
    load_reference,
    served_steps,
    vocab_problems,
)
from tt_conformance.names import is_emulated
from tt_conformance.selection import OPTIONAL_NOT_RUN
from tt_conformance.situation_matrix import FORWARD_KV, Cell, cells
from tt_conformance.ttmetrics import NOT_EXERCISED

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.fixtures import RecordCell, RecordPerf
    from tt_conformance.rawhttp import MetricSample, RawHttp
    from tt_conformance.server import ServerInfo

__all__ = ["BUDGET", "GENERATED", "Group", "cut_offset", "group_for", "wave_lengths"]

pytestmark = [pytest.mark.forward_reference, pytest.mark.xdist_group("exclusive")]

NOT_RUN = OPTIONAL_NOT_RUN
GENERATED = 12  # tokens per request; prompts end GENERATED // 2 before a block boundary
# Prompt + output cap: transformers reruns every sequence on the CPU. Hardware serves models of
# billions of parameters (an 8B model in float32 takes seconds per 100 tokens on a CPU), so its
# prompts stay shorter; they still cross several KV blocks of 32 or 64.
LONGEST = 1024
HARDWARE_LONGEST = 512
WAVE = 8  # concurrent requests of the batched wave (at most the server's capacity)
DEFAULT_BLOCK = 64  # the plugin's default, used only when the server does not say


@pytest.fixture(scope="module")
def reference(pytestconfig: pytest.Config) -> ReferenceForward:
    given = pytestconfig.getoption("tt_reference_checkpoint", None)
    path = given or envs.TT_REFERENCE_CHECKPOINT.get()
    if not path:
        pytest.skip(
            f"{NOT_RUN} no checkpoint given (--tt-reference-checkpoint PATH or "
            "TT_REFERENCE_CHECKPOINT); standing in: the host path (device_sampling, "
            "long_context), which shares the device's logits"
        )
    checkpoint = Path(path)
    if not (checkpoint / "config.json").is_file():
        pytest.fail(f"--tt-reference-checkpoint {checkpoint}: no config.json there")
    try:
        return load_reference(checkpoint)
    except ImportError as exc:
        pytest.skip(f"{NOT_RUN} torch and transformers are needed ({exc})")


@dataclass(frozen=True)
class Sent:
    label: str
    prompt: list[int]


def _counter(samples: list[MetricSample], name: str, **labels: str) -> float:
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


COUNTERS: dict[str, tuple[str, dict[str, str]]] = {
    "multi_row_prefills": ("tt_multi_row_prefills_total", {}),
    "prefill_chunks": ("tt_prefill_chunks_total", {}),
    "preemptions": ("tt_preempted_requests_total", {}),
    "prefix_hit_tokens": ("vllm:prefix_cache_hits_total", {}),
}


def _counters(raw: RawHttp) -> dict[str, float]:
    samples = raw.metrics()
    return {key: _counter(samples, name, **labels) for key, (name, labels) in COUNTERS.items()}


def _block_size(raw: RawHttp) -> int | None:
    for sample in raw.metrics():
        if sample.name == "vllm:cache_config_info":
            size = sample.labels.get("block_size")
            if size and size.isdigit():
                return int(size)
    return None


def _corpus(raw: RawHttp, needed: int) -> tuple[list[int], list[int]]:
    """The server's BOS (if it adds one) and at least ``needed`` ids of plain text."""
    text = ". ".join(PLAIN_PROMPTS) + ". "
    bare = raw.tokenize(text, add_special_tokens=False)
    full = raw.tokenize(text, add_special_tokens=True)
    head = full[: len(full) - len(bare)] if full[len(full) - len(bare) :] == bare else []
    assert bare, "the server tokenized the plain prompts to nothing"
    return head, (bare * (needed // len(bare) + 2))[: needed + len(bare)]


def _compare(
    reference: ReferenceForward, sent: list[Sent], outputs: list[Output], tolerance: float
) -> tuple[list[str], float, int]:
    """Problems (one line per bad position), the largest value difference, positions compared."""
    steps = {}
    for item, out in zip(sent, outputs, strict=True):
        assert len(out.token_ids) == GENERATED, (
            f"{item.label}: {len(out.token_ids)} tokens served, {GENERATED} asked for "
            f"(finish {out.finish_reason}); the reference needs every position"
        )
        steps[item.label] = served_steps(out.token_ids, out.logprobs, TOP_K)
    outside = vocab_problems(steps, reference.vocab_size)
    assert not outside, "served token ids outside the checkpoint's vocabulary:\n" + "\n".join(
        outside
    )
    problems, worst, compared = [], 0.0, 0
    for item, out in zip(sent, outputs, strict=True):
        seq = steps[item.label]
        ids = item.prompt + list(out.token_ids[:-1])
        wanted = [[s.token, *s.top] for s in seq]
        rows = reference.rows(ids, len(item.prompt) - 1, wanted, TOP_K)
        for pos, (step, row) in enumerate(zip(seq, rows, strict=True)):
            verdict = compare_position(step, row, tolerance)
            worst = max(worst, verdict.max_abs_diff)
            compared += 1
            problems += [f"{item.label}, generated token {pos}: {p}" for p in verdict.problems]
    return problems, worst, compared


def _serve(client: AsyncOpenAI, model: str, sent: list[Sent]) -> list[Output]:
    bodies = [
        greedy(
            s.prompt, GENERATED, logprobs=TOP_K, ignore_eos=True, return_tokens_as_token_ids=True
        )
        for s in sent
    ]
    return complete_all(client, model, bodies)


def _fail(problems: list[str], what: str) -> None:
    if problems:
        shown = "\n".join(problems[:20])
        more = f"\n... {len(problems) - 20} more" if len(problems) > 20 else ""
        pytest.fail(
            f"{what}: {len(problems)} position(s) disagree with transformers:\n{shown}{more}"
        )


def _record(tt_record_perf: RecordPerf, made: dict[str, float]) -> None:
    # A report holds no zero figure: a situation this run did not create has none.
    for key, value in made.items():
        if value > 0:
            tt_record_perf(f"forward_reference_{key}", value, "count", "higher", stat="count")


def _cap(tt_server: ServerInfo) -> int:
    longest = LONGEST if is_emulated(tt_server.device) else HARDWARE_LONGEST
    return min(longest, tt_server.max_model_len or longest)


def _tolerance(tt_server: ServerInfo) -> float:
    return EMULATED_TOLERANCE if is_emulated(tt_server.device) else HARDWARE_TOLERANCE


def wave_lengths(block: int, cap: int, count: int) -> list[int]:
    """``count`` prompt lengths, k blocks minus half the output for k spread from 2 blocks up to
    the cap: every prompt crosses blocks and its decode crosses one more boundary."""
    top = (cap - GENERATED) // block
    ks = sorted({2 + round(i * (top - 2) / max(count - 1, 1)) for i in range(count)})
    return [k * block - GENERATED // 2 for k in ks if k * block - GENERATED // 2 >= 8]


def test_batched_chunked_long_prompts(
    reference: ReferenceForward,
    tt_server: ServerInfo,
    tt_raw_http: RawHttp,
    tt_async_openai_client: AsyncOpenAI,
    tt_record_perf: RecordPerf,
    tt_record_cell: RecordCell,
) -> None:
    """A wave of concurrent prompts of different lengths, each crossing several KV blocks, more
    tokens at once than a prefill step takes, then the situation matrix's groups (prefills cut
    by the step's budget on and inside KV blocks): compared position by position."""
    block = _block_size(tt_raw_http) or DEFAULT_BLOCK
    cap = _cap(tt_server)
    count = max(1, min(WAVE, tt_server.max_num_seqs * tt_server.lanes))
    lengths = wave_lengths(block, cap, count)
    assert lengths, f"max_model_len {cap} leaves no prompt of two {block}-token blocks"
    head, corpus = _corpus(tt_raw_http, max(lengths) + 16 * len(lengths))
    # Each prompt starts elsewhere in the (periodic) text; hits between them are counted.
    sent = [
        Sent(f"prompt of {n} tokens", head + corpus[7 * i + 1 : 7 * i + 1 + n - len(head)])
        for i, n in enumerate(lengths)
    ]
    before = _counters(tt_raw_http)
    outputs = _serve(tt_async_openai_client, tt_server.model, sent)
    after = _counters(tt_raw_http)
    problems, worst, compared = _compare(reference, sent, outputs, _tolerance(tt_server))
    crossings = sum((len(s.prompt) + GENERATED - 1) // block for s in sent)
    made = {
        "positions": compared,
        "block_boundaries": crossings,
        "batched_requests": len(sent),
        **{k: after[k] - before[k] for k in COUNTERS},
    }
    _record(tt_record_perf, made)
    if worst > 0:
        tt_record_perf("forward_reference_max_logprob_diff", worst, "nats", "lower", stat="max")
    wave = f"batched wave ({made}, block size {block})"
    # The matrix runs whatever the wave found, so the report lists its cells either way.
    found, what = _situation_matrix(
        reference, tt_server, tt_raw_http, tt_async_openai_client, tt_record_perf, tt_record_cell
    )
    if problems and found:
        wave += f"; and the {what}: {len(found)} position(s) disagree too"
    _fail(problems, wave)
    _fail(found, what)


def test_prefix_cache_reuse(
    reference: ReferenceForward,
    tt_server: ServerInfo,
    tt_raw_http: RawHttp,
    tt_async_openai_client: AsyncOpenAI,
    tt_record_perf: RecordPerf,
) -> None:
    """A prompt served alone, then again together with its first two blocks plus a new suffix:
    the second pair reuses cached blocks (prefix-cache hits) and must still agree."""
    block = _block_size(tt_raw_http) or DEFAULT_BLOCK
    cap = _cap(tt_server)
    length = min(3 * block + block // 2, cap - GENERATED)
    shared = 2 * block
    assert length > shared, f"max_model_len {cap} is too short for a shared {shared}-token prefix"
    head, corpus = _corpus(tt_raw_http, 2 * length + 64)
    first = head + corpus[3 : 3 + length - len(head)]
    suffix = corpus[length + 11 : length + 11 + block // 2 + 13]
    before = _counters(tt_raw_http)
    alone = _serve(tt_async_openai_client, tt_server.model, [Sent("first", first)])
    again = [
        Sent("same prompt again", first),
        Sent("shared prefix, new suffix", first[:shared] + suffix),
    ]
    outputs = alone + _serve(tt_async_openai_client, tt_server.model, again)
    after = _counters(tt_raw_http)
    sent = [Sent("prompt served first", first), *again]
    problems, worst, compared = _compare(reference, sent, outputs, _tolerance(tt_server))
    hits = after["prefix_hit_tokens"] - before["prefix_hit_tokens"]
    # Named apart from the wave's counters: a report keeps one figure per name.
    _record(tt_record_perf, {"reuse_prefix_hit_tokens": hits, "reuse_positions": compared})
    if worst > 0:
        tt_record_perf(
            "forward_reference_reuse_max_logprob_diff", worst, "nats", "lower", stat="max"
        )
    _fail(problems, f"prefix reuse ({hits:.0f} prefix-cache hit tokens, block size {block})")
    if hits <= 0:
        # The sequences agreed, but nothing was reused: reported as not run, never as covered.
        pytest.skip(
            f"{NOT_EXERCISED}: the server reported no prefix-cache hits "
            "(vllm:prefix_cache_hits_total did not move: prefix caching off?); the three "
            "sequences agreed with transformers"
        )


# --------------------------------------------------------------------------- the situation matrix

# vLLM's prefill-step token budget for an OpenAI server with chunked prefill (its default
# max_num_batched_tokens, which the emulated server keeps); a server publishes no budget, so
# the groups are composed for this one and the counters say what the server actually cut.
BUDGET = 2048
PACER_TOKENS = 4 * GENERATED  # the request decoding beside a group outlives the group's prefill
# Where an off-boundary continuation starts in its block: a few slots in, or a few before its end.
MID_OFFSET = 5


@dataclass(frozen=True)
class Group:
    """A matrix cell's prompts: a one-block primer, the companions, then the target, whose
    prefill the budget cuts at ``cut`` (the continuation's first position) when the companions
    and the target are scheduled in one step.

    The primer is there because an idle engine schedules the first prompt that reaches it
    alone: the primer is then that prompt, and the rest land together in the next step. Had it
    shared their step, it moved the cut by one block, which leaves it on or off a boundary as
    planned."""

    primer: int
    companions: tuple[int, ...]
    target: int
    cut: int

    @property
    def lengths(self) -> list[int]:
        return [self.primer, *self.companions, self.target]


def cut_offset(chunk_start: str, block: int) -> int:
    """Where a cell's continuation starts within its KV block."""
    early = max(1, min(MID_OFFSET, block // 4))
    return {"on_block": 0, "mid_block_early": early, "mid_block_late": block - early}[chunk_start]


def group_for(cell: Cell, block: int, cap: int, budget: int = BUDGET) -> Group:
    """Prompt lengths for ``cell``: the companions fill most of a step's budget, the target
    goes past it. The cut is ``budget - sum(companions)``; a budget is a multiple of the block
    size, so the companions' lengths alone put the cut on or off a block boundary. A request
    decoding beside the group takes none of the budget: TT steps are prefill-only or
    decode-only (docs/SCHEDULING.md). The target ends below, at or just past a block boundary
    (``prompt_end``)."""
    room = (cap - GENERATED - 1) // block  # whole blocks a prompt may hold
    per = max(1, min(room - 1, budget // (3 * block)))
    count = 2
    while (budget - count * per * block) // block + 1 > room:
        count += 1
    offset = cut_offset(str(cell["chunk_start"]), block)
    last = per * block + (-offset) % block
    companions = (*([per * block] * (count - 1)), last)
    cut = budget - sum(companions)
    end = {"below_block": -(GENERATED // 2), "at_block": 0, "past_block": 1}[
        str(cell["prompt_end"])
    ]
    blocks = cut // block + 1  # the target ends in the block after the cut's, or the next one
    if blocks * block + end <= cut:
        blocks += 1
    return Group(block, companions, blocks * block + end, cut)


def _choice_output(choice: Any) -> Output:
    ids = getattr(choice, "token_ids", None)
    assert ids is not None, "the server returned no token_ids (return_token_ids=true was set)"
    return Output(
        text=choice.text,
        token_ids=tuple(int(t) for t in ids),
        finish_reason=choice.finish_reason,
        logprobs=choice.logprobs,
    )


async def _group_request(
    client: AsyncOpenAI, model: str, prompts: list[list[int]], salt: str
) -> list[Output]:
    """All of a group's prompts in one request: vLLM adds them to the engine back to back, so
    they land in one scheduler step far more often than separate requests would."""
    response = await client.completions.create(
        model=model,
        prompt=prompts,
        max_tokens=GENERATED,
        temperature=0.0,
        logprobs=TOP_K,
        extra_body={
            "ignore_eos": True,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            # Each cell's own salt: no prefix-cache hit from another cell, so a continuation
            # is the budget's cut, not a cached prefix.
            "cache_salt": salt,
        },
    )
    return [_choice_output(c) for c in sorted(response.choices, key=lambda c: c.index)]


async def _serve_cell(
    client: AsyncOpenAI, model: str, cell: Cell, prompts: list[list[int]], pacer: list[int]
) -> list[Output]:
    salt = f"matrix-{uuid.uuid4().hex}"
    if cell["arrival"] == "together":
        return await _group_request(client, model, prompts, salt)
    decoding = asyncio.Event()

    def progress(n: int) -> None:
        if n >= 1:
            decoding.set()

    body = greedy(pacer, PACER_TOKENS, ignore_eos=True, cache_salt=salt)
    running = asyncio.ensure_future(astream(client, model, body, on_progress=progress))
    if cell["arrival"] == "after_finish":
        # A short request beside the pacer finishes first: the group joins a batch that lost
        # a row.
        await acomplete(client, model, greedy(pacer[:-1], 2, ignore_eos=True, cache_salt=salt))
    await asyncio.wait_for(decoding.wait(), timeout=120)
    outputs = await _group_request(client, model, prompts, salt)
    await running
    return outputs


def _situations(raw: RawHttp) -> dict[str, float]:
    found: dict[str, float] = {}
    for sample in raw.metrics():
        if sample.name == "tt_situations_total" and "situation" in sample.labels:
            key = sample.labels["situation"]
            found[key] = found.get(key, 0.0) + sample.value
    return found


def _situation_matrix(
    reference: ReferenceForward,
    tt_server: ServerInfo,
    tt_raw_http: RawHttp,
    tt_async_openai_client: AsyncOpenAI,
    tt_record_perf: RecordPerf,
    tt_record_cell: RecordCell,
) -> tuple[list[str], str]:
    """Every cell of the forward matrix (situation_matrix.FORWARD_KV): a group of prompts past
    a prefill step's budget, so vLLM cuts the last one and its continuation starts on or inside
    a KV block, arriving alone, beside a decoding request or after one finished; the cut prompt
    and the group's primer are compared position by position with transformers. Returns the
    problems and what the matrix created."""
    block = _block_size(tt_raw_http) or DEFAULT_BLOCK
    cap = _cap(tt_server)
    matrix = cells(FORWARD_KV)
    groups = [group_for(cell, block, cap) for cell in matrix]
    longest = max(max(g.lengths) for g in groups)
    head, corpus = _corpus(tt_raw_http, longest + 64)
    before = _situations(tt_raw_http)
    problems: list[str] = []
    worst, compared = 0.0, 0
    for index, (cell, group) in enumerate(zip(matrix, groups, strict=True)):
        lengths = group.lengths
        sent = [
            Sent(f"[{cell.label}] prompt {i} of {n} tokens", head + corpus[i : i + n - len(head)])
            for i, n in enumerate(lengths)
        ]
        pacer = head + corpus[index + 5 : index + 25]
        outputs = asyncio.run(
            _serve_cell(
                tt_async_openai_client, tt_server.model, cell, [s.prompt for s in sent], pacer
            )
        )
        # The cut lives in the target (last); the companions are whole prefills the batched
        # wave already compares, and their reference forward would cost most of the time.
        ends = [0, len(sent) - 1]
        found, diff, count = _compare(
            reference, [sent[i] for i in ends], [outputs[i] for i in ends], _tolerance(tt_server)
        )
        problems += found
        worst, compared = max(worst, diff), compared + count
        tt_record_cell(FORWARD_KV.name, cell.label)
    after = _situations(tt_raw_http)
    made = {
        f"matrix_{key}": after.get(key, 0.0) - before.get(key, 0.0)
        for key in ("prefill_start_mid_block", "prefill_start_on_block", "decode_new_block")
    }
    _record(tt_record_perf, {**made, "matrix_positions": compared, "matrix_cells": len(matrix)})
    if worst > 0:
        tt_record_perf(
            "forward_reference_matrix_max_logprob_diff", worst, "nats", "lower", stat="max"
        )
    return problems, f"situation matrix ({made}, block size {block})"
