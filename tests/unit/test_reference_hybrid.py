"""The hybrid (sliding-window / full attention) reference model against HF Qwen2 and vLLM's specs.

A tiny random Llama is converted by ``tools/make_hybrid_checkpoint.py`` into a Qwen2 checkpoint
with alternating sliding / full layers. The reference class is driven directly with contract
calls on an emulated mesh, with page tables kept the way vLLM's hybrid KV cache manager keeps
them: one table per KV cache group, and in the sliding group the blocks that fall out of the
window are freed (null block 0 in the scheduler's view, a stale id in the runner's) and handed
to other requests. Greedy output must equal transformers' Qwen2 for prompts longer than the
window, whole or chunked. The per-layer specs, vLLM's grouping of them and each group's
per-request KV footprint come from vLLM's own API.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM, SmolLM3ForCausalLM
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

from tests.checkpoint_files import assert_same_checkpoint
from tests.conftest import REPO
from tests.tool_modules import load_tool
from vllm_tt_plugin.adapter.kv_cache import compute_block_budget, layer_name, sliding_windows
from vllm_tt_plugin.contract.sampling_params import DeviceSamplingRow, TTSamplingParams
from vllm_tt_plugin.emulation.mesh import EmulatedMeshDevice
from vllm_tt_plugin.launch.mesh_spec import NAMED_MESHES
from vllm_tt_plugin.test_models.hybrid import vllm_layer_groups
from vllm_tt_plugin.test_models.inputs import ContractInputError
from vllm_tt_plugin.test_models.llama import ReferenceModelConfigError
from vllm_tt_plugin.test_models.paged_kv import KVCacheError
from vllm_tt_plugin.test_models.reference_llama import ReferenceHybridForCausalLM

BS = 16  # block size
WINDOW = 24  # not a multiple of BS: the window's first block is partly outside it
MAX_LEN = 160
COLS = MAX_LEN // BS  # page-table width
NUM_BLOCKS = 80
VOCAB = 256
SLOTS = 8
SLIDING_GROUP, FULL_GROUP = 0, 1  # vLLM's order for this model (checked below)
FULL_RELOAD = dict(
    reload_inputs=True,
    reload_page_table=False,
    reload_sampling_params=True,
    reset_sampling_state=True,
)
PROMPT_LENS = [5, 23, 24, 25, 41, 64, 87, 113]
UNSUPPORTED_LAYER_TYPES = (
    "sliding_attention",
    "full_attention",
    "chunked_attention",
    "full_attention",
)


TOOL = load_tool("make_hybrid_checkpoint")


# --- fixtures ----------------------------------------------------------------------------------
def write_llama(path: Path) -> Path:
    torch.manual_seed(4321)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,  # vLLM configs below go up to 4096 tokens
        rms_norm_eps=1e-5,
        initializer_range=0.15,  # spread-out logits, so greedy paths do not collapse
        tie_word_embeddings=False,
        architectures=["ReferenceLlamaForCausalLM"],
    )
    LlamaForCausalLM(config).save_pretrained(path, safe_serialization=True)
    return path


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    llama: Path
    hf: SmolLM3ForCausalLM
    config: Any


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    llama = write_llama(tmp_path_factory.mktemp("tiny-llama"))
    out = tmp_path_factory.mktemp("tiny-hybrid") / "ckpt"
    TOOL.build(llama, out, WINDOW, check=True)
    hf = SmolLM3ForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    return Checkpoint(out, llama, hf, AutoConfig.from_pretrained(out))


@pytest.fixture
def mesh() -> Iterator[EmulatedMeshDevice]:
    device = EmulatedMeshDevice(NAMED_MESHES["N150"], step_time_s=0.0)
    yield device
    device.close()


@torch.no_grad()
def hf_greedy(hf: Any, prompt: list[int], steps: int) -> list[int]:
    """Whole-sequence forwards (no HF cache), so only transformers' mask decides the window."""
    ids = torch.tensor([prompt])
    for _ in range(steps):
        nxt = hf(ids).logits[0, -1].argmax()
        ids = torch.cat((ids, nxt.view(1, 1)), dim=1)
    return ids[0, len(prompt) :].tolist()


