"""What a report's ``matrix_cells`` and ``situations`` may say, and what losing them means.

Both sections are the report's word: a hand can list cells no harness generates, counts no run
reaches, or drop the section. Read like every other stored verdict (rederive.py), they are held
to what the harness and the report's own figures give:

- cells: each concern is one the situation matrix defines, each label a cell it generates, none
  twice, at most the concern's ``max_cells``, never an empty list (the collector lists a
  concern only with cells); listed only when the check that serves the
  concern ran (a skip is allowed only where that check skips *after* serving the matrix:
  isolation's "not exercised" path claim); a check that passed ran every cell (the cells are
  recorded before its verdict), so a passing check of a harness that records them, with none
  listed, is inconsistent; the forward matrix's own figure (``forward_reference_matrix_cells``)
  is the number of its cells listed; a concern whose serving check, at a clean harness commit
  of the history, records no cells has none listed;
- situations: counts below 2**31 (a run's rows are thousands), names the plugin's spelling,
  never below the part the forward matrix's figures say the server created (the matrix ran
  inside the run; both are differences of the same monotone counters); null only with the
  run's "situations not counted" warning (or an aborted run) when those figures count some;
- the harness's version: a report whose harness commit is a clean commit of this harness's
  history that predates situation_matrix.py (or situations.py) has no cells (no counts).

Labels are judged against this harness's matrix (a concern changed since would show as foreign
labels: regenerate the report). Whether a check records cells is git's word only for a clean
commit of the history (the check module committed there calls ``tt_record_cell``); for another
report (an unknown commit, or ``+dirty``: uncommitted code ran) a missing section cannot be told
from an older harness, and the gate still reports it against a baseline that has cells.

`coverage_regressions` is the gate's part: fewer cells than the baseline for a concern, or a
situation the baseline created and the candidate did not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from tt_conformance.committed import committed_file, history_commit
from tt_conformance.report import CheckResult, Report
from tt_conformance.situation_matrix import CONCERNS, cells
from tt_conformance.situations import UNCOUNTED
from tt_conformance.ttmetrics import NOT_EXERCISED

__all__ = ["SERVED_BY", "ServedBy", "coverage_regressions", "record_problems"]

# A count no run reaches (a run's rows are thousands): a larger one is forged or corrupt.
MAX_COUNT = 2**31
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_PACKAGE = "conformance/tt_conformance"
MATRIX_PATH = f"{_PACKAGE}/situation_matrix.py"
SITUATIONS_PATH = f"{_PACKAGE}/situations.py"
# The forward matrix's figures: its cell count and the situations it created.
CELLS_FIGURE = "forward_reference_matrix_cells"
_MATRIX_SITUATION = "forward_reference_matrix_"
_RAN = frozenset({"pass", "fail", "error", "xfail", "xpass", "flaky"})
_PASSED = frozenset({"pass", "xpass", "flaky"})


@dataclass(frozen=True)
class ServedBy:
    """The check that serves a concern's matrix, and the skip it may take after serving it."""

    check: str
    skip_after: str | None = None

    @property
    def module_path(self) -> str:
        module = self.check.partition("::")[0]
        return f"conformance/{module.replace('.', '/')}.py"


SERVED_BY: dict[str, ServedBy] = {
    "forward_reference": ServedBy(
        "tt_conformance.checks.test_forward_reference::test_batched_chunked_long_prompts"
    ),
    "penalties": ServedBy("tt_conformance.checks.test_penalties::test_mixed_penalties_match_solo"),
    # Its path claims are concluded after the matrix ran (ttpath.TTPath.conclude).
    "sampling_fields": ServedBy(
        "tt_conformance.checks.test_isolation::test_batched_prefill_rows_match_solo",
        skip_after=NOT_EXERCISED,
    ),
}


