#!/usr/bin/env python3
"""Train the bundled reference checkpoint `fixtures/models/tt-reference-llama`.

The host-emulated test runs serve this tiny Llama through the real vLLM engine. Conformance checks
(penalties, logit_bias, structured output, min_tokens, stop strings, chat) only show an effect
when the model behaves like a language model, so it is trained, not random: on a synthetic corpus
of repetitions, counting, ordered lists, short stories, Q&A, key: value lines, code-like snippets,
many short always-closed JSON values, and chat turns rendered with the checkpoint's own template.

The corpus itself comes from `reference_corpus.py` beside this file (the chat scheme too).
Everything is deterministic: the corpus comes from `random.Random(seed)`, torch is seeded, runs
with `torch.use_deterministic_algorithms(True)` and a fixed thread count (2 by default; a
different count or CPU kind may change float rounding and so the weights' bytes).

    python tools/train_reference_model.py --out fixtures/models/tt-reference-llama

Needs torch, transformers (5.x), tokenizers and safetensors; no network.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# Run as a script, this file's folder is on sys.path; add it for `python -m` / imports too.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from permute_vocab import permute_checkpoint
from reference_corpus import (
    BOS,
    CHAT_TEMPLATE,
    EOS,
    PAD,
    ROLE_TOKENS,
    SPECIAL_TOKENS,
    documents,
)
from training_schedule import adamw, warmup_cosine

if TYPE_CHECKING:  # heavy imports happen inside the functions, after argument checks
    from tokenizers import Tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM


# --- tokenizer -----------------------------------------------------------------------------------
def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
    )
    # The special tokens are added tokens; strip them from the training text so no merge spans them.
    plain = [t for text in texts for t in _split_special(text)]
    tok.train_from_iterator(plain, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    # Same template transformers builds from add_bos_token=True, so both agree on plain prompts.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1", special_tokens=[(BOS, bos_id)]
    )
    for i, t in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(t) != i:
            raise RuntimeError(f"special token {t} got id {tok.token_to_id(t)}, expected {i}")
    return tok


def _split_special(text: str) -> list[str]:
    parts = [text]
    for t in SPECIAL_TOKENS:
        parts = [p for part in parts for p in part.split(t)]
    return [p for p in parts if p]


# --- model ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6


def build_config(shape: Shape, vocab_size: int) -> LlamaConfig:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=shape.max_position_embeddings,
        rms_norm_eps=shape.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": shape.rope_theta},
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        bos_token_id=SPECIAL_TOKENS.index(BOS),
        eos_token_id=SPECIAL_TOKENS.index(EOS),
        pad_token_id=SPECIAL_TOKENS.index(PAD),
        dtype="float32",
    )


def pack(docs: list[list[int]], seq_len: int, pad_id: int) -> list[list[int]]:
    """Greedy packing of whole documents, so every row starts with BOS at position 0."""
    rows: list[list[int]] = []
    row: list[int] = []
    for d in docs:
        if len(d) > seq_len:
            continue
        if len(row) + len(d) > seq_len:
            rows.append(row + [pad_id] * (seq_len - len(row)))
            row = []
        row += d
    if row:
        rows.append(row + [pad_id] * (seq_len - len(row)))
    return rows


@dataclass(frozen=True)
class TrainArgs:
    out: Path
    steps: int
    batch_size: int
    seq_len: int
    lr: float
    warmup: int
    seed: int
    threads: int
    vocab_size: int
    tokenizer_docs: int
    command: str  # the command line, recorded in the checkpoint's README


def train(args: TrainArgs, shape: Shape) -> dict[str, float]:
    import torch
    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()

    stream = documents(args.seed)
    tok = train_tokenizer([next(stream) for _ in range(args.tokenizer_docs)], args.vocab_size)
    if tok.get_vocab_size() != args.vocab_size:
        raise RuntimeError(f"tokenizer vocab is {tok.get_vocab_size()}, wanted {args.vocab_size}")
    t_tok = time.time() - t0

    need = (args.steps + 8) * args.batch_size  # +8 batches held out for the eval loss
    rows: list[list[int]] = []
    while len(rows) < need:
        texts = [next(stream) for _ in range(20000)]
        ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        rows += pack(ids, args.seq_len, SPECIAL_TOKENS.index(PAD))
    data = torch.tensor(rows[:need], dtype=torch.long)
    eval_data, data = data[: 8 * args.batch_size], data[8 * args.batch_size :]
    n_tokens = int((data != SPECIAL_TOKENS.index(PAD)).sum())
    print(
        f"corpus: {len(data)} rows x {args.seq_len}, {n_tokens} real tokens "
        f"(tokenizer {t_tok:.1f}s, corpus {time.time() - t0 - t_tok:.1f}s)",
        flush=True,
    )

    config = build_config(shape, args.vocab_size)
    model = LlamaForCausalLM(config)
    model.train()
    opt = adamw(model, args.lr)
    lr_at = warmup_cosine(args.lr, args.warmup, args.steps)

    def labels_of(batch: torch.Tensor) -> torch.Tensor:
        return batch.masked_fill(batch == SPECIAL_TOKENS.index(PAD), -100)

    t_train = time.time()
    losses: list[float] = []
    for step in range(args.steps):
        batch = data[step * args.batch_size : (step + 1) * args.batch_size]
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss = model(input_ids=batch, labels=labels_of(batch)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == args.steps - 1:
            print(
                f"step {step:5d} loss {loss.item():.4f} lr {lr_at(step):.2e} "
                f"{time.time() - t_train:6.1f}s",
                flush=True,
            )
    train_seconds = time.time() - t_train

    model.eval()
    with torch.no_grad():
        eval_loss = (
            sum(
                float(model(input_ids=b, labels=labels_of(b)).loss)
                for b in eval_data.split(args.batch_size)
            )
            / 8
        )
    stats = {
        "train_seconds": train_seconds,
        "total_seconds": time.time() - t0,
        "final_loss": sum(losses[-20:]) / len(losses[-20:]),
        "eval_loss": eval_loss,
        "params": float(sum(p.numel() for p in model.parameters())),
        "tokens": float(n_tokens),
    }
    write_checkpoint(args.out, model, config, tok, args, stats)
    # Trained with its special tokens first; shipped with them on top, as Llama 3 has them.
    permute_checkpoint(args.out)
    from tokenizers import Tokenizer

    shipped = Tokenizer.from_file(str(args.out / "tokenizer.json"))
    (args.out / "README.md").write_text(readme(args, stats, shipped), encoding="utf-8")
    return stats


# --- checkpoint files --------------------------------------------------------------------------
def _write_json(path: Path, obj: dict[str, object]) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


CHECKPOINT_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "README.md",
    }
)


def _clear_checkpoint_dir(out: Path) -> None:
    """Empty `out` for rewriting, refusing any folder that holds more than a checkpoint."""
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--out {out} exists and is not a directory")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in CHECKPOINT_FILES)
        if foreign:
            raise SystemExit(f"--out {out} holds files that are not checkpoint files: {foreign}")
        for name in CHECKPOINT_FILES:
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)


def write_checkpoint(
    out: Path,
    model: LlamaForCausalLM,
    config: LlamaConfig,
    tok: Tokenizer,
    args: TrainArgs,
    stats: dict[str, float],
) -> None:
    from safetensors.torch import save_file

    _clear_checkpoint_dir(out)
    cfg = config.to_diff_dict()  # only the fields a Llama config defines, no generic defaults
    cfg["architectures"] = ["ReferenceLlamaForCausalLM"]
    cfg["dtype"] = "float32"
    _write_json(out / "config.json", cfg)
    # Only the token ids: sampling defaults here would be adopted by vLLM as request defaults.
    _write_json(
        out / "generation_config.json",
        {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id},
    )
    tensors = {k: v.detach().contiguous().float() for k, v in model.state_dict().items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "model.safetensors").chmod(0o644)  # safetensors creates it owner-only

    tok.save(str(out / "tokenizer.json"))
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS,
            "eos_token": EOS,
            "pad_token": PAD,
            "extra_special_tokens": ROLE_TOKENS,
            "add_bos_token": True,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": config.max_position_embeddings,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    _write_json(
        out / "special_tokens_map.json",
        {
            "bos_token": BOS,
            "eos_token": EOS,
            "pad_token": PAD,
            "additional_special_tokens": ROLE_TOKENS,
        },
    )


def readme(args: TrainArgs, stats: dict[str, float], tok: Tokenizer) -> str:
    ids = ", ".join(f"`{t}` = {tok.token_to_id(t)}" for t in SPECIAL_TOKENS)
    return f"""# tt-reference-llama