def build(ckpt: Checkpoint, mesh: Any, hybrid_manager: bool = True) -> tuple[Any, Any]:
    model = ReferenceHybridForCausalLM.initialize_vllm_model(
        ckpt.config, mesh, SLOTS, max_seq_len=MAX_LEN
    )
    heads = model.sharding.kv_heads_per_shard
    windows = model.hybrid_layers.windows
    if hybrid_manager:
        # What initialize_vllm_model(vllm_config=...) derives from vLLM's grouping (checked in
        # test_kv_cache_spec_per_layer_and_vllm_groups); layer pairs share one buffer each.
        model.layer_groups = tuple(SLIDING_GROUP if w else FULL_GROUP for w in windows)
        tensor_idx = [i // 2 for i in range(len(windows))]
    else:  # vLLM without its hybrid manager: one group, full-length blocks, one buffer per layer
        tensor_idx = list(range(len(windows)))
    specs = [((NUM_BLOCKS, heads, BS, 16), torch.float32, idx) for idx in tensor_idx]
    return model, model.allocate_kv_cache_per_layer(specs)


# --- a miniature of vLLM's hybrid block manager and the runner's calls -------------------------
@dataclass
class Req:
    prompt: list[int]
    slot: int
    tables: list[list[int]]  # per group, the scheduler's view (freed sliding blocks -> 0)
    runner: list[list[int]]  # per group, the runner's view (freed blocks keep their old id)
    out: list[int] = field(default_factory=list)

    @property
    def seq(self) -> list[int]:
        return self.prompt + self.out


class HybridBlocks:
    """Allocates per group like vLLM: the full group keeps every block; the sliding group frees
    the blocks wholly before ``num_computed - window + 1``. Freed blocks are handed out first
    (LIFO), so other requests overwrite them while stale ids may still point at them.
    """

    def __init__(self, groups: int, windows: dict[int, int], rng: random.Random) -> None:
        self.free = list(range(1, NUM_BLOCKS))
        rng.shuffle(self.free)
        self.groups = groups
        self.windows = windows
        self.freed_ids: set[int] = set()
        self.reused = 0

    def new(self, prompt: list[int], slot: int) -> Req:
        return Req(prompt, slot, [[] for _ in range(self.groups)], [[] for _ in range(self.groups)])

    def schedule(self, req: Req, num_computed: int, last_pos: int) -> None:
        """Before computing positions num_computed..last_pos (vLLM: remove_skipped_blocks, then
        allocate_slots)."""
        for group, window in self.windows.items():
            skipped = max(0, num_computed - window + 1) // BS
            for col in range(min(skipped, len(req.tables[group]))):
                if req.tables[group][col]:
                    self.free.append(req.tables[group][col])
                    self.freed_ids.add(req.tables[group][col])
                    req.tables[group][col] = 0
        for group in range(self.groups):
            while len(req.tables[group]) * BS <= last_pos:
                block = self.free.pop()
                self.reused += block in self.freed_ids
                req.tables[group].append(block)
                req.runner[group].append(block)


def table_row(blocks: list[int]) -> torch.Tensor:
    row = torch.zeros(COLS, dtype=torch.int32)
    row[: len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
    return row


def group_tables(
    reqs: list[Req], view: str, rows: int | None = None, slot_indexed: bool = False
) -> list[torch.Tensor]:
    """One [rows, COLS] table per group, as the runner sends page_tables_per_group."""
    groups = len(reqs[0].tables)
    n = rows if rows is not None else len(reqs)
    out = [torch.zeros((n, COLS), dtype=torch.int32) for _ in range(groups)]
    for i, r in enumerate(reqs):
        for g in range(groups):
            out[g][r.slot if slot_indexed else i] = table_row(
                r.tables[g] if view == "null" else r.runner[g]
            )
    return out


def run(
    model: Any,
    kv: Any,
    blocks: HybridBlocks,
    reqs: list[Req],
    chunk: int,
    steps: int,
    view: str,
    sampling: bool,
) -> None:
    """Chunked prefill rounds (every unfinished prompt advances one chunk per call), then
    `steps` full-batch decodes; tables are scheduled before every call as vLLM does."""
    done = {id(r): len(r.prompt) if r.out else 0 for r in reqs}  # prefilled earlier: decode
    while any(done[id(r)] < len(r.prompt) for r in reqs):
        rows = [r for r in reqs if done[id(r)] < len(r.prompt)]
        starts = [done[id(r)] for r in rows]
        ends = [min(s + chunk, len(r.prompt)) for s, r in zip(starts, rows, strict=True)]
        for r, s, e in zip(rows, starts, ends, strict=True):
            blocks.schedule(r, s, e - 1)
        tokens = torch.zeros((len(rows), max(ends)), dtype=torch.int32)  # from position 0
        for i, (r, e) in enumerate(zip(rows, ends, strict=True)):
            tokens[i, :e] = torch.tensor(r.prompt[:e], dtype=torch.int32)
        tables = group_tables(rows, view)
        params = encode([DeviceSamplingRow()] * len(rows)) if sampling else None
        result = model.prefill_forward(
            tokens=tokens,
            page_table=tables[0],
            kv_cache=kv,
            prompt_lens=ends,
            start_pos=starts,
            page_tables_per_group=tables,
            sampling_params=params,
            empty_slots=[r.slot for r in rows],
        )
        new = result[:, 0] if sampling else result[:, -1].argmax(dim=1)
        for i, (r, e) in enumerate(zip(rows, ends, strict=True)):
            done[id(r)] = e
            if e == len(r.prompt):
                r.out.append(int(new[i]))
    for _ in range(steps):
        n = model.num_slots
        tokens = torch.zeros((n, 1), dtype=torch.int32)
        pos = torch.full((n,), -1, dtype=torch.int32)
        for r in reqs:
            p = len(r.seq) - 1
            blocks.schedule(r, p, p)
            tokens[r.slot, 0], pos[r.slot] = r.seq[-1], p
        tables = group_tables(reqs, view, rows=n, slot_indexed=True)
        extra: dict[str, Any] = {}
        if sampling:
            extra["sampling_params"] = encode([DeviceSamplingRow()] * n)
        result = model.decode_forward(
            tokens=tokens,
            page_table=tables[0],
            kv_cache=kv,
            start_pos=pos,
            page_tables_per_group=tables,
            **extra,
            **FULL_RELOAD,
        )
        values = result[0]  # (values, logprobs)
        new = values[:, 0] if sampling else values[:, -1].argmax(dim=1)
        for r in reqs:
            r.out.append(int(new[r.slot]))


def encode(rows: list[DeviceSamplingRow]) -> TTSamplingParams:
    return TTSamplingParams.encode(rows, VOCAB)


def poison_null_block(kv: Any) -> None:
    """NaN in block 0 of every layer: any read of it (even masked: NaN * 0 = NaN) would leak."""
    for lane in kv.lanes:
        for tensors in (*lane.keys, *lane.values):
            for shard in tensors:
                shard[0] = float("nan")


def prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(VOCAB) for _ in range(n)] for n in PROMPT_LENS]


