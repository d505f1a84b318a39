"""Files that exist only in a vllm-tt-plugin source checkout, never in the installed wheel.

The wheel holds the ``vllm_tt_plugin`` and ``tt_conformance`` packages only. The import-only
ttnn stub (``host_stubs/``), the bundled reference checkpoints (``fixtures/models/``) and the
test fixtures (``fixtures/tt_metal/``) are repository files: code that defaults to one asks
here, and outside a checkout gets a ``CheckoutFileError`` naming the file and the setting that
replaces it, not a path computed from ``__file__`` that points into site-packages.
Standard library only (``tox -e contract-parity`` imports ``contract_signatures`` without vLLM).
"""

from __future__ import annotations

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
