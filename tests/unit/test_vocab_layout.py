"""The bundled tokenizer keeps its special tokens on top of the vocabulary, as Llama 3 does, and
the step that put them there (tools/permute_vocab.py) changes ids, not text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.conftest import BUNDLED_MODEL, REPO
from tests.tool_modules import load_tool

HYBRID = REPO / "fixtures" / "models" / "tt-reference-hybrid"
LLAVA = REPO / "fixtures" / "models" / "tt-reference-llava"


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load_tool("permute_vocab")


def _special_ids(ckpt: Path) -> list[int]:
    tokenizer = json.loads((ckpt / "tokenizer.json").read_text())
    return sorted(t["id"] for t in tokenizer["added_tokens"] if t["special"])


@pytest.mark.parametrize("ckpt", [BUNDLED_MODEL, HYBRID, LLAVA], ids=lambda p: p.name)
def test_special_tokens_are_the_top_ids(ckpt: Path) -> None:
    config = json.loads((ckpt / "config.json").read_text())
    vocab = config.get("text_config", config)["vocab_size"]
    tok = AutoTokenizer.from_pretrained(ckpt)
    special = _special_ids(ckpt)
    assert special == list(range(vocab - len(special), vocab))
    assert {tok.bos_token_id, tok.eos_token_id} <= set(special)
    ordinary = [i for i in range(vocab) if i not in special]
    assert all(tok.decode([i]) for i in ordinary)  # every low id is some text


def test_allowed_token_ids_1_2_3_give_text() -> None:
    """What black-box suites written for Llama-family tokenizers assume (issue 14)."""
    tok = AutoTokenizer.from_pretrained(BUNDLED_MODEL)
    model = AutoModelForCausalLM.from_pretrained(BUNDLED_MODEL, dtype=torch.float32).eval()
    allowed = torch.tensor([1, 2, 3])

    def only_allowed(ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        masked = torch.full_like(scores, float("-inf"))
        masked[:, allowed] = scores[:, allowed]
        return masked

    ids = tok("Hello", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=8, do_sample=False, logits_processor=[only_allowed]
        )
    new = out[0, ids.shape[1] :].tolist()
    assert set(new) <= {1, 2, 3}
    assert tok.decode(new, skip_special_tokens=True).strip()


def test_permuting_the_vocabulary_keeps_the_text(tool: ModuleType, tmp_path: Path) -> None:
    """Rebuild the specials-first layout the tokenizer was trained with, check it speaks the same
    text, then let the tool move the specials back on top: the files come back identical."""
    first = tmp_path / "specials-first"
    shutil.copytree(BUNDLED_MODEL, first)
    vocab = json.loads((first / "config.json").read_text())["vocab_size"]
    special = _special_ids(first)
    tool.apply_order(first, special + [i for i in range(vocab) if i not in special])
    assert _special_ids(first) == list(range(len(special)))
    assert json.loads((first / "config.json").read_text())["bos_token_id"] == 1

    assert tool.greedy_texts(first) == tool.greedy_texts(BUNDLED_MODEL)

    assert tool.permute_checkpoint(first) is True
    assert tool.permute_checkpoint(first) is False  # idempotent
    # Byte for byte: the tool writes these itself (no library serialiser, and the version stamp
    # it carries over is the bundled file's).
    for name in ("tokenizer.json", "config.json", "generation_config.json"):
        assert (first / name).read_bytes() == (BUNDLED_MODEL / name).read_bytes(), name
    got, want = (
        load_file(str(first / "model.safetensors")),
        load_file(str(BUNDLED_MODEL / "model.safetensors")),
    )
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
