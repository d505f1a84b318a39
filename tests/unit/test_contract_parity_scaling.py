"""The parity checker's work grows linearly with a checkout module's size (rt45h CR05: 200,000
generated module-level assignments took ~25 min, quadratic). Counted, not timed:
benchmarks/contract_parity_scaling.py prints the times.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.unit.test_contract_parity_redteam import ADAPTER, BASE, run
from vllm_tt_plugin.contract import source_import
from vllm_tt_plugin.contract.parity import CheckoutReader, failures
from vllm_tt_plugin.contract.source_hostbound import host_bindings


def _module(size: int) -> str:
    return BASE + "".join(f"_X{i} = {i}\n" for i in range(size))


class _CountingSet(set[str]):
    """A scope's name set that counts the names each union copies."""

    copied = 0

    def __or__(self, other: Iterable[str]) -> _CountingSet:  # type: ignore[override]
        out = _CountingSet(set(self) | set(other))
        _CountingSet.copied += len(out)
        return out

    def __ior__(self, other: Iterable[str]) -> _CountingSet:  # type: ignore[override,misc]
        added = set(other)
        _CountingSet.copied += len(added)
        self.update(added)
        return self


def _names_copied(monkeypatch: pytest.MonkeyPatch, size: int) -> int:
    monkeypatch.setattr(source_import, "set", _CountingSet, raising=False)
    _CountingSet.copied = 0
    source_import.import_time_raises(ast.parse(_module(size)))
    return _CountingSet.copied


def test_reading_a_module_copies_names_linearly(monkeypatch: pytest.MonkeyPatch) -> None:
    """What each statement's expressions may name is a view of the scopes, not a copy of every
    name bound so far (a copy per statement was quadratic)."""
    small, large = _names_copied(monkeypatch, 500), _names_copied(monkeypatch, 2000)
    assert large <= 4.5 * small, (small, large)


def test_a_module_is_walked_once_however_many_bodies_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every driven body asks which names 3.10 leaves unbound; the module is walked once."""
    found = run(tmp_path, {ADAPTER: _module(300)})
    assert failures(list(found.values())) == []
    reader = CheckoutReader(tmp_path)
    module = reader.module("models.demo.tt.generator_vllm")
    assert module is not None
    visits = 0
    walk = ast.iter_child_nodes

    def counted(node: ast.AST) -> Iterable[ast.AST]:
        nonlocal visits
        visits += 1
        return walk(node)

    monkeypatch.setattr(ast, "iter_child_nodes", counted)
    host_bindings(reader, module)
    once = visits
    for _ in range(9):
        host_bindings(reader, module)
    assert once > 300 and visits == once, (once, visits)
