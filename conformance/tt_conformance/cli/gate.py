"""``tt-conformance-gate``: gate a candidate report against a baseline.

Usage: tt-conformance-gate --baseline B --candidate C [--expectations E]
                           [--default-perf-tolerance T] [--axis NAME ...]
                           [--allow-difference NAME ...]

Exit 0 no regression, 1 regression, 2 bad input (the rules: `tt_conformance.gate`).
Expectations default to ``expectations.json`` next to the baseline when that file exists.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from tt_conformance.baseline import PromoteError, refuse_gate_baseline, same_selection
from tt_conformance.cli.pipes import keeps_verdict
from tt_conformance.expectations import Expectations, ExpectationsError, load_expectations
from tt_conformance.formats.text import render_gate
from tt_conformance.gate import (
    DEFAULT_PERF_TOLERANCE,
    EXIT_BAD_INPUT,
    HARDWARE_PERF_TOLERANCE,
    GateInputError,
    compare,
)
from tt_conformance.identity import AXES, DEFAULT_AXES, unknown_axes
from tt_conformance.paired import ACCURACY_AXIS
from tt_conformance.report import ReportError, load_report

__all__ = ["main"]


@keeps_verdict
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tt-conformance-gate",
        description="Compare a candidate conformance report with a baseline (exit 0 ok, "
        "1 regression, 2 bad input).",
    )
    parser.add_argument("--baseline", required=True, type=Path, help="baseline report JSON")
    parser.add_argument("--candidate", required=True, type=Path, help="candidate report JSON")
    parser.add_argument(
        "--expectations",
        type=Path,
        default=None,
        help="expectations JSON (default: expectations.json next to the baseline, if present)",
    )
    parser.add_argument(
        "--default-perf-tolerance",
        type=float,
        default=DEFAULT_PERF_TOLERANCE,
        help="relative tolerance (e.g. 0.10) for perf figures the expectations give none for "
        f"(default: {HARDWARE_PERF_TOLERANCE * 100:g} %% for a run on TT hardware; none for an "
        "emulated or non-TT run, whose figures are then informational)",
    )
    parser.add_argument(
        "--axis",
        action="append",
        default=[],
        metavar="NAME",
        help="an identity axis under test besides tt_metal and ttnn (e.g. plugin, vllm, "
        f"tt_options.trace_mode); one of: {', '.join(AXES)}",
    )
    parser.add_argument(
        "--allow-difference",
        action="append",
        default=[],
        metavar="NAME",
        help="accept a difference on this identity axis (the verdict lists it); never model, "
        f"weights, model_class, device or mesh_shape; {ACCURACY_AXIS} or {ACCURACY_AXIS}.<task> "
        "accepts an accuracy task scored on other items",
    )
    args = parser.parse_args(argv)
    named = [*args.axis, *(n for n in args.allow_difference if not _is_accuracy(n))]
    bad = unknown_axes(named)
    if bad:
        parser.error(f"unknown identity axis {', '.join(map(repr, bad))}; known: {', '.join(AXES)}")
    try:
        tol = args.default_perf_tolerance
        if tol is not None and (not math.isfinite(tol) or tol < 0):
            raise GateInputError(
                f"--default-perf-tolerance must be a finite number >= 0, got "
                f"{args.default_perf_tolerance}"
            )
        baseline = load_report(args.baseline)
        candidate = load_report(args.candidate)
        exp_path = args.expectations
        if exp_path is None and (args.baseline.parent / "expectations.json").is_file():
            exp_path = args.baseline.parent / "expectations.json"
        expectations = load_expectations(exp_path) if exp_path is not None else None
        # The baseline is held to promote's bar: a hand-made or never-promoted file (aborted,
        # partial, failing what no expectation explains) would pass whatever it failed.
        refuse_gate_baseline(
            baseline,
            args.baseline,
            expectations or Expectations(),
            allow_partial=same_selection(baseline, candidate),
        )
        result = compare(
            baseline,
            candidate,
            expectations,
            args.default_perf_tolerance,
            axes=DEFAULT_AXES | frozenset(args.axis),
            allowed=frozenset(args.allow_difference),
        )
    except (ReportError, ExpectationsError, GateInputError, PromoteError) as exc:
        print(f"tt-conformance-gate: bad input, failing closed: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # The verdict is the first line of the output (a saved output's title is read from it).
    sys.stdout.write(render_gate(result, baseline, candidate, expectations))
    if exp_path is not None:
        print(f"expectations: {exp_path}")
    return result.exit_code


def _is_accuracy(name: str) -> bool:
    axis, dot, task = name.partition(".")
    return axis == ACCURACY_AXIS and (not dot or bool(task))


if __name__ == "__main__":
    sys.exit(main())
