"""Files as committed at a recorded harness commit: a yardstick the report does not control.

A report records the commit its harness ran from (``versions.harness_commit``). When this
harness runs from a git checkout that holds that commit, the files committed there (the
expectations a run was judged by, the suite manifest it was written against) can be read back
with ``git show <commit>:<path>``; a report cannot edit them. Everything here is best effort:
no checkout, no git, an unknown commit or path give None, and the caller says so.

A recorded path may be absolute (reports written before paths were recorded
repository-relative, on another machine's checkout): its trailing parts are tried as
repository paths, longest first. The path only locates the file; callers prove it is the one
the run used by its digest.
"""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path, PurePath

__all__ = ["checkout_root", "committed_file", "repo_relative"]

_COMMIT = re.compile(r"[0-9a-f]{7,40}")
# git answers from its local object store; a hung one must not hang a reader.
_GIT_TIMEOUT_S = 10.0


def checkout_root() -> Path | None:
    """The git checkout this harness runs from (None for an installed harness)."""
    root = Path(__file__).resolve().parents[2]
    if (root / ".git").exists() and (root / "conformance").is_dir():
        return root
    return None


def repo_relative(path: Path) -> str:
    """``path`` relative to the checkout when it lies inside it, else as given (absolute)."""
    root = checkout_root()
    resolved = path.resolve()
    if root is not None and resolved.is_relative_to(root):
        return resolved.relative_to(root).as_posix()
    return str(resolved)


def committed_file(commit: str, named: str) -> tuple[str, bytes] | None:
    """The repository path and bytes of ``named`` as committed at ``commit`` (a ``+dirty``
    suffix is dropped: the digest the caller checks tells an edited file), or None."""
    head = commit.removesuffix("+dirty")
    if checkout_root() is None or not _COMMIT.fullmatch(head):
        return None
    parts = PurePath(named).parts
    if PurePath(named).is_absolute():
        parts = parts[1:]
    for start in range(len(parts)):
        candidate = "/".join(parts[start:])
        data = _show(head, candidate)
        if data is not None:
            return candidate, data
    return None


@lru_cache(maxsize=256)
def _show(commit: str, path: str) -> bytes | None:
    root = checkout_root()
    if root is None or path.startswith("-"):
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "show", f"{commit}:{path}"],
            capture_output=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
