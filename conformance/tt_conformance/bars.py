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
bars. The file is read only when it is a regular file (a report cannot make a reader block on a
device or a pipe).

When the named file is gone or edited, the second yardstick is the file as committed at the
harness commit the report records (``git show <commit>:<path>`` in this harness's checkout):
the recorded digest must be that committed content's, so the path only locates and the digest
proves. A report whose bars meet neither yardstick (no file or digest recorded, the file
unreachable and not committed with that content, a digest rewritten with the bars) has
*self-asserted* bars (`bar_check`): nobody but the report vouches for its targets and
thresholds, so tiers.py never lets them lift a run to functional or complete (the tier says
why), and the gate, which compares tiers, cannot pass on them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from tt_conformance.committed import committed_file, harness_repository
from tt_conformance.expectations import (
    Expectations,
    ExpectationsError,
    expectations_from_dict,
    load_expectations,
)
from tt_conformance.longtasks import PASSKEY_TASK
from tt_conformance.report import Report

__all__ = [
    "BarCheck",
    "bar_check",
    "bar_differences",
    "bytes_digest",
    "file_bar_differences",
    "file_digest",
    "recorded_expectations",
]

_TARGET_FIELDS = ("reference", "source", "functional", "complete", "target")
_ACCURACY_FIELDS = ("reference", "threshold", "tolerance")


def file_digest(path: str | Path) -> str:
    return bytes_digest(Path(path).read_bytes())


def bytes_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class BarCheck:
    """Whether anything but the report vouches for its stored bars."""

    checked: bool
    yardstick: str | None  # what the bars were held against (None: nothing)
    why: str | None = None  # why the bars are self-asserted


def _has_bars(report: Report) -> bool:
    # The passkey bar is the harness's own, not the expectations'.
    return bool(report.perf_targets) or any(a.task != PASSKEY_TASK for a in report.accuracy)


def recorded_expectations(report: Report) -> tuple[str, Expectations] | None:
    """The expectations file the report names, read, when it is a regular file whose content
    is still the one the run recorded; None otherwise (no file or digest recorded, the file
    gone or edited since)."""
    named, digest = report.expectations_file, report.expectations_digest
    if not named or not digest:
        return None
    local = _local_path(named)
    if local is not None:
        try:
            if local.is_file() and file_digest(local) == digest:
                return named, load_expectations(local)
        except OSError:
            pass
    found = committed_file(report.versions.harness_commit, named)
    if found is None or bytes_digest(found[1]) != digest:
        return None
    where = f"{found[0]} at harness commit {report.versions.harness_commit[:12]}"
    try:
        data = json.loads(found[1].decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError included
        raise ExpectationsError(f"{where}: not a JSON expectations file: {exc}") from None
    return where, expectations_from_dict(data, where)


def _local_path(named: str) -> Path | None:
    """The named file here: an absolute name as recorded; a relative one (recorded
    repository-relative, committed.repo_relative) under the checkout, else from here."""
    path = Path(named)
    root = harness_repository()
    if path.is_absolute() or root is None or not (root / path).is_file():
        return path
    return root / path


def bar_check(report: Report) -> BarCheck:
    """Whether the report's stored bars were held against a yardstick it does not control."""
    if not _has_bars(report):
        return BarCheck(checked=True, yardstick=None)
    if not report.expectations_file:
        why = "the report names no expectations file"
    elif not report.expectations_digest:
        why = "the report records no digest of its expectations file"
    else:
        try:
            found = recorded_expectations(report)
        except ExpectationsError as exc:
            return BarCheck(checked=False, yardstick=None, why=f"unreadable expectations: {exc}")
        if found is not None:
            return BarCheck(checked=True, yardstick=found[0])
        why = (
            f"its expectations file {report.expectations_file} cannot be read with the recorded "
            "digest, here or as committed at its harness commit"
        )
    return BarCheck(checked=False, yardstick=None, why=why)


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
