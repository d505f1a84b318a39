"""rt46b (issue 46): what an outside red team got through in the second oracle's record
(reports/mutation/second-oracle.json), each now refused on the pages, plus the honest control.

Every entry must be one of plugin.json's not-killed mutants (same name, module, first-oracle
status) and carry the evidence of its verdict; the totals and dates must be the campaign's; the
file must be committed at HEAD; a refused record fails the matrix command."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harnessgit import commit_all, git, harness_checkout
from tests.conformance.test_matrix import _tree
from tests.conformance.test_mutation_score import COMMITTED, TODAY, _write, record
from tests.conformance.test_second_oracle_pages import CHECK, second, tally
from tt_conformance.cli import matrix as matrix_cli
from tt_conformance.formats.html import render_matrix_html
from tt_conformance.formats.markdown import render_matrix_markdown
from tt_conformance.mutation import (
    SECOND_ORACLE,
    MutationRecordError,
    PublishedScore,
    load_mutation_record,
    parse_mutation_record,
    published_score,
)
from tt_conformance.second_oracle import load_second_oracle

# record()'s not_killed: 0 a survivor, 1 and 2 claimed equivalent.
SURVIVOR, EQUIVALENT = 0, 1
GATE = ["tt-conformance gate: REGRESSION (1 found)", "- accuracy top1_agreement: 1.0 -> 0.91"]


def honest(plugin: dict[str, Any]) -> dict[str, Any]:
    """The survivor and one equivalent served, neither killed."""
    return second(plugin, [(SURVIVOR, "not killed"), (EQUIVALENT, "not killed")])


def edit(change: Callable[[dict[str, Any]], None], recount: bool = True) -> Any:
    """A forgery: ``change`` applied to the honest record, its counts restated to agree."""

    def forged(plugin: dict[str, Any]) -> dict[str, Any]:
        data = copy.deepcopy(honest(plugin))
        change(data)
        if recount:
            data.update(tally(data["mutants"]))
        return data

    return forged


def _set(index: int, **fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data["mutants"][index].update(fields)


def _kill(index: int, **fields: Any) -> Callable[[dict[str, Any]], None]:
    return _set(index, verdict="killed", **fields)


def _redate(data: dict[str, Any], when: str) -> None:
    data["date"] = when
    for entry in data["mutants"]:
        entry["date"] = when


FORGERIES = {
    # 1. entries are plugin.json's not-killed mutants, with their module and first oracle
    "A2 invented mutant": (
        edit(_set(0, mutant="vllm_tt_plugin.policy.sampling_route.x_decide_route__mutmut_999")),
        "is not one of the mutation record's not-killed mutants",
    ),
    "A19 module no target": (
        edit(_set(0, mutant="vllm_tt_plugin.nonexistent.x__mutmut_1", module="nonexistent/x.py")),
        "is not one of the mutation record's not-killed mutants",
    ),
    "A17 module not the mutant's": (
        edit(_set(0, module="input_batch.py")),
        "'module' 'input_batch.py' is not the mutation record's",
    ),
    "A21 first oracle rewritten": (
        edit(_set(0, first_oracle="timeout")),
        "'first_oracle' 'timeout' is not the mutation record's ('survived')",
    ),
    "A3 killed without evidence": (
        edit(_kill(0, note="suite and gate passed")),
        "a killed mutant names no failing check and no gate regression",
    ),
    "A3 gate regression line with exit 0": (
        edit(_kill(0, gate=GATE)),
        "a killed mutant names no failing check and no gate regression",
    ),
    "A3 gate line that is no regression": (
        edit(_kill(0, gate=["tt-conformance gate: OK (no regression)"], exit_status=1)),
        "a killed mutant names no failing check and no gate regression",
    ),
    "A3b wrong equivalence relabelled survived": (
        edit(_kill(EQUIVALENT, killed_by=[CHECK], exit_status=1, first_oracle="survived")),
        "'first_oracle' 'survived' is not the mutation record's ('equivalent')",
    ),
    "not killed with a failing run": (
        edit(_set(0, exit_status=1)),
        "a not killed mutant's run exited 1, not 0",
    ),
    "unjudged with no reason": (
        edit(_set(0, verdict="unjudged", exit_status=None, note="")),
        "an unjudged mutant gives no reason",
    ),
    "killed_by not lines": (
        edit(_kill(0, killed_by=[""], exit_status=1)),
        "'killed_by' must be a list of non-empty lines",
    ),
    # 2. the total is plugin.json's
    "A8 total cut to the served": (
        edit(lambda data: data.update(not_killed_by_unit_tests=2)),
        "'not_killed_by_unit_tests' (2) is not the number of not-killed mutants the mutation "
        "record lists (3)",
    ),
    "A20 nothing to judge": (
        edit(lambda data: data.update(mutants=[], not_killed_by_unit_tests=0)),
        "'not_killed_by_unit_tests' (0) is not the number",
    ),
    # 3. dates and times
    "A6b dated before the campaign": (
        edit(lambda data: _redate(data, "2020-01-02")),
        "'date' (2020-01-02) is before the mutation campaign it judges (2026-12-06)",
    ),
    "entry dated before the campaign": (
        edit(_set(0, date="2026-12-01")),
        "mutants[0]: 'date' (2026-12-01) is before the mutation campaign",
    ),
    "A6c entry in the future": (
        edit(_set(0, date="2031-01-01")),
        "mutants[0]: 'date' (2031-01-01) is after the record's date (2026-12-07)",
    ),
    "A12 negative seconds": (edit(_set(0, seconds=-5)), "'seconds' must be a time above 0"),
    "A12 no time": (edit(_set(0, seconds=0)), "'seconds' must be a time above 0"),
    "A12 huge seconds": (edit(_set(0, seconds=1e12)), "'seconds' must be a time above 0"),
    "A12 NaN seconds": (edit(_set(0, seconds=float("nan"))), "'seconds' must be a time above 0"),
}


@pytest.mark.parametrize("name", FORGERIES)
def test_a_forged_second_oracle_record_is_refused_on_the_pages(tmp_path: Path, name: str) -> None:
    forge, message = FORGERIES[name]
    plugin = record()
    path = _write(tmp_path / "plugin.json", plugin)
    _write(tmp_path / SECOND_ORACLE, forge(plugin))
    shown = published_score(path, TODAY)
    assert shown.record is not None  # the score itself stands
    line = shown.second_oracle or ""
    assert line.startswith("Second oracle record refused:") and message in line, line
    assert message in (shown.second_oracle_refused or "")  # the matrix command exits 2


def test_the_honest_record_of_each_verdict_is_published(tmp_path: Path) -> None:
    """The control of the forgeries: the tool's own entries, each verdict with its evidence (a
    gate-only kill with exit 1 and the gate's regression line)."""
    plugin = record()
    path = _write(tmp_path / "plugin.json", plugin)
    data = second(plugin, [(SURVIVOR, "killed"), (EQUIVALENT, "not killed"), (2, "unjudged")])
    data["mutants"][0].update(killed_by=[], gate=GATE, exit_status=1)
    _write(tmp_path / SECOND_ORACLE, data)
    shown = published_score(path, TODAY)
    assert shown.second_oracle_refused is None
    assert shown.second_oracle == (
        "Second oracle (emulated suite + gate), of the 3 mutants the unit tests did not kill: "
        "2 judged (1 killed, 1 not killed), 1 unjudged, 0 not yet served (2026-12-07)"
    )


