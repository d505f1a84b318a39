"""Writing a benchmark's results file so that no failure loses what was measured.

A benchmark writes its JSON after every part it finishes (not once at the end), each time through
the harness's atomic writer (a temp file in the same directory, then ``os.replace``): a later
part that raises, a kill or a full disk leaves the last complete file, never a truncated one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tt_conformance.writers import atomic_write_text


def write_json(path: Path | str, doc: Any, indent: int = 1) -> None:
    """``doc`` as JSON (and a final newline) at ``path``, replaced atomically."""
    text = json.dumps(doc, indent=indent) + "\n"  # before any file is touched: may raise
    atomic_write_text(Path(path), text)
