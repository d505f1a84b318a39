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

Only a commit of the harness's own line of history is a yardstick (`history_commit`): an
ancestor of HEAD. Anyone who can write a report can also put a loose commit in the object store
(``git commit-tree``: a manifest of three modules, bars of their choosing) and record it, and
anyone with the checkout can point a branch or a tag at it (``git branch x <commit>``); such a
commit, or one of an unrelated history, reads as not held (`commit_state` tells the caller
which, for its label).

`head_file` answers another question: is a file of the work tree the one committed at HEAD
(the baseline and expectations a saved gate OK must have judged)? There a file that cannot be
shown committed is refused (NotCommitted, saying why), never taken as it is.
"""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path, PurePath
from typing import Literal

__all__ = [
    "CommitState",
    "NotCommitted",
    "changed_since",
    "checkout_root",
    "commit_state",
    "committed_file",
    "forget_answers",
    "harness_repository",
    "head_file",
    "history_commit",
    "repo_relative",
]

# "history": in the harness's history; "foreign": an object git holds outside it (a loose or
# unrelated commit); "absent": not held here, or not a commit name at all.
CommitState = Literal["history", "foreign", "absent"]

_COMMIT = re.compile(r"[0-9a-f]{7,40}")
# git answers from its local object store; a hung one must not hang a reader.
_GIT_TIMEOUT_S = 10.0


def checkout_root() -> Path | None:
    """The git checkout this harness runs from (None for an installed harness)."""
    root = Path(__file__).resolve().parents[2]
    if (root / ".git").exists() and (root / "conformance").is_dir():
        return root
    return None


def harness_repository() -> Path | None:
    """The work tree of the harness's own repository: the checkout it runs from, else (an
    installed harness: tox builds a wheel) the git work tree it is run in when that holds the
    harness's source, as `tox -e matrix` is run from the repository's root."""
    root = checkout_root()
    if root is not None:
        return root
    top = _git(str(Path.cwd()), "rev-parse", "--show-toplevel")
    if top is None:
        return None
    base = Path(top.decode("utf-8", "replace").strip())
    return base if (base / "conformance" / "tt_conformance").is_dir() else None


def repo_relative(path: Path) -> str:
    """``path`` relative to the checkout when it lies inside it, else as given (absolute)."""
    root = checkout_root()
    resolved = path.resolve()
    if root is not None and resolved.is_relative_to(root):
        return resolved.relative_to(root).as_posix()
    return str(resolved)


def commit_state(commit: str, repository: Path | None = None) -> CommitState:
    """Where ``commit`` (a recorded commit, ``+dirty`` dropped) stands in the git of
    ``repository`` (default: the harness's repository, `harness_repository`)."""
    head = commit.removesuffix("+dirty")
    root = repository if repository is not None else harness_repository()
    if root is None or not _COMMIT.fullmatch(head):
        return "absent"
    return _state(str(root), head)


def history_commit(commit: str) -> str | None:
    """The commit name without ``+dirty`` when it is in the harness's history, else None."""
    return commit.removesuffix("+dirty") if commit_state(commit) == "history" else None


@lru_cache(maxsize=256)
def _state(root: str, commit: str) -> CommitState:
    full = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if full is None:
        return "absent"
    sha = full.decode("ascii", "replace").strip()
    # HEAD's ancestors only: a branch or tag costs one command and vouches for nothing.
    if _git(root, "merge-base", "--is-ancestor", sha, "HEAD") is not None:
        return "history"
    return "foreign"


def forget_answers() -> None:
    """Drop git's answers cached by this process (they assume HEAD does not move while it
    runs; a test that moves it asks again)."""
    _state.cache_clear()
    _shown.cache_clear()


def _git(root: str, *args: str) -> bytes | None:
    """git's output, None when it fails (or cannot run in time)."""
    try:
        done = subprocess.run(
            ["git", "-C", root, *args], capture_output=True, timeout=_GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def committed_file(commit: str, named: str) -> tuple[str, bytes] | None:
    """The repository path and bytes of ``named`` as committed at ``commit`` (a ``+dirty``
    suffix is dropped: the digest the caller checks tells an edited file), or None, also when
    the commit is not in the harness's history."""
    head = history_commit(commit)
    if head is None:
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


def _show(commit: str, path: str) -> bytes | None:
    # The harness's repository, not only a source checkout: `tox -e matrix` / `-e gate` run an
    # installed wheel from the repository's root, and must read its history as the checkout does.
    root = harness_repository()
    if root is None or path.startswith("-"):
        return None
    return _shown(str(root), commit, path)


@lru_cache(maxsize=256)
def _shown(root: str, commit: str, path: str) -> bytes | None:
    return _git(root, "show", f"{commit}:{path}")


class NotCommitted(Exception):
    """A file of the work tree that is not the one committed at HEAD; the message says why."""


def head_file(path: Path) -> bytes | None:
    """The bytes of ``path`` as committed at HEAD of the harness's repository, when the work
    tree holds exactly those; None when neither HEAD nor the work tree has the file. Raises
    NotCommitted, saying why, for a file outside the harness's repository (another git
    repository proves nothing: anyone can commit to one of their own), untracked or only
    staged, or changed or deleted since its commit."""
    resolved = path.resolve()
    exists = resolved.is_file()
    root = harness_repository()
    if root is None or not resolved.is_relative_to(root):
        if not exists:
            return None
        where = "no git checkout of the harness here" if root is None else f"not under {root}"
        raise NotCommitted(f"{path} is not in the harness's git repository ({where})")
    # cat-file blob, not show: a directory at that path is no committed file.
    data = _git(str(root), "cat-file", "blob", f"HEAD:{resolved.relative_to(root).as_posix()}")
    if data is None:
        if not exists:
            return None
        raise NotCommitted(f"{path} is not committed at HEAD of the harness's repository")
    try:
        held = resolved.read_bytes()
    except OSError:
        raise NotCommitted(f"{path} is deleted or unreadable in the work tree") from None
    if held != data:
        raise NotCommitted(f"{path} is modified in the work tree since its commit")
    return data


def changed_since(commit: str, paths: list[str], repository: Path) -> tuple[str, ...] | None:
    """Which of ``paths`` (repository-relative) differ between ``commit`` and the work tree of
    ``repository``; None when git cannot tell."""
    if not _COMMIT.fullmatch(commit):
        return None
    out = _git(str(repository), "diff", "--name-only", commit, "--", *paths)
    return None if out is None else tuple(out.decode("utf-8", "replace").split())
