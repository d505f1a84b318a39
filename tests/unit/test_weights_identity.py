"""The weights and commit a server reports (tt_plugin_info): reports are keyed by them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from vllm_tt_plugin.utils import checkout
from vllm_tt_plugin.utils.weights_identity import weights_identity


def _folder(root: Path, **files: bytes) -> Path:
    root.mkdir(parents=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


COMMIT = "0e9e39f249a16976918f6564b8830bc894c89659"


def test_a_revision_or_a_hub_snapshot_names_repository_and_commit(tmp_path: Path) -> None:
    assert weights_identity("meta-llama/Llama-3.1-8B", "abc123") == "meta-llama/Llama-3.1-8B@abc123"
    snap = tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B" / "snapshots" / COMMIT
    _folder(snap, **{"config.json": b"{}"})
    assert weights_identity(str(snap)) == f"meta-llama/Llama-3.1-8B@{COMMIT}"
    assert weights_identity(f"{snap}/") == f"meta-llama/Llama-3.1-8B@{COMMIT}"
    assert weights_identity(str(snap), "main") == f"meta-llama/Llama-3.1-8B@{COMMIT}"
    assert weights_identity("org/not-downloaded") == "org/not-downloaded@unresolved"


@pytest.mark.parametrize(
    "named",
    [
        f"models--meta--llama/snapshots/{COMMIT}-retrained",  # rt44c #9: not the snapshot
        f"models--meta--llama/snapshots/{COMMIT}/finetune",  # a folder inside one
        f"my-models--meta--llama/snapshots/{COMMIT}",  # not the cache's own component
        f"models--meta--llama/snapshots/{COMMIT[:12]}",  # the cache names whole commits
        f"models--meta--llama/snapshots/{COMMIT.upper()}",
    ],
)
def test_only_a_whole_snapshot_folder_of_the_hub_cache_reads_as_its_commit(
    tmp_path: Path, named: str
) -> None:
    """rt44c #9: '.../snapshots/<40 hex>-retrained' read as the repository at that commit (the
    pattern was not anchored). A folder that is not a snapshot itself is digested like any
    local folder: its identity follows its bytes."""
    folder = _folder(tmp_path / named, **{"config.json": b"{}"})
    before = weights_identity(str(folder))
    assert before.startswith("sha256:")
    (folder / "config.json").write_bytes(b'{"retrained": true}')
    assert weights_identity(str(folder)) not in (before, f"meta/llama@{COMMIT}")


def test_a_local_folder_is_its_content_whatever_revision_is_given(tmp_path: Path) -> None:
    """rt44c #9: with --revision a local folder was '<path>@<revision>', a pinned-looking name
    that stayed the same when its config.json changed. vLLM loads the folder as it is: its
    identity is its digest, with or without a revision."""
    folder = _folder(tmp_path / "ckpt", **{"config.json": b"{}", "model.safetensors": b"\0" * 64})
    digest = weights_identity(str(folder))
    assert digest.startswith("sha256:")
    assert weights_identity(str(folder), COMMIT) == digest
    (folder / "config.json").write_bytes(b'{"num_hidden_layers": 2}')
    changed = weights_identity(str(folder))
    assert changed != digest and weights_identity(str(folder), COMMIT) == changed
    assert COMMIT not in changed


def test_a_small_folder_is_digested_whole_and_any_byte_changes_it(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", **{"config.json": b"{}", "model.safetensors": b"\x00" * 64})
    b = _folder(tmp_path / "b", **{"config.json": b"{}", "model.safetensors": b"\x00" * 64})
    c = _folder(tmp_path / "c", **{"config.json": b"{}", "model.safetensors": b"\x00" * 63 + b"1"})
    assert weights_identity(str(a)).startswith("sha256:")
    assert weights_identity(str(a)) == weights_identity(str(b))  # where it lives does not count
    assert weights_identity(str(a)) != weights_identity(str(c))


def test_documentation_is_not_part_of_the_weights(tmp_path: Path) -> None:
    served = {"config.json": b"{}", "model.safetensors": b"\x00" * 64, "merges.txt": b"a b"}
    bare = _folder(tmp_path / "bare", **served)
    documented = _folder(
        tmp_path / "documented",
        **served,
        **{"README.md": b"# card", "LICENSE": b"MIT", ".gitattributes": b"* -text"},
    )
    assert weights_identity(str(bare)) == weights_identity(str(documented))
    # A tokenizer file is read by the loader: it counts.
    retokenized = _folder(tmp_path / "retokenized", **{**served, "merges.txt": b"a c"})
    assert weights_identity(str(bare)) != weights_identity(str(retokenized))


def test_a_large_folder_is_fingerprinted_by_config_and_shard_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_tt_plugin.utils import weights_identity as module

    monkeypatch.setattr(module, "FULL_DIGEST_BYTES", 10)
    a = _folder(tmp_path / "a", **{"config.json": b"{}", "m.safetensors": b"\x00" * 64})
    same_size = _folder(tmp_path / "b", **{"config.json": b"{}", "m.safetensors": b"\x01" * 64})
    other_config = _folder(tmp_path / "c", **{"config.json": b"{ }", "m.safetensors": b"\x00" * 64})
    assert weights_identity(str(a)).startswith("files-sha256:")
    assert weights_identity(str(a)) == weights_identity(str(same_size))  # documented limit
    assert weights_identity(str(a)) != weights_identity(str(other_config))


def test_the_source_commit_is_the_checkout_head() -> None:
    root = checkout.checkout_root()
    assert root is not None
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert checkout.source_commit().removesuffix("+dirty") == head


def test_outside_a_checkout_the_commit_pip_recorded_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Dist:
        def read_text(self, name: str) -> str:
            assert name == "direct_url.json"
            return json.dumps(
                {"url": "git+https://x", "vcs_info": {"vcs": "git", "commit_id": "f00"}}
            )

    monkeypatch.setattr(checkout, "checkout_root", lambda: None)
    monkeypatch.setattr(checkout.metadata, "distribution", lambda name: Dist())
    assert checkout.source_commit() == "f00"
    monkeypatch.setattr(
        checkout.metadata,
        "distribution",
        lambda name: type("D", (), {"read_text": lambda self, n: None})(),
    )
    assert checkout.source_commit() == "unknown"
