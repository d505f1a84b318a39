"""Comparing a rebuilt checkpoint with the bundled one by what the building tool controls.

``save_pretrained`` stamps files with the version of the library that wrote them
(``"transformers_version"``, at any depth of a composite config). A rebuild under a newer
transformers must still count as the same checkpoint, so the stamp is left out of the comparison;
every other field, the weights and the tokenizer are compared exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Written by the library on save, not chosen by the tool that builds the checkpoint.
LIBRARY_STAMPS = frozenset({"transformers_version"})


def _without_stamps(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_stamps(v) for k, v in value.items() if k not in LIBRARY_STAMPS}
    if isinstance(value, list):
        return [_without_stamps(item) for item in value]
    return value


def tool_controlled(path: Path) -> Any:
    """A checkpoint file's content as the tool determines it: JSON parsed and without the
    library's version stamps, any other file as its text."""
    if path.suffix == ".json":
        return _without_stamps(json.loads(path.read_text()))
    return path.read_text()
