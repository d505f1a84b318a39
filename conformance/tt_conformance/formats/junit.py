"""A report as JUnit XML, for TT's CI data collector and CI viewers."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timezone

from tt_conformance.formats.cells import MAX_CELL
from tt_conformance.report import Report

__all__ = ["pytest_timestamp", "render_junit"]


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
    return _xml_text(text)[: MAX_CELL * 4]