@dataclass(frozen=True)
class HarnessVersion:
    """What git says of the report's harness commit (None: it cannot say)."""

    commit: str | None  # a clean commit of this harness's history
    has_matrix: bool | None
    has_situations: bool | None

    def records(self, concern: str) -> bool:
        """Whether that commit's check serving ``concern`` records its cells."""
        served = SERVED_BY.get(concern)
        if self.commit is None or not self.has_matrix or served is None:
            return False
        found = committed_file(self.commit, served.module_path)
        return found is not None and b"tt_record_cell(" in found[1]


def _version(report: Report) -> HarnessVersion:
    recorded = report.versions.harness_commit
    commit = None if recorded.endswith("+dirty") else history_commit(recorded)
    if commit is None:
        return HarnessVersion(None, None, None)
    return HarnessVersion(
        commit,
        committed_file(commit, MATRIX_PATH) is not None,
        committed_file(commit, SITUATIONS_PATH) is not None,
    )


@lru_cache(maxsize=1)
def _generated() -> dict[str, tuple[frozenset[str], int]]:
    return {c.name: (frozenset(cell.label for cell in cells(c)), c.max_cells) for c in CONCERNS}


def _short(labels: list[str]) -> str:
    text = "; ".join(repr(x[:80]) for x in labels[:3])
    return text + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")


def _cell_problems(report: Report, version: HarnessVersion) -> list[str]:
    listed = report.matrix_cells or {}
    if report.matrix_cells is not None and version.has_matrix is False:
        return [
            f"field 'matrix_cells': harness commit {version.commit!s:.12} predates the "
            f"situation matrix ({MATRIX_PATH}): its run records no cells"
        ]
    out: list[str] = []
    generated = _generated()
    outcomes = {c.id: c for c in report.checks}
    for concern, labels in listed.items():
        where = f"field 'matrix_cells.{concern}'"
        if concern not in generated:
            out.append(f"{where}: no such concern in the situation matrix ({sorted(generated)})")
            continue
        known, max_cells = generated[concern]
        if not labels:
            # The collector lists a concern only with the cells that ran.
            out.append(f"{where}: empty (a run lists a concern only with the cells it ran)")
            continue
        if version.has_matrix and concern in SERVED_BY and not version.records(concern):
            out.append(
                f"{where}: the check serving it at harness commit {version.commit!s:.12} "
                "records no cells"
            )
        twice = sorted({x for x in labels if labels.count(x) > 1})
        if twice:
            out.append(f"{where}: listed twice: {_short(twice)}")
        if len(labels) > max_cells:
            out.append(f"{where}: {len(labels)} cells, the concern has at most {max_cells}")
        foreign = sorted(set(labels) - known)
        if foreign:
            out.append(f"{where}: not cells of the matrix: {_short(foreign)}")
        out += _served(concern, labels, known, outcomes, where)
    figure = report.perf.get(CELLS_FIGURE)
    ran = len(listed.get("forward_reference", ()))
    if figure is not None and figure.value != ran:
        out.append(
            f"field 'matrix_cells.forward_reference': {ran} cells, the run's own figure "
            f"{CELLS_FIGURE} says {figure.value:g}"
        )
    for concern, served in SERVED_BY.items():
        check = outcomes.get(served.check)
        if concern in listed or check is None or check.outcome not in _PASSED:
            continue
        if version.records(concern):
            out.append(
                f"field 'matrix_cells.{concern}': missing, though {served.check} passed on a "
                f"harness that records its cells (commit {version.commit!s:.12})"
            )
    return out