def test_unjudged_mutants_are_not_called_served_or_judged(tmp_path: Path) -> None:
    """rt46b P2: a run with no verdict is not a served mutant the oracle judged."""
    plugin = record()
    path = _write(tmp_path / "plugin.json", plugin)
    _write(tmp_path / SECOND_ORACLE, second(plugin, [(SURVIVOR, "unjudged")]))
    line = published_score(path, TODAY).second_oracle or ""
    assert "0 judged (0 killed, 0 not killed), 1 unjudged, 2 not yet served" in line
    assert "served," not in line


def test_a_wrong_equivalence_is_said_loudly_on_the_pages(tmp_path: Path) -> None:
    """rt46b A3b/A4: a mutant plugin.json claims equivalent that the suite killed is counted
    from the claim, and the pages say WRONG EQUIVALENCE, naming it."""
    plugin = record()
    path = _write(tmp_path / "plugin.json", plugin)
    _write(tmp_path / SECOND_ORACLE, second(plugin, [(EQUIVALENT, "killed")]))
    shown = published_score(path, TODAY)
    name = plugin["not_killed"][EQUIVALENT]["mutant"].rpartition(".")[2]
    md, page = (render([], "now", mutation=shown) for render in (render_matrix_markdown,
                                                                   render_matrix_html))  # fmt: skip
    assert "WRONG EQUIVALENCE: 1 mutant(s)" in md and name.replace("_", "\\_") in md
    assert "WRONG EQUIVALENCE: 1 mutant(s)" in page and name in page
    hidden = second(plugin, [(EQUIVALENT, "killed")]) | {"wrong equivalences": 0}
    _write(tmp_path / SECOND_ORACLE, hidden)
    assert "'wrong equivalences' (0) is not its entries' (1)" in (
        published_score(path, TODAY).second_oracle_refused or ""
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda nk: nk[2].update(mutant=nk[1]["mutant"]), "twice"),
        (
            lambda nk: nk[0].update(mutant="vllm_tt_plugin.input_batch.x_f__mutmut_1"),
            "is not a mutant of policy/sampling_route.py",
        ),
        (lambda nk: nk[0].pop("mutant"), "'mutant' must be a str"),
    ],
)
def test_the_mutation_record_names_each_not_killed_mutant_once_after_its_module(
    change: Callable[[list[dict[str, Any]]], None], message: str
) -> None:
    """What the second oracle is checked against must itself be unambiguous."""
    forged = record()
    change(forged["not_killed"])
    with pytest.raises(MutationRecordError, match=message):
        parse_mutation_record(forged, TODAY)


