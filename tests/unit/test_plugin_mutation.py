"""The plugin-side mutation driver's judgments (tools/run_plugin_mutation.py), without mutmut."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.tool_modules import load_tool

driver = load_tool("run_plugin_mutation")
mutation_verdict = pytest.importorskip("tests.mutation_verdict")

STEP_POLICY = next(t for t in driver.TARGETS if t.module == "policy/step_policy.py")
DIFF = """--- vllm_tt_plugin/policy/step_policy.py
+++ vllm_tt_plugin/policy/step_policy.py
@@ -1,9 +1,9 @@
 def record(self, mode: StepKind, facts: WorkFacts) -> None:
     if mode is StepKind.PREFILL:
         self.consecutive_prefill += 1
         self.inserted_decode = 0
     elif mode is StepKind.DECODE:
@@ -12,4 +12,4 @@
         else:
             self.consecutive_prefill = 0
-            self.inserted_decode = 0
+            self.inserted_decode = 1"""


@pytest.mark.parametrize(
    ("exit_code", "status"),
    [
        (1, "killed"),
        (0, "survived"),
        (33, "no test"),
        (36, "timeout"),
        (-24, "timeout"),
        (2, "unjudged"),  # a collection error
        (3, "unjudged"),  # pytest's internal error: mutmut calls it a kill
        (mutation_verdict.UNJUDGED_EXIT, "unjudged"),  # an error outside a test's call
        (None, "unjudged"),  # never run
        (-11, "unjudged"),
    ],
)
def test_only_a_failing_test_is_a_kill(exit_code: int | None, status: str) -> None:
    assert driver.classify(exit_code) == status


def test_the_score_leaves_out_equivalents_and_counts_no_timeout_as_a_kill() -> None:
    mutants = [
        driver.Mutant("a", "killed", 1),
        driver.Mutant("b", "killed", 1),
        driver.Mutant("c", "timeout", 36),
        driver.Mutant("d", "no test", 33),
        driver.Mutant("e", "survived", 0, equivalent_because="same value"),
        driver.Mutant("f", "unjudged", 2),
    ]
    totals = driver.counts(mutants)
    assert totals == {
        "total": 6,
        "killed": 2,
        "survived": 1,
        "equivalent": 1,
        "timeout": 1,
        "unjudged": 1,
    }
    assert driver.score(totals) == 0.4


def test_a_survivor_is_located_at_its_own_occurrence_of_a_repeated_line() -> None:
    source = (REPO / "plugin" / "vllm_tt_plugin" / STEP_POLICY.module).read_text()
    line = driver._line_of(source, "xǁStepPolicyǁrecord", DIFF)
    lines = source.splitlines()
    assert lines[line - 1].strip() == "self.inserted_decode = 0"
    assert lines[line - 2].strip() == "self.consecutive_prefill = 0"
    assert lines[line - 3].strip() == "else:"


def test_equivalents_match_by_function_and_change_and_stale_entries_are_returned() -> None:
    name = f"{STEP_POLICY.dotted}.xǁStepPolicyǁrecord__mutmut_18"
    survivor = driver.Mutant(name, "survived", 0, diff=DIFF)
    killed = driver.Mutant(name.replace("18", "2"), "killed", 1, diff=DIFF)
    result = driver.ModuleResult(STEP_POLICY.module, STEP_POLICY.concern, [], 0.0)
    result.mutants = [survivor, killed]
    entry = {
        "module": STEP_POLICY.module,
        "function": "xǁStepPolicyǁrecord",
        "change": ["-self.inserted_decode = 0", "+self.inserted_decode = 1"],
        "why": "because",
    }
    other = {**entry, "change": ["-a", "+b"]}
    stale = driver.mark_equivalents(result, STEP_POLICY, [entry, other])
    assert survivor.equivalent_because == "because" and killed.equivalent_because is None
    assert stale == [other]


def test_the_committed_equivalents_each_say_why() -> None:
    entries = driver.load_equivalents()
    modules = {t.module for t in driver.TARGETS}
    for entry in entries:
        assert entry["module"] in modules, entry
        assert [line[0] for line in entry["change"]].count("-") >= 1, entry


def test_every_target_module_and_test_file_exists() -> None:
    for target in driver.TARGETS:
        assert (REPO / "plugin" / "vllm_tt_plugin" / target.module).is_file(), target
        assert target.concern in driver.MUTATION_CONCERNS, target
        for test in target.tests:
            assert (REPO / test).is_file(), test
    assert set(driver.CI_SAMPLE) <= {t.module for t in driver.TARGETS}


def test_a_sample_summary_is_never_the_published_record(tmp_path: Path) -> None:
    """Only a full run may feed the pages: a CI sample's summary is refused as the record."""
    from tt_conformance.mutation import MutationRecordError, parse_mutation_record

    results = []
    for target in driver.TARGETS:
        result = driver.ModuleResult(target.module, target.concern, list(target.tests), 1.0)
        result.mutants = [driver.Mutant("m", "killed", 1)]
        results.append(result)
    sample = json.loads(json.dumps(driver.summary(results[2:3], ci=True)))
    with pytest.raises(MutationRecordError, match="'campaign' must be 'full'"):
        parse_mutation_record(sample)
    # rt46 #29: a sample relabelled full lacks the targets it did not run
    with pytest.raises(MutationRecordError, match="'concerns' lacks sampling route"):
        parse_mutation_record(sample | {"campaign": "full", "tree_clean": True})
    full = json.loads(json.dumps(driver.summary(results, ci=False))) | {"tree_clean": True}
    assert parse_mutation_record(full).concerns[0].score == 1.0


