"""The reference TT test model against Hugging Face and against the TT model contract.

A tiny random-weight ``LlamaForCausalLM`` checkpoint is written to a temp dir; the reference
class is driven directly with contract calls on an emulated mesh, the way the plugin's runner
drives a tt-metal ``generator_vllm`` class. Greedy output must equal HF's, whatever the block
assignment, chunking, prefix reuse, resident/async decode, slot moves, lanes or warm-ups.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM

from vllm_tt_plugin.contract.protocols import decode_contract_version
from vllm_tt_plugin.contract.sampling_params import DeviceSamplingRow, TTSamplingParams
from vllm_tt_plugin.emulation.mesh import EmulatedMeshDevice
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.launch.envs import TT_REFERENCE_MAX_TOKENS_ALL_USERS
from vllm_tt_plugin.launch.mesh_spec import NAMED_MESHES
from vllm_tt_plugin.model_registry import ModelTarget
from vllm_tt_plugin.test_models import variants
from vllm_tt_plugin.test_models.core import ReferenceModelError
from vllm_tt_plugin.test_models.inputs import UnexpectedArgumentError
from vllm_tt_plugin.test_models.paged_kv import KVCacheError
from vllm_tt_plugin.test_models.reference_llama import (
    ReferenceLlamaForCausalLM,
    ReferenceLlamaLanesForCausalLM,
)
from vllm_tt_plugin.test_models.sampling import (
    PenaltyHistory,
    SamplingTensors,
    exponential_noise,
    sample,
    select_params,
    tensors_from_params,
)

BS = 16  # block size
MAX_LEN = 128
WIDTH = MAX_LEN // BS  # page-table width
NUM_BLOCKS = 96
VOCAB = 256
GREEDY = DeviceSamplingRow()
FULL_RELOAD = dict(
    reload_inputs=True, reload_page_table=False, reload_sampling_params=True,
    reset_sampling_state=True,
)  # fmt: skip
NO_RELOAD = dict(
    reload_inputs=False, reload_page_table=False, reload_sampling_params=False,
    reset_sampling_state=False,
)  # fmt: skip


# --- fixtures ----------------------------------------------------------------------------------
def _write_checkpoint(path: Path, tie: bool) -> LlamaForCausalLM:
    torch.manual_seed(1234 + int(tie))
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,  # not hidden_size / heads: the model must read it from the config
        max_position_embeddings=MAX_LEN,
        rope_theta=5000.0,
        rms_norm_eps=1e-5,
        initializer_range=0.15,
        tie_word_embeddings=tie,
        architectures=["ReferenceLlamaForCausalLM"],
    )
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(path, safe_serialization=True)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, LlamaForCausalLM]:
    path = tmp_path_factory.mktemp("tiny-llama")
    hf = _write_checkpoint(path, tie=False)
    return AutoConfig.from_pretrained(path), hf


@pytest.fixture
def mesh() -> Iterator[EmulatedMeshDevice]:
    device = EmulatedMeshDevice(NAMED_MESHES["N150"], step_time_s=0.0)
    yield device
    device.close()


@pytest.fixture
def mesh_n300() -> Iterator[EmulatedMeshDevice]:
    device = EmulatedMeshDevice(NAMED_MESHES["N300"], step_time_s=0.0)
    yield device
    device.close()


@pytest.fixture
def mesh_t3k() -> Iterator[EmulatedMeshDevice]:
    device = EmulatedMeshDevice(NAMED_MESHES["T3K"], step_time_s=0.0)
    yield device
    device.close()


def encode(rows: list[DeviceSamplingRow]) -> TTSamplingParams:
    """What the plugin sends as sampling_params (tt-metal's SamplingParams, per-row lists)."""
    return TTSamplingParams.encode(rows, VOCAB)


def as_tensors(params: TTSamplingParams) -> SamplingTensors:
    """The device's copy of ``params`` (what the reference sampler consumes)."""
    return tensors_from_params(params, params.batch_size, VOCAB, "test")


def build(cls: type, config: Any, mesh: Any, slots: int = 8, lanes: int = 1, legacy_kv=False):
    model = cls.initialize_vllm_model(
        config, mesh, slots, max_seq_len=MAX_LEN, tt_data_parallel=lanes
    )
    heads = model.sharding.kv_heads_per_shard
    if legacy_kv:
        kv = model.allocate_kv_cache((NUM_BLOCKS, heads, BS, 24), torch.float32, 2)
    else:  # per_layer_specs: (shape, dtype, tensor_idx) per layer
        kv = model.allocate_kv_cache_per_layer(
            [((NUM_BLOCKS, heads, BS, 24), torch.float32, i) for i in range(2)]
        )
    return model, kv


@torch.no_grad()
def hf_greedy(hf: LlamaForCausalLM, prompt: list[int], steps: int) -> list[int]:
    ids = torch.tensor([prompt])
    for _ in range(steps):
        nxt = hf(ids).logits[0, -1].argmax()
        ids = torch.cat((ids, nxt.view(1, 1)), dim=1)
    return ids[0, len(prompt) :].tolist()


# --- a miniature runner: the calls the plugin makes -----------------------------------------------
@dataclass
class Req:
    prompt: list[int]
    slot: int
    blocks: list[int]
    row: DeviceSamplingRow = GREEDY
    out: list[int] = field(default_factory=list)

    @property
    def seq(self) -> list[int]:
        return self.prompt + self.out


def make_reqs(prompts: list[list[int]], slots: list[int], rng: random.Random, rows=None):
    pool = list(range(1, NUM_BLOCKS))
    rng.shuffle(pool)  # random, non-contiguous block ids
    reqs = []
    for i, (prompt, slot) in enumerate(zip(prompts, slots, strict=True)):
        blocks = [pool.pop() for _ in range(WIDTH)]
        reqs.append(Req(prompt, slot, blocks, rows[i] if rows else GREEDY))
    return reqs


def page_row(blocks: list[int], upto: int | None = None) -> torch.Tensor:
    row = torch.zeros(WIDTH, dtype=torch.int32)
    used = blocks if upto is None else blocks[: upto // BS + 1]
    row[: len(used)] = torch.tensor(used, dtype=torch.int32)
    return row


def values_of(result: Any) -> torch.Tensor:
    return result[0] if isinstance(result, tuple) else result


def tokens_of(result: Any) -> torch.Tensor:
    """Device-sampled tokens [B] of a prefill ([B, 1]) or decode ((values [B, 1], logprobs))."""
    values = values_of(result)
    return values.reshape(values.shape[0], -1)[:, -1]


def logits_of(result: Any) -> torch.Tensor:
    """Host logits [B, V] of a prefill ([B, 1, V]) or decode ((logits [B, 1, V], placeholder))."""
    return values_of(result)[:, -1, :]


def full_tokens(seqs: list[list[int]], end: int | None = None) -> torch.Tensor:
    """Prefill ``tokens``: each row's sequence from position 0, int32, zero padded."""
    rows = [seq[: (end or len(seq))] for seq in seqs]
    tokens = torch.zeros((len(rows), max(map(len, rows))), dtype=torch.int32)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.int32)
    return tokens


def prefill(model, kv, reqs: list[Req], sampling: bool, start: int = 0, end: int | None = None):
    """One prefill call over reqs (positions start..end of each sequence); appends the token."""
    ends = [end or len(r.seq) for r in reqs]
    result = model.prefill_forward(
        tokens=full_tokens([r.seq for r in reqs], end),
        page_table=torch.stack([page_row(r.blocks) for r in reqs]),
        kv_cache=kv,
        enable_trace=False,
        prompt_lens=ends,
        start_pos=[start] * len(reqs),
        sampling_params=encode([r.row for r in reqs]) if sampling else None,
        empty_slots=[r.slot for r in reqs],
    )
    if end is not None:
        return result
    new = tokens_of(result) if sampling else logits_of(result).argmax(dim=1)
    for r, t in zip(reqs, new.tolist(), strict=True):
        r.out.append(t)
    return result


def decode_args(model, reqs: list[Req], sampling: bool, pages_upto_pos: bool = False):
    n = model.num_slots
    tokens = torch.zeros((n, 1), dtype=torch.int32)
    pos = torch.full((n,), -1, dtype=torch.int32)
    table = torch.zeros((n, WIDTH), dtype=torch.int32)
    rows = [DeviceSamplingRow(top_k=1)] * n  # padding: neutral values
    for r in reqs:
        p = len(r.seq) - 1
        tokens[r.slot, 0], pos[r.slot] = r.seq[-1], p
        table[r.slot] = page_row(r.blocks, p if pages_upto_pos else None)
        rows[r.slot] = r.row
    args: dict[str, Any] = dict(tokens=tokens, page_table=table, start_pos=pos)
    if sampling:
        args["sampling_params"] = encode(rows)
        if any(r.row.has_penalties for r in reqs):
            width = max(1, max(len(r.prompt) for r in reqs), max(len(r.out) for r in reqs))
            prompt = torch.full((n, width), -1, dtype=torch.int32)
            out = torch.full((n, width), -1, dtype=torch.int32)
            for r in reqs:
                prompt[r.slot, : len(r.prompt)] = torch.tensor(r.prompt)
                out[r.slot, : len(r.out)] = torch.tensor(r.out)
            args["prompt_tokens"], args["output_tokens"] = prompt, out
    return args


def decode_sync(model, kv, reqs: list[Req], steps: int, sampling: bool) -> list[Any]:
    """Host-style decode: every step reloads everything (the plugin's host-sampling pattern)."""
    results = []
    for _ in range(steps):
        result = model.decode_forward(
            kv_cache=kv, **decode_args(model, reqs, sampling), **FULL_RELOAD
        )
        new = tokens_of(result) if sampling else logits_of(result).argmax(dim=1)
        for r in reqs:
            r.out.append(int(new[r.slot]))
        results.append(result)
    return results


def finalize(model, handle: Any) -> Any:
    handle, events = model.read_decode_output(handle, async_read=True)
    for event in events:
        event.synchronize()
    return model.process_decode_output_host(handle, is_tokens=True)


def decode_async(model, kv, reqs: list[Req], steps: int, first_reload: bool = True) -> None:
    """Steady resident decode: one full reload (unless the state is already resident), then no
    flags except page-table refreshes; step k+1 is submitted before step k is read, and the host
    never sends the current tokens."""
    pending: deque[Any] = deque()
    base = {id(r): len(r.seq) - 1 for r in reqs}
    last_table: torch.Tensor | None = None
    for step in range(steps):
        args = decode_args(model, reqs, sampling=True, pages_upto_pos=True)
        for r in reqs:  # pages for the position this step consumes, tokens unknown (zeros)
            args["page_table"][r.slot] = page_row(r.blocks, base[id(r)] + step)
        if step == 0 and first_reload:
            flags = FULL_RELOAD
        else:  # stale host copies: only what a flag names may be used
            args["tokens"] = torch.zeros_like(args["tokens"])
            args["start_pos"] = torch.where(args["start_pos"] >= 0, 0, -1).to(torch.int32)
            args["sampling_params"] = encode([GREEDY] * model.num_slots)
            args.pop("prompt_tokens", None), args.pop("output_tokens", None)
            changed = last_table is None or not torch.equal(args["page_table"], last_table)
            flags = {**NO_RELOAD, "reload_page_table": changed}
        last_table = args["page_table"].clone()
        pending.append(
            model.decode_forward(
                kv_cache=kv, read_from_device=False, enable_trace=True, **args, **flags
            )
        )
        while len(pending) > 1 or (pending and step == steps - 1):
            new = tokens_of(finalize(model, pending.popleft()))
            for r in reqs:
                r.out.append(int(new[r.slot]))


PROMPT_LENS = [1, 2, 5, 15, 16, 17, 31, 33, 40, 47]


def prompts(rng: random.Random, lens: list[int] = PROMPT_LENS) -> list[list[int]]:
    return [[rng.randrange(VOCAB) for _ in range(n)] for n in lens]


# --- greedy parity ------------------------------------------------------------------------------
@pytest.mark.parametrize("sampling", [False, True], ids=["host-logits", "device-greedy"])
def test_greedy_matches_hf_for_mixed_lengths_and_random_blocks(checkpoint, mesh, sampling):
    config, hf = checkpoint
    rng = random.Random(7)
    ps = prompts(rng)
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh, slots=12)
    reqs = make_reqs(ps, rng.sample(range(12), len(ps)), rng)
    prefill(model, kv, reqs[:4], sampling)  # two prefill calls of mixed lengths
    prefill(model, kv, reqs[4:], sampling)
    decode_sync(model, kv, reqs, 7, sampling)
    for r in reqs:
        assert r.out == hf_greedy(hf, r.prompt, 8), f"prompt of {len(r.prompt)} tokens"


