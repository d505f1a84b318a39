"""An installed harness (`tox -e matrix` / `tox -e gate` build a wheel) run from the harness's
repository reads that repository's history as a source checkout does: the manifest a partial run
is judged by, committed expectations, yardstick commits. Before, only `head_file` looked past the
checkout, so `tox -e matrix` labelled every partial run "cannot be read here" and vouched for no
committed file; run elsewhere, nothing is read (nothing proves the history is the harness's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conformance.harnessgit import commit_all, git
from tt_conformance import committed
from tt_conformance.selection import MANIFEST_PATH

MANIFEST = {"kind": "tt-conformance-suite-manifest", "modules": {"m": []}}


@pytest.fixture
def installed_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A harness repository with a committed manifest, the harness itself installed (no
    checkout beside its modules); returns the repository and its commit."""
    repo = tmp_path / "harness"
    manifest = repo / MANIFEST_PATH
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps(MANIFEST))
    git(repo, "init", "-q")
    commit_all(repo, "harness")
    monkeypatch.setattr(committed, "checkout_root", lambda: None)
    committed.forget_answers()
    yield repo, git(repo, "rev-parse", "HEAD")
    committed.forget_answers()


def test_an_installed_harness_reads_its_repositorys_history_from_its_root(
    installed_in: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, head = installed_in
    monkeypatch.chdir(repo)
    assert committed.commit_state(head) == "history"
    found = committed.committed_file(head, MANIFEST_PATH)
    assert found is not None and json.loads(found[1]) == MANIFEST
    # A recorded path under the repository, as repo_relative writes it, is found there.
    assert committed.committed_file(head, str(repo / MANIFEST_PATH)) == found


def test_run_outside_the_harnesss_repository_nothing_is_vouched_for(
    installed_in: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, head = installed_in
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert committed.commit_state(head) == "absent"
    assert committed.committed_file(head, MANIFEST_PATH) is None
    # Another git repository (not holding the harness's source) is no harness's history.
    git(elsewhere, "init", "-q")
    (elsewhere / "x").write_text("x")
    commit_all(elsewhere, "other")
    committed.forget_answers()
    other = git(elsewhere, "rev-parse", "HEAD")
    assert committed.commit_state(other) == "absent"