# --- greedy parity ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("chunk", "view", "sampling"),
    [
        (MAX_LEN, "null", False),  # whole prompts, host logits
        (32, "null", True),  # chunked prefill, device greedy
        (20, "stale", False),  # chunks shorter than the window; runner keeps stale ids
    ],
    ids=["whole-null-logits", "chunk32-null-device", "chunk20-stale-logits"],
)
def test_greedy_matches_hf_qwen2_beyond_the_window(checkpoint, mesh, chunk, view, sampling):
    steps = 9
    model, kv = build(checkpoint, mesh)
    poison_null_block(kv)
    rng = random.Random(chunk)
    blocks = HybridBlocks(2, {SLIDING_GROUP: WINDOW}, rng)
    slots = rng.sample(range(SLOTS), len(PROMPT_LENS))
    reqs = [blocks.new(p, s) for p, s in zip(prompts(chunk), slots, strict=True)]
    run(model, kv, blocks, reqs, chunk, steps, view, sampling)
    # Sliding blocks fell out of the window and were handed out again, so the test has teeth.
    assert blocks.freed_ids and blocks.reused > 0
    assert all(0 in r.tables[SLIDING_GROUP] for r in reqs if len(r.seq) > WINDOW + BS)
    for r in reqs:
        assert r.out == hf_greedy(checkpoint.hf, r.prompt, steps + 1), f"prompt {len(r.prompt)}"


