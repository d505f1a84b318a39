"""Outside red team rt46b (/work/notes/rt46b.md, issue 46): a report's ``matrix_cells`` and
``situations`` are held to the harness's matrix and the report's own figures (B1, C1-C4), and
the gate reports situation coverage lost (G1).

The two runs under data/situations are real reports of the suite at harness commit 660b7fa on
the emulated llama server, each serving one of the red team's faults from tests/mutants
(`tools/run_mutants.py --mutant RepetitionPromptDroppedWithLogprobs --mutant
ChunkLateInBlockOffByOne`): run_a's fault failed the penalties matrix check, run_b's the
forward reference. run_b reads partial (its class name holds "Block", so the block-output
probe's skip is not excused: selection._BLOCK_CLASS). pre_matrix_llama.json is the llama
baseline as committed before the matrix existed. Each forgery changes one field the way a hand
would.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tt_conformance import committed
from tt_conformance.cli import gate as gate_cli
from tt_conformance.gate import compare
from tt_conformance.history import HistoryError, add_run
from tt_conformance.matrix import MatrixError, find_reports
from tt_conformance.rederive import inconsistencies
from tt_conformance.report import Report, load_report
from tt_conformance.selection import derive_coverage
from tt_conformance.situation_matrix import CONCERNS
from tt_conformance.situation_record import SERVED_BY, coverage_regressions
from tt_conformance.tiers import derive_tier
from tt_conformance.writers import write_report

DATA = Path(__file__).parent / "data" / "situations"
BASELINES = Path(__file__).resolve().parents[2] / "reports" / "baselines"
# The llama baseline as committed before the situation matrix existed (its harness commit is in
# this repository's history and has no situation_matrix.py).
PRE_MATRIX = DATA / "pre_matrix_llama.json"
PENALTIES = SERVED_BY["penalties"].check
FORWARD = SERVED_BY["forward_reference"].check


def _run(name: str) -> Report:
    return load_report(DATA / f"{name}.json")


def _outcome(report: Report, check: str, outcome: str, reason: str = "") -> Report:
    """The report with one check's outcome changed and its totals and tier restated, as a
    careful forger writes it."""
    checks = tuple(
        c.model_copy(update={"outcome": outcome, "reason": reason}) if c.id == check else c
        for c in report.checks
    )
    changed = report.replace(checks=checks)
    return changed.replace(tier=derive_tier(changed))


def _problems(report: Report, field: str) -> list[str]:
    return [p for p in inconsistencies(report) if p.startswith(f"field '{field}")]


def _head() -> str:
    root = committed.checkout_root()
    if root is None:
        pytest.skip("no git checkout of the harness")
    out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True)
    return out.stdout.decode().strip()


# ----------------------------------------------------------------------------- controls


@pytest.mark.parametrize("name", ["run_a", "run_b"])
def test_real_current_runs_are_consistent(name: str) -> None:
    report = _run(name)
    assert report.matrix_cells is not None and set(report.matrix_cells) == set(SERVED_BY)
    assert inconsistencies(report) == []


@pytest.mark.parametrize("path", sorted(BASELINES.glob("*/*/baseline.json")), ids=str)
def test_committed_baselines_are_consistent(path: Path) -> None:
    assert inconsistencies(load_report(path)) == []


def test_a_baseline_of_a_harness_without_the_matrix_still_reads() -> None:
    report = load_report(PRE_MATRIX)
    assert report.matrix_cells is None and report.situations is None
    assert inconsistencies(report) == []


def test_a_current_run_gated_against_a_baseline_without_cells_stays_ok() -> None:
    """The baseline had no cells and counted no situations: nothing to lose."""
    base, cand = _run("run_a"), _run("run_b")
    assert coverage_regressions(base.replace(matrix_cells=None, situations=None), cand) == []


# ----------------------------------------------------------------------------- item 1


def test_b1_cells_on_a_baseline_whose_harness_predates_the_matrix() -> None:
    """B1: the committed llama baseline (harness commit before situation_matrix.py) with cells
    and counts added."""
    base = load_report(PRE_MATRIX)
    if committed.history_commit(base.versions.harness_commit) is None:
        pytest.skip("the baseline's harness commit is not in this checkout")
    forged = base.replace(matrix_cells={"forward_reference": ("arrival=together",)})
    assert any("predates the situation matrix" in p for p in _problems(forged, "matrix_cells"))
    counted = base.replace(situations={"prefill_start_mid_block": 9})
    assert any("predates the situation counts" in p for p in _problems(counted, "situations"))


@pytest.mark.parametrize(
    ("cells", "words"),
    [
        ({"forward_reference": ("arrival=moon,chunk_start=nowhere,prompt_end=x",)}, "not cells"),
        ({"long_context": ("pos=0",)}, "no such concern"),
        ({"made_up_concern": ("a=1",)}, "no such concern"),
    ],
)
def test_c2_labels_and_concerns_the_matrix_does_not_generate(
    cells: dict[str, tuple[str, ...]], words: str
) -> None:
    report = _run("run_a")
    forged = report.replace(matrix_cells={**(report.matrix_cells or {}), **cells})
    found = _problems(forged, "matrix_cells")
    assert any(words in p for p in found), found


def test_c2b_duplicates_and_more_cells_than_the_matrix_has() -> None:
    report = _run("run_a")
    assert report.matrix_cells is not None
    real = report.matrix_cells["forward_reference"]
    for labels in (real * 50, (real[0],) * 500):
        forged = report.replace(matrix_cells={**report.matrix_cells, "forward_reference": labels})
        found = " ".join(_problems(forged, "matrix_cells.forward_reference"))
        assert "listed twice" in found and "at most 10" in found
        assert f"{len(labels)} cells, the run's own figure forward_reference_matrix_cells" in found


def test_c2b_counts_past_any_run() -> None:
    report = _run("run_a")
    assert report.situations is not None
    for count in (10**12, 2**62, 2**31):
        forged = report.replace(situations={**report.situations, "decode_new_block": count})
        assert any("past any run's count" in p for p in _problems(forged, "situations"))
    named = report.replace(situations={**report.situations, "<b>x</b>": 5})
    assert any("not a situation name" in p for p in _problems(named, "situations"))


def test_c4_penalties_cells_while_the_check_serving_them_was_skipped() -> None:
    report = _run("run_a")
    for reason in ("not exercised: forged", "waived: forged"):
        forged = _outcome(report, PENALTIES, "skip", reason)
        found = _problems(forged, "matrix_cells.penalties")
        assert any("did not run" in p for p in found), found
    gone = report.replace(checks=tuple(c for c in report.checks if c.id != PENALTIES))
    assert any("absent from the run" in p for p in _problems(gone, "matrix_cells.penalties"))


def test_a_passing_matrix_check_lists_every_cell() -> None:
    """A passing check ran its whole matrix before its verdict: part of it is a forgery."""
    report = _outcome(_run("run_a"), PENALTIES, "pass")
    assert inconsistencies(report) == []
    assert report.matrix_cells is not None
    half = report.matrix_cells["penalties"][:10]
    forged = report.replace(matrix_cells={**report.matrix_cells, "penalties": half})
    assert any("10 of the matrix's" in p for p in _problems(forged, "matrix_cells.penalties"))
    # A failing check may have stopped part-way (a server error in a cell).
    failing = _run("run_a")
    assert _problems(failing.replace(matrix_cells={**report.matrix_cells, "penalties": half}),
                     "matrix_cells") == []  # fmt: skip


def test_c3_situations_below_what_the_run_says_its_forward_matrix_created() -> None:
    report = _run("run_a")
    assert report.situations is not None
    zero = dict.fromkeys(report.situations, 0)
    found = _problems(report.replace(situations=zero), "situations")
    assert any("prefill_start_mid_block" in p and "says the forward matrix" in p for p in found)


def test_c2b_history_add_refuses_the_forgery(tmp_path: Path) -> None:
    report = _run("run_a")
    forged = report.replace(situations={**(report.situations or {}), "decode_new_block": 2**62})
    path = write_report(forged, tmp_path / "run").json
    with pytest.raises(HistoryError, match="situations.decode_new_block"):
        add_run(path, tmp_path / "history")


# ----------------------------------------------------------------------------- item 2


def test_c1_missing_cells_of_a_harness_that_records_them() -> None:
    """A current-harness run (its commit is this checkout's HEAD) whose matrix checks passed,
    with matrix_cells dropped: inconsistent, naming each concern."""
    head = _head()
    report = _outcome(_run("run_a"), PENALTIES, "pass")
    current = report.replace(versions=report.versions.model_copy(update={"harness_commit": head}))
    assert _problems(current, "matrix_cells") == []
    dropped = current.replace(matrix_cells=None)
    found = " ".join(_problems(dropped, "matrix_cells"))
    for concern in SERVED_BY:
        assert f"matrix_cells.{concern}': missing" in found
    # The forward matrix's own figure says 10 ran: contradicted on any harness.
    assert "forward_reference_matrix_cells says 10" in found
    unknown = report.replace(matrix_cells=None)
    assert any("figure" in p for p in _problems(unknown, "matrix_cells"))


# ----------------------------------------------------------------------------- item 3


def _gated_pair() -> tuple[Report, Report]:
    """Two real runs made alike: each run's failing check passed (restated), the same model
    class (each run served its own mutant)."""
    base = _outcome(_run("run_a"), PENALTIES, "pass")
    cand = _outcome(_run("run_b"), FORWARD, "pass")
    server = cand.server.model_copy(update={"model_class": base.server.model_class})
    # The served class takes part in the coverage verdict (selection._BLOCK_CLASS): restated.
    cand = cand.replace(server=server)
    cand = cand.replace(coverage=derive_coverage(cand))
    return base, cand.replace(tier=derive_tier(cand))


def test_g1_gate_names_cells_and_situations_the_candidate_lost(tmp_path: Path) -> None:
    base, cand = _gated_pair()
    allowed = frozenset({"plugin"})
    assert compare(base, cand, allowed=allowed).regressions == []
    assert cand.matrix_cells is not None and cand.situations is not None
    lost = cand.replace(
        matrix_cells={k: v for k, v in cand.matrix_cells.items() if k != "penalties"},
        situations={**cand.situations, "device_decode_logprobs": 0},
    )
    assert inconsistencies(lost) == []
    lines = compare(base, lost, allowed=allowed).regressions
    assert any(line.startswith("situation matrix penalties: 0 cells ran") for line in lines)
    assert any(line.startswith("situation device_decode_logprobs: created") for line in lines)
    paths = [write_report(r, tmp_path / n).json for r, n in ((base, "b"), (lost, "c"))]
    args = ["--baseline", str(paths[0]), "--candidate", str(paths[1])]
    assert gate_cli.main([*args, "--allow-difference", "plugin"]) == 1


def test_g1_candidate_that_counted_no_situations() -> None:
    base, cand = _gated_pair()
    lines = coverage_regressions(base, cand.replace(situations=None))
    assert any("the candidate counted no situations" in line for line in lines)


def test_isolation_may_skip_as_not_exercised_after_serving_its_matrix() -> None:
    """Its path claims are concluded after the sampling-fields matrix ran (a real skip of a
    server whose batches took another path); any other skip ran no cell."""
    check = SERVED_BY["sampling_fields"].check
    report = _run("run_a")
    after = _outcome(report, check, "skip", "not exercised: multi-row prefill: none seen")
    assert _problems(after, "matrix_cells") == []
    waived = _outcome(report, check, "skip", "waived: hangs")
    assert any("did not run" in p for p in _problems(waived, "matrix_cells.sampling_fields"))


@pytest.mark.parametrize("concern", sorted(SERVED_BY))
def test_the_checks_named_as_serving_a_concern_record_its_cells(concern: str) -> None:
    """SERVED_BY is the checks' word: the named check records that concern's cells."""
    served = SERVED_BY[concern]
    root = Path(__file__).resolve().parents[2]
    source = (root / served.module_path).read_text()
    test = served.check.partition("::")[2]
    assert f"def {test}(" in source and "tt_record_cell(" in source
    assert concern in {c.name for c in CONCERNS}


def test_b4_an_empty_concern_is_no_record_of_cells() -> None:
    report = _run("run_a")
    forged = report.replace(matrix_cells={**(report.matrix_cells or {}), "penalties": ()})
    assert any("empty" in p for p in _problems(forged, "matrix_cells.penalties"))


def test_c3_situations_dropped_without_the_warning_that_says_why() -> None:
    """The run's own figures count situations: a null count needs the run's warning."""
    report = _run("run_a")
    found = _problems(report.replace(situations=None), "situations")
    assert any("null without the warning" in p for p in found), found
    said = report.replace(situations=None, warnings=("situations not counted: GET failed",))
    assert _problems(said, "situations") == []


# The commit that added the matrix before any check drew cells from it (50e1fa7 in the
# harness's history).
MATRIX_ONLY = "50e1fa7"


def test_cells_of_a_concern_whose_check_recorded_none_at_that_harness_commit() -> None:
    full = committed.history_commit(MATRIX_ONLY)
    if full is None:
        pytest.skip("the harness commit that added the matrix is not in this checkout")
    report = _run("run_a")
    old = report.replace(versions=report.versions.model_copy(update={"harness_commit": full}))
    found = _problems(old, "matrix_cells.penalties")
    assert any("records no cells" in p for p in found), found


def test_a_current_run_against_a_baseline_without_cells_loses_nothing() -> None:
    """A llama baseline of an older harness (no cells, no counts) gates a current run's
    situation coverage OK: the baseline had none."""
    assert coverage_regressions(load_report(PRE_MATRIX), _run("run_b")) == []


def test_c2_the_matrix_pages_refuse_the_forgery(tmp_path: Path) -> None:
    report = _run("run_a")
    cells = {**(report.matrix_cells or {}), "long_context": ("pos=0",)}
    write_report(report.replace(matrix_cells=cells), tmp_path / "run")
    with pytest.raises(MatrixError, match="matrix_cells.long_context"):
        find_reports(tmp_path)
