"""The second oracle's verdicts on the pages: a line under the mutation score, from
reports/mutation/second-oracle.json beside the record, refused when it contradicts it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conformance.test_mutation_score import TODAY, _write, record
from tt_conformance.formats.html import render_matrix_html
from tt_conformance.formats.markdown import render_matrix_markdown
from tt_conformance.mutation import load_mutation_record, published_score
from tt_conformance.second_oracle import ORACLE, load_second_oracle

REPO = Path(__file__).resolve().parents[2]
CHECK = "tt_conformance/checks/test_sampling.py::test_seeded_sampling_is_reproducible"
# What the tool writes beside each verdict (tools/plugin_second_oracle.py, judge).
NOTES = {
    "killed": "",
    "not killed": "suite and gate passed",
    "unjudged": "no report written (exit 2): the server never served",
}


def entry(plugin: dict[str, Any], index: int, verdict: str) -> dict[str, Any]:
    """The tool's entry for the record's ``index``-th not-killed mutant, judged ``verdict``."""
    listed = plugin["not_killed"][index]
    first = "equivalent" if listed["equivalent_because"] else listed["status"]
    return {
        "mutant": listed["mutant"], "module": listed["module"], "first_oracle": first,
        "verdict": verdict, "killed_by": [CHECK] if verdict == "killed" else [], "gate": [],
        "exit_status": {"killed": 1, "not killed": 0}.get(verdict),
        "seconds": 250.0, "note": NOTES[verdict], "date": "2026-12-07",
    }  # fmt: skip


def second(
    plugin: dict[str, Any], picks: list[tuple[int, str]], commit: str | None = None
) -> dict[str, Any]:
    """A record as the tool writes it, judging the picked (index, verdict) not-killed mutants."""
    mutants = [entry(plugin, index, verdict) for index, verdict in picks]
    return {
        "schema": 1, "oracle": ORACLE, "tool": "mutmut 3.8.1", "date": "2026-12-07",
        "plugin_commit": commit or plugin["plugin_commit"],
        "not_killed_by_unit_tests": len(plugin["not_killed"]),
        **tally(mutants), "mutants": mutants,
    }  # fmt: skip


def tally(mutants: list[dict[str, Any]]) -> dict[str, int]:
    """The record's counts as its entries give them."""
    counts = {v: sum(m["verdict"] == v for m in mutants) for v in ("killed", "not killed")}
    return {
        "served": len(mutants), **counts,
        "unjudged": sum(m["verdict"] == "unjudged" for m in mutants),
        "wrong equivalences": sum(
            m["first_oracle"] == "equivalent" and m["verdict"] == "killed" for m in mutants
        ),
    }  # fmt: skip


def test_the_matrix_says_how_many_not_killed_mutants_the_second_oracle_judged(
    tmp_path: Path,
) -> None:
    plugin = record()
    path = _write(tmp_path / "plugin.json", plugin)
    _write(tmp_path / "second-oracle.json", second(plugin, [(1, "not killed"), (2, "unjudged")]))
    shown = published_score(path, TODAY)
    line = (
        "of the 3 mutants the unit tests did not kill: 1 judged (0 killed, 1 not killed), "
        "1 unjudged, 1 not yet served (2026-12-07)"
    )
    assert line in render_matrix_markdown([], "now", mutation=shown)
    assert line in render_matrix_html([], "now", mutation=shown)
    _write(tmp_path / "second-oracle.json", second(plugin, [(1, "killed")]))
    assert "WRONG EQUIVALENCE: 1 mutant(s)" in (published_score(path, TODAY).second_oracle or "")


def test_a_second_oracle_record_of_another_commit_is_refused_on_the_pages(tmp_path: Path) -> None:
    plugin = record()
    path = _write(tmp_path / "plugin.json", plugin)
    assert published_score(path, TODAY).second_oracle is None  # never ran: no line
    _write(tmp_path / "second-oracle.json", second(plugin, [], "b" * 40))
    md = render_matrix_markdown([], "now", mutation=published_score(path, TODAY))
    assert "Second oracle record refused:" in md and "is not the mutation record's" in md


def test_the_committed_second_oracle_record_is_valid() -> None:
    committed = REPO / "reports" / "mutation"
    campaign = load_mutation_record(committed / "plugin.json")
    assert campaign is not None
    if (committed / "second-oracle.json").is_file():
        parsed = load_second_oracle(committed / "second-oracle.json", campaign.campaign())
        assert parsed is not None and parsed.served >= 1