def test_prefill_logits_match_hf_and_tied_embeddings(checkpoint, mesh, tmp_path):
    hf_tied = _write_checkpoint(tmp_path, tie=True)
    config = AutoConfig.from_pretrained(tmp_path)
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    prompt = list(range(3, 40))
    [req] = make_reqs([prompt], [0], random.Random(1))
    logits = logits_of(prefill(model, kv, [req], sampling=False))
    with torch.no_grad():
        expected = hf_tied(torch.tensor([prompt])).logits[0, -1]
    torch.testing.assert_close(logits[0], expected, rtol=1e-4, atol=1e-5)
    assert model.decoder.weights.lm_head is model.decoder.weights.embed


def test_chunked_prefill_equals_whole_prefill(checkpoint, mesh):
    config, hf = checkpoint
    rng = random.Random(11)
    prompt = prompts(rng, [45])[0]
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    whole, chunked = make_reqs([prompt, prompt], [0, 1], rng)
    expected = prefill(model, kv, [whole], sampling=False)
    for start, end in ((0, 7), (7, 20)):  # intermediate chunks, one mid-block
        prefill(model, kv, [chunked], sampling=False, start=start, end=end)
    got = prefill(model, kv, [chunked], sampling=False, start=20)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert [rec.start_pos for rec in model.call_log if rec.method == "prefill_forward"][1:] == [
        (0,),
        (7,),
        (20,),
    ]
    decode_sync(model, kv, [whole, chunked], 5, sampling=False)
    assert chunked.out == whole.out == hf_greedy(hf, prompt, 6)


