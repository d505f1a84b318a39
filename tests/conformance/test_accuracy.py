"""Accuracy tasks: scoring rules, the confidence interval, task files, verdicts, lm-eval."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from tt_conformance import accuracy
from tt_conformance.accuracy import (
    TaskError,
    TaskItem,
    load_task,
    resolve_task,
    verdict,
    wilson_interval,
)
from tt_conformance.expectations import (
    AccuracyExpectation,
    ExpectationsError,
    expectations_from_dict,
)


@pytest.mark.parametrize(
    ("item", "completion", "ok"),
    [
        ({"scoring": "exact", "expected": "Tuesday"}, " Tuesday.", True),
        ({"scoring": "exact", "expected": "Tuesday"}, " Tuesday is next", False),
        ({"scoring": "contains", "expected": "Paris"}, " Alice lives in Paris.", True),
        ({"scoring": "contains", "expected": "Paris"}, " Alice lives in paris.", False),
        # gsm8k-style extraction: the number after the marker, commas and $ ignored
        ({"scoring": "regex", "pattern": r"#### (-?[$0-9.,]+)", "expected": "1234"},
         "so 1,234 in all\n#### $1,234", True),
        ({"scoring": "regex", "pattern": r"is (-?\d+)", "expected": "7"}, " 3 plus 4 is 8.", False),
        ({"scoring": "regex", "pattern": r"(\d+)", "expected": "9", "group": "last"},
         " 4 and 5 make 9", True),
        ({"scoring": "regex", "pattern": r"(\d+)", "expected": "9"}, " 4 and 5 make 9", False),
        ({"scoring": "regex", "pattern": r"is (\d+)", "expected": "7"}, " no number", False),
    ],
)  # fmt: skip
def test_scoring_rules(item: dict, completion: str, ok: bool) -> None:
    assert TaskItem(prompt="p", **item).score(completion) is ok


def test_wilson_interval_is_sound_at_the_edges() -> None:
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson_interval(10, 10)
    assert high == pytest.approx(1.0) and low == pytest.approx(0.7225, abs=1e-4)
    low, high = wilson_interval(96, 107)
    assert low < 96 / 107 < high and high - low < 0.13
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_task_file_errors_name_the_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({"prompt": "a", "expected": "b"}) + "\n\n"
        + json.dumps({"prompt": "a", "expected": "b", "scoring": "regex"}) + "\n"
    )  # fmt: skip
    with pytest.raises(TaskError, match=r"t\.jsonl:3: .*needs a 'pattern'"):
        load_task(path)
    path.write_text(json.dumps({"prompt": "a", "expected": "b", "scoring": "fuzzy"}) + "\n")
    with pytest.raises(TaskError, match=r"t\.jsonl:1: field 'scoring'"):
        load_task(path)
    path.write_text("")
    with pytest.raises(TaskError, match="has no items"):
        load_task(path)
    with pytest.raises(TaskError, match="cannot read"):
        load_task(tmp_path / "absent.jsonl")


def test_bundled_task_ships_with_the_package() -> None:
    items = load_task(accuracy.bundled_task_path("tt-patterns"))
    assert len(items) >= 100
    assert {i.scoring for i in items} == {"regex", "contains"}


def test_user_jsonl_resolves_relative_to_the_expectations(tmp_path: Path) -> None:
    (tmp_path / "mine.jsonl").write_text(
        "".join(json.dumps({"prompt": f"q{i}", "expected": "x"}) + "\n" for i in range(5))
    )
    exp = expectations_from_dict(
        {"schema_version": 2, "accuracy": [{"task": "mine.jsonl", "threshold": 0.5,
                                            "num_samples": 3}]},
        str(tmp_path / "expectations.json"),
    )  # fmt: skip
    entry = exp.accuracy[0]
    assert len(resolve_task(entry, exp.task_path(entry.task))) == 3
    too_many = entry.model_copy(update={"num_samples": 9})
    with pytest.raises(TaskError, match="num_samples 9 but the task has 5"):
        resolve_task(too_many, exp.task_path(entry.task))
    with pytest.raises(TaskError, match="not a bundled task"):
        resolve_task(AccuracyExpectation(task="gsm8k", threshold=0.1), None)


def test_entry_needs_exactly_one_bar() -> None:
    for bad in ({"task": "t"}, {"task": "t", "reference": 0.5, "threshold": 0.4}):
        with pytest.raises(ExpectationsError, match="exactly one of reference or threshold"):
            expectations_from_dict({"schema_version": 2, "accuracy": [bad]}, "e.json")


def test_verdict_against_reference_and_threshold() -> None:
    ref = AccuracyExpectation(task="t", reference=0.9, tolerance=0.05)
    assert verdict(ref, 0.85, 100, (0.8, 0.9)).verdict == "pass"
    failed = verdict(ref, 0.84, 100, (0.8, 0.9))
    assert failed.verdict == "fail" and "0.840 < reference 0.900 - tolerance 0.050" in failed.reason
    thr = AccuracyExpectation(task="t", threshold=0.6)
    assert verdict(thr, 0.6, 10, (0.3, 0.8)).verdict == "pass"
    assert verdict(thr, 0.59, 10, (0.3, 0.8)).verdict == "fail"


def test_lm_eval_path_runs_local_completions_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict = {}

    def simple_evaluate(**kwargs):
        import os

        seen.update(
            kwargs, env={k: os.environ.get(k) for k in ("HF_DATASETS_OFFLINE", "OPENAI_API_KEY")}
        )
        return {
            "results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.75,
                                  "exact_match_stderr,strict-match": 0.02}},
            "n-samples": {"gsm8k": {"original": 1319, "effective": 200}},
        }  # fmt: skip

    monkeypatch.setitem(
        sys.modules, "lm_eval", types.SimpleNamespace(simple_evaluate=simple_evaluate)
    )
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    got = accuracy.run_lm_eval("gsm8k", "http://h:1/v1", "m", 8, "sekret", 200)
    assert (got.metric, got.score, got.stderr, got.n) == (
        "exact_match,strict-match",
        0.75,
        0.02,
        200,
    )
    assert seen["model"] == "local-completions" and seen["tasks"] == ["gsm8k"]
    assert seen["model_args"]["base_url"] == "http://h:1/v1/completions"
    assert seen["model_args"]["num_concurrent"] == 8 and seen["limit"] == 200
    assert seen["env"] == {"HF_DATASETS_OFFLINE": "1", "OPENAI_API_KEY": "sekret"}
    import os

    assert "OPENAI_API_KEY" not in os.environ  # restored afterwards


def test_lm_eval_missing_raises_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    with pytest.raises(ImportError):
        accuracy.run_lm_eval("gsm8k", "http://h:1/v1", "m", 1, None, None)