def test_only_a_second_oracle_record_committed_at_head_is_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rt46b A22: as plugin.json, the record must be committed unchanged at HEAD unless
    --include-uncommitted."""
    repo = tmp_path / "repo"
    plugin = record() | {"plugin_commit": harness_checkout(repo, monkeypatch)}
    path = _write(repo / "reports" / "mutation" / "plugin.json", plugin)
    honest_record = _write(path.with_name(SECOND_ORACLE), honest(plugin))
    commit_all(repo)
    shown = published_score(path, TODAY, committed_only=True)
    assert shown.second_oracle_refused is None and "2 judged" in (shown.second_oracle or "")
    _write(honest_record, second(plugin, [(SURVIVOR, "killed")]))  # edited, not committed
    refused = published_score(path, TODAY, committed_only=True).second_oracle or ""
    assert "modified in the work tree since its commit (pass --include-uncommitted)" in refused
    assert "1 killed" in (published_score(path, TODAY).second_oracle or "")  # uncommitted shown
    git(repo, "rm", "-q", "--cached", str(honest_record))
    git(repo, "commit", "-qm", "untrack")
    refused = published_score(path, TODAY, committed_only=True).second_oracle or ""
    assert (
        refused.startswith("Second oracle record refused:") and "not committed at HEAD" in refused
    )


def test_a_refused_second_oracle_record_fails_the_matrix_command(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """rt46b A1-rc: the pages are written, saying why, and the command exits 2, as for a refused
    plugin.json: a publishing job must not go green over it."""
    root = _tree(tmp_path, make_report)
    plugin = record()
    _write(root / "mutation" / "plugin.json", plugin)
    _write(root / "mutation" / SECOND_ORACLE, honest(plugin))
    assert matrix_cli.main([str(root), "--include-uncommitted"]) == matrix_cli.EXIT_OK
    assert "2 judged (0 killed, 2 not killed)" in (root / "MATRIX.md").read_text()
    forged = honest(plugin) | {"served": 5}
    _write(root / "mutation" / SECOND_ORACLE, forged)
    code = matrix_cli.main([str(root), "--include-uncommitted", "--replace"])
    assert code == matrix_cli.EXIT_BAD_INPUT
    assert "second oracle record refused" in capsys.readouterr().err
    page = (root / "MATRIX.md").read_text()
    assert "Second oracle record refused:" in page and "| step policy | 4 | 4 |" in page


def test_the_committed_second_oracle_record_is_valid_and_published() -> None:
    """The honest control: the committed record passes every rule, committed at HEAD, and the
    pages show its line, its total the campaign's."""
    campaign = load_mutation_record(COMMITTED)
    assert campaign is not None
    shown: PublishedScore = published_score(COMMITTED, committed_only=True)
    assert shown.record is not None and shown.second_oracle_refused is None
    parsed = load_second_oracle(COMMITTED.with_name(SECOND_ORACLE), campaign.campaign())
    assert parsed is not None and parsed.candidates == len(campaign.not_killed)
    assert shown.second_oracle == parsed.summary()
    data = json.loads(COMMITTED.with_name(SECOND_ORACLE).read_text())
    assert parsed.served == len(data["mutants"]) >= 1
