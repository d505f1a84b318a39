"""``pytest tests/tt -v --tt-server-url=URL --tt-model-name=NAME``: the conformance suite against
a running server, as the product spec writes it.

Thin on purpose: nothing here but the collection of the installed ``tt_conformance.checks``
modules (the same modules, under the same module names and so the same check ids, baselines and
expectations as ``tox -e hw``, which runs ``pytest --pyargs tt_conformance.checks``). Options,
fixtures, reports and xdist handling all come from the ``tt_conformance`` pytest plugin.
Without a server URL (``--tt-server-url`` or ``TT_SERVER_URL``) every check is skipped, naming
the option, so ``pytest tests/`` on a host without a server stays green.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tt_conformance.checks

CHECKS_DIR = Path(tt_conformance.checks.__file__).resolve().parent
SUITE_FILE = Path(__file__).with_name("SUITE")


class CheckSuite(pytest.File):
    """tests/tt/SUITE stands for the whole check package: one Module per check file, imported
    under its package name (tt_conformance.checks.test_*), as --pyargs would."""

    def collect(self) -> list[pytest.Module]:
        return [
            pytest.Module.from_parent(self, path=path)
            for path in sorted(CHECKS_DIR.glob("test_*.py"))
        ]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> CheckSuite | None:
    return CheckSuite.from_parent(parent, path=file_path) if file_path == SUITE_FILE else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("tt_server_url", None) or os.environ.get("TT_SERVER_URL"):
        return
    skip = pytest.mark.skip(reason="no server: pass --tt-server-url URL (or set TT_SERVER_URL)")
    for item in items:
        if CHECKS_DIR in Path(item.path).resolve().parents:
            item.add_marker(skip)
