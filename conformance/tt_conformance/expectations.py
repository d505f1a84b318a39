"""Expectations per model/device: known failures, flaky checks, perf tolerances and targets, and
the accuracy bar. The pydantic models below are the format (`expectations.schema.json` is
generated from them).

    {
      "schema_version": 2,
      "kind": "tt-conformance-expectations",          (optional)
      "model": "meta-llama/Llama-3.1-8B-Instruct",    (optional, informational)
      "device": "N150",                               (optional, informational)
      "expected_failures": [
        {"check": "tt_conformance.checks.test_logprobs::test_prompt_logprobs",
         "reason": "prompt logprobs not produced on device", "issue": "optional link"}
      ],
      "flaky": [{"check": "tt_conformance.checks.test_kv_capacity::*", "reason": "..."}],
      "skips": [{"check": "tt_conformance.checks.test_lanes::*", "reason": "must not run: ..."}],
      "perf_tolerances": {"ttft_median@i128o128c1": 0.15, "tt_tps@i128o128c32": null},
      "default_perf_tolerance": 0.2,                   (optional)
      "accuracy": [
        {"task": "tt-patterns", "reference": 0.9, "tolerance": 0.05, "num_samples": 120,
         "reference_source": "transformers on the same checkpoint (accuracy_reference.json)"}
      ],
      "perf_targets": {
        "tps_user_median@i128o128c32": {"reference": 25.0, "source": "published: tt-metal table",
                                     "functional": 0.1, "complete": 0.5, "target": 0.8}
      }
    }

``check`` is a check id (``<module>::<test name[params]>``) where ``*`` matches any run of
characters; nothing else is special, so parametrisation brackets match literally. Tolerances are
relative (0.15 = 15 % worse than the baseline is still acceptable); ``null`` marks a figure as
informational (never gated). An accuracy entry gives either a ``reference`` score (pass when
score >= reference - tolerance) or a ``threshold`` (pass when score >= threshold); ``task`` is a
bundled task name, a JSONL file (relative to this file) or ``lm-eval:<task>``. Perf targets are
fractions of a theoretical or published figure. ``skips`` lists checks that must not run on this
model (the suite skips them with the reason; the gate does not count them as regressions).
A reason starting with ``TODO`` is a placeholder (``tt-conformance baseline promote`` writes
them): the suite runs with it, the gate refuses the file and names the entries. Default location:
``reports/baselines/<model>/<device>/expectations.json``, next to ``baseline.json``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from tt_conformance.datafile import DataFileError, Strict, read_json_file, validate_file_data

__all__ = [
    "EXPECTATIONS_KIND",
    "EXPECTATIONS_SCHEMA_VERSION",
    "PLACEHOLDER_PREFIX",
    "AccuracyExpectation",
    "Expectation",
    "Expectations",
    "ExpectationsError",
    "PerfTarget",
    "expectations_from_dict",
    "load_expectations",
]

EXPECTATIONS_SCHEMA_VERSION: Final = 2
EXPECTATIONS_KIND = "tt-conformance-expectations"
# Reasons a promoted baseline's skeleton carries until someone writes the real one.
PLACEHOLDER_PREFIX = "TODO"


class ExpectationsError(DataFileError):
    """An expectations file is missing or does not match its format."""


class Expectation(Strict):
    check: str = Field(min_length=1, description="check id; '*' matches any characters")
    reason: str = Field(description="why (JSON has no comments)")
    issue: str | None = None
    observed: str | None = Field(
        default=None, description="what the promoted run reported (written by baseline promote)"
    )

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    def matches(self, check_id: str) -> bool:
        return _pattern(self.check).fullmatch(check_id) is not None


class AccuracyExpectation(Strict):
    task: str = Field(
        min_length=1, description="bundled task name, JSONL path (relative to the file), lm-eval:T"
    )
    reference: float | None = Field(default=None, ge=0, le=1)
    threshold: float | None = Field(default=None, ge=0, le=1)
    tolerance: float = Field(default=0.0, ge=0, le=1, description="absolute, below reference")
    num_samples: int | None = Field(default=None, ge=1, description="default: the whole task")
    reference_source: str | None = None
    reason: str | None = None

    @model_validator(mode="after")
    def _one_bar(self) -> AccuracyExpectation:
        if (self.reference is None) == (self.threshold is None):
            raise ValueError(
                f"accuracy entry for task {self.task!r}: give exactly one of reference or threshold"
            )
        return self

    @property
    def bar(self) -> float:
        """The lowest passing score."""
        if self.reference is not None:
            return max(0.0, self.reference - self.tolerance)
        assert self.threshold is not None
        return self.threshold


class PerfTarget(Strict):
    reference: float = Field(gt=0, description="theoretical or published figure, same unit")
    source: str = Field(min_length=1, description="where the reference comes from")
    functional: float = Field(default=0.1, gt=0)
    complete: float = Field(default=0.5, gt=0)
    target: float = Field(default=0.8, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> PerfTarget:
        if not self.functional <= self.complete <= self.target:
            raise ValueError(
                "perf target fractions must satisfy functional <= complete <= target, got "
                f"{self.functional} / {self.complete} / {self.target}"
            )
        return self


class Expectations(Strict):
    schema_version: Literal[1, 2] = EXPECTATIONS_SCHEMA_VERSION
    kind: Literal["tt-conformance-expectations"] | None = None
    model: str | None = None
    device: str | None = None
    expected_failures: tuple[Expectation, ...] = ()
    flaky: tuple[Expectation, ...] = ()
    skips: tuple[Expectation, ...] = ()
    perf_tolerances: dict[str, Annotated[float, Field(ge=0)] | None] = Field(default_factory=dict)
    default_perf_tolerance: float | None = Field(default=None, ge=0)
    accuracy: tuple[AccuracyExpectation, ...] = ()
    perf_targets: dict[str, PerfTarget] = Field(default_factory=dict)
    source: SkipJsonSchema[str | None] = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _no_duplicates(self) -> Expectations:
        for key in ("expected_failures", "flaky", "skips"):
            seen: set[str] = set()
            for i, entry in enumerate(getattr(self, key)):
                if entry.check in seen:
                    raise ValueError(f"field '{key}[{i}].check': duplicate entry {entry.check!r}")
                seen.add(entry.check)
        both = {e.check for e in self.expected_failures} & {e.check for e in self.flaky}
        if both:
            raise ValueError(
                f"field 'flaky': check {sorted(both)[0]!r} is also listed in expected_failures"
            )
        tasks = [a.task for a in self.accuracy]
        if len(tasks) != len(set(tasks)):
            raise ValueError("field 'accuracy': a task is listed twice")
        return self

    def expected_failure(self, check_id: str) -> Expectation | None:
        return next((e for e in self.expected_failures if e.matches(check_id)), None)

    def flaky_entry(self, check_id: str) -> Expectation | None:
        return next((e for e in self.flaky if e.matches(check_id)), None)

    def skip_entry(self, check_id: str) -> Expectation | None:
        return next((e for e in self.skips if e.matches(check_id)), None)

    def placeholders(self) -> list[tuple[str, Expectation]]:
        """(field, entry) pairs whose reason is still a skeleton placeholder."""
        return [
            (key, e)
            for key in ("expected_failures", "flaky", "skips")
            for e in getattr(self, key)
            if e.reason.upper().startswith(PLACEHOLDER_PREFIX)
        ]

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
            for e in (*self.expected_failures, *self.flaky, *self.skips)
            if not any(e.matches(cid) for cid in check_ids)
        ]

    def task_path(self, task: str) -> Path | None:
        """A task naming a JSONL file, resolved against the expectations file's directory."""
        if not task.endswith(".jsonl"):
            return None
        path = Path(task)
        if not path.is_absolute() and self.source:
            path = Path(self.source).parent / path
        return path


def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in text.split("*")), re.DOTALL)


def expectations_from_dict(data: Any, source: str = "<expectations>") -> Expectations:
    if isinstance(data, dict) and data.get("schema_version") not in (1, 2):
        raise ExpectationsError(
            f"{source}: field 'schema_version': unsupported version "
            f"{data.get('schema_version')!r} (this harness reads 1 and "
            f"{EXPECTATIONS_SCHEMA_VERSION})"
        )
    parsed = validate_file_data(Expectations, data, source, ExpectationsError)
    return parsed.model_copy(update={"source": source})


def load_expectations(path: str | os.PathLike[str]) -> Expectations:
    p = Path(path)
    try:
        data = read_json_file(p, "expectations")
    except DataFileError as exc:
        raise ExpectationsError(str(exc)) from None
    return expectations_from_dict(data, str(p))