def test_prefix_reuse_at_block_boundary_equals_full_prefill(checkpoint, mesh):
    config, _ = checkpoint
    rng = random.Random(12)
    shared = prompts(rng, [2 * BS])[0]
    first_prompt, second_prompt = [*shared, 5, 6, 7], [*shared, 9, 8, 7, 6, 5]
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    # A repetition penalty < 1 boosts seen tokens, so the first token is a prompt token: one from
    # the cached prefix only if the model sees the whole prompt, not just the chunk it was sent.
    penal = DeviceSamplingRow(repetition_penalty=0.02)
    first, full, hit = make_reqs([first_prompt, second_prompt, second_prompt], [0, 1, 2], rng,
                                 rows=[penal, penal, penal])  # fmt: skip
    hit.blocks[:2] = first.blocks[:2]  # the cached prefix blocks
    prefill(model, kv, [first, full], sampling=True)
    full_logits = prefill(model, kv, [replace(full, out=[])], sampling=False)
    hit_logits = prefill(model, kv, [replace(hit, out=[])], sampling=False, start=2 * BS)
    torch.testing.assert_close(hit_logits, full_logits, rtol=1e-5, atol=1e-5)
    # Device penalties on the hit see the whole prompt (the cached part read back from the cache).
    prefill(model, kv, [hit], sampling=True, start=2 * BS)
    assert hit.out == full.out
    assert full.out[0] in shared and full.out[0] not in second_prompt[2 * BS :]
    decode_sync(model, kv, [first, full, hit], 4, sampling=True)
    assert hit.out == full.out


# --- resident decode, async, slot remap --------------------------------------------------------
SAMPLED_ROWS = [
    DeviceSamplingRow(),
    DeviceSamplingRow(temperature=0.9, top_k=20, top_p=0.9, seed=101),
    DeviceSamplingRow(temperature=1.3, seed=202, repetition_penalty=1.5, frequency_penalty=0.4),
    DeviceSamplingRow(repetition_penalty=1.4, presence_penalty=0.7),
    DeviceSamplingRow(temperature=0.7, top_p=0.8, seed=303, presence_penalty=0.3, num_logprobs=3),
    DeviceSamplingRow(temperature=1.0, top_k=5, seed=404),
]


def _sampled_reqs(rng: random.Random, slots: list[int]) -> list[Req]:
    return make_reqs(prompts(rng, [3, 17, 30, 9, 33, 1]), slots, rng, rows=SAMPLED_ROWS)


def _clone(reqs: list[Req]) -> list[Req]:
    return [replace(r, out=list(r.out)) for r in reqs]


