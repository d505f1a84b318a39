"""The rebuilt-checkpoint comparison ignores only the library's version stamp."""

from __future__ import annotations

import json
from pathlib import Path

from tests.checkpoint_files import tool_controlled
from tests.conftest import REPO

QWEN2VL_CONFIG = REPO / "fixtures" / "models" / "tt-reference-qwen2vl" / "config.json"


def _variant(tmp_path: Path, name: str, change: dict[str, object], nested: str = "") -> Path:
    config = json.loads(QWEN2VL_CONFIG.read_text())
    (config[nested] if nested else config).update(change)
    path = tmp_path / name
    path.write_text(json.dumps(config, indent=2))
    return path


def test_a_newer_transformers_stamp_is_the_same_checkpoint(tmp_path: Path) -> None:
    restamped = _variant(tmp_path, "a.json", {"transformers_version": "99.0.0"})
    assert tool_controlled(restamped) == tool_controlled(QWEN2VL_CONFIG)
    nested = _variant(tmp_path, "b.json", {"transformers_version": "99.0.0"}, "vision_config")
    assert tool_controlled(nested) == tool_controlled(QWEN2VL_CONFIG)


def test_a_field_that_defines_the_model_is_compared(tmp_path: Path) -> None:
    wider = _variant(tmp_path, "a.json", {"hidden_size": 256}, "text_config")
    assert tool_controlled(wider) != tool_controlled(QWEN2VL_CONFIG)
    deeper = _variant(tmp_path, "b.json", {"depth": 3}, "vision_config")
    assert tool_controlled(deeper) != tool_controlled(QWEN2VL_CONFIG)
