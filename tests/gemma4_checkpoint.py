"""A Gemma-4-flavoured copy of the bundled reference checkpoint, built in a temp dir: the same
weights with the Gemma 4 chat special tokens appended to the tokenizer (and zero rows appended
to the embedding and lm_head, so the model can read and emit them), plus a Gemma-style chat
template (``<|turn>role\\n...<turn|>``). Used by the parser unit tests (tokenizer) and the
engine test that serves a scripted Gemma 4 chat (tests/engine/scripted_models.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tokenizers import AddedToken, Tokenizer

from tests.conftest import BUNDLED_MODEL

GEMMA4_TOKENS = (
    "<|channel>",
    "<channel|>",
    "<|tool_call>",
    "<tool_call|>",
    '<|"|>',
    "<|turn>",
    "<turn|>",
    "<|tool_response>",
    "<tool_response|>",
)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|turn>"
    "{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n{{ m['content'] or '' }}<turn|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}"
)
_ROWS = ("model.embed_tokens.weight", "lm_head.weight")


def build_gemma4_checkpoint(out: Path, source: Path = BUNDLED_MODEL) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.is_file() and item.name != "README.md":
            shutil.copy2(item, out / item.name)
    tok = Tokenizer.from_file(str(source / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in GEMMA4_TOKENS])
    tok.save(str(out / "tokenizer.json"))
    config = json.loads((source / "config.json").read_text())
    vocab = -(-tok.get_vocab_size(with_added_tokens=True) // 16) * 16
    tensors = load_file(str(source / "model.safetensors"))
    for name in _ROWS:
        if name in tensors:
            weight = tensors[name]
            pad = torch.zeros((vocab - weight.shape[0], weight.shape[1]), dtype=weight.dtype)
            tensors[name] = torch.cat([weight, pad]).contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config["vocab_size"] = vocab
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tok_config = json.loads((source / "tokenizer_config.json").read_text())
    tok_config["chat_template"] = CHAT_TEMPLATE
    extra = [t for t in tok_config.get("extra_special_tokens", []) if t not in GEMMA4_TOKENS]
    tok_config["extra_special_tokens"] = extra + list(GEMMA4_TOKENS)
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
    special_map = out / "special_tokens_map.json"
    if special_map.exists():
        special = json.loads(special_map.read_text())
        extra = [t for t in special.get("additional_special_tokens", []) if t not in GEMMA4_TOKENS]
        special["additional_special_tokens"] = extra + list(GEMMA4_TOKENS)
        special_map.write_text(json.dumps(special, indent=2))
    return out
