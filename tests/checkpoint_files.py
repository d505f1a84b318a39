"""Comparing a rebuilt checkpoint with the bundled one by what the building tool controls.

Some of a checkpoint's content is written by the libraries on their own, whatever the tool asks
for: ``save_pretrained`` stamps config.json and generation_config.json with the transformers
release that wrote them (``transformers_version``, at any depth of a composite config; older
releases also wrote where and at which hub revision the source was read, ``_name_or_path`` and
``_commit_hash``, and named the dtype ``torch_dtype``); a saved tokenizer's init arguments record
how ``from_pretrained`` found its source (``is_local``, and ``local_files_only``, which is true
whenever HF_HUB_OFFLINE is set); and the byte layouts of tokenizer.json and model.safetensors are
those of the installed tokenizers and safetensors serialisers. A rebuild under other releases of
those libraries, or in another environment, must still count as the same checkpoint, so exactly
these are left out. Everything else is compared exactly: every other JSON field (including the
library defaults a config carries, which readers act on), the dtype's value, every tensor's name,
dtype, shape and bytes, the safetensors metadata, the tokenizer's content, and the bytes of every
other file (README, chat template).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any

# Written by transformers into any saved config: which release wrote it, where and at which hub
# revision the source was read. None of them changes what a reader builds.
PROVENANCE = frozenset({"transformers_version", "_name_or_path", "_commit_hash"})
# How the tokenizer's source was loaded (saved with its init arguments), not what it is.
TOKENIZER_LOAD_CONTEXT = frozenset({"is_local", "local_files_only"})


def _without(value: Any, keys: frozenset[str]) -> Any:
    """``value`` without ``keys`` at any depth, and with ``torch_dtype`` under its current name
    ``dtype`` (the value is still compared)."""
    if isinstance(value, dict):
        out = {k: _without(v, keys) for k, v in value.items() if k not in keys}
        if "torch_dtype" in out and "dtype" not in out:
            out["dtype"] = out.pop("torch_dtype")
        return out
    if isinstance(value, list):
        return [_without(item, keys) for item in value]
    return value


def _tensors(path: Path) -> dict[str, Any]:
    """Metadata, and each tensor's dtype, shape and a digest of its bytes (-0.0 and NaN payloads
    included), so a difference names the tensor."""
    import torch
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        metadata = _without(f.metadata() or {}, PROVENANCE)
        tensors = {}
        for name in sorted(f.keys()):
            t = f.get_tensor(name)
            raw = t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
            tensors[name] = (str(t.dtype), tuple(t.shape), hashlib.sha256(raw).hexdigest())
    return {"metadata": metadata, "tensors": tensors}


def tool_controlled(path: Path) -> Any:
    """A checkpoint file's content as the tool determines it, comparable with ``==``: weights by
    tensor, tokenizer.json as the installed tokenizers library reads it, other JSON parsed and
    without the library-written fields above, any other file as its bytes."""
    if path.suffix == ".safetensors":
        return _tensors(path)
    if path.name == "tokenizer.json":
        from tokenizers import Tokenizer

        # Both sides re-serialised by one library: its layout and new defaults cancel out,
        # the vocabulary, merges, added tokens and pipeline do not.
        return json.loads(Tokenizer.from_file(str(path)).to_str())
    if path.suffix == ".json":
        keys = PROVENANCE
        if path.name == "tokenizer_config.json":
            keys |= TOKENIZER_LOAD_CONTEXT
        return _without(json.loads(path.read_text(encoding="utf-8")), keys)
    return path.read_bytes()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _differences(got: Any, want: Any, where: str) -> Iterator[str]:
    """Where ``got`` differs from ``want``: dict keys and the items of equally long lists
    followed, other values shown (bytes by their first differing line)."""
    if isinstance(got, dict) and isinstance(want, dict):
        for key in sorted(got.keys() | want.keys(), key=str):
            inner = f"{where}.{key}" if where else str(key)
            if key not in want:
                yield f"{inner}: not expected"
            elif key not in got:
                yield f"{inner}: missing"
            else:
                yield from _differences(got[key], want[key], inner)
    elif isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            yield from _differences(a, b, f"{where}[{i}]")
    elif isinstance(got, bytes) and isinstance(want, bytes):
        if got != want:
            lines = zip_longest(got.splitlines(keepends=True), want.splitlines(keepends=True))
            line, (a, b) = next((i, ab) for i, ab in enumerate(lines, 1) if ab[0] != ab[1])
            yield f"line {line}: {_short(a)} != {_short(b)}"
    elif got != want:
        yield f"{where or 'content'}: {_short(got)} != {_short(want)}"


def checkpoint_differences(got: Path, want: Path) -> list[str]:
    """What differs between two (flat) checkpoint directories by :func:`tool_controlled`, file by
    file, and which files only one of them has; empty when they are the same checkpoint."""
    names = {p.name for p in got.iterdir()} | {p.name for p in want.iterdir()}
    found = []
    for name in sorted(names):
        if not (want / name).is_file():
            found.append(f"{name}: not a file of {want}")
        elif not (got / name).is_file():
            found.append(f"{name}: missing")
        else:
            diffs = _differences(tool_controlled(got / name), tool_controlled(want / name), "")
            found += [f"{name}: {d}" for d in diffs]
    return found


def assert_same_checkpoint(got: Path, want: Path) -> None:
    """``got`` (rebuilt) is ``want`` (bundled) in everything the building tool controls."""
    differences = checkpoint_differences(got, want)
    more = [f"... and {len(differences) - 20} more"] if len(differences) > 20 else []
    assert not differences, "\n".join(differences[:20] + more)
