#!/usr/bin/env python3
"""Measure what the bundled reference checkpoint does where the conformance suite probes it.

    python tools/measure_reference_model.py --checkpoint fixtures/models/tt-reference-llama

With transformers on CPU, greedy, float32, prints:

- repeated patterns (letters, words, digits, phrases; plain prompt with BOS, without BOS, and
  as a chat turn): the greedy continuation, whether it repeats the cycle, and whether presence,
  frequency and repetition penalties (applied to the logits as vLLM's host sampler does) change
  the greedy output;
- the long-context check's 20 passkey prompts (key seed 2023, windows of 1024) and its 4 passage
  copies (254-1016 tokens);
- the held-out corpus loss on 64 packed rows of 256 tokens from a corpus seed no run trains on.

The bundled `tt-patterns` accuracy task is scored by `tools/measure_accuracy_reference.py`.
Deterministic (one torch thread); a few minutes on one core.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "conformance"))

from reference_corpus import PAD, documents  # noqa: E402

from tt_conformance.checks._support import PLAIN_PROMPTS  # noqa: E402
from tt_conformance.longtasks import PASSKEY_FILLER, Passkey, passkey_answer  # noqa: E402

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

# Prompts a penalty check of the common kind would use: a short cycle written out three times.
PATTERNS = (
    "a b c a b c a b c",
    "x y x y x y x y",
    "red blue green red blue green red blue green",
    "cat dog cat dog cat dog",
    "1 2 3 1 2 3 1 2 3",
    "7 4 7 4 7 4 7 4",
    "hello world hello world hello world",
    "yes no maybe yes no maybe yes no maybe",
)
PENALTIES: tuple[dict[str, float], ...] = (
    {"presence_penalty": 1.0},
    {"presence_penalty": 2.0},
    {"frequency_penalty": 1.0},
    {"frequency_penalty": 2.0},
    {"repetition_penalty": 1.3},
    {"repetition_penalty": 2.0},
)
HELD_OUT_SEED = 97531  # no training run draws corpus documents from this seed
PASSKEY_LENGTHS = (254, 509, 763, 1018)  # the check's prompt lengths at max_model_len 1024
COPY_LENGTHS = (254, 508, 762, 1016)
NEEDLE_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Penalties:
    """vLLM's semantics: repetition over prompt and output (divide positive logits, multiply
    negative ones); frequency and presence subtracted over output tokens only."""

    repetition: float = 1.0
    frequency: float = 0.0
    presence: float = 0.0

    @classmethod
    def of(cls, params: dict[str, float]) -> Penalties:
        return cls(
            params.get("repetition_penalty", 1.0),
            params.get("frequency_penalty", 0.0),
            params.get("presence_penalty", 0.0),
        )

    def apply(self, logits: torch.Tensor, prompt: list[int], output: list[int]) -> torch.Tensor:
        import torch

        out = logits.clone()
        if self.repetition != 1.0:
            seen = torch.tensor(sorted(set(prompt) | set(output)), dtype=torch.long)
            vals = out[seen]
            out[seen] = torch.where(vals > 0, vals / self.repetition, vals * self.repetition)
        if output:
            counts = torch.bincount(torch.tensor(output), minlength=out.numel()).to(out.dtype)
            out -= self.frequency * counts + self.presence * (counts > 0).to(out.dtype)
        return out


def greedy(
    model: LlamaForCausalLM, prompt: list[int], n: int, penalties: Penalties | None = None
) -> list[int]:
    """Greedy decoding without EOS stopping (as ``ignore_eos``), penalties on the raw logits."""
    import torch

    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([prompt + out])).logits[0, -1].float()
            if penalties is not None:
                logits = penalties.apply(logits, prompt, out)
            out.append(int(logits.argmax()))
    return out


def cycle_of(prompt: str) -> list[str]:
    """The repeated unit of a pattern prompt (shortest prefix whose repeats give the words)."""
    words = prompt.split()
    for size in range(1, len(words)):
        if all(w == words[i % size] for i, w in enumerate(words)):
            return words[:size]
    return words


def repeats(prompt: str, completion: str) -> bool:
    """Whether the completion's first six words carry the prompt's cycle on."""
    unit, done = cycle_of(prompt), len(prompt.split())
    got = completion.split()[:6]
    want = [unit[(done + i) % len(unit)] for i in range(len(got))]
    return len(got) == 6 and got == want


def pattern_variants(tok: PreTrainedTokenizerFast, text: str) -> dict[str, list[int]]:
    chat = tok.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return {
        "bos": tok(text).input_ids,
        "no-bos": tok(text, add_special_tokens=False).input_ids,
        "chat": tok(chat, add_special_tokens=False).input_ids,
    }


def measure_patterns(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, n: int) -> None:
    repeated = total = changed = probes = 0
    for text in (*PATTERNS, "red green blue red green blue"):
        for kind, ids in pattern_variants(tok, text).items():
            plain = greedy(model, ids, n)
            shown = tok.decode(plain)
            ok = repeats(text, shown)
            total += 1
            repeated += ok and kind != "chat"
            diffs = []
            for params in PENALTIES:
                got = greedy(model, ids, n, Penalties.of(params))
                probes += 1
                changed += got != plain
                diffs.append("D" if got != plain else "=")
            print(
                f"{kind:6s} {text!r:50s} -> {shown!r:45.45s} repeats={ok!s:5s} "
                f"penalties {''.join(diffs)}",
                flush=True,
            )
    plain_total = total * 2 // 3
    print(f"patterns repeated (bos/no-bos): {repeated}/{plain_total}")
    print(f"penalised greedy outputs that differ: {changed}/{probes}", flush=True)


def measure_passkey(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    bare = len(tok(Passkey(10000, 0, 0).prompt).input_ids)
    per_filler = len(tok(PASSKEY_FILLER, add_special_tokens=False).input_ids)
    rng = random.Random(2023)
    found = total = 0
    for n in PASSKEY_LENGTHS:
        fillers = max(0, (n - bare) // per_filler)
        for depth in NEEDLE_DEPTHS:
            before = round(fillers * depth)
            task = Passkey(rng.randint(10000, 99999), before, fillers - before)
            got = passkey_answer(tok.decode(greedy(model, tok(task.prompt).input_ids, 6)))
            total += 1
            found += got == task.key
    print(f"passkey (key seed 2023): {found}/{total}", flush=True)


def measure_copy(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    text = " ".join(PLAIN_PROMPTS)
    rest = tok(" " + text, add_special_tokens=False).input_ids
    stream = tok(text).input_ids[:1]
    while len(stream) < COPY_LENGTHS[-1] + 32:
        stream += rest
    ok = 0
    for n in COPY_LENGTHS:
        out = tok.decode(greedy(model, stream[:n], 8))
        written = tok.decode(stream[n : n + 32])
        ok += bool(out) and written.startswith(out)
    print(f"passage copy at {COPY_LENGTHS[0]}-{COPY_LENGTHS[-1]} tokens: {ok}/4", flush=True)


def measure_loss(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    import torch

    pad = tok.convert_tokens_to_ids(PAD)
    stream = documents(HELD_OUT_SEED)
    rows: list[list[int]] = []
    row: list[int] = []
    while len(rows) < 64:
        doc = tok(next(stream), add_special_tokens=False).input_ids
        if len(row) + len(doc) > 256:
            rows.append(row + [pad] * (256 - len(row)))
            row = []
        row += doc[:256]
    batch = torch.tensor(rows)
    labels = batch.masked_fill(batch == pad, -100)
    with torch.no_grad():
        loss = sum(
            float(model(input_ids=b, labels=lb).loss)
            for b, lb in zip(batch.split(16), labels.split(16), strict=True)
        )
    print(f"held-out corpus loss (seed {HELD_OUT_SEED}): {loss / 4:.3f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=12, help="generated per pattern prompt")
    parser.add_argument("--skip-long", action="store_true", help="patterns and loss only")
    args = parser.parse_args(argv)
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(args.checkpoint)
    model = LlamaForCausalLM.from_pretrained(args.checkpoint).eval()
    measure_patterns(model, tok, args.tokens)
    measure_loss(model, tok)
    if not args.skip_long:
        measure_copy(model, tok)
        measure_passkey(model, tok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