def _served(
    concern: str,
    labels: tuple[str, ...],
    known: frozenset[str],
    outcomes: dict[str, CheckResult],
    where: str,
) -> list[str]:
    """The serving check ran (a passing one: every cell) when cells are listed."""
    served = SERVED_BY.get(concern)
    if served is None:
        return []
    check = outcomes.get(served.check)
    outcome = None if check is None else check.outcome
    reason = "" if check is None else check.reason
    after = served.skip_after is not None and reason.startswith(served.skip_after)
    if outcome not in _RAN and not (outcome == "skip" and after):
        state = "absent from the run" if check is None else f"{outcome} ({reason[:80]})"
        return [f"{where}: cells listed, but {served.check} that serves them did not run: {state}"]
    if (outcome in _PASSED or outcome == "skip") and not known <= set(labels):
        return [
            f"{where}: {len(set(labels) & known)} of the matrix's {len(known)} cells, but "
            f"{served.check} {outcome}: it runs every cell before its verdict"
        ]
    return []


def _matrix_situations(report: Report) -> dict[str, float]:
    """What the run's own figures say the forward matrix created, by situation."""
    out = {}
    for name, fig in report.perf.items():
        situation = name.removeprefix(_MATRIX_SITUATION)
        if situation != name and fig.stat == "count" and situation in _SITUATION_FIGURES:
            out[situation] = fig.value
    return out


def _situation_problems(report: Report, version: HarnessVersion) -> list[str]:
    situations, figures = report.situations, _matrix_situations(report)
    if situations is None:
        said = any(w.startswith(UNCOUNTED) for w in report.warnings)
        if figures and not said and report.aborted is None:
            # The server publishes them (the figures count them) and nothing says why the
            # run's own count is missing.
            return [
                f"field 'situations': null without the warning {UNCOUNTED!r}, though the "
                f"run's own figures count situations ({_MATRIX_SITUATION}*)"
            ]
        return []
    if version.has_situations is False:
        return [
            f"field 'situations': harness commit {version.commit!s:.12} predates the situation "
            f"counts ({SITUATIONS_PATH}): its run records none"
        ]
    out = []
    for name, count in situations.items():
        where = f"field 'situations.{name}'"
        if not _NAME.fullmatch(name):
            out.append(f"{where}: not a situation name the plugin writes")
        if count >= MAX_COUNT:
            out.append(f"{where}: {count} is past any run's count (< 2**31)")
    for situation, value in sorted(figures.items()):
        if situations.get(situation, 0) < value:
            out.append(
                f"field 'situations.{situation}': {situations.get(situation, 0)} over the run, "
                f"but the run's own figure {_MATRIX_SITUATION}{situation} says the forward "
                f"matrix alone created {value:g}"
            )
    return out


# The forward matrix's figures that count tt_situations_total (test_forward_reference.py).
_SITUATION_FIGURES = frozenset(
    {"prefill_start_mid_block", "prefill_start_on_block", "decode_new_block"}
)


def record_problems(report: Report) -> list[str]:
    """Every field of ``matrix_cells`` and ``situations`` the harness or the report's own
    figures contradict (rederive.inconsistencies refuses the report over them)."""
    version = _version(report)
    return _cell_problems(report, version) + _situation_problems(report, version)


def coverage_regressions(baseline: Report, candidate: Report) -> list[str]:
    """The gate's lines: a concern with fewer matrix cells than the baseline ran, a situation
    the baseline created that the candidate did not (nothing when the baseline had none)."""
    out = []
    before, after = baseline.matrix_cells or {}, candidate.matrix_cells or {}
    for concern, labels in sorted(before.items()):
        now = after.get(concern, ())
        if len(now) < len(labels):
            lost = sorted(set(labels) - set(now))
            out.append(
                f"situation matrix {concern}: {len(now)} cells ran, the baseline ran "
                f"{len(labels)} (not run now: {_short(lost)})"
            )
    created = {k: v for k, v in (baseline.situations or {}).items() if v > 0}
    for name, count in sorted(created.items()):
        if candidate.situations is None:
            out.append(
                f"situation {name}: created {count} times in the baseline; the candidate "
                "counted no situations"
            )
        elif candidate.situations.get(name, 0) == 0:
            out.append(f"situation {name}: created {count} times in the baseline, not now")
    return out
