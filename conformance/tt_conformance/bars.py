"""The bars a report was judged by, held against the expectations file it names.

A report stores its perf targets (reference and fractions) and each accuracy result's bar
(threshold, or reference and tolerance) as the run found them in its expectations file;
rederive.py recomputes the verdicts against these stored bars. Stored bars alone prove nothing:
an edited reference (100 -> 5.5), a deleted failing target or a lowered accuracy threshold
re-derive consistently. So the run records the file (``expectations_file``) and the SHA-256 of
its bytes (``expectations_digest``), and wherever that file can still be read with that content,
its bars are the yardstick: a stored target or accuracy bar that differs from the file's, a
target the file defines that the report lacks, or a stored target the file does not define,
makes the report inconsistent.

The digest is what tells "the file the run was judged by" from "the file as edited since": an
honest run judged by an older version of the file (a reference re-measured later) keeps its
bars. Its limit, documented: a report whose digest was rewritten too, or whose file cannot be
reached (another machine, a CI artifact), or a report written before the digest, is judged by
its stored bars. The file is read only when it is a regular file (a report cannot make a reader
block on a device or a pipe).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tt_conformance.expectations import Expectations, ExpectationsError, load_expectations
from tt_conformance.report import Report

__all__ = ["bar_differences", "file_bar_differences", "file_digest", "recorded_expectations"]

_TARGET_FIELDS = ("reference", "source", "functional", "complete", "target")
_ACCURACY_FIELDS = ("reference", "threshold", "tolerance")


def file_digest(path: str | Path) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def recorded_expectations(report: Report) -> tuple[str, Expectations] | None:
    """The expectations file the report names, read, when it is a regular file whose content
    is still the one the run recorded; None otherwise (no file or digest recorded, the file
    gone or edited since)."""
    named, digest = report.expectations_file, report.expectations_digest
    if not named or not digest or not Path(named).is_file():
        return None
    try:
        if file_digest(named) != digest:
            return None
    except OSError:
        return None
    return named, load_expectations(named)


def bar_differences(report: Report, expectations: Expectations, source: str) -> list[str]:
    """Every stored bar of the report that the expectations ``source`` contradict."""
    out: list[str] = []
    stored = {t.figure: (i, t) for i, t in enumerate(report.perf_targets)}
    for name, bar in sorted(expectations.perf_targets.items()):
        if name not in stored:
            out.append(
                f"field 'perf_targets': lacks the target {name} that the expectations {source} "
                "define (a dropped target judges nothing)"
            )
            continue
        i, target = stored[name]
        where = f"field 'perf_targets[{i}]' ({name})"
        out += _field_differences(where, target, bar, _TARGET_FIELDS, source)
    for name, (i, _) in sorted(stored.items()):
        if name not in expectations.perf_targets:
            out.append(
                f"field 'perf_targets[{i}]' ({name}): the expectations {source} define no such "
                "target"
            )
    entries = {a.task: a for a in expectations.accuracy}
    for i, acc in enumerate(report.accuracy):
        entry = entries.get(acc.task)
        if entry is None:
            continue  # a bar of the harness's own (the passkey check), not the file's
        where = f"field 'accuracy[{i}]' ({acc.task})"
        out += _field_differences(where, acc, entry, _ACCURACY_FIELDS, source)
    return out


def _field_differences(
    where: str, stored: object, bar: object, fields: tuple[str, ...], source: str
) -> list[str]:
    """The ``fields`` in which a stored bar differs from the expectations' one."""
    return [
        f"{where}.{field}: stored {getattr(stored, field)!r}, the expectations {source} give "
        f"{getattr(bar, field)!r}"
        for field in fields
        if getattr(stored, field) != getattr(bar, field)
    ]


def file_bar_differences(report: Report) -> list[str]:
    """`bar_differences` against the file the report names, when it can be read."""
    try:
        found = recorded_expectations(report)
    except ExpectationsError as exc:
        return [f"field 'expectations_file': cannot be read to check the report's bars: {exc}"]
    if found is None:
        return []
    return bar_differences(report, found[1], found[0])
