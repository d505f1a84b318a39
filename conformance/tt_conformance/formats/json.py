"""Published JSON: a run's report (the schema's form) and a report directory's run index."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tt_conformance.history import INDEX_KIND
from tt_conformance.matrix import tier_of
from tt_conformance.report import Report

__all__ = ["index_entry", "index_json", "report_json", "report_to_dict"]


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as JSON data: figures sorted by name, durations to the microsecond."""
    data = report.model_dump(mode="json")
    data["perf"] = dict(sorted(data["perf"].items()))
    for check in data["checks"]:
        check["duration_s"] = round(check["duration_s"], 6)
    return data


def report_json(report: Report) -> str:
    return json.dumps(report_to_dict(report), indent=2, sort_keys=False) + "\n"


def index_entry(report: Report, file: str) -> dict[str, object]:
    """One run's line in a run index."""
    v = report.versions
    return {
        "run_id": report.run_id,
        "file": file,
        "started_at": report.started_at,
        "finished_at": report.finished_at,
        "tt_metal": v.tt_metal,
        "plugin": v.plugin,
        "vllm": v.vllm,
        "ttnn": v.ttnn,
        "tier": tier_of(report).tier,
        "totals": dict(report.counts),
    }


def index_json(model: str, device: str, entries: Sequence[dict[str, object]]) -> str:
    payload = {"kind": INDEX_KIND, "model": model, "device": device, "runs": list(entries)}
    return json.dumps(payload, indent=2) + "\n"
