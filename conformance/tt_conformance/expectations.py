"""Expectations per model/device: known failures, flaky checks and perf tolerances.

Format: JSON (stdlib on every supported Python, 3.10 included, so no tomli dependency; the same
strict reader as reports gives errors with a file and field path). JSON has no comments, so every
entry carries a mandatory ``reason``, which is what a comment would have said anyway.

    {
      "schema_version": 1,
      "kind": "tt-conformance-expectations",          (optional)
      "model": "meta-llama/Llama-3.1-8B-Instruct",    (optional, informational)
      "device": "N150",                               (optional, informational)
      "expected_failures": [
        {"check": "tt_conformance.checks.test_logprobs::test_prompt_logprobs",
         "reason": "prompt logprobs not produced on device", "issue": "optional link"}
      ],
      "flaky": [
        {"check": "tt_conformance.checks.test_kv_capacity::*", "reason": "..."}
      ],
      "perf_tolerances": {"ttft_p50@c1": 0.15, "throughput@c32": 0.10, "tpot_p50@c1": null},
      "default_perf_tolerance": 0.2                    (optional)
    }

``check`` is a check id (``<module>::<test name[params]>``) where ``*`` matches any run of
characters; nothing else is special, so parametrisation brackets match literally. Tolerances are
relative (0.15 = 15 % worse than the baseline is still acceptable); ``null`` marks a figure as
informational (never gated). Default location:
``reports/baselines/<model>/<device>/expectations.json``, next to ``baseline.json``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tt_conformance._schema import DataFileError, FieldReader, read_json_file

EXPECTATIONS_SCHEMA_VERSION = 1
EXPECTATIONS_KIND = "tt-conformance-expectations"
_FIELDS = (
    "schema_version", "kind", "model", "device", "expected_failures", "flaky", "perf_tolerances",
    "default_perf_tolerance",
)  # fmt: skip


class ExpectationsError(DataFileError):
    """An expectations file is missing or does not match its format."""


@dataclass(frozen=True)
class Expectation:
    check: str
    reason: str
    issue: str | None = None

    def matches(self, check_id: str) -> bool:
        return _pattern(self.check).fullmatch(check_id) is not None


@dataclass(frozen=True)
class Expectations:
    expected_failures: tuple[Expectation, ...] = ()
    flaky: tuple[Expectation, ...] = ()
    perf_tolerances: dict[str, float | None] = field(default_factory=dict)
    default_perf_tolerance: float | None = None
    model: str | None = None
    device: str | None = None
    source: str | None = None

    def expected_failure(self, check_id: str) -> Expectation | None:
        return next((e for e in self.expected_failures if e.matches(check_id)), None)

    def flaky_entry(self, check_id: str) -> Expectation | None:
        return next((e for e in self.flaky if e.matches(check_id)), None)

    def has_tolerance(self, figure: str) -> bool:
        return figure in self.perf_tolerances or self.default_perf_tolerance is not None

    def tolerance(self, figure: str, fallback: float | None = None) -> float | None:
        """Relative tolerance for a figure: explicit entry (may be null), file default, fallback."""
        if figure in self.perf_tolerances:
            return self.perf_tolerances[figure]
        if self.default_perf_tolerance is not None:
            return self.default_perf_tolerance
        return fallback

    def unmatched(self, check_ids: list[str]) -> list[Expectation]:
        """Entries that match none of the given checks: stale lines worth a warning."""
        return [
            e
            for e in (*self.expected_failures, *self.flaky)
            if not any(e.matches(cid) for cid in check_ids)
        ]


def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in text.split("*")), re.DOTALL)


def expectations_from_dict(data: Any, source: str = "<expectations>") -> Expectations:
    r = FieldReader(source)
    try:
        top = r.obj(data, "", allowed=_FIELDS)
        version = r.integer(top, "schema_version")
        if version != EXPECTATIONS_SCHEMA_VERSION:
            r.fail(
                "schema_version",
                f"unsupported version {version} (this harness reads {EXPECTATIONS_SCHEMA_VERSION})",
            )
        if "kind" in top and top["kind"] != EXPECTATIONS_KIND:
            r.fail("kind", f"expected {EXPECTATIONS_KIND!r}, got {top['kind']!r}")
        failures = _entries(r, top, "expected_failures")
        flaky = _entries(r, top, "flaky")
        both = {e.check for e in failures} & {e.check for e in flaky}
        if both:
            r.fail("flaky", f"check {sorted(both)[0]!r} is also listed in expected_failures")
        tolerances: dict[str, float | None] = {}
        raw = r.obj(top.get("perf_tolerances", {}), "perf_tolerances")
        for name, value in raw.items():
            tolerances[name] = (
                None if value is None else r.as_number(value, f"perf_tolerances.{name}", 0.0)
            )
        default = top.get("default_perf_tolerance")
        if default is not None:
            default = r.as_number(default, "default_perf_tolerance", 0.0)
        return Expectations(
            expected_failures=failures,
            flaky=flaky,
            perf_tolerances=tolerances,
            default_perf_tolerance=default,
            model=r.opt_string(top, "model"),
            device=r.opt_string(top, "device"),
            source=source,
        )
    except DataFileError as exc:
        raise ExpectationsError(str(exc)) from None


def _entries(r: FieldReader, top: dict[str, Any], key: str) -> tuple[Expectation, ...]:
    out: list[Expectation] = []
    seen: set[str] = set()
    for i, item in enumerate(r.lst(top.get(key, []), key)):
        path = f"{key}[{i}]"
        d = r.obj(item, path, allowed=("check", "reason", "issue"))
        entry = Expectation(
            check=r.string(d, "check", path, nonempty=True),
            reason=r.string(d, "reason", path, nonempty=True).strip(),
            issue=r.opt_string(d, "issue", path),
        )
        if entry.check in seen:
            r.fail(f"{path}.check", f"duplicate entry {entry.check!r}")
        seen.add(entry.check)
        out.append(entry)
    return tuple(out)


def load_expectations(path: str | os.PathLike[str]) -> Expectations:
    p = Path(path)
    try:
        data = read_json_file(p, "expectations")
    except DataFileError as exc:
        raise ExpectationsError(str(exc)) from None
    return expectations_from_dict(data, str(p))
