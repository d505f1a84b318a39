"""The rebuilt-checkpoint comparison (tests/checkpoint_files.py) ignores only what a library
writes on its own: a change to anything the building tool controls is still a difference."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.checkpoint_files import assert_same_checkpoint, checkpoint_differences, tool_controlled
from tests.conftest import REPO

QWEN2VL = REPO / "fixtures" / "models" / "tt-reference-qwen2vl"
QWEN2VL_CONFIG = QWEN2VL / "config.json"


def _variant(tmp_path: Path, name: str, change: dict[str, object], nested: str = "") -> Path:
    config = json.loads(QWEN2VL_CONFIG.read_text())
    (config[nested] if nested else config).update(change)
    path = tmp_path / name
    path.mkdir()
    path = path / "config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def test_a_newer_transformers_stamp_is_the_same_checkpoint(tmp_path: Path) -> None:
    restamped = _variant(tmp_path, "a", {"transformers_version": "99.0.0"})
    assert tool_controlled(restamped) == tool_controlled(QWEN2VL_CONFIG)
    nested = _variant(tmp_path, "b", {"transformers_version": "99.0.0"}, "vision_config")
    assert tool_controlled(nested) == tool_controlled(QWEN2VL_CONFIG)
    # What older releases also wrote: where and at which revision the source was read.
    loaded = _variant(tmp_path, "c", {"_name_or_path": "/x", "_commit_hash": "abc"}, "text_config")
    assert tool_controlled(loaded) == tool_controlled(QWEN2VL_CONFIG)


def test_a_field_that_defines_the_model_is_compared(tmp_path: Path) -> None:
    wider = _variant(tmp_path, "a", {"hidden_size": 256}, "text_config")
    assert tool_controlled(wider) != tool_controlled(QWEN2VL_CONFIG)
    deeper = _variant(tmp_path, "b", {"depth": 3}, "vision_config")
    assert tool_controlled(deeper) != tool_controlled(QWEN2VL_CONFIG)
    # A default the library wrote is still compared: readers act on it.
    windowed = _variant(tmp_path, "c", {"max_window_layers": 2}, "text_config")
    assert tool_controlled(windowed) != tool_controlled(QWEN2VL_CONFIG)
    # Load-context keys are dropped from tokenizer_config.json only.
    assert tool_controlled(_variant(tmp_path, "d", {"is_local": True})) != tool_controlled(
        QWEN2VL_CONFIG
    )


def test_the_dtype_is_compared_under_either_name(tmp_path: Path) -> None:
    config = json.loads(QWEN2VL_CONFIG.read_text())
    config["torch_dtype"] = config.pop("dtype")
    old_name = tmp_path / "config.json"
    old_name.write_text(json.dumps(config))
    assert tool_controlled(old_name) == tool_controlled(QWEN2VL_CONFIG)
    config["torch_dtype"] = "bfloat16"
    old_name.write_text(json.dumps(config))
    assert tool_controlled(old_name) != tool_controlled(QWEN2VL_CONFIG)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the bundled Qwen2-VL checkpoint: the same checkpoint, until a test changes it."""
    out = shutil.copytree(QWEN2VL, tmp_path / "copy")
    assert checkpoint_differences(out, QWEN2VL) == []
    return out


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], object], indent: int = 2) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=indent))


def test_what_libraries_write_on_their_own_is_the_same_checkpoint(copy: Path) -> None:
    """A newer transformers' stamps, an online run's tokenizer load context, another tokenizers'
    tokenizer.json layout and another safetensors' file layout."""
    for name in ("config.json", "generation_config.json"):
        _edit_json(copy / name, lambda d: d.update(transformers_version="5.25.0"))
    _edit_json(copy / "tokenizer_config.json", lambda d: d.update(local_files_only=False))
    tokenizer = json.loads((copy / "tokenizer.json").read_text())
    (copy / "tokenizer.json").write_text(json.dumps(dict(reversed(tokenizer.items()))))
    # The same tensors under another header layout (key order, padding).
    weights = copy / "model.safetensors"
    raw = weights.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.dumps(dict(reversed(json.loads(raw[8 : 8 + size]).items())), indent=1).encode()
    header += b" " * (-len(header) % 8)
    weights.write_bytes(len(header).to_bytes(8, "little") + header + raw[8 + size :])
    assert weights.read_bytes() != (QWEN2VL / "model.safetensors").read_bytes()
    assert_same_checkpoint(copy, QWEN2VL)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            lambda d: d["text_config"].update(hidden_size=256),
            "config.json: text_config.hidden_size",
        ),
        (lambda d: d.pop("vision_end_token_id"), "config.json: vision_end_token_id: missing"),
    ],
    ids=["changed-field", "dropped-field"],
)
def test_a_config_change_is_named(copy: Path, change: Any, named: str) -> None:
    _edit_json(copy / "config.json", change)
    with pytest.raises(AssertionError, match=named):
        assert_same_checkpoint(copy, QWEN2VL)


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda t: t["lm_head.weight"][5, 0].add_(1e-6), "lm_head.weight"),
        (lambda t: t["lm_head.weight"][-1].neg_(), "lm_head.weight"),  # a zero row turns -0.0
        (lambda t: t.update(extra=torch.zeros(1)), "extra: not expected"),
        (lambda t: t.update({"lm_head.weight": t["lm_head.weight"].double()}), "lm_head.weight"),
        (lambda t: t.pop("lm_head.weight"), "lm_head.weight: missing"),
    ],
    ids=["value", "sign-of-zero", "extra-tensor", "dtype", "dropped-tensor"],
)
def test_a_weight_change_is_named(copy: Path, edit: Any, named: str) -> None:
    tensors = load_file(str(copy / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(copy / "model.safetensors"), {"format": "pt"})
    with pytest.raises(AssertionError, match=f"model.safetensors: tensors.{named}"):
        assert_same_checkpoint(copy, QWEN2VL)


def test_tokenizer_and_other_file_changes_are_named(copy: Path) -> None:
    tokenizer = copy / "tokenizer.json"
    _edit_json(tokenizer, lambda d: d["added_tokens"][-1].update(content="<|video|>"))
    _edit_json(copy / "tokenizer_config.json", lambda d: d.update(model_max_length=8192))
    readme = copy / "README.md"
    readme.write_bytes(readme.read_bytes().replace(b"seed 0", b"seed 1"))
    (copy / "chat_template.jinja").unlink()
    (copy / "extra.txt").write_text("x")
    found = "\n".join(checkpoint_differences(copy, QWEN2VL))
    for named in (
        "tokenizer.json: added_tokens[10].content: '<|video|>' != '<|video_pad|>'",
        "tokenizer_config.json: model_max_length: 8192 != 4096",
        "README.md: line 6: b'Qwen2-VL vision tower (seed 1;",
        "chat_template.jinja: missing",
        "extra.txt: not a file of",
    ):
        assert named in found, (named, found)