The reference language model that the plugin's host-emulated runs serve (as
`ReferenceLlamaForCausalLM`; transformers loads it as `LlamaForCausalLM`). A tiny Llama: RMSNorm,
default RoPE (theta 10000), GQA (4 query / 2 KV heads), SwiGLU, no biases, untied lm_head;
{int(stats["params"]):,} float32 parameters; a {args.vocab_size}-token byte-level BPE tokenizer.

It is trained from scratch on a synthetic corpus (repetitions, counting, days, months, alphabet,
short stories, Q&A, key: value lines, code-like snippets, short always-closed JSON, chat turns),
so greedy output continues patterns, closes JSON and ends chat answers with EOS, while sampling
still varies (names and words in sentences). `tests/unit/test_reference_checkpoint.py` checks it.

## How it was made

    {args.command}

`tools/train_reference_model.py` (corpus: `tools/reference_corpus.py`) is deterministic: seed
{args.seed}, `torch.use_deterministic_algorithms(True)`, {args.threads} torch threads (another
thread count or CPU kind may change float rounding and so the bytes). {args.steps} steps of
{args.batch_size} x {args.seq_len} tokens, AdamW lr {args.lr} (warm-up, cosine decay); final
training loss {stats["final_loss"]:.3f}, held-out loss {stats["eval_loss"]:.3f}. Training takes
6-10 minutes on an otherwise idle 2-core CPU (0.4-0.6 s a step). The tokenizer is trained with
its special tokens first; `tools/permute_vocab.py` (run by the training tool) then moves them to
the top of the vocabulary, as Llama 3 keeps them, permuting the embedding and lm_head rows and
every id in the configs alike, so the model's text is unchanged and low ids are ordinary text.

