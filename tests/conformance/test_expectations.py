"""Expectations files: format, validation errors, matching and tolerance resolution."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tt_conformance.expectations import (
    ExpectationsError,
    expectations_from_dict,
    load_expectations,
)
from tt_conformance.names import default_expectations_path, path_component

VALID: dict[str, Any] = {
    "schema_version": 1,
    "kind": "tt-conformance-expectations",
    "model": "org/m",
    "device": "N150",
    "expected_failures": [
        {"check": "tt_conformance.checks.test_lp::test_prompt[8]", "reason": "no prompt lp"},
        {"check": "tt_conformance.checks.test_so::*", "reason": "xgrammar missing", "issue": "#7"},
    ],
    "flaky": [{"check": "tt_conformance.checks.test_kv::test_fill", "reason": "timing"}],
    "perf_tolerances": {"ttft_p50@c1": 0.15, "tpot_p50@c1": None},
    "default_perf_tolerance": 0.3,
}


def test_matching_uses_star_only() -> None:
    exp = expectations_from_dict(VALID, "e.json")
    assert exp.expected_failure("tt_conformance.checks.test_lp::test_prompt[8]") is not None
    # Brackets are literal, not a character class.
    assert exp.expected_failure("tt_conformance.checks.test_lp::test_prompt8") is None
    entry = exp.expected_failure("tt_conformance.checks.test_so::test_json[schema]")
    assert entry is not None and (entry.reason, entry.issue) == ("xgrammar missing", "#7")
    assert exp.flaky_entry("tt_conformance.checks.test_kv::test_fill") is not None
    assert exp.flaky_entry("tt_conformance.checks.test_kv::test_fill_more") is None


def test_tolerance_resolution() -> None:
    exp = expectations_from_dict(VALID, "e.json")
    assert exp.tolerance("ttft_p50@c1", 0.1) == 0.15
    assert exp.tolerance("tpot_p50@c1", 0.1) is None  # explicitly informational
    assert exp.tolerance("throughput@c32", 0.1) == 0.3  # file default beats CLI fallback
    no_default = expectations_from_dict({"schema_version": 1}, "e.json")
    assert no_default.tolerance("anything", 0.1) == 0.1


def test_unmatched_entries() -> None:
    exp = expectations_from_dict(VALID, "e.json")
    stale = exp.unmatched(["tt_conformance.checks.test_so::test_x"])
    assert [e.check for e in stale] == [
        "tt_conformance.checks.test_lp::test_prompt[8]",
        "tt_conformance.checks.test_kv::test_fill",
    ]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["flaky"][0].pop("reason"), "field 'flaky[0].reason': missing required field"),
        (lambda d: d["flaky"][0].update(reason="  "), "field 'flaky[0].reason': must not be empty"),
        (
            lambda d: d["expected_failures"].append({"check": "x", "reason": "r", "why": "?"}),
            "field 'expected_failures[2].why': unknown field",
        ),
        (lambda d: d.update(expected_failure=[]), "field 'expected_failure': unknown field"),
        (
            lambda d: d["perf_tolerances"].update(ttft_p50=-0.1),
            "field 'perf_tolerances.ttft_p50': Input should be greater than or equal to 0",
        ),
        (
            lambda d: d.update(default_perf_tolerance="10%"),
            "field 'default_perf_tolerance': Input should be a valid number",
        ),
        (
            lambda d: d["flaky"].append(dict(d["expected_failures"][0])),
            "is also listed in expected_failures",
        ),
        (
            lambda d: d["flaky"].append(dict(d["flaky"][0])),
            "field 'flaky[1].check': duplicate entry",
        ),
        (lambda d: d.update(schema_version=3), "field 'schema_version': unsupported version 3"),
        (lambda d: d.update(kind="tt-conformance-report"), "field 'kind': Input should be"),
    ],
)
def test_validation_errors_name_the_field(mutate, message: str) -> None:
    data = json.loads(json.dumps(VALID))
    mutate(data)
    with pytest.raises(ExpectationsError) as info:
        expectations_from_dict(data, "x/expectations.json")
    assert str(info.value).startswith("x/expectations.json: ")
    assert message in str(info.value)


def test_load_from_default_location(tmp_path: Path) -> None:
    path = default_expectations_path(tmp_path, "meta-llama/Llama-3.1-8B", "T3K")
    assert path == tmp_path / "meta-llama--Llama-3.1-8B" / "T3K" / "expectations.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(VALID))
    assert load_expectations(path).source == str(path)
    with pytest.raises(ExpectationsError, match="expectations file not found"):
        load_expectations(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama--Llama-3.1-8B-Instruct"),
        ("../../etc", "--..--etc"),
        ("a b:c", "a_b_c"),
        ("", "unknown"),
        ("..", "unknown"),
    ],
)
def test_path_component_is_safe(name: str, safe: str) -> None:
    assert path_component(name) == safe
    assert "/" not in path_component(name) and not path_component(name).startswith(".")
