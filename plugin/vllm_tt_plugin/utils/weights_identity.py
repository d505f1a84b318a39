"""Which weights a server serves, as one string a report can key on (``tt_plugin_info``).

- ``<repository>@<commit>`` when the model path is a Hugging Face cache snapshot, the whole
  path ending in ``.../models--<org>--<name>/snapshots/<40 hex>`` (``.../<40 hex>-retrained``
  is a folder of someone's own: digested below);
- for a local model folder, its content, whatever ``--revision`` says (vLLM loads a local
  folder as it is: the revision names no bytes of it, so it is not recorded):
  ``sha256:<hex>`` of every file up to ``FULL_DIGEST_BYTES`` in total
  (the bundled checkpoints, small models), but its documentation (``*.md``, README, LICENSE,
  NOTICE, dot files), which no loader reads: editing a model card changes no weights;
- ``files-sha256:<hex>`` for a larger local folder: its config and index files' bytes plus the
  name and size of every weight file (reading 140 GB at start-up is not an option; a changed
  shard keeps its size only by coincidence, and the config and index usually change too);
- ``<repository>@<revision>`` for a hub id vLLM was given ``--revision`` for;
- ``<repository>@unresolved`` for a hub id with no revision (the hub's head at load time).
Standard library only.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

__all__ = ["FULL_DIGEST_BYTES", "weights_identity"]

FULL_DIGEST_BYTES = 256 * 1024 * 1024
# Whole path components, to the very end (\Z: `$` would also take a trailing newline): the
# hub cache names a snapshot folder by the repository's full commit and nothing else.
_SNAPSHOT = re.compile(
    r"(?:^|/)models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<rev>[0-9a-f]{40})\Z"
)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
_DIGEST_HEX = 16
_DOC_STEMS = ("README", "LICENSE", "NOTICE", "USE_POLICY")


def _served(path: Path) -> bool:
    """A file a loader may read (config, weights, tokenizer, templates), not documentation."""
    name = path.name
    return not (
        name.startswith(".") or path.suffix.lower() == ".md" or name.upper().startswith(_DOC_STEMS)
    )


def weights_identity(model: str, revision: str | None = None) -> str:
    snapshot = _SNAPSHOT.search(Path(model).as_posix())
    if snapshot is not None:
        return f"{snapshot['org']}/{snapshot['name']}@{snapshot['rev']}"
    folder = Path(model)
    if not folder.is_dir():
        # A hub id: what the hub serves under that revision (a branch or tag names no content;
        # the report's reader judges that, conformance identity.weights_pinned).
        return f"{model}@{revision or 'unresolved'}"
    files = sorted(p for p in folder.rglob("*") if p.is_file() and _served(p))
    total = sum(p.stat().st_size for p in files)
    digest = hashlib.sha256()
    if total <= FULL_DIGEST_BYTES:
        for path in files:
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
        return f"sha256:{digest.hexdigest()[:_DIGEST_HEX]}"
    for path in files:
        name = path.relative_to(folder).as_posix()
        if path.suffix in _WEIGHT_SUFFIXES:
            digest.update(f"{name}\0{path.stat().st_size}\0".encode())
        elif path.suffix == ".json":
            digest.update(name.encode() + b"\0" + path.read_bytes())
    return f"files-sha256:{digest.hexdigest()[:_DIGEST_HEX]}"
