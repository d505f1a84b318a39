"""``tt-conformance``: report tools.

    tt-conformance baseline promote REPORT.json [--baselines-dir reports/baselines]
                                    [--write-todo-entries] [--allow-older]

copies the run to <baselines>/<model>/<device>/baseline.json and writes (or extends)
expectations.json there. It refuses an aborted, incomplete, partial or inconsistent run, a run
older than the baseline it would replace (unless --allow-older) and a run with failing,
expected-failing or flaky checks the expectations do not cover, unless --write-todo-entries:
then each gets an entry whose reason is a ``TODO`` placeholder, and the gate refuses the file,
naming them, until each is written.

    tt-conformance summary REPORT.json [--gate | --gate-output FILE] [--baselines-dir D]
                           [--out FILE]

writes the run as Markdown for $GITHUB_STEP_SUMMARY (appended to --out, default stdout), with
the gate against the run's baseline (--gate, as tox -e hw gates) or a saved gate output. A saved
OK titles the run only when it judged this run's content against the baseline committed for
its model and device under --baselines-dir (default reports/baselines) and the expectations
next to it, both as committed at HEAD of the harness's git repository (the gate's "judged:"
line names all three by digest).

    tt-conformance import-bench RESULT.json [--report REPORT.json | --device D]
                                [--expectations E] [--input-len N] [--output-len N]
                                [--concurrency N] [--replace-own]

folds a ``vllm bench serve --save-result`` JSON into the report's perf section (figures named
like the harness's own, source "vllm-bench"), re-evaluates the perf targets (against the bars
the run recorded; --expectations may only restate them) and the tier, and rewrites the run's
.json/.md/.xml (latest.* too when it is the latest run). Without --report the report is
reports/<model_id of the result>/<device>/latest.json, the device from --device or
$MESH_DEVICE. It refuses a result for another model, a concurrency above the server's capacity
in the report, a shape the result does not record (no max_concurrency or token totals) or
contradicts, an inconsistent report, other bars than the run recorded, a date more than
a day from the run, a result that does not name the report's device (vllm bench serve
--metadata device=<the report's device>), and (unless --replace-own) one that would overwrite
the harness's own figures. Exit 0 done, 2 bad input (the message names the file and the
problem).

    tt-conformance history add REPORT.json [--history reports/history] [--replace]

files a run in the published history store (<history>/<model>/<device>/<run_id>.json,
history.py), an aborted one too (a crash or a hang is history). It refuses (exit 2, naming the
field) a file that is not a report and an inconsistent report (rederive.py); a run already in
the store is a no-op (exit 0, said so), unless the stored copy differs:
then --replace overwrites it.

    tt-conformance report-dir --model MODEL [--device D]

prints the directory the harness writes that model's runs to, reports/<model>/<device>, the
device in the harness's canonical spelling (TG -> GALAXY; default $MESH_DEVICE): what CI's later
steps read. A server without the TT plugin writes under not-tt instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tt_conformance import envs
from tt_conformance.baseline import PromoteError, committed_gate_inputs, gate_run, promote
from tt_conformance.benchimport import (
    BenchImportError,
    bench_delivery_problems,
    bench_figures,
    bench_shape,
    own_figures_replaced,
    result_mismatches,
)
from tt_conformance.cli.pipes import keeps_verdict
from tt_conformance.expectations import (
    Expectations,
    ExpectationsError,
    PerfTarget,
    load_expectations,
)
from tt_conformance.formats.markdown import render_step_summary
from tt_conformance.history import HISTORY_STORE, HistoryError, add_run
from tt_conformance.names import default_report_dir, normalize_device
from tt_conformance.rederive import require_consistent
from tt_conformance.report import Report, ReportError, load_report
from tt_conformance.tiers import derive_tier, evaluate_targets
from tt_conformance.writers import write_report

__all__ = ["EXIT_BAD_INPUT", "EXIT_OK", "main"]

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def recorded_targets(report: Report) -> dict[str, PerfTarget]:
    """The perf targets the run recorded, as the bars it was judged by."""
    return {
        t.figure: PerfTarget(
            reference=t.reference,
            source=t.source,
            functional=t.functional,
            complete=t.complete,
            target=t.target,
        )
        for t in report.perf_targets
    }


def swapped_bars(recorded: dict[str, PerfTarget], given: dict[str, PerfTarget]) -> list[str]:
    """Each figure whose bars in ``given`` differ from the recorded ones (added or dropped
    included)."""
    out = []
    for name in sorted(set(recorded) | set(given)):
        was, now = recorded.get(name), given.get(name)
        if was != now:
            out.append(f"{name}: recorded {_bars(was)}, given {_bars(now)}")
    return out


def _bars(t: PerfTarget | None) -> str:
    if t is None:
        return "none"
    return f"reference {t.reference:g} ({t.functional:g}/{t.complete:g}/{t.target:g})"


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
        device = args.device or envs.MESH_DEVICE.get() or "unknown"
        try:
            device = normalize_device(device)
        except ValueError as exc:
            raise BenchImportError(f"--device / MESH_DEVICE: {exc}") from None
        if not isinstance(model, str) or not model:
            raise BenchImportError(f"{args.result}: no model_id in the result: pass --report")
        report_path = default_report_dir(Path.cwd(), model, device) / "latest.json"
        if not report_path.is_file():
            raise BenchImportError(f"no report at {report_path}: pass --report REPORT.json")
    report = require_consistent(load_report(report_path), str(report_path))
    shape = bench_shape(data, args.input_len, args.output_len, args.concurrency)
    mismatches = result_mismatches(
        data, report, shape, args.concurrency, args.input_len, args.output_len
    )
    if mismatches:
        raise BenchImportError(
            f"{args.result} does not describe the run of {report_path}: " + "; ".join(mismatches)
        )
    problems = bench_delivery_problems(data)
    figures = bench_figures(data, shape, "; ".join(problems) or None)
    replaced = own_figures_replaced(report, figures)
    if replaced and not args.replace_own:
        raise BenchImportError(
            f"{args.result} would overwrite {len(replaced)} of the harness's own figures in "
            f"{report_path}: {', '.join(replaced)}; pass --replace-own to replace them"
        )
    # The bars a run is judged by are the ones it recorded: the import re-evaluates them
    # against the new figures, and an --expectations file may only restate them.
    recorded = recorded_targets(report)
    if args.expectations:
        swapped = swapped_bars(recorded, load_expectations(args.expectations).perf_targets)
        if swapped:
            raise BenchImportError(
                f"field 'perf_targets': --expectations {args.expectations} judges the run by "
                f"other bars than those it recorded ({'; '.join(swapped)}); a run is judged by "
                "its own expectations: rerun it with the new file"
            )
    expectations = Expectations(perf_targets=recorded)
    perf = {**report.perf, **figures}
    name = Path(args.result).name
    warnings = list(report.warnings) + [
        f"perf figures from {name} (vllm bench serve): {problem}" for problem in problems
    ]
    if replaced:
        # The harness's measurement is gone from the report: say so where a reader looks.
        warnings.append(
            f"{len(replaced)} harness perf figures replaced by vllm bench serve figures from "
            f"{name} (--replace-own): {', '.join(replaced)}"
        )
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


def promote_baseline(args: argparse.Namespace) -> int:
    done = promote(
        Path(args.report),
        Path(args.baselines_dir),
        write_todo_entries=args.write_todo_entries,
        allow_older=args.allow_older,
    )
    was = f" (replacing run {done.replaced_run})" if done.replaced_run else ""
    print(f"baseline: {done.baseline}{was}")
    print(f"expectations: {done.expectations}")
    for check in done.dropped:
        print(f"  removed the TODO entry for {check}: this run does not fail it")
    if done.added:
        print(f"{len(done.added)} placeholder entries to fill in before the gate accepts the file:")
        for check in done.added:
            print(f"  TODO {check}")
    return EXIT_OK


def step_summary(args: argparse.Namespace) -> int:
    report = load_report(args.report)
    gate_text = None
    if args.gate_output:
        try:
            gate_text = Path(args.gate_output).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise PromoteError(f"--gate-output {args.gate_output}: {exc}") from None
    if args.gate:
        # The same gate tox -e hw ran (--tt-gate): baseline of the run's model and device.
        gate_text = gate_run(report, Path(args.baselines_dir)).text.strip()
    # A saved OK titles the run only when judged against its committed baseline and
    # expectations: one against a doctored baseline or other excuses is no OK for this run.
    against = committed_gate_inputs(Path(args.baselines_dir), report) if gate_text else None
    text = render_step_summary(report, gate_text, against)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as fh:  # GitHub's summary file is appended
            fh.write(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def history_add(args: argparse.Namespace) -> int:
    done = add_run(Path(args.report), Path(args.history), replace=args.replace)
    if not done.added:
        print(f"history: run already in the store as {done.path}; nothing added")
    else:
        print(f"history: {'replaced' if done.replaced else 'added'} {done.path}")
    return EXIT_OK


def report_dir(args: argparse.Namespace) -> int:
    # The harness's own rule (state.py): normalize_device, then default_report_dir.
    raw = args.device or envs.MESH_DEVICE.get() or "unknown"
    try:
        device = normalize_device(raw)
    except ValueError as exc:
        print(f"tt-conformance: error: --device / MESH_DEVICE: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(default_report_dir(Path("."), args.model, device))
    return EXIT_OK


@keeps_verdict
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
    bench.add_argument(
        "--expectations", default=None, help="may only restate the perf targets the run recorded"
    )
    bench.add_argument("--input-len", type=int, default=None)
    bench.add_argument("--output-len", type=int, default=None)
    bench.add_argument("--concurrency", type=int, default=None)
    bench.add_argument(
        "--replace-own",
        action="store_true",
        help="let the result's figures replace the harness's own figures of the same name",
    )
    bench.set_defaults(run=import_bench)
    base = sub.add_parser("baseline", help="hardware baselines")
    base_sub = base.add_subparsers(dest="baseline_command", required=True)
    prom = base_sub.add_parser("promote", help="make a run the baseline of its model/device")
    prom.add_argument("report", help="report JSON of the run")
    prom.add_argument("--baselines-dir", default="reports/baselines")
    prom.add_argument(
        "--write-todo-entries",
        action="store_true",
        help="write a TODO expectations entry for each failing or flaky check not covered",
    )
    prom.add_argument(
        "--allow-older",
        action="store_true",
        help="promote a run that started before the baseline it replaces",
    )
    prom.set_defaults(run=promote_baseline)
    summ = sub.add_parser("summary", help="Markdown for $GITHUB_STEP_SUMMARY")
    summ.add_argument("report", help="report JSON of the run")
    summ.add_argument("--gate-output", default=None, help="the gate's stdout, saved to a file")
    summ.add_argument("--out", default=None, help="append here (default stdout)")
    summ.add_argument(
        "--gate", action="store_true", help="include the gate against the run's baseline"
    )
    summ.add_argument(
        "--baselines-dir",
        default="reports/baselines",
        help="for --gate; a --gate-output OK must have judged the baseline committed here",
    )
    summ.set_defaults(run=step_summary)
    hist = sub.add_parser("history", help="the published run history (reports/history)")
    hist_sub = hist.add_subparsers(dest="history_command", required=True)
    hadd = hist_sub.add_parser("add", help="file a finished run in the history store")
    hadd.add_argument("report", help="report JSON of the run")
    hadd.add_argument("--history", default=str(HISTORY_STORE), help="the store directory")
    hadd.add_argument(
        "--replace", action="store_true", help="overwrite a stored copy of the run that differs"
    )
    hadd.set_defaults(run=history_add)
    where = sub.add_parser("report-dir", help="where the harness writes a model's runs")
    where.add_argument("--model", required=True, help="the served model id")
    where.add_argument("--device", default=None, help="default $MESH_DEVICE")
    where.set_defaults(run=report_dir)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (BenchImportError, ReportError, ExpectationsError, PromoteError, HistoryError) as exc:
        print(f"tt-conformance: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
