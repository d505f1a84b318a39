"""``tt-conformance``: report tools.

    tt-conformance import-bench RESULT.json [--report REPORT.json | --device D]
                                [--expectations E] [--input-len N] [--output-len N]
                                [--concurrency N]

folds a ``vllm bench serve --save-result`` JSON into the report's perf section (figures named
like the harness's own, source "vllm-bench"), re-evaluates the perf targets and the tier, and
rewrites the run's .json/.md/.xml (latest.* too when it is the latest run). Without --report the
report is reports/<model_id of the result>/<device>/latest.json, the device from --device or
$MESH_DEVICE. Exit 0 done, 2 bad input (the message names the file and the problem).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tt_conformance._names import default_report_dir, normalize_device
from tt_conformance.benchimport import (
    BenchImportError,
    bench_delivery_problems,
    bench_figures,
    bench_shape,
)
from tt_conformance.expectations import Expectations, ExpectationsError, load_expectations
from tt_conformance.report import ReportError, load_report, write_report
from tt_conformance.tiers import derive_tier, evaluate_targets

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def import_bench(args: argparse.Namespace) -> int:
    try:
        data = json.loads(Path(args.result).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchImportError(f"{args.result}: cannot read as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BenchImportError(f"{args.result}: expected a JSON object")
    if args.report:
        report_path = Path(args.report)
    else:
        model = data.get("model_id")
        device = args.device or os.environ.get("MESH_DEVICE") or "unknown"
        try:
            device = normalize_device(device)
        except ValueError as exc:
            raise BenchImportError(f"--device / MESH_DEVICE: {exc}") from None
        if not isinstance(model, str) or not model:
            raise BenchImportError(f"{args.result}: no model_id in the result: pass --report")
        report_path = default_report_dir(Path.cwd(), model, device) / "latest.json"
        if not report_path.is_file():
            raise BenchImportError(f"no report at {report_path}: pass --report REPORT.json")
    report = load_report(report_path)
    shape = bench_shape(data, args.input_len, args.output_len, args.concurrency)
    problems = bench_delivery_problems(data)
    figures = bench_figures(data, shape, "; ".join(problems) or None)
    exp_path = args.expectations or report.expectations_file
    expectations = load_expectations(exp_path) if exp_path else Expectations()
    perf = {**report.perf, **figures}
    warnings = list(report.warnings) + [
        f"perf figures from {Path(args.result).name} (vllm bench serve): {problem}"
        for problem in problems
    ]
    updated = report.replace(perf=perf, warnings=tuple(warnings))
    updated = updated.replace(perf_targets=evaluate_targets(updated, expectations))
    updated = updated.replace(tier=derive_tier(updated))
    latest = report_path.parent / "latest.json"
    is_latest = report_path.name == "latest.json" or (
        latest.is_file() and load_report(latest).run_id == report.run_id
    )
    stem = report.run_id if report_path.name == "latest.json" else report_path.stem
    written = write_report(updated, report_path.parent, stem=stem, refresh_latest=is_latest)
    tier = updated.tier.tier if updated.tier else "?"
    print(
        f"imported {len(figures)} figures ({shape.input_len}/{shape.output_len} @ "
        f"{shape.concurrency}) into {written.json}; tier {tier}"
    )
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tt-conformance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("import-bench", help="fold a vllm bench serve result into a report")
    bench.add_argument("result", help="vllm bench serve --save-result JSON")
    bench.add_argument("--report", default=None, help="report JSON to amend (default: see above)")
    bench.add_argument("--device", default=None, help="device of the default report path")
    bench.add_argument("--expectations", default=None, help="default: the report's own")
    bench.add_argument("--input-len", type=int, default=None)
    bench.add_argument("--output-len", type=int, default=None)
    bench.add_argument("--concurrency", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        return import_bench(args)
    except (BenchImportError, ReportError, ExpectationsError) as exc:
        print(f"tt-conformance: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
