"""Files that exist only in a vllm-tt-plugin source checkout, never in the installed wheel.

The wheel holds the ``vllm_tt_plugin`` and ``tt_conformance`` packages only. The import-only
ttnn stub (``host_stubs/``), the bundled reference checkpoints (``fixtures/models/``) and the
tt-metal skeleton trees (``fixtures/tt_metal/skeletons/``) are repository files: code that
defaults to one asks here, and outside a checkout gets a ``CheckoutFileError`` naming the file
and the setting that replaces it, not a path computed from ``__file__`` that points into
site-packages. (The tt-metal signature data the parity checker needs is package data:
``contract/tt_metal_signatures.json``.)
It also says which commit the plugin was built from (`source_commit`), for ``tt_plugin_info``.
Standard library only (``tox -e contract-parity`` imports it without vLLM).
"""

from __future__ import annotations

import json
import subprocess
from importlib import metadata
from pathlib import Path

# This package's directory: <checkout>/plugin/vllm_tt_plugin, or site-packages/vllm_tt_plugin.
PACKAGE_DIR = Path(__file__).resolve().parents[1]


class CheckoutFileError(FileNotFoundError):
    """A repository-only file was asked for where the plugin does not run from a checkout."""


def checkout_root() -> Path | None:
    """The repository root when the plugin is imported from its source tree (an editable
    install or ``plugin/`` on ``PYTHONPATH``); None for an installed wheel."""
    root = PACKAGE_DIR.parents[1]
    if PACKAGE_DIR.parent.name == "plugin" and (root / "pyproject.toml").is_file():
        return root
    return None


def checkout_path(relative: str, *, what: str, instead: str) -> Path:
    """``<checkout>/relative``; outside a checkout a ``CheckoutFileError`` naming ``what`` is
    missing and ``instead``, the setting a wheel user passes in its place."""
    root = checkout_root()
    if root is None:
        raise CheckoutFileError(
            f"{what} ({relative}) ships only with a vllm-tt-plugin source checkout, and "
            f"vllm_tt_plugin is installed at {PACKAGE_DIR}: {instead}"
        )
    return root / relative


def source_commit() -> str:
    """The commit this plugin was built from: ``git rev-parse HEAD`` of the checkout (with
    ``+dirty`` when tracked files changed), else the VCS commit pip recorded for a wheel
    installed from git (PEP 610 ``direct_url.json``), else ``unknown``. Reports need it: the
    version number stays the same across hundreds of commits."""
    root = checkout_root()
    if root is not None and (root / ".git").exists():
        head = git_output(root, "rev-parse", "HEAD")
        if head:
            dirty = git_output(root, "status", "--porcelain", "--untracked-files=no")
            return head + ("+dirty" if dirty else "")
    return _recorded_vcs_commit() or "unknown"


def git_output(root: Path, *args: str) -> str | None:
    """``git -C root ARGS``'s stripped output, None when git fails or is missing."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _recorded_vcs_commit() -> str | None:
    try:
        text = metadata.distribution("vllm-tt-plugin").read_text("direct_url.json")
        commit = json.loads(text or "{}").get("vcs_info", {}).get("commit_id")
    except (metadata.PackageNotFoundError, ValueError, AttributeError):
        return None
    return str(commit) if commit else None