def test_async_resident_decode_equals_sync_full_reload(checkpoint, mesh):
    config, _ = checkpoint
    rng = random.Random(21)
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    sync_reqs = _sampled_reqs(rng, [0, 2, 3, 5, 6, 7])
    async_reqs = _clone(sync_reqs)
    prefill(model, kv, sync_reqs, sampling=True)
    decode_sync(model, kv, sync_reqs, 20, sampling=True)

    model2, kv2 = build(ReferenceLlamaForCausalLM, config, mesh)
    prefill(model2, kv2, async_reqs, sampling=True)
    state = model2.resident_snapshot()  # a device-sampled prefill seeds the slot's decode input
    for r in async_reqs:
        assert (int(state.tokens[r.slot]), int(state.positions[r.slot])) == (
            r.out[0],
            len(r.prompt),
        )
    decode_async(model2, kv2, async_reqs, 20)
    assert [r.out for r in async_reqs] == [r.out for r in sync_reqs]
    decodes = [c for c in model2.call_log if c.method == "decode_forward"]
    assert sum(c.reload_page_table for c in decodes) >= 2  # sequences crossed block boundaries
    assert not any(c.reload_inputs for c in decodes[1:])
    assert len([c for c in model2.call_log if c.method == "process_decode_output_host"]) == 20
    state = model2.resident_snapshot()
    for (
        r
    ) in async_reqs:  # invariant: resident token = last sampled, position = where it is consumed
        assert int(state.tokens[r.slot]) == r.out[-1]
        assert int(state.positions[r.slot]) == len(r.seq) - 1


def test_async_handles_are_finalised_exactly_once(checkpoint, mesh):
    config, _ = checkpoint
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    [req] = make_reqs([[1, 2, 3]], [0], random.Random(3))
    prefill(model, kv, [req], sampling=True)
    args = decode_args(model, [req], sampling=True)
    handle = model.decode_forward(kv_cache=kv, read_from_device=False, **args, **FULL_RELOAD)
    handle, _ = model.read_decode_output(handle, async_read=True)
    with pytest.raises(ReferenceModelError, match="is_tokens=False"):
        model.process_decode_output_host(handle, is_tokens=False)
    assert tokens_of(model.process_decode_output_host(handle, is_tokens=True)).shape == (8,)
    with pytest.raises(ReferenceModelError, match="already finalised"):
        model.process_decode_output_host(handle, is_tokens=True)
    with pytest.raises(ReferenceModelError, match="already read"):
        model.read_decode_output(handle, async_read=True)
    # The synchronous path: the raw device output straight to process_decode_output_host.
    args = decode_args(model, [req], sampling=True)
    raw = model.decode_forward(kv_cache=kv, read_from_device=False, **args, **FULL_RELOAD)
    values, logprobs = model.process_decode_output_host(raw, is_tokens=True)
    assert values.shape == (8, 1) and values.dtype == torch.int64
    assert logprobs.shape == (8,) and bool(logprobs.isnan().all())  # placeholder: none asked


@pytest.mark.parametrize("with_reload", [False, True], ids=["steady", "full-reload"])
def test_slot_remap_applies_exactly_once(checkpoint, mesh, with_reload):
    config, _ = checkpoint
    rng = random.Random(31)
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    reference = _sampled_reqs(rng, [0, 1, 2, 3, 4, 5])
    moved = _clone(reference)
    prefill(model, kv, reference, sampling=True)
    decode_sync(model, kv, reference, 10, sampling=True)

    model2, kv2 = build(ReferenceLlamaForCausalLM, config, mesh)
    prefill(model2, kv2, moved, sampling=True)
    decode_sync(model2, kv2, moved, 4, sampling=True)  # leaves the state resident
    # Gather semantics: new slot i holds old slot remap[i]. A 3-cycle plus moves into empty
    # slots: applying it twice (or not at all) scrambles tokens, positions or penalty history.
    remap = torch.tensor([1, 2, 0, 6, 7, 5, 3, 4], dtype=torch.int64)
    new_slot = {int(old): new for new, old in enumerate(remap)}
    for r in moved:
        r.slot = new_slot[r.slot]
    flags = FULL_RELOAD if with_reload else NO_RELOAD
    args = decode_args(model2, moved, sampling=True)
    if not with_reload:
        args["tokens"] = torch.zeros_like(args["tokens"])  # resident state must be used
    result = model2.decode_forward(
        kv_cache=kv2, slot_remap=remap, enable_trace=True, **args, **flags
    )
    for r in moved:
        r.out.append(int(tokens_of(result)[r.slot]))
    decode_async(model2, kv2, moved, 5, first_reload=with_reload)
    assert [r.out for r in moved] == [r.out for r in reference]
    assert model2.call_log[-1].method == "process_decode_output_host"
    assert [c.slot_remap for c in model2.call_log if c.slot_remap] == [tuple(remap.tolist())]


def test_preempted_request_replays_and_continues_identically(checkpoint, mesh):
    config, _ = checkpoint
    rng = random.Random(41)
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    # Repetition penalty only: prefill counts the replayed sequence as prompt tokens (it is
    # never sent a history), which repetition treats like output tokens.
    row = DeviceSamplingRow(temperature=1.3, seed=202, repetition_penalty=1.5)
    [ref] = make_reqs(prompts(rng, [12]), [2], rng, rows=[row])
    prefill(model, kv, [ref], sampling=True)
    decode_sync(model, kv, [ref], 12, sampling=True)
    [again] = make_reqs([ref.prompt], [5], random.Random(99), rows=[row])
    prefill(model, kv, [again], sampling=True)
    decode_sync(model, kv, [again], 5, sampling=True)
    # Preempted: its blocks are gone; it replays prompt + generated tokens through prefill in
    # other blocks and another slot.
    resumed = Req(again.prompt, 7, make_reqs([[0]], [0], random.Random(5))[0].blocks,
                  again.row, list(again.out))  # fmt: skip
    prefill(model, kv, [resumed], sampling=True)
    with pytest.raises(UnexpectedArgumentError, match="output_tokens"):
        model.prefill_forward(
            tokens=full_tokens([resumed.seq]), page_table=page_row(resumed.blocks)[None],
            kv_cache=kv, prompt_lens=[len(resumed.seq)], start_pos=[0], empty_slots=[7],
            output_tokens=torch.tensor([resumed.out], dtype=torch.int32),
        )  # fmt: skip
    decode_sync(model, kv, [resumed], 6, sampling=True)
    assert resumed.out == ref.out


