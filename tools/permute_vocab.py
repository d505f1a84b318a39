#!/usr/bin/env python3
"""Move a checkpoint's special tokens to the top of its vocabulary, as Llama 3 keeps them.

The reference tokenizer is trained with its special tokens first (ids 0-6); black-box suites
written for real Llama-family tokenizers assume low ids are ordinary text. This step renumbers
the vocabulary so that every ordinary token keeps its relative order at the bottom and the
special (added) tokens follow at the top, and applies the same permutation everywhere an id
lives: tokenizer.json (BPE vocab, added tokens, post-processor; merges name tokens by text and
stay valid), config.json and generation_config.json (bos/eos/pad ids) and the embedding and
lm_head rows of model.safetensors (a tied lm_head is the embedding and moves with it). The model
is the same function of text: greedy output for any prompt is unchanged (``--check``).

Idempotent: a vocabulary whose special tokens are already on top is left as it is.

    python tools/permute_vocab.py fixtures/models/tt-reference-llama [--check]

Run by tools/train_reference_model.py after training; the hybrid and LLaVA checkpoints are then
rebuilt from the permuted Llama by their own tools. Needs torch, safetensors (and transformers
for --check); no network.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
# Tensors indexed by token id: rows move with the permutation.
ROW_TENSORS = ("model.embed_tokens.weight", "lm_head.weight")


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _write(path: Path, obj: dict[str, Any], sort_keys: bool) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=sort_keys) + "\n", encoding="utf-8")


def special_order(tokenizer: dict[str, Any], vocab_size: int) -> list[int]:
    """``order[new_id] = old_id``: ordinary ids in order, then the special tokens in id order."""
    special = sorted(t["id"] for t in tokenizer["added_tokens"] if t.get("special"))
    taken = set(special)
    return [i for i in range(vocab_size) if i not in taken] + special


def _remap_ids(obj: dict[str, Any], new_of_old: dict[int, int]) -> dict[str, Any]:
    out = dict(obj)
    for key in ID_KEYS:
        value = out.get(key)
        if isinstance(value, int):
            out[key] = new_of_old[value]
        elif isinstance(value, list):
            out[key] = [new_of_old[v] for v in value]
    return out


def _remap_tokenizer(tokenizer: dict[str, Any], new_of_old: dict[int, int]) -> dict[str, Any]:
    out = json.loads(json.dumps(tokenizer))
    vocab = out["model"]["vocab"]
    out["model"]["vocab"] = dict(
        sorted(((tok, new_of_old[i]) for tok, i in vocab.items()), key=lambda kv: kv[1])
    )
    for token in out["added_tokens"]:
        token["id"] = new_of_old[token["id"]]
    out["added_tokens"].sort(key=lambda t: t["id"])
    post = out.get("post_processor") or {}
    for entry in (post.get("special_tokens") or {}).values():
        entry["ids"] = [new_of_old[i] for i in entry["ids"]]
    return out


def permute_checkpoint(ckpt: Path) -> bool:
    """Rewrite ``ckpt`` in place; False when its special tokens were already on top."""
    config = _read(ckpt / "config.json")
    order = special_order(_read(ckpt / "tokenizer.json"), int(config["vocab_size"]))
    if order == list(range(len(order))):
        return False
    apply_order(ckpt, order)
    return True


def apply_order(ckpt: Path, order: list[int]) -> None:
    """Renumber ``ckpt`` in place so that new id ``i`` is old id ``order[i]``."""
    import torch
    from safetensors.torch import load_file, save_file

    config = _read(ckpt / "config.json")
    tokenizer = _read(ckpt / "tokenizer.json")
    vocab_size = int(config["vocab_size"])
    if sorted(order) != list(range(vocab_size)):
        raise SystemExit(f"not a permutation of the {vocab_size} ids")
    new_of_old = {old: new for new, old in enumerate(order)}
    index = torch.tensor(order)
    tensors = load_file(str(ckpt / "model.safetensors"))
    for name in ROW_TENSORS:
        if name in tensors:
            if tensors[name].shape[0] != vocab_size:
                rows = tensors[name].shape[0]
                raise SystemExit(f"{name} has {rows} rows, but vocab_size is {vocab_size}")
            tensors[name] = tensors[name][index].contiguous()
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    (ckpt / "model.safetensors").chmod(0o644)
    (ckpt / "tokenizer.json").write_text(
        json.dumps(_remap_tokenizer(tokenizer, new_of_old), ensure_ascii=False, indent=2) + "\n",
        encoding="utf-8",
    )
    _write(ckpt / "config.json", _remap_ids(config, new_of_old), sort_keys=True)
    generation = ckpt / "generation_config.json"
    if generation.exists():
        _write(generation, _remap_ids(_read(generation), new_of_old), sort_keys=True)


CHECK_PROMPTS = (
    "Monday, Tuesday,",
    "1 2 3 4 5",
    '{"name": "Ada", "age":',
    "Once upon a time",
)


def greedy_texts(ckpt: Path, new_tokens: int = 24) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "What comes after Monday?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    texts = []
    with torch.no_grad():
        for prompt, specials in [(p, True) for p in CHECK_PROMPTS] + [(chat, False)]:
            ids = tok(prompt, add_special_tokens=specials, return_tensors="pt").input_ids
            out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)
            texts.append(tok.decode(out[0, ids.shape[1] :], skip_special_tokens=False))
    return texts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--check", action="store_true", help="compare greedy text before and after")
    a = p.parse_args(argv)
    before = greedy_texts(a.checkpoint) if a.check else []
    changed = permute_checkpoint(a.checkpoint)
    print(f"{a.checkpoint}: {'special tokens moved to the top' if changed else 'already on top'}")
    if a.check:
        after = greedy_texts(a.checkpoint)
        if before != after:
            raise SystemExit(f"greedy text changed:\n{before}\n{after}")
        print(f"greedy text unchanged for {len(after)} prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
