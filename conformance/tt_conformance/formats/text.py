"""The gate's verdict as plain text: what `tt-conformance-gate` prints and --tt-gate shows."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from tabulate import tabulate

from tt_conformance.expectations import Expectations
from tt_conformance.formats.escape import one_line
from tt_conformance.formats.json import report_to_dict
from tt_conformance.gate import GateResult
from tt_conformance.numfmt import format_number, pct
from tt_conformance.report import Report
from tt_conformance.tiers import perf_is_informational

__all__ = [
    "GATE_PREFIX",
    "JudgedAgainst",
    "change_text",
    "content_digest",
    "expectations_digest",
    "gate_headline",
    "render_gate",
]

GATE_PREFIX = "tt-conformance gate: "


def change_text(worse_by: float | None) -> str:
    if worse_by is None:
        return "—"
    if worse_by > 0:
        return f"{pct(worse_by)} worse"
    if worse_by < 0:
        return f"{pct(-worse_by)} better"
    return "unchanged"


# The verdict lines `render_gate` writes, and nothing else: a title is read from these only.
_VERDICT = re.compile(
    r"(OK \(no regression(; same weights not proven)?\)|REGRESSION \(\d+ found\))"
)
_CANDIDATE = re.compile(r"candidate (\S+): ")
_DIGESTS = re.compile(
    r"judged: baseline (sha256:[0-9a-f]+), candidate (sha256:[0-9a-f]+), "
    r"expectations (sha256:[0-9a-f]+)"
)


def content_digest(report: Report) -> str:
    """A digest of everything the report states: a saved verdict names the content it judged,
    so a run amended in place under the same run id no longer matches it."""
    text = json.dumps(report_to_dict(report), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def expectations_digest(expectations: Expectations | None) -> str:
    """A digest of what the expectations a gate judged by decide (their entries, tolerances,
    bars), so a saved OK names the excuses it applied. No file and an empty one judge alike;
    the informational words (kind, model, device, schema version) decide nothing."""
    informational = {"kind", "model", "device", "schema_version"}
    data = (expectations or Expectations()).model_dump(mode="json", exclude=informational)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class JudgedAgainst:
    """What a saved gate OK must have judged a run against to title it: the committed baseline
    of the run's model and device column (`baseline.committed_gate_inputs`) and the
    expectations next to it. An OK against a doctored baseline, or the committed one with
    other expectations, is no OK for this run."""

    baseline: str | None  # its content digest; None: no baseline is committed for the run
    expectations: str
    # Why the files found for the run are not the committed ones (committed.head_file).
    uncommitted: str | None = None


def gate_headline(
    text: str,
    run_id: str | None = None,
    digest: str | None = None,
    against: JudgedAgainst | None = None,
) -> str:
    """The verdict a gate's output states, for a title. Only its first line is read (the gate
    writes its verdict first, from its own decision; report text comes after, on escaped
    lines), and only the verdict forms the gate writes count. An OK must name ``run_id`` as
    its candidate and, given ``digest`` (`content_digest` of the report titled), that content
    as the one it judged (a saved output of another run, of an earlier gate, or of this run
    before it was amended is no verdict on this one); given ``against``, the baseline and
    expectations it names must be those. Anything else is "not recognised", never taken for a
    pass."""
    lines = text.strip().splitlines()
    first = lines[0] if lines else ""
    if first.startswith(GATE_PREFIX):
        verdict = first.removeprefix(GATE_PREFIX)
        if not _VERDICT.fullmatch(verdict):
            return "gate output not recognised"
        if verdict.startswith("OK") and run_id is not None:
            named = [m.group(1) for ln in lines[1:] if (m := _CANDIDATE.match(ln))]
            if named[:1] != [run_id]:
                return "gate output not recognised (not a gate of this run)"
        judged = next((m.groups() for ln in lines[1:] if (m := _DIGESTS.fullmatch(ln))), None)
        content = judged[1] if judged else None
        if verdict.startswith("OK") and digest is not None and content != digest:
            return "gate output not recognised (it judged other content than this report)"
        problem = None if against is None else _other_baseline(judged, against)
        if verdict.startswith("OK") and problem:
            return f"gate output not recognised ({problem}: not an OK for this run)"
        return "gate " + verdict
    if first.startswith("bad input, failing closed") or first.startswith(
        "tt-conformance-gate: bad input, failing closed"
    ):
        return "gate BAD INPUT (failing closed)"
    if first.startswith("the run was ABORTED"):
        return "gate FAILED (run aborted)"
    if first.startswith("no baseline for ") and "not gated" in first:
        return "not gated (no baseline)"
    return "gate output not recognised"


def _other_baseline(judged: tuple[str, ...] | None, against: JudgedAgainst) -> str | None:
    """Why an OK that judged ``judged`` (baseline, candidate, expectations digests) is not one
    against the committed baseline and expectations; None when it is."""
    if against.uncommitted is not None:
        # The path is the operator's --baselines-dir: kept on the title's one line all the same.
        return f"the run's baseline files are not committed: {one_line(against.uncommitted)}"
    if against.baseline is None:
        return "no baseline is committed for this run's model and device"
    if judged is None or judged[0] != against.baseline:
        return "it judged another baseline than the committed one for this run's setup"
    if judged[2] != against.expectations:
        return "it judged by other expectations than the committed ones for this run's setup"
    return None


def render_gate(
    result: GateResult,
    baseline: Report,
    candidate: Report,
    expectations: Expectations | None = None,
) -> str:
    """The gate's verdict as plain text (stdout, the pytest summary, the CI step summary);
    ``expectations``: those the verdict applied (named by digest with the two reports)."""
    bv, cv = baseline.versions, candidate.versions
    verdict = (
        f"REGRESSION ({len(result.regressions)} found)"
        if result.regressions
        # An OK on weights nobody pinned is qualified where it is read: the verdict line.
        else "OK (no regression; same weights not proven)"
        if result.weights_unproven
        else "OK (no regression)"
    )
    # The verdict is the first line, from the decision alone; every line after it that holds
    # report text holds it escaped onto that one line (formats/escape.py).
    lines = [
        f"{GATE_PREFIX}{verdict}",
        one_line(f"model {candidate.model}, device {candidate.device}"),
        one_line(
            f"baseline  {baseline.run_id}: tt-metal {bv.tt_metal}, vLLM {bv.vllm}, "
            f"plugin {bv.plugin}"
        ),
        one_line(
            f"candidate {candidate.run_id}: tt-metal {cv.tt_metal}, vLLM {cv.vllm}, "
            f"plugin {cv.plugin}"
        ),
        f"judged: baseline {content_digest(baseline)}, candidate {content_digest(candidate)}, "
        f"expectations {expectations_digest(expectations)}",
        "",
    ]
    if result.identity:
        lines.append("Identity (everything else is equal):")
        lines += [f"  * {one_line(item)}" for item in result.identity]
        lines.append("")
    else:
        lines += ["Identity: the two runs are alike on every axis", ""]
    for title, marker, items in (
        ("Regressions", "-", result.regressions),
        ("Improvements", "+", result.improvements),
        ("Expected failures (not regressions)", "~", result.expected),
        ("Flaky, passed on retry (not regressions)", "~", result.flaky),
        ("Notes", " ", result.notes),
    ):
        if items:
            lines.append(f"{title} ({len(items)}):")
            lines += [f"  {marker} {one_line(item)}" for item in items]
            lines.append("")
    if result.perf:
        informational = perf_is_informational(candidate.device)
        # Emulated (and other non-TT) figures measure no TT hardware: say so where they show.
        lines.append(
            f"Performance (informational: {one_line(candidate.device)} is not TT hardware; a "
            "figure is gated only where a tolerance is set):"
            if informational
            else "Performance:"
        )
        lines.append(
            tabulate(
                [
                    [
                        one_line(p.name),
                        one_line(f"{format_number(p.baseline)} {p.unit}"),
                        "—"
                        if p.candidate is None
                        else one_line(f"{format_number(p.candidate)} {p.unit}"),
                        change_text(p.worse_by),
                        "—" if p.tolerance is None else pct(p.tolerance),
                        p.verdict,
                    ]
                    for p in result.perf
                ],
                headers=["figure", "baseline", "candidate", "change", "tolerance", "verdict"],
                disable_numparse=True,
            )
        )
    return "\n".join(lines).rstrip() + "\n"