# --- device sampling semantics -----------------------------------------------------------------
def test_seeded_sampling_is_reproducible_and_batch_and_slot_invariant(checkpoint, mesh):
    config, _ = checkpoint
    rng = random.Random(51)
    row = DeviceSamplingRow(temperature=1.0, top_k=40, top_p=0.95, seed=777)
    prompt = prompts(rng, [9])[0]
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    [alone] = make_reqs([prompt], [0], rng, rows=[row])
    prefill(model, kv, [alone], sampling=True)
    decode_sync(model, kv, [alone], 12, sampling=True)

    model2, kv2 = build(ReferenceLlamaForCausalLM, config, mesh)
    crowd = _sampled_reqs(rng, [0, 1, 2, 3, 4, 6])
    [again] = make_reqs([prompt], [5], rng, rows=[row])
    prefill(model2, kv2, crowd[:3], sampling=True)
    prefill(model2, kv2, [*crowd[3:], again], sampling=True)
    decode_async(model2, kv2, [*crowd, again], 12)
    assert again.out == alone.out

    [other_seed] = make_reqs([prompt], [3], rng, rows=[replace(row, seed=778)])
    prefill(model2, kv2, [other_seed], sampling=True)
    decode_sync(model2, kv2, [other_seed], 12, sampling=True)
    assert other_seed.out != alone.out


def _padded(seqs: list[list[int]], pad: int) -> torch.Tensor:
    out = torch.full((len(seqs), max(1, *map(len, seqs))), pad, dtype=torch.int64)
    for i, seq in enumerate(seqs):
        out[i, : len(seq)] = torch.tensor(seq, dtype=torch.int64)
    return out


def vllm_reference_tokens(
    logits: torch.Tensor,
    p: TTSamplingParams,
    prompts_: list[list[int]],
    outputs: list[list[int]],
    pos: torch.Tensor,
) -> torch.Tensor:
    """What vLLM's own sampler ops produce from these logits, with the (seed, position) noise."""
    from vllm.model_executor.layers.utils import apply_penalties
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    vocab = logits.shape[1]
    x = apply_penalties(logits.clone(), _padded(prompts_, vocab), _padded(outputs, vocab),
                        p.presence_penalty, p.frequency_penalty, p.repetition_penalty)  # fmt: skip
    greedy = x.argmax(dim=1)
    temp = p.temperature
    x = x / torch.where(temp < 1e-5, 1.0, temp)[:, None]
    k = p.top_k.long()
    x = apply_top_k_top_p_pytorch(x, torch.where(k == 0, vocab, k), p.top_p)
    probs = x.softmax(dim=1)
    noise = torch.stack(
        [exponential_noise(int(p.seed[i]), int(pos[i]), vocab) for i in range(len(prompts_))]
    )
    return torch.where(temp < 1e-5, greedy, (probs / noise).argmax(dim=1))


def test_sampler_matches_vllm_ops_on_random_logits():
    gen = torch.Generator().manual_seed(5)
    rows, vocab = 256, 64
    # Logit scales from flat to very peaked, so top-p sometimes keeps only the top token.
    logits = torch.randn((rows, vocab), generator=gen) * torch.tensor([0.3, 1.0, 4.0, 12.0]).repeat(
        rows // 4)[:, None]  # fmt: skip
    pick = random.Random(6)
    table = [
        DeviceSamplingRow(
            temperature=pick.choice([0.0, 0.5, 1.0, 2.0]),
            top_k=pick.choice([0, 1, 3, 50]),
            top_p=pick.choice([1.0, 0.99, 0.9, 0.5, 0.1]),
            presence_penalty=pick.choice([0.0, 0.0, 0.8, -0.5]),
            frequency_penalty=pick.choice([0.0, 0.0, 0.3]),
            repetition_penalty=pick.choice([1.0, 1.0, 1.3, 0.8]),
            seed=pick.randrange(1 << 40),
        )
        for _ in range(rows)
    ]
    params = tensors_from_params(TTSamplingParams.encode(table, vocab), rows, vocab, "test")
    prompt_ids = [[pick.randrange(vocab) for _ in range(pick.randrange(0, 9))] for _ in range(rows)]
    output_ids = [[pick.randrange(vocab) for _ in range(pick.randrange(0, 9))] for _ in range(rows)]
    pos = torch.tensor([pick.randrange(1000) for _ in range(rows)], dtype=torch.int64)
    history = PenaltyHistory.from_padded(
        _padded(prompt_ids, -1), _padded(output_ids, -1), rows, vocab
    )
    got = sample(logits, params, history, pos)
    assert (
        got.tolist() == vllm_reference_tokens(logits, params, prompt_ids, output_ids, pos).tolist()
    )


def test_device_sampling_matches_vllm_sampler_ops_and_flat_logprobs(checkpoint, mesh_t3k):
    """On 8 devices per lane the default device path computes the sampled token's logprob, a
    flat [B] tensor from the raw logits (tt-metal's form)."""
    config, _ = checkpoint
    rng = random.Random(61)
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh_t3k)
    reqs = _sampled_reqs(rng, [0, 1, 2, 4, 5, 7])
    prefill(model, kv, reqs, sampling=True)
    slots = torch.tensor([r.slot for r in reqs])
    for _ in range(6):
        args = decode_args(model, reqs, sampling=True)
        params = as_tensors(args["sampling_params"])
        host = {k: args[k] for k in ("tokens", "page_table", "start_pos")}
        logits = logits_of(model.decode_forward(kv_cache=kv, **host, **FULL_RELOAD))
        values, lp = model.decode_forward(kv_cache=kv, **args, **FULL_RELOAD)
        tokens = tokens_of(values)
        expected = vllm_reference_tokens(
            logits[slots], select_params(params, slots), [r.prompt for r in reqs],
            [r.out for r in reqs], args["start_pos"][slots],
        )  # fmt: skip
        assert tokens[slots].tolist() == expected.tolist()
        raw = logits[slots].log_softmax(dim=1)
        assert lp.shape == (8,) and lp.dtype == torch.float32
        torch.testing.assert_close(lp[slots], raw.gather(1, tokens[slots][:, None])[:, 0])
        for r in reqs:
            r.out.append(int(tokens[r.slot]))


