"""Hardware baselines: promote a run to the baseline of its model and device, find the baseline
a run is gated against, gate a run against it (``--tt-gate``, ``tt-conformance summary --gate``).

``promote`` copies a report to ``<baselines>/<model>/<device>/baseline.json`` and writes (or
extends) ``expectations.json`` next to it with one entry per failing or flaky check of the run.
Their reasons are placeholders (``TODO: ...``); the gate refuses the file, naming the entries,
until a person has written why each check fails on that model and device (Mesa's deqp-runner
model: the failures file is checked in as the next baseline, reviewed).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from tt_conformance.expectations import (
    EXPECTATIONS_KIND,
    EXPECTATIONS_SCHEMA_VERSION,
    PLACEHOLDER_PREFIX,
    Expectations,
    ExpectationsError,
    load_expectations,
)
from tt_conformance.formats.text import render_gate
from tt_conformance.gate import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_REGRESSION,
    GateInputError,
    compare,
)
from tt_conformance.names import path_component
from tt_conformance.report import FAILING, Report, ReportError, load_report
from tt_conformance.writers import atomic_write_text

__all__ = [
    "BASELINE_NAME",
    "EXPECTATIONS_NAME",
    "PromoteError",
    "Promoted",
    "RunGate",
    "baseline_dir",
    "baseline_dir_of",
    "find_baseline",
    "gate_run",
    "placeholder_reason",
    "promote",
]

BASELINE_NAME = "baseline.json"
EXPECTATIONS_NAME = "expectations.json"


class PromoteError(Exception):
    """The run cannot be promoted; the message names the file and the problem."""


@dataclass(frozen=True)
class Promoted:
    baseline: Path
    expectations: Path
    added: tuple[str, ...]  # check ids given a placeholder entry by this promotion
    replaced_run: str | None  # run id of the baseline this one replaced


def baseline_dir(baselines_dir: Path, model: str, device: str, lanes: int = 1) -> Path:
    """<baselines>/<model>/<device>; a lane-DP run (lanes > 1) has its own baseline,
    <device>-lanes<N> (as reports/baselines/<model>/emulated-lanes4), like its own matrix
    column."""
    where = device if lanes <= 1 else f"{device}-lanes{lanes}"
    return baselines_dir / path_component(model) / path_component(where)


def baseline_dir_of(baselines_dir: Path, report: Report) -> Path:
    return baseline_dir(baselines_dir, report.model, report.device, report.server.lanes)


def find_baseline(baselines_dir: Path, report: Report) -> Path | None:
    path = baseline_dir_of(baselines_dir, report) / BASELINE_NAME
    return path if path.is_file() else None


def placeholder_reason(outcome: str, device: str) -> str:
    return f"{PLACEHOLDER_PREFIX}: why is this check {outcome} on {device}? (write it, then gate)"


def promote(report_path: Path, baselines_dir: Path) -> Promoted:
    report = load_report(report_path)
    if not report.checks:
        raise PromoteError(f"{report_path}: the run has no checks; it cannot be a baseline")
    if report.collection_errors:
        first = report.collection_errors[0].nodeid
        raise PromoteError(
            f"{report_path}: the run has {len(report.collection_errors)} collection error(s) "
            f"(first: {first}); fix them before promoting"
        )
    target = baseline_dir_of(baselines_dir, report)
    target.mkdir(parents=True, exist_ok=True)
    baseline = target / BASELINE_NAME
    replaced = load_report(baseline).run_id if baseline.is_file() else None
    exp_path = target / EXPECTATIONS_NAME
    existing = load_expectations(exp_path) if exp_path.is_file() else None
    data, added = _skeleton(report, existing, exp_path)
    # The report first: a crash before the expectations leaves a baseline the gate can still
    # read with the old expectations (or none).
    tmp = baseline.with_suffix(".json.tmp")
    shutil.copyfile(report_path, tmp)
    tmp.replace(baseline)
    atomic_write_text(exp_path, json.dumps(data, indent=2) + "\n")
    return Promoted(baseline, exp_path, tuple(added), replaced)


def _skeleton(
    report: Report, existing: Expectations | None, exp_path: Path
) -> tuple[dict[str, object], list[str]]:
    if existing is not None:
        data = json.loads(exp_path.read_text(encoding="utf-8"))
    else:
        data = {
            "schema_version": EXPECTATIONS_SCHEMA_VERSION,
            "kind": EXPECTATIONS_KIND,
            "model": report.model,
            "device": report.device,
            "expected_failures": [],
            "flaky": [],
        }
    covered = existing or Expectations()
    added: list[str] = []
    for check in sorted(report.checks, key=lambda c: c.id):
        if check.outcome in FAILING or check.outcome == "xfail":
            key = "expected_failures"
            known = covered.expected_failure(check.id) or covered.skip_entry(check.id)
        elif check.outcome == "flaky":
            key = "flaky"
            known = covered.flaky_entry(check.id)
        else:
            continue
        if known is not None:
            continue
        entry: dict[str, str] = {
            "check": check.id,
            "reason": placeholder_reason(check.outcome, report.device),
        }
        if check.reason:
            entry["observed"] = check.reason[:300]
        data.setdefault(key, []).append(entry)
        added.append(check.id)
    return data, added


@dataclass(frozen=True)
class RunGate:
    """The suite's own gate (``--tt-gate``): against the baseline of the run's model/device."""

    exit_code: int
    text: str
    baseline: Path | None


def gate_run(candidate: Report, baselines_dir: Path) -> RunGate:
    path = find_baseline(baselines_dir, candidate)
    if path is None and candidate.aborted is not None:
        return RunGate(
            EXIT_REGRESSION,
            f"the run was ABORTED ({candidate.aborted.reason}): failing the gate (and there is "
            f"no baseline for {candidate.model} on {candidate.device} under {baselines_dir})",
            None,
        )
    if path is None:
        return RunGate(
            EXIT_OK,
            f"no baseline for {candidate.model} on {candidate.device} under {baselines_dir}: "
            "not gated (tt-conformance baseline promote REPORT makes one)",
            None,
        )
    exp_path = path.parent / EXPECTATIONS_NAME
    try:
        baseline = load_report(path)
        expectations = load_expectations(exp_path) if exp_path.is_file() else None
        result = compare(baseline, candidate, expectations)
    except (ReportError, ExpectationsError, GateInputError) as exc:
        return RunGate(EXIT_BAD_INPUT, f"bad input, failing closed: {exc}", path)
    return RunGate(
        result.exit_code, f"baseline: {path}\n" + render_gate(result, baseline, candidate), path
    )
