"""The situation matrix: deterministic, every value and every pair of values met, bounded, and
malformed axes refused; the forward groups put a prefill cut where their cell says."""

from __future__ import annotations

import itertools

import pytest

from tt_conformance.checks.test_forward_reference import (
    BUDGET,
    GENERATED,
    cut_offset,
    group_for,
)
from tt_conformance.situation_matrix import (
    CONCERNS,
    FORWARD_KV,
    Axis,
    Cell,
    Concern,
    cells,
    product_size,
)


@pytest.mark.parametrize("concern", CONCERNS, ids=lambda c: c.name)
def test_cells_are_deterministic_and_bounded(concern: Concern) -> None:
    first = [c.label for c in cells(concern)]
    assert first == [c.label for c in cells(concern)]
    assert len(set(first)) == len(first), "a cell repeats"
    assert len(first) <= concern.max_cells


@pytest.mark.parametrize("concern", CONCERNS, ids=lambda c: c.name)
def test_every_pair_of_values_is_met(concern: Concern) -> None:
    made = cells(concern)
    for a, b in itertools.combinations(concern.axes, 2):
        met = {(c[a.name], c[b.name]) for c in made}
        wanted = set(itertools.product(a.values, b.values))
        assert wanted <= met, f"{a.name} x {b.name}: never met {sorted(map(str, wanted - met))}"


def test_pairwise_is_smaller_than_the_product() -> None:
    concern = Concern(
        "wide",
        tuple(Axis(f"a{i}", (0, 1, 2)) for i in range(5)),
        strength="pairwise",
        max_cells=30,
    )
    made = cells(concern)
    assert product_size(concern) == 243
    # A pairwise design for five 3-valued axes needs at least 9 rows; greedy stays near it.
    assert 9 <= len(made) <= 15
    for a, b in itertools.combinations(concern.axes, 2):
        assert len({(c[a.name], c[b.name]) for c in made}) == 9


def test_full_strength_is_the_product_in_axis_order() -> None:
    concern = Concern("small", (Axis("x", ("p", "q")), Axis("y", (1, None))), "full", 4)
    assert [c.label for c in cells(concern)] == ["x=p,y=1", "x=p,y=none", "x=q,y=1", "x=q,y=none"]


def test_a_single_axis_gives_each_value_once() -> None:
    concern = Concern("one", (Axis("x", (1, 2, 3)),), "pairwise", 3)
    assert [c["x"] for c in cells(concern)] == [1, 2, 3]


def test_over_budget_is_refused() -> None:
    concern = Concern("big", (Axis("x", (1, 2, 3)), Axis("y", (1, 2, 3))), "pairwise", 8)
    with pytest.raises(ValueError, match="9 cells .* exceed its budget of 8"):
        cells(concern)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Axis("x", ()), "has no values"),
        (lambda: Axis("not an identifier", (1,)), "not an identifier"),
        (lambda: Axis("x", (1, "1")), "repeats a value"),
        (lambda: Concern("c", (), "full", 1), "has no axes"),
        (lambda: Concern("c", (Axis("x", (1,)), Axis("x", (2,))), "full", 1), "repeats an axis"),
        (lambda: Concern("c", (Axis("x", (1,)),), "triple", 1), "unknown strength"),  # type: ignore[arg-type]
    ],
)
def test_malformed_matrix_is_refused(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


def test_a_cell_names_its_axes() -> None:
    cell = Cell("c", (("x", 1), ("y", None)))
    assert cell["y"] is None and cell.label == "x=1,y=none"
    with pytest.raises(KeyError, match="no axis 'z'"):
        cell["z"]


@pytest.mark.parametrize(("block", "cap"), [(64, 1024), (32, 512), (64, 512), (16, 1024)])
def test_forward_groups_cut_where_the_cell_says(block: int, cap: int) -> None:
    for cell in cells(FORWARD_KV):
        group = group_for(cell, block, cap)
        lengths = group.lengths
        assert group.primer == block
        assert max(lengths) + GENERATED <= cap, (cell.label, lengths)
        # The step's budget runs out inside the target: the prefill is cut there.
        assert group.cut == BUDGET - sum(group.companions)
        assert 0 < group.cut < group.target, (cell.label, group)
        assert group.cut % block == cut_offset(str(cell["chunk_start"]), block), (cell.label, group)
        assert (group.cut % block == 0) == (cell["chunk_start"] == "on_block")
        end = group.target % block
        wanted = {"below_block": block - GENERATED // 2, "at_block": 0, "past_block": 1}
        assert end == wanted[str(cell["prompt_end"])] % block, (cell.label, group)