def test_logprobs_forms_by_mesh_and_family(checkpoint, mesh, mesh_t3k):
    """One device: a placeholder (NaN), never a value. GPT-OSS: top-32 (values, indices),
    sorted descending, from the raw logits."""
    config, _ = checkpoint
    row = DeviceSamplingRow(num_logprobs=3)
    [req] = make_reqs([[4, 5, 6, 7]], [2], random.Random(8), rows=[row])
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    tokens, lp = prefill(model, kv, [replace(req, out=[])], sampling=True)
    assert tokens.shape == (1, 1) and bool(lp.isnan().all())
    gpt, gkv = build(variants.GptOssForCausalLM, config, mesh_t3k)
    prefill(gpt, gkv, [req], sampling=True)
    args = decode_args(gpt, [req], sampling=True)
    logits = logits_of(gpt.decode_forward(kv_cache=gkv, **{
        k: args[k] for k in ("tokens", "page_table", "start_pos")}, **FULL_RELOAD))  # fmt: skip
    values, (top_values, top_indices) = gpt.decode_forward(kv_cache=gkv, **args, **FULL_RELOAD)
    assert top_values.shape == top_indices.shape == (8, 32)
    assert top_values.dtype == torch.float32 and top_indices.dtype == torch.int32
    raw = logits[2].log_softmax(dim=0)
    torch.testing.assert_close(top_values[2], raw.topk(32).values)
    assert int(values[2, 0]) in top_indices[2].tolist()


def test_penalties_steer_greedy_output(checkpoint, mesh):
    config, _ = checkpoint
    rng = random.Random(71)
    prompt = [7, 7, 7, 7, 7, 7, 7, 7]
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    plain, presence, repetition = make_reqs(
        [prompt] * 3, [0, 1, 2], rng,
        rows=[GREEDY, DeviceSamplingRow(presence_penalty=50.0),
              DeviceSamplingRow(repetition_penalty=50.0)],
    )  # fmt: skip
    prefill(model, kv, [plain, presence, repetition], sampling=True)
    decode_sync(model, kv, [plain, presence, repetition], 14, sampling=True)
    assert len(set(presence.out)) == len(presence.out)  # never repeats an output token
    assert 7 not in repetition.out[:5]
    assert len(set(plain.out)) < len(plain.out)  # the unpenalised model does repeat
    assert presence.out[0] == plain.out[0]  # presence penalises outputs only


def test_logits_without_sampling_params_cover_every_slot(checkpoint, mesh):
    config, _ = checkpoint
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    [req] = make_reqs([[4, 5, 6]], [3], random.Random(1))
    prefill(model, kv, [req], sampling=False)
    result = model.decode_forward(kv_cache=kv, **decode_args(model, [req], False), **FULL_RELOAD)
    logits = logits_of(result)  # tt_transformers' (values, logprobs) tuple, logits [B, 1, V]
    assert logits.shape == (8, VOCAB) and logits.dtype == torch.float32
    assert torch.count_nonzero(logits.abs().sum(dim=1)) == 1 and logits[3].abs().sum() > 0


# --- lanes and sharding ------------------------------------------------------------------------
def test_lanes_give_the_same_tokens_as_one_lane(checkpoint, mesh, mesh_n300):
    config, _ = checkpoint
    rng = random.Random(81)
    one = _sampled_reqs(rng, [0, 1, 2, 3, 4, 5])
    two = _clone(one)
    for r in two[3:]:  # lane 1 is slots 4..7; it reuses lane 0's block ids in its own cache
        r.slot += 1
    for a, b in zip(two[:3], two[3:], strict=True):
        b.blocks = list(a.blocks)
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    prefill(model, kv, one, sampling=True)
    decode_sync(model, kv, one, 8, sampling=True)
    lanes, kv2 = build(ReferenceLlamaLanesForCausalLM, config, mesh_n300, lanes=2)
    assert lanes.devices_per_lane == 1 and len(kv2.lanes) == 2
    assert ModelCapabilities.from_model_class(type(lanes)).supports_lane_data_parallel
    prefill(lanes, kv2, two, sampling=True)
    decode_async(lanes, kv2, two, 8)
    assert [r.out for r in two] == [r.out for r in one]
    with pytest.raises(ValueError, match="another lane"):
        remap = torch.tensor([4, 1, 2, 3, 0, 5, 6, 7], dtype=torch.int64)
        lanes.decode_forward(kv_cache=kv2, slot_remap=remap, **decode_args(lanes, two, True),
                             **FULL_RELOAD)  # fmt: skip


