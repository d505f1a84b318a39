"""A throwaway git repository standing in for the harness's own checkout (for tests only).

Publishing trusts a report only when it is committed in the harness's repository at a commit
of that repository's history (cli/matrix.committed_only); tests that publish committed reports
make a repository under tmp_path the harness's checkout for their duration."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tt_conformance import committed


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def harness_checkout(repo: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``repo`` as a new git repository with one commit, made the harness's checkout; the
    commit, for the reports' recorded harness and plugin commits."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q")
    git(repo, "commit", "-q", "--allow-empty", "-m", "harness")
    monkeypatch.setattr(committed, "checkout_root", lambda: repo)
    return git(repo, "rev-parse", "HEAD")


def commit_all(repo: Path, message: str = "runs") -> None:
    git(repo, "add", ".")
    git(repo, "commit", "-qm", message)