def test_freed_blocks_reused_by_a_later_request_leave_earlier_ones_intact(checkpoint, mesh):
    """A request admitted after others' sliding blocks were freed writes into those blocks;
    the earlier requests (whose runner tables still list them) keep HF's output."""
    model, kv = build(checkpoint, mesh)
    rng = random.Random(11)
    blocks = HybridBlocks(2, {SLIDING_GROUP: WINDOW}, rng)
    ps = prompts(3)
    first = [blocks.new(ps[-1], 0), blocks.new(ps[-2], 1)]
    run(model, kv, blocks, first, chunk=MAX_LEN, steps=3, view="stale", sampling=False)
    late = blocks.new(ps[-3], 2)
    run(model, kv, blocks, [late], chunk=MAX_LEN, steps=0, view="stale", sampling=False)
    stale = {b for r in first for b in r.runner[SLIDING_GROUP]} - {
        b for r in first for b in r.tables[SLIDING_GROUP]
    }
    assert stale & set(late.tables[FULL_GROUP] + late.tables[SLIDING_GROUP])
    run(model, kv, blocks, [*first, late], chunk=MAX_LEN, steps=4, view="stale", sampling=False)
    for r in (*first, late):
        assert r.out == hf_greedy(checkpoint.hf, r.prompt, len(r.out)), f"prompt {len(r.prompt)}"


def test_the_window_matters_for_these_prompts(checkpoint):
    """Sanity for the parity tests: without the window (the source Llama) the logits differ."""
    llama = LlamaForCausalLM.from_pretrained(checkpoint.llama, dtype=torch.float32).eval()
    long_prompt = prompts(5)[-1]
    short_prompt = long_prompt[: WINDOW - 1]
    with torch.no_grad():
        for prompt, differs in ((long_prompt, True), (short_prompt, False)):
            ids = torch.tensor([prompt])
            diff = (checkpoint.hf(ids).logits[0, -1] - llama(ids).logits[0, -1]).abs().max()
            assert (float(diff) > 1e-3) == differs, f"len {len(prompt)}: max |diff| {diff}"


def test_without_vllm_hybrid_manager_layers_still_slide(checkpoint, mesh):
    """One full-length group (vLLM's --disable-hybrid-kv-cache-manager): no block is freed and
    the sliding layers still attend within their window."""
    model, kv = build(checkpoint, mesh, hybrid_manager=False)
    assert [layout.sliding_window for layout in kv.layers] == [WINDOW, None, WINDOW, None]
    blocks = HybridBlocks(1, {}, random.Random(2))
    reqs = [blocks.new(p, i) for i, p in enumerate(prompts(8)[-3:])]
    run(model, kv, blocks, reqs, chunk=48, steps=4, view="null", sampling=False)
    for r in reqs:
        assert r.out == hf_greedy(checkpoint.hf, r.prompt, 5), f"prompt {len(r.prompt)}"