## Tokens and chat

Special tokens: {ids}. A plain prompt is encoded with BOS first (tokenizer post-processor).
The chat template renders `<|bos|>`, then per message `<|role|>` + newline + content; system and
user turns end with `<|end|>` + newline, the assistant turn ends with `<|eos|>`, the one eos id
(also in `config.json` and `generation_config.json`), so chat completions stop on their own.
`add_generation_prompt` appends `<|assistant|>` + newline. Other roles raise an error.
`generation_config.json` holds only the bos/eos ids: no sampling defaults for vLLM to adopt.
"""


def parse_args(argv: list[str]) -> tuple[TrainArgs, Shape]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="checkpoint directory to (re)write")
    p.add_argument("--steps", type=int, default=900)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--threads", type=int, default=2, help="torch threads; the shipped weights were made with 2"
    )
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--tokenizer-docs", type=int, default=30000)
    p.add_argument("--hidden-size", type=int, default=Shape.hidden_size)
    p.add_argument("--intermediate-size", type=int, default=Shape.intermediate_size)
    p.add_argument("--layers", type=int, default=Shape.num_hidden_layers)
    p.add_argument("--heads", type=int, default=Shape.num_attention_heads)
    a = p.parse_args(argv)
    positive = ("steps", "batch_size", "seq_len", "threads", "tokenizer_docs", "lr")
    for name in (*positive, "hidden_size", "intermediate_size", "layers", "heads"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    if a.warmup < 0:
        p.error(f"--warmup must not be negative, got {a.warmup}")
    if (
        a.heads % Shape.num_key_value_heads
        or a.hidden_size % a.heads
        or (a.hidden_size // a.heads) % 2
    ):
        p.error(
            f"--heads {a.heads} must be divisible by the 2 KV heads and divide "
            f"--hidden-size {a.hidden_size} into an even head_dim (RoPE rotates pairs)"
        )
    if a.vocab_size <= 256 + len(SPECIAL_TOKENS):
        p.error(f"--vocab-size {a.vocab_size} must exceed the 256 bytes + special tokens")
    shape = Shape(
        hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        head_dim=a.hidden_size // a.heads,
    )
    args = TrainArgs(
        out=a.out,
        steps=a.steps,
        batch_size=a.batch_size,
        seq_len=a.seq_len,
        lr=a.lr,
        warmup=min(a.warmup, a.steps),
        seed=a.seed,
        threads=a.threads,
        vocab_size=a.vocab_size,
        tokenizer_docs=a.tokenizer_docs,
        command=shlex.join(["python", "tools/train_reference_model.py", *argv]),
    )
    return args, shape


def main(argv: list[str] | None = None) -> int:
    args, shape = parse_args(sys.argv[1:] if argv is None else argv)
    stats = train(args, shape)
    print(json.dumps({k: round(v, 4) for k, v in stats.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
