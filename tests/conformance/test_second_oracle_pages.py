"""The second oracle's verdicts on the pages: a line under the mutation score, from
reports/mutation/second-oracle.json beside the record, refused when it contradicts it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conformance.test_mutation_score import COMMIT, TODAY, _write, record
from tt_conformance.formats.html import render_matrix_html
from tt_conformance.formats.markdown import render_matrix_markdown
from tt_conformance.mutation import published_score
from tt_conformance.second_oracle import ORACLE, load_second_oracle

REPO = Path(__file__).resolve().parents[2]


def second(commit: str, verdicts: list[tuple[str, str]]) -> dict[str, Any]:
    mutants = [
        {"mutant": f"m{i}", "module": "policy/sampling_route.py", "first_oracle": first,
         "verdict": verdict, "killed_by": ["c"] if verdict == "killed" else [], "gate": []}
        for i, (first, verdict) in enumerate(verdicts)
    ]  # fmt: skip
    tally = {v: sum(m["verdict"] == v for m in mutants) for v in ("killed", "not killed")}
    return {
        "schema": 1, "oracle": ORACLE, "date": "2026-12-06", "plugin_commit": commit,
        "not_killed_by_unit_tests": 3, "served": len(mutants), **tally,
        "unjudged": sum(m["verdict"] == "unjudged" for m in mutants),
        "wrong equivalences": sum(
            m["first_oracle"] == "equivalent" and m["verdict"] == "killed" for m in mutants
        ),
        "mutants": mutants,
    }  # fmt: skip


def test_the_matrix_says_how_many_not_killed_mutants_the_second_oracle_judged(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "plugin.json", record())
    _write(tmp_path / "second-oracle.json", second(COMMIT, [("equivalent", "not killed")] * 2))
    shown = published_score(path, TODAY)
    line = "2 of 3 mutants the unit tests did not kill served, 0 killed, 2 not killed, 0 unjudged"
    assert line in render_matrix_markdown([], "now", mutation=shown)
    assert line in render_matrix_html([], "now", mutation=shown)
    _write(tmp_path / "second-oracle.json", second(COMMIT, [("equivalent", "killed")]))
    assert "1 WRONG equivalence claim" in (published_score(path, TODAY).second_oracle or "")


def test_a_second_oracle_record_of_another_commit_is_refused_on_the_pages(tmp_path: Path) -> None:
    path = _write(tmp_path / "plugin.json", record())
    assert published_score(path, TODAY).second_oracle is None  # never ran: no line
    _write(tmp_path / "second-oracle.json", second("b" * 40, []))
    md = render_matrix_markdown([], "now", mutation=published_score(path, TODAY))
    assert "Second oracle record refused:" in md and "is not the mutation record's" in md


def test_the_committed_second_oracle_record_is_valid() -> None:
    committed = REPO / "reports" / "mutation"
    commit = json.loads((committed / "plugin.json").read_text())["plugin_commit"]
    if (committed / "second-oracle.json").is_file():
        parsed = load_second_oracle(committed / "second-oracle.json", commit)
        assert parsed is not None and parsed.served >= 1