def test_page_table_checks_follow_the_window(checkpoint, mesh):
    """Null blocks before the window are fine; a null block inside it is an error."""
    model, kv = build(checkpoint, mesh)
    prompt = prompts(9)[-1][:80]  # positions 0..79; the window of 79 starts at 56 (block 3)
    full = table_row(list(range(1, 6)))[None]
    sliding = table_row([0, 0, 0, 8, 9])[None]  # blocks 0-2 freed
    tokens = torch.tensor([prompt], dtype=torch.int32)

    def call(sliding_table: torch.Tensor) -> Any:
        return model.prefill_forward(
            tokens=tokens,
            page_table=sliding_table,
            kv_cache=kv,
            prompt_lens=[80],
            start_pos=[64],
            page_tables_per_group=[sliding_table, full],
            empty_slots=[0],
        )

    # Chunk 64..79: the first query (64) needs keys from 41 = block 2, so block 2 must be real.
    with pytest.raises(KVCacheError, match=r"KV group 0.*column 2"):
        call(sliding)
    call(table_row([0, 0, 7, 8, 9])[None])
    with pytest.raises(ContractInputError, match="page_tables_per_group must be a list of 2"):
        model.prefill_forward(
            tokens=tokens,
            page_table=full,
            kv_cache=kv,
            prompt_lens=[80],
            start_pos=[64],
            page_tables_per_group=[full],
            empty_slots=[0],
        )


# --- checkpoint and config errors ---------------------------------------------------------------
def test_checkpoint_is_smollm3_with_the_llama_weights(checkpoint):
    config = json.loads((checkpoint.path / "config.json").read_text())
    assert config["model_type"] == "smollm3" and config["no_rope_layers"] == [1] * 4
    assert config["architectures"] == ["ReferenceHybridForCausalLM"]
    assert config["layer_types"] == ["sliding_attention", "full_attention"] * 2
    assert config["use_sliding_window"] is True and config["sliding_window"] == WINDOW
    windows = [layer.self_attn.sliding_window for layer in checkpoint.hf.model.layers]
    assert windows == [WINDOW, None, WINDOW, None]
    src = load_file(str(checkpoint.llama / "model.safetensors"))
    out = load_file(str(checkpoint.path / "model.safetensors"))
    assert set(out) == set(src) and all(torch.equal(out[k], src[k]) for k in src)


def test_make_checkpoint_is_deterministic(checkpoint, tmp_path):
    # Byte for byte: both builds run with the same installed libraries.
    TOOL.build(checkpoint.llama, tmp_path / "again", WINDOW, check=False)
    for name in ("config.json", "model.safetensors", "README.md"):
        assert (tmp_path / "again" / name).read_bytes() == (checkpoint.path / name).read_bytes()


def test_bundled_fixture_is_what_the_script_makes(tmp_path):
    """fixtures/models/tt-reference-hybrid must be regenerated whenever the bundled Llama is."""
    bundled = REPO / "fixtures" / "models" / "tt-reference-hybrid"
    if not bundled.is_dir():
        pytest.skip("fixtures/models/tt-reference-hybrid is not built yet")
    assert TOOL.DEFAULT_SRC.is_dir(), "the hybrid fixture is made from the bundled Llama"
    TOOL.build(TOOL.DEFAULT_SRC, tmp_path / "fresh", TOOL.DEFAULT_SLIDING_WINDOW, check=False)
    # The same files, tensors and fields; not model.safetensors' byte layout, which is the
    # installed safetensors' (tests/checkpoint_files.py).
    assert_same_checkpoint(tmp_path / "fresh", bundled)


def test_make_checkpoint_rejects_bad_sources(checkpoint, tmp_path):
    with pytest.raises(TOOL.CheckpointError, match="model_type='smollm3'"):
        TOOL.build(checkpoint.path, tmp_path / "x", WINDOW, check=False)
    with pytest.raises(TOOL.CheckpointError, match="--sliding-window 1"):
        TOOL.build(checkpoint.llama, tmp_path / "y", 1, check=False)