def test_head_sharding_over_a_lane_matches_hf(checkpoint, mesh_n300):
    config, hf = checkpoint
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh_n300)  # 2 devices, 2 KV heads
    assert model.sharding.num_shards == 2 and model.sharding.kv_heads_per_shard == 1
    k0, _ = kv.device_tensors(0, 0, 0)
    assert k0.shape == (NUM_BLOCKS, 1, BS, 24)
    rng = random.Random(91)
    reqs = make_reqs(prompts(rng, [5, 20, 33]), [0, 3, 6], rng)
    prefill(model, kv, reqs, sampling=False)
    decode_sync(model, kv, reqs, 4, sampling=False)
    assert [r.out for r in reqs] == [hf_greedy(hf, r.prompt, 5) for r in reqs]
    with pytest.raises(KVCacheError, match="num_kv_heads=2 per device"):
        model.allocate_kv_cache((NUM_BLOCKS, 2, BS, 24), torch.float32, 2)


# --- warm-up ------------------------------------------------------------------------------------
def test_warmup_leaves_no_state_behind(checkpoint, mesh):
    config, _ = checkpoint
    rng = random.Random(101)
    plain = _sampled_reqs(rng, [0, 1, 2, 3, 4, 5])
    warmed = _clone(plain)
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    prefill(model, kv, plain, sampling=True)
    decode_async(model, kv, plain, 8)

    model2, kv2 = build(ReferenceLlamaForCausalLM, config, mesh)
    for trace in (False, True):
        model2.already_warmed_up_prefill = False  # what the plugin does between phases
        model2.warmup_model_prefill(kv_cache=kv2, enable_trace=trace, can_sample_on_device=True)
        model2.warmup_model_decode(kv_cache=kv2, enable_trace=trace, max_batch_size=8,
                                   num_blocks=WIDTH, can_sample_on_device=True)  # fmt: skip
    prefill(model2, kv2, warmed, sampling=True)
    decode_async(model2, kv2, warmed, 3)
    before = model2.resident_snapshot()
    model2.already_warmed_up_prefill = False
    model2.warmup_model_decode(kv2, True, 8, WIDTH, True)  # mid-run: must not disturb
    model2.warmup_model_prefill(kv2, True, True)
    after = model2.resident_snapshot()
    assert torch.equal(before.tokens, after.tokens)
    assert torch.equal(before.positions, after.positions)
    decode_async(model2, kv2, warmed, 5)
    assert [r.out for r in warmed] == [r.out for r in plain]
    traced = [c.enable_trace for c in model2.call_log if c.method.startswith("warmup")]
    assert traced == [False, False, True, True, True, True]


def test_warmup_table_width_and_prefill_runs_once_until_reset(checkpoint, mesh):
    config, _ = checkpoint
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    with pytest.raises(ValueError, match="wider than one request's page table"):
        model.warmup_model_decode(kv, False, 8, NUM_BLOCKS, False)  # the pool, not a request
    for _ in range(2):
        model.warmup_model_prefill(kv_cache=kv, enable_trace=False, can_sample_on_device=False)
    assert [c.method for c in model.call_log].count("warmup_model_prefill") == 1
    assert model.already_warmed_up_prefill


# --- contract enforcement -----------------------------------------------------------------------
def test_v1_model_rejects_reset_batch_and_incoherent_flags(checkpoint, mesh):
    config, _ = checkpoint
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    [req] = make_reqs([[1, 2, 3, 4]], [1], random.Random(2))
    prefill(model, kv, [req], sampling=True)
    args = decode_args(model, [req], sampling=True)
    logged = len(model.call_log)
    bad_calls = [
        ({**FULL_RELOAD, "reset_batch": False}, "reset_batch is the legacy"),
        ({**FULL_RELOAD, "reload_page_table": True}, "both True"),
        ({**NO_RELOAD, "reset_sampling_state": True}, "requires reload_inputs"),
        ({**FULL_RELOAD, "slot_remap": torch.tensor([0, 0, 1, 2, 3, 4, 5, 6])}, "permutation"),
        ({**NO_RELOAD}, "reload_inputs=False on an untraced decode"),
        ({**NO_RELOAD, "enable_trace": True}, "no sampling parameters are resident"),
    ]
    for flags, message in bad_calls:
        with pytest.raises(ValueError, match=message):
            model.decode_forward(kv_cache=kv, **args, **flags)
    with pytest.raises(TypeError, match="unexpected keyword argument.*page_tables_per_layer"):
        model.decode_forward(kv_cache=kv, page_tables_per_layer=[], **args, **FULL_RELOAD)
    assert len(model.call_log) == logged  # rejected calls left nothing behind
    decode_sync(model, kv, [req], 2, sampling=True)


def test_page_table_null_block_and_bounds_are_checked(checkpoint, mesh):
    config, _ = checkpoint
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    [req] = make_reqs([list(range(20))], [0], random.Random(4))
    table = page_row(req.blocks)[None].clone()
    call = dict(kv_cache=kv, prompt_lens=[20], start_pos=[0])
    table[0, 1] = 0
    with pytest.raises(KVCacheError, match="null block"):
        model.prefill_forward(full_tokens([req.prompt]), page_table=table, **call)
    table[0, 1] = NUM_BLOCKS
    with pytest.raises(KVCacheError, match="outside this lane's cache"):
        model.prefill_forward(full_tokens([req.prompt]), page_table=table, **call)
    table = page_row(req.blocks)[None]
    with pytest.raises(ValueError, match=r"tokens must be torch\.int32"):
        model.prefill_forward(full_tokens([req.prompt]).long(), page_table=table, **call)


def test_prefill_reads_its_chunk_out_of_the_whole_sequence(checkpoint, mesh):
    """tokens carry the sequence from position 0; a plugin sending only the chunk is refused
    (prompt_lens beyond the columns) or, when the chunk happens to be long enough, computes
    other logits than the whole-sequence call."""
    config, _ = checkpoint
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    [req] = make_reqs([list(range(3, 43))], [0], random.Random(6))
    prefill(model, kv, [replace(req, out=[])], sampling=False, start=0, end=20)
    table = page_row(req.blocks)[None]
    with pytest.raises(ValueError, match="tokens carry the whole sequence from position 0"):
        model.prefill_forward(full_tokens([req.prompt[20:]]), page_table=table, kv_cache=kv,
                              prompt_lens=[40], start_pos=[20])  # fmt: skip


