"""Accuracy tasks: scoring rules, the confidence interval, task files, verdicts, lm-eval."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

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
from tt_conformance.report import CheckResult
from tt_conformance.selection import (
    coverage_of,
    read_manifest_checks,
    read_manifest_concerns,
    suite_modules,
)
from tt_conformance.tiers import derive_tier


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


def test_lm_eval_samples_become_item_outcomes_only_when_right_or_wrong() -> None:
    def results(values: list[Any], effective: int = 3) -> dict[str, Any]:
        samples = [
            {"doc_id": i, "doc_hash": f"h{i}", "filter": "strict-match", "exact_match": v}
            for i, v in enumerate(values)
        ]  # fmt: skip
        samples += [{**s, "filter": "flexible-extract", "exact_match": 0.0} for s in samples]
        return {
            "results": {"gsm8k": {"exact_match,strict-match": sum(values) / len(values)}},
            "n-samples": {"gsm8k": {"effective": effective}},
            "samples": {"gsm8k": samples},
        }

    got = accuracy.pick_lm_eval_metric(results([1.0, 0.0, 1.0]), "gsm8k")
    assert got.items is not None and [i.correct for i in got.items] == [True, False, True]
    assert got.correct == 2 and len({i.id for i in got.items}) == 3
    # The same document always gets the same id; another document another one.
    again = accuracy.pick_lm_eval_metric(results([0.0, 0.0, 1.0]), "gsm8k")
    assert again.items is not None
    assert [i.id for i in again.items] == [i.id for i in got.items]
    # A graded metric, or samples that are not the ones scored: no items, no count.
    assert accuracy.pick_lm_eval_metric(results([0.5, 1.0, 1.0]), "gsm8k").items is None
    assert accuracy.pick_lm_eval_metric(results([1.0, 0.0, 1.0], 4), "gsm8k").correct is None
    assert accuracy.pick_lm_eval_metric({**results([1.0]), "samples": {}}, "gsm8k").items is None


def test_bundled_items_are_named_by_content() -> None:
    item = accuracy.TaskItem(prompt="Q: 2 plus 3?\nA:", expected="5")
    assert item.id == accuracy.TaskItem(prompt="Q: 2 plus 3?\nA:", expected="5").id
    assert item.id != accuracy.TaskItem(prompt="Q: 2 plus 3?\nA:", expected="6").id
    repeated = accuracy.item_outcomes([("a", True), ("a", False), ("b", True)])
    assert [i.id for i in repeated] == ["a", "a#2", "b"]


def test_lm_eval_missing_raises_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    with pytest.raises(ImportError):
        accuracy.run_lm_eval("gsm8k", "http://h:1/v1", "m", 1, None, None)


def _accuracy_run(pytester, fake_server, harness_args, expected: str, scoring: str):
    from tests.conformance.conftest import tt_info_text

    fake_server.state.tt_metrics = [tt_info_text("N150", "1x1", emulated_mesh=True)]
    (pytester.path / "task.jsonl").write_text(
        "".join(
            json.dumps({"prompt": f"q{i}", "expected": expected, "scoring": scoring}) + "\n"
            for i in range(6)
        )
    )
    (pytester.path / "expectations.json").write_text(
        json.dumps({"schema_version": 2, "accuracy": [
            {"task": "task.jsonl", "reference": 1.0, "tolerance": 0.1, "num_samples": 5}]})
    )  # fmt: skip
    result = pytester.runpytest(
        *harness_args, "--pyargs", "tt_conformance.checks.test_accuracy",
        f"--tt-server-url={fake_server.url}", "--tt-report-dir=out",
        "--tt-expectations=expectations.json", "--tt-device=emulated",
    )  # fmt: skip
    from tt_conformance.report import load_report

    return result, load_report(pytester.path / "out" / "latest.json")


def test_accuracy_check_end_to_end(pytester: pytest.Pytester, fake_server, harness_args) -> None:
    # The fake server completes every prompt with " world".
    result, report = _accuracy_run(pytester, fake_server, harness_args, "world", "contains")
    result.assert_outcomes(passed=1)
    (acc,) = report.accuracy
    assert (acc.task, acc.score, acc.num_samples, acc.correct, acc.verdict) == (
        "task.jsonl", 1.0, 5, 5, "pass",
    )  # fmt: skip
    assert acc.check == "tt_conformance.checks.test_accuracy::test_accuracy[task.jsonl]"
    # Every item's outcome is stored, named by its content: the gate pairs runs by them.
    assert acc.items is not None and [i.correct for i in acc.items] == [True] * 5
    assert [i.id for i in acc.items] == [accuracy.item_id(f"q{i}", "world") for i in range(5)]
    # One check module of the suite ran: the run is partial, whatever its checks say.
    assert report.coverage is not None and not report.coverage.full
    assert "tt_conformance.checks.test_accuracy" not in report.coverage.missing_modules
    assert report.tier is not None and report.tier.tier == "partial"
    # Neither a stored "full" nor a suite recorded as this one module makes it full: coverage
    # is re-derived from the checks against the shipped manifest.
    suite = ("tt_conformance.checks.test_accuracy",)
    short = report.replace(coverage=report.coverage.model_copy(update={"suite": suite}))
    assert derive_tier(report.replace(coverage=report.coverage.model_copy(
        update={"full": True, "partial_because": ()}))).tier == "partial"  # fmt: skip
    assert derive_tier(short).tier == "partial"
    # The same results with the rest of the suite run (other modules' checks passing): the
    # tier reads the accuracy verdict.
    listed = read_manifest_checks()
    others = tuple(
        CheckResult(id=f"{m}::{e.replace('[*]', '[x]')}", nodeid=f"{m}::{e}",
                    concern=read_manifest_concerns()[m], outcome="pass")
        for m in suite_modules() if m != suite[0] for e in listed[m]
    )  # fmt: skip
    whole = report.replace(checks=report.checks + others)
    full = coverage_of(
        whole.checks, deselected=0, keyword=None, markers=None, args=(), device=whole.device
    )
    whole = whole.replace(coverage=full)
    tier = derive_tier(whole)  # emulated, accuracy passes
    assert tier.tier == "emulated" and "accuracy passes (task.jsonl 1.000)" in tier.reason
    completions = [p for m, p in fake_server.state.requests if p == "/v1/completions"]
    assert len(completions) == 5  # num_samples, not the whole file


def test_failing_accuracy_fails_the_check_and_the_tier(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    result, report = _accuracy_run(pytester, fake_server, harness_args, "hello", "exact")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*accuracy on task.jsonl: score 0.000 < reference 1.000*"])
    assert report.accuracy[0].verdict == "fail" and report.tier.tier == "fail"


def test_without_an_accuracy_entry_the_check_skips(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    result = pytester.runpytest(
        *harness_args, "--pyargs", "tt_conformance.checks.test_accuracy",
        f"--tt-server-url={fake_server.url}", "--tt-report-dir=out",
    )  # fmt: skip
    result.assert_outcomes(skipped=1)
    from tt_conformance.report import load_report

    report = load_report(pytester.path / "out" / "latest.json")
    assert report.accuracy == () and report.tier.tier == "partial"
    assert report.coverage is not None and report.coverage.skipped_other == 1
    # Even with the suite this one module, the accuracy concern did not run: its one check
    # skipped for want of an expectations entry, which is no reason the server gives. A tier
    # needs every applicable concern run, so the run stays partial, naming the concern.
    suite = ("tt_conformance.checks.test_accuracy",)
    whole = report.replace(coverage=report.coverage.model_copy(update={"suite": suite}))
    tier = derive_tier(whole)
    assert tier.tier == "partial" and "did not run" in tier.reason and "accuracy" in tier.reason


REPO = Path(__file__).resolve().parents[2]


def _tool(name: str):
    import importlib

    sys.path.insert(0, str(REPO / "tools"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "tools"))


def test_bundled_task_is_what_the_generator_writes() -> None:
    items = _tool("make_accuracy_task").items
    lines = accuracy.bundled_task_path("tt-patterns").read_text().splitlines()
    assert lines == [json.dumps(item, sort_keys=True) for item in items()]


@pytest.mark.parametrize(
    "baseline", sorted((REPO / "reports" / "baselines").glob("*/*/accuracy_reference.json")),
    ids=lambda p: p.parent.parent.name,
)  # fmt: skip
def test_expectations_use_the_measured_reference(baseline: Path) -> None:
    measured = json.loads(baseline.read_text())
    exp = expectations_from_dict(
        json.loads((baseline.parent / "expectations.json").read_text()), str(baseline)
    )
    (entry,) = [a for a in exp.accuracy if a.task == measured["task"]]
    assert entry.reference == measured["score"]
    assert entry.num_samples == measured["num_samples"]
    assert measured["correct"] == measured["num_samples"] - len(measured["failures"])
    checkpoint = REPO / "fixtures" / "models" / measured["checkpoint"]
    if checkpoint.is_dir():
        digest = _tool("measure_accuracy_reference").checkpoint_digest
        assert digest(checkpoint) == measured["checkpoint_sha256"]