def test_nonzero_qkv_bias_is_rejected(checkpoint, tmp_path, mesh):
    bad = tmp_path / "biased"
    TOOL.build(checkpoint.llama, bad, WINDOW, check=False)
    tensors = load_file(str(bad / "model.safetensors"))
    # A Qwen2-style checkpoint carries q/k/v biases: a nonzero one is not Llama math.
    bias = torch.zeros(tensors["model.layers.2.self_attn.k_proj.weight"].shape[0])
    bias[3] = 0.5
    tensors["model.layers.2.self_attn.k_proj.bias"] = bias
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(ReferenceModelConfigError, match=r"layers\.2\.self_attn\.k_proj\.bias"):
        ReferenceHybridForCausalLM.initialize_vllm_model(AutoConfig.from_pretrained(bad), mesh, 4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"layer_types": [*UNSUPPORTED_LAYER_TYPES]},
            r"layer_types\[2\]='chunked_attention'",
        ),
        ({"model_type": "llama", "layer_types": None}, "layer_types=None"),
        ({"use_sliding_window": False}, "use_sliding_window=False"),
        ({"sliding_window": None}, "sliding_window=None"),
        ({"no_rope_layers": [1, 1, 1, 0]}, r"no_rope_layers\[3\]=0"),
    ],
    ids=["unknown-type", "llama-without-layer-types", "window-off", "no-window", "nope-layer"],
)
def test_bad_layer_config_names_the_field(checkpoint, mesh, tmp_path, overrides, message):
    raw = {**json.loads((checkpoint.path / "config.json").read_text()), **overrides}
    kept = {k: v for k, v in raw.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(kept))
    config = AutoConfig.from_pretrained(tmp_path)
    with pytest.raises(ReferenceModelConfigError, match=message):
        ReferenceHybridForCausalLM.initialize_vllm_model(config, mesh, 4)


# --- vLLM's view: specs, groups, per-request footprint, TT block budget --------------------------
@pytest.fixture
def hybrid_vllm_config(checkpoint, clean_registry):
    from vllm.engine.arg_utils import EngineArgs

    def make(**engine_args: Any) -> Any:
        args = EngineArgs(
            model=str(checkpoint.path),
            skip_tokenizer_init=True,
            additional_config={"tt": {"emulated_mesh": True, "register_test_models": True}},
            **{"async_scheduling": False, **engine_args},
        )
        return args.create_engine_config()

    return make


def test_kv_cache_spec_per_layer_and_vllm_groups(hybrid_vllm_config):
    from vllm.v1.core import kv_cache_utils

    from vllm_tt_plugin.adapter.kv_cache import layer_specs_for_model

    config = hybrid_vllm_config(max_model_len=MAX_LEN, max_num_seqs=4)
    specs = ReferenceHybridForCausalLM.get_kv_cache_spec(config)
    assert list(specs) == [f"model.layers.{i}.self_attn" for i in range(4)]
    assert [type(s) for s in specs.values()] == [SlidingWindowSpec, FullAttentionSpec] * 2
    block = config.cache_config.block_size
    for spec in specs.values():
        assert (spec.block_size, spec.num_kv_heads, spec.head_size) == (block, 2, 16)
    assert [getattr(s, "sliding_window", None) for s in specs.values()] == [WINDOW, None] * 2

    groups = kv_cache_utils.get_kv_cache_groups(config, dict(specs))
    assert [type(g.kv_cache_spec) for g in groups] == [SlidingWindowSpec, FullAttentionSpec]
    assert [g.layer_names for g in groups] == [
        ["model.layers.0.self_attn", "model.layers.2.self_attn"],
        ["model.layers.1.self_attn", "model.layers.3.self_attn"],
    ]
    # The model groups its layers as vLLM does when it is given vllm_config.
    assert vllm_layer_groups(config, specs) == (SLIDING_GROUP, FULL_GROUP) * 2
    [kv_config] = kv_cache_utils.get_kv_cache_configs(config, [dict(specs)], [1 << 24])
    per_layer = layer_specs_for_model(kv_config, tp_width=1)
    # Several groups: one tensor_idx per kv_cache_tensors entry, shared by its layers.
    shape = (kv_config.num_blocks, 2, block, 16)
    assert [entry.as_tuple() for entry in per_layer] == [
        (shape, torch.bfloat16, 0),
        (shape, torch.bfloat16, 0),
        (shape, torch.bfloat16, 1),
        (shape, torch.bfloat16, 1),
    ]