def test_legacy_variant_uses_reset_batch_and_legacy_allocation(checkpoint, mesh):
    config, _ = checkpoint
    legacy_cls = variants.LegacyDecodeContract
    assert decode_contract_version(legacy_cls) == 0
    assert not hasattr(legacy_cls, "allocate_kv_cache_per_layer")
    rng = random.Random(111)
    reference = _sampled_reqs(rng, [0, 1, 2, 3, 4, 5])
    legacy_reqs = _clone(reference)
    model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
    prefill(model, kv, reference, sampling=True)
    decode_sync(model, kv, reference, 6, sampling=True)

    legacy, lkv = build(legacy_cls, config, mesh, legacy_kv=True)
    assert lkv.allocated_by == "allocate_kv_cache"
    prefill(legacy, lkv, legacy_reqs, sampling=True)
    for step in range(6):  # reset_batch on the first step only: then the state is resident
        args = decode_args(legacy, legacy_reqs, sampling=True)
        result = legacy.decode_forward(kv_cache=lkv, reset_batch=step == 0, **args)
        for r in legacy_reqs:
            r.out.append(int(tokens_of(result)[r.slot]))
    assert [r.out for r in legacy_reqs] == [r.out for r in reference]
    assert [c.reset_batch for c in legacy.call_log if c.method == "decode_forward"] == [
        True, False, False, False, False, False
    ]  # fmt: skip
    args = decode_args(legacy, legacy_reqs, sampling=True)
    with pytest.raises(TypeError, match="unexpected keyword argument.*reload_inputs"):
        legacy.decode_forward(kv_cache=lkv, **args, **FULL_RELOAD)
    with pytest.raises(ValueError, match="never sent to a contract-v0 model"):
        legacy.decode_forward(kv_cache=lkv, slot_remap=torch.arange(8), **args)


def test_variants_enforce_their_declarations(checkpoint, mesh):
    config, _ = checkpoint
    for spec in variants.VARIANTS:
        cls = variants.VARIANT_CLASSES[spec.name]
        target = ModelTarget("TTReferenceLlamaForCausalLM", f"{variants.__name__}:{spec.name}",
                             "override")  # fmt: skip
        assert target.load_class() is cls
        caps = ModelCapabilities.from_model_class(cls)
        for key, value in spec.capabilities.items():
            assert getattr(caps, key) == value
    assert not hasattr(variants.NoAsyncDecode, "read_decode_output")
    rng = random.Random(121)
    [req] = make_reqs([list(range(40))], [0], rng)
    penal = encode([DeviceSamplingRow(repetition_penalty=1.2)])
    cases = [
        (variants.HostSamplingOnly, dict(sampling_params=encode([GREEDY])),
         0, "without supports_sample_on_device"),
        (variants.NoDevicePenalties, dict(sampling_params=penal), 0, "supports_device_penalties"),
        (variants.LimitedDeviceSampler, dict(sampling_params=encode(
            [DeviceSamplingRow(temperature=1.0, top_k=9)])), 0, "max_device_top_k=8"),
        (variants.WholePromptPrefill, {}, BS, "neither supports_chunked_prefill"),
        (variants.NoPrefixCaching, {}, BS, "does not continue an earlier chunk"),
        (variants.NoChunkedPrefill, {}, 7, "not block-aligned"),
    ]  # fmt: skip
    for cls, extra, start, message in cases:
        model, kv = build(cls, config, mesh)
        with pytest.raises(ValueError, match=message):
            model.prefill_forward(full_tokens([req.prompt]), page_table=page_row(req.blocks)[None],
                                  kv_cache=kv, prompt_lens=[40], start_pos=[start],
                                  empty_slots=[0], **extra)  # fmt: skip
    # What the variants do allow: a chunk continuation without prefix caching.
    model, kv = build(variants.NoPrefixCaching, config, mesh)
    chunk = replace(req, out=[])
    prefill(model, kv, [chunk], sampling=False, start=0, end=BS)
    prefill(model, kv, [chunk], sampling=False, start=BS)
    # No read-back hooks: host tensors (bare logits) even for read_from_device=False; resident
    # inputs (reload_inputs=False) are refused without supports_async_decode.
    model, kv = build(variants.NoAsyncDecode, config, mesh)
    out = model.decode_forward(kv_cache=kv, read_from_device=False,
                               **decode_args(model, [], False), **FULL_RELOAD)  # fmt: skip
    assert isinstance(out, torch.Tensor) and out.shape == (8, 1, VOCAB)
    with pytest.raises(ReferenceModelError, match="supports_async_decode"):
        model.decode_forward(kv_cache=kv, enable_trace=True,
                             **decode_args(model, [], False), **NO_RELOAD)  # fmt: skip


def test_kv_budget_default_and_env_override(monkeypatch):
    cls = ReferenceLlamaForCausalLM
    MAX_TOKENS_ENV = TT_REFERENCE_MAX_TOKENS_ALL_USERS.name
    monkeypatch.delenv(MAX_TOKENS_ENV, raising=False)
    assert cls.get_max_tokens_all_users("m", 1, 1, 4096, max_num_seqs=32) == 32768
    monkeypatch.setenv(MAX_TOKENS_ENV, "640")
    assert cls.get_max_tokens_all_users("m", 1, 1, 4096, max_num_seqs=32) == 640
    monkeypatch.setenv(MAX_TOKENS_ENV, "lots")
    with pytest.raises(ValueError, match=f"{MAX_TOKENS_ENV}='lots'"):
        cls.get_max_tokens_all_users("m", 1, 1, 4096)
