"""Human and CI renderings of a report: Markdown (tabulate) and JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from typing import Any

from tabulate import tabulate

from tt_conformance.report import OUTCOMES, PerfFigure, Report

# Worst first, so a reader meets the failures before the passes.
OUTCOME_ORDER: dict[str, int] = {
    o: i for i, o in enumerate(("fail", "error", "xpass", "flaky", "xfail", "skip", "pass"))
}
_MAX_CELL = 300


def md_cell(value: Any, limit: int = _MAX_CELL) -> str:
    """Make any text safe inside a Markdown table cell (pipes, newlines, overlong text)."""
    text = "" if value is None else str(value)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def format_number(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}" if abs(value) >= 1000 or abs(value) < 0.01 else f"{value:.2f}"


def shape_text(fig: PerfFigure) -> str:
    if fig.input_len is None and fig.output_len is None and fig.concurrency is None:
        return "—"
    return f"{fig.input_len or '?'}/{fig.output_len or '?'} @ {fig.concurrency or '?'}"


def render_markdown(report: Report) -> str:
    totals = report.counts
    tier = report.tier
    run = report.run
    lines = [
        f"# Conformance report: {md_cell(report.model)} on {md_cell(report.device)}",
        "",
        tabulate(
            [
                [
                    "status",
                    "**ABORTED**: " + md_cell(report.aborted.reason, 600)
                    if report.aborted
                    else "complete run",
                ],
                ["tier", md_cell(tier.tier if tier else "not derived")],
                ["tier reason", md_cell(tier.reason if tier else "")],
                ["next tier needs", md_cell((tier.next_blocker if tier else None) or "—")],
                ["run", md_cell(report.run_id)],
                ["started / finished", f"{report.started_at} / {report.finished_at}"],
                ["command", md_cell(" ".join(run.command) if run else "unknown", 600)],
                ["host", md_cell(run.host if run else "unknown")],
                [
                    "device / mesh shape",
                    f"{md_cell(report.device)} / {md_cell(report.mesh_shape or 'n/a')}",
                ],
                ["vLLM", md_cell(report.versions.vllm)],
                ["plugin", md_cell(report.versions.plugin)],
                ["ttnn", md_cell(report.versions.ttnn)],
                ["tt-metal", md_cell(report.versions.tt_metal)],
                ["harness", md_cell(report.versions.harness)],
                ["server", md_cell(report.server.url)],
                ["max_num_seqs / lanes", f"{report.server.max_num_seqs} / {report.server.lanes}"],
                ["max_model_len", str(report.server.max_model_len or "unknown")],
                ["model class", md_cell(report.server.model_class or "unknown")],
                [
                    "read from the server",
                    md_cell(", ".join(report.server.discovered) or "nothing (flags/defaults)"),
                ],
                [
                    "server options",
                    md_cell(report.server_options if report.server_options is not None else ""),
                ],
                ["expectations", md_cell(report.expectations_file or "none")],
                ["pytest exit status", str(report.exit_status)],
            ],
            headers=["run", "value"],
            tablefmt="github",
        ),
        "",
        "## Totals",
        "",
        tabulate(
            [[totals[o] for o in OUTCOMES] + [totals["total"]]],
            headers=[*OUTCOMES, "total"],
            tablefmt="github",
        ),
        "",
    ]
    if report.collection_errors:
        lines += ["## Collection errors", ""]
        lines.append(
            tabulate(
                [[md_cell(e.nodeid), md_cell(e.message)] for e in report.collection_errors],
                headers=["module", "error"],
                tablefmt="github",
            )
        )
        lines.append("")
    lines += ["## Checks", ""]
    ordered = sorted(report.checks, key=lambda c: (OUTCOME_ORDER.get(c.outcome, 99), c.id))
    if ordered:
        lines.append(
            tabulate(
                [
                    [
                        md_cell(c.outcome),
                        md_cell(c.concern),
                        md_cell(c.id),
                        f"{c.duration_s:.2f}",
                        c.attempts,
                        md_cell(c.reason),
                    ]
                    for c in ordered
                ],
                headers=["outcome", "concern", "check", "seconds", "attempts", "reason"],
                tablefmt="github",
                disable_numparse=True,
            )
        )
    else:
        lines.append("No checks ran.")
    lines += ["", "## Accuracy", ""]
    if report.accuracy:
        lines.append(
            tabulate(
                [
                    [
                        md_cell(a.task),
                        a.verdict,
                        f"{a.score:.3f}",
                        f"{a.ci_low:.3f} to {a.ci_high:.3f}",
                        str(a.num_samples),
                        "—" if a.reference is None else f"{a.reference:.3f}",
                        "—" if a.threshold is None else f"{a.threshold:.3f}",
                        f"{a.tolerance:.3f}",
                    ]
                    for a in report.accuracy
                ],
                headers=[
                    "task",
                    "verdict",
                    "score",
                    "95% CI",
                    "samples",
                    "reference",
                    "threshold",
                    "tolerance",
                ],
                tablefmt="github",
                disable_numparse=True,
            )
        )
    else:
        lines.append("No accuracy verdict (no accuracy entry in the expectations).")
    lines += ["", "## Serving performance", ""]
    if report.perf:
        lines.append(
            tabulate(
                [
                    [
                        md_cell(p.name),
                        format_number(p.value),
                        md_cell(p.unit),
                        shape_text(p),
                        p.source,
                        md_cell(p.flag or ""),
                    ]
                    for _, p in sorted(report.perf.items())
                ],
                headers=["figure", "value", "unit", "in/out @ conc", "source", "flag"],
                tablefmt="github",
                disable_numparse=True,
            )
        )
    else:
        lines.append("No performance figures recorded.")
    if report.perf_targets:
        lines += ["", "### Perf targets", ""]
        lines.append(
            tabulate(
                [
                    [
                        md_cell(t.figure),
                        format_number(t.reference),
                        md_cell(t.source),
                        "n/a" if t.fraction is None else f"{t.fraction:.1%}",
                        f"{t.functional:.0%} / {t.complete:.0%} / {t.target:.0%}",
                        t.met,
                    ]
                    for t in report.perf_targets
                ],
                headers=[
                    "figure",
                    "reference",
                    "source",
                    "achieved",
                    "functional / complete / target",
                    "met",
                ],
                tablefmt="github",
                disable_numparse=True,
            )
        )
    if report.warnings:
        lines += ["", "## Warnings", ""]
        lines += [f"- {md_cell(w, 1000)}" for w in report.warnings]
    return "\n".join(lines) + "\n"


def pytest_timestamp(iso: str | None) -> str:
    """pytest's JUnit timestamp form (``%Y-%m-%dT%H:%M:%S.%f``, no zone; ours are UTC).

    TT's CI data collector (tt-github-actions ``collect_data``) parses the suite timestamp and
    each test case's start/end properties in exactly this form.
    """
    if not iso:
        return ""
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")


def render_junit(report: Report) -> str:
    """JUnit XML for TT's CI data collector and CI viewers.

    One ``testsuite`` named ``pytest`` (the only one the collector reads); each case carries
    ``start_timestamp`` / ``end_timestamp`` properties; xfail maps to skipped; a flaky check
    passes with one Surefire ``flakyFailure`` per failed attempt; xpass passes with a property.
    """
    totals = report.counts
    suites = ET.Element("testsuites", {"name": "tt-conformance"})
    suite = ET.SubElement(
        suites,
        "testsuite",
        {
            "name": "pytest",
            "tests": str(totals["total"] + len(report.collection_errors)),
            "failures": str(totals["fail"]),
            "errors": str(totals["error"] + len(report.collection_errors)),
            "skipped": str(totals["skip"] + totals["xfail"]),
            "time": f"{sum(c.duration_s for c in report.checks):.3f}",
            "timestamp": pytest_timestamp(report.started_at),
            "hostname": report.device,
        },
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("run_id", report.run_id),
        ("model", report.model),
        ("device", report.device),
        ("vllm_version", report.versions.vllm),
        ("plugin_version", report.versions.plugin),
        ("ttnn_version", report.versions.ttnn),
        ("tt_metal_version", report.versions.tt_metal),
        ("tier", report.tier.tier if report.tier else "not derived"),
    ):
        ET.SubElement(props, "property", {"name": name, "value": value})
    for error in report.collection_errors:
        case = ET.SubElement(
            suite, "testcase", {"classname": error.nodeid, "name": "collection", "time": "0"}
        )
        stamp = pytest_timestamp(report.started_at)
        case_props = ET.SubElement(case, "properties")
        for pname in ("start_timestamp", "end_timestamp"):
            ET.SubElement(case_props, "property", {"name": pname, "value": stamp})
        node = ET.SubElement(case, "error", {"message": _xml_attr(error.message)})
        node.text = _xml_text(error.message)
    for c in sorted(report.checks, key=lambda c: c.id):
        classname, _, name = c.id.rpartition("::")
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": classname or c.id, "name": name or c.id, "time": f"{c.duration_s:.3f}"},
        )
        case_props = ET.SubElement(case, "properties")
        # A check without its own times (reports from before they were kept) gets the run's.
        for pname, pvalue in (
            ("start_timestamp", pytest_timestamp(c.started_at or report.started_at)),
            ("end_timestamp", pytest_timestamp(c.finished_at or report.finished_at)),
            ("outcome", c.outcome),
            ("concern", c.concern),
            ("attempts", str(c.attempts)),
        ):
            ET.SubElement(case_props, "property", {"name": pname, "value": pvalue})
        if c.outcome == "fail":
            node = ET.SubElement(case, "failure", {"message": _xml_attr(c.reason)})
            node.text = _xml_text(c.details or c.reason)
        elif c.outcome == "error":
            node = ET.SubElement(case, "error", {"message": _xml_attr(c.reason)})
            node.text = _xml_text(c.details or c.reason)
        elif c.outcome in ("skip", "xfail"):
            kind = "pytest.xfail" if c.outcome == "xfail" else "pytest.skip"
            ET.SubElement(case, "skipped", {"type": kind, "message": _xml_attr(c.reason)})
        elif c.outcome == "flaky":
            # Surefire's rerun vocabulary: the case passed, each earlier attempt failed.
            for attempt in range(1, c.attempts):
                flaky = ET.SubElement(
                    case,
                    "flakyFailure",
                    {"message": _xml_attr(c.reason), "type": f"attempt {attempt}"},
                )
                trace = ET.SubElement(flaky, "stackTrace")
                trace.text = _xml_text(c.details or c.reason)
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )


def _xml_text(text: str) -> str:
    # XML 1.0 forbids most control characters even when escaped (ANSI colour codes in pytest
    # output are the usual culprit); drop them rather than emit a file CI cannot parse.
    return "".join(ch for ch in text if ch in "\t\n\r" or 0x20 <= ord(ch) < 0xFFFE)


def _xml_attr(text: str) -> str:
    return _xml_text(text)[: _MAX_CELL * 4]