def test_without_vllm_hybrid_manager_one_group_carries_no_window(hybrid_vllm_config):
    """--disable-hybrid-kv-cache-manager: vLLM merges every layer into one full-attention group
    and the plugin passes sliding_window=None, which the model accepts (see the model test)."""
    from vllm.v1.core import kv_cache_utils

    from vllm_tt_plugin.adapter.kv_cache import layer_specs_for_model

    config = hybrid_vllm_config(
        max_model_len=MAX_LEN, max_num_seqs=4, disable_hybrid_kv_cache_manager=True
    )
    specs = ReferenceHybridForCausalLM.get_kv_cache_spec(config)
    [kv_config] = kv_cache_utils.get_kv_cache_configs(config, [dict(specs)], [1 << 24])
    [group] = kv_config.kv_cache_groups
    assert type(group.kv_cache_spec) is FullAttentionSpec and len(group.layer_names) == 4
    per_layer = layer_specs_for_model(kv_config, tp_width=2)  # 2 KV heads over 2 columns
    assert [entry.as_tuple()[1:] for entry in per_layer] == [(torch.bfloat16, i) for i in range(4)]
    assert {entry.shape[1] for entry in per_layer} == {1}


@pytest.mark.parametrize(
    ("max_model_len", "batched_tokens"), [(4096, 64), (2048, 64), (2048, 256), (MAX_LEN, 128)]
)
def test_per_request_kv_footprint_per_group(hybrid_vllm_config, max_model_len, batched_tokens):
    """vLLM's max_memory_usage_bytes: a full group holds max_model_len per request, a sliding
    group window - 1 tokens plus the tokens in flight (+1 block: the window straddles blocks)."""
    config = hybrid_vllm_config(
        max_model_len=max_model_len, max_num_seqs=4, max_num_batched_tokens=batched_tokens
    )
    specs = ReferenceHybridForCausalLM.get_kv_cache_spec(config)
    full, sliding = specs[layer_name(1)], specs[layer_name(0)]
    block = config.cache_config.block_size
    in_flight = config.max_in_flight_tokens
    assert in_flight == batched_tokens  # no async scheduling, no pipeline parallelism
    full_bytes = full.max_memory_usage_bytes(config)
    sliding_bytes = sliding.max_memory_usage_bytes(config)
    assert full_bytes == math.ceil(max_model_len / block) * full.page_size_bytes
    sliding_blocks = math.ceil(min(WINDOW - 1 + in_flight, max_model_len) / block) + 1
    assert sliding_bytes == sliding_blocks * sliding.page_size_bytes
    ratio = sliding_bytes / full_bytes
    bound = (WINDOW + in_flight + 2 * block) / max_model_len
    assert ratio <= bound, f"sliding/full = {ratio:.4f} > {bound:.4f}"
    if max_model_len == 4096:
        assert ratio == 3 / 64  # 3 of 64 blocks: ~ (window + one 64-token chunk) / 4096


def test_tt_block_budget_adds_sliding_headroom_per_sequence(hybrid_vllm_config):
    config = hybrid_vllm_config(max_model_len=1024, max_num_seqs=4)
    specs = ReferenceHybridForCausalLM.get_kv_cache_spec(config)
    block = config.cache_config.block_size
    assert sliding_windows(specs) == [WINDOW]
    in_flight = config.max_in_flight_tokens
    budget = compute_block_budget(2000, block, 4, sliding_windows(specs), in_flight)
    assert budget.sliding_headroom == 4 * (math.ceil(WINDOW / block) + 1) + math.ceil(
        in_flight / block
    )
    uniform = compute_block_budget(2000, block, 4, [])
    assert budget.num_blocks == uniform.num_blocks + budget.sliding_headroom