def _rejudge_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stamp: str | None, mutants: int
) -> tuple[Path, str]:
    """A published record of one full run and scratch trees re-read with ``mutants`` each."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    results = []
    for target in driver.TARGETS:
        result = driver.ModuleResult(target.module, target.concern, list(target.tests), 1.0)
        result.mutants = [driver.Mutant(f"m{i}", "killed", 1) for i in range(3)]
        results.append(result)
    record = driver.summary(results, ci=False) | {"plugin_commit": commit, "tree_clean": True}
    tmp_path.mkdir(parents=True, exist_ok=True)
    published = tmp_path / "plugin.json"
    text = json.dumps(record, indent=2) + "\n"
    published.write_text(text)
    (tmp_path / "full").mkdir()
    if stamp is not None:
        (tmp_path / "full" / driver.COMMIT_STAMP).write_text(stamp.replace("HEAD", commit))

    def collect(target, bin_dir, names, seconds, root):  # type: ignore[no-untyped-def]
        result = driver.ModuleResult(target.module, target.concern, list(target.tests), seconds)
        result.mutants = [driver.Mutant(f"m{i}", "killed", 1) for i in range(mutants)]
        return result

    monkeypatch.setattr(driver, "PUBLISHED", published)
    monkeypatch.setattr(driver, "SCRATCH", tmp_path)
    monkeypatch.setattr(driver, "REPO", tmp_path)
    monkeypatch.setattr(driver, "_git", lambda *args: "" if args[0] == "status" else commit)
    monkeypatch.setattr(driver, "mutation_env", lambda env_dir: tmp_path)
    monkeypatch.setattr(driver, "load_equivalents", lambda: [])
    monkeypatch.setattr(driver, "collect", collect)
    return published, text


def test_a_rejudge_of_other_trees_refuses_and_leaves_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rt46 #50: trees with fewer mutants (a CI sample's) or of another commit are not the run
    the record describes; a refused rejudge never rewrites the record."""
    published, text = _rejudge_setup(tmp_path, monkeypatch, "HEAD", mutants=1)
    assert driver.main(["--rejudge"]) == 1
    assert published.read_text() == text
    for stamp in (None, "f" * 40):
        published, text = _rejudge_setup(tmp_path / str(stamp), monkeypatch, stamp, mutants=3)
        with pytest.raises(SystemExit, match="run the full campaign again"):
            driver.main(["--rejudge"])
        assert published.read_text() == text
    # a record lacking a target: its trees are not the run it describes either
    published, _ = _rejudge_setup(tmp_path / "short", monkeypatch, "HEAD", mutants=3)
    short = json.loads(published.read_text())
    short["modules"] = short["modules"][1:]
    published.write_text(text := json.dumps(short))
    assert driver.main(["--rejudge"]) == 1
    assert published.read_text() == text


def test_a_rejudge_of_the_records_own_trees_rewrites_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    published, _ = _rejudge_setup(tmp_path, monkeypatch, "HEAD", mutants=3)
    assert driver.main(["--rejudge"]) == 0
    assert "equivalents_rejudged" in json.loads(published.read_text())


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (None, "missing"),
        ("{", "not readable JSON"),
        ("[]", "'equivalent' is a list"),
        ('{"equivalent": "x"}', "'equivalent' is a list"),
        ('{"equivalent": [1]}', "equivalent[0] must be an object"),
        ("BLANK", "equivalent[0] lacks 'why'"),
        ("equivalent", "does not say why"),
        ("no effect.", "does not say why"),
    ],
)
def test_a_missing_or_malformed_equivalents_file_is_a_named_error_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None, named: str
) -> None:
    """rt46 #47-#49: never a traceback, never exit 1 (the code of an unexplained survivor), never
    a missing file read as an empty list, never a reason that says nothing."""
    path = tmp_path / "equivalent-mutants.json"
    entry = {"module": "m.py", "function": "f", "change": ["-a", "+b"], "why": ""}
    if text is not None and not text.startswith(("{", "[")):
        entry["why"] = "" if text == "BLANK" else text
        text = json.dumps({"equivalent": [entry]})
    if text is not None:
        path.write_text(text)
    with pytest.raises(driver.EquivalentsError, match=re.escape(named)):
        driver.load_equivalents(path)
    monkeypatch.setattr(driver, "EQUIVALENTS", path)
    monkeypatch.setattr(driver, "mutation_env", lambda env_dir: tmp_path)
    assert driver.main(["--module", STEP_POLICY.module]) == 2
    entry["why"] = "the counter is reset on the next call before any read"
    path.write_text(json.dumps({"equivalent": [entry]}))
    assert driver.load_equivalents(path) == [entry]
