"""The plugin mutation campaign's second oracle (tools/plugin_second_oracle.py): its verdicts, its
exit status and record, and that the activation reaches a served process; no server runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tool_modules import load_tool
from tt_conformance.second_oracle import SecondOracleError, parse_second_oracle

oracle = load_tool("plugin_second_oracle")

EQUIVALENT = oracle.Candidate(
    "vllm_tt_plugin.policy.sampling_route.x_decide_route__mutmut_35",
    "policy/sampling_route.py",
    "equivalent",
    ('-return RouteDecision(Route.DEVICE, "device sampling")',),
)
CHECK = "tt_conformance/checks/test_sampling.py::test_seeded_sampling_is_reproducible"
COMMIT = "a" * 40


def write_run(path: Path, outcomes: dict[str, str]) -> Path:
    checks = [{"id": check, "outcome": outcome} for check, outcome in outcomes.items()]
    path.write_text(json.dumps({"server": {}, "checks": checks}))
    return path


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    return write_run(tmp_path / "baseline.json", {CHECK: "pass", "other": "fail"})


def test_a_check_failing_that_passes_in_the_baseline_kills(tmp_path: Path, baseline: Path) -> None:
    report = write_run(tmp_path / "run.json", {CHECK: "fail", "other": "fail"})
    verdict = oracle.judge(EQUIVALENT, 1, report, baseline, [], 150.0)
    assert (verdict.verdict, verdict.killed_by) == ("killed", (CHECK,))
    assert verdict.wrong_equivalence


def test_a_gate_regression_without_a_failing_check_kills(tmp_path: Path, baseline: Path) -> None:
    report = write_run(tmp_path / "run.json", {CHECK: "pass", "other": "fail"})
    gate = ["REGRESSION accuracy: top-1 agreement 0.99 -> 0.91"]
    verdict = oracle.judge(EQUIVALENT, 1, report, baseline, gate, 150.0)
    assert (verdict.verdict, verdict.gate) == ("killed", tuple(gate))


def test_a_clean_pass_does_not_kill(tmp_path: Path, baseline: Path) -> None:
    report = write_run(tmp_path / "run.json", {CHECK: "pass", "other": "fail"})  # old failure
    verdict = oracle.judge(EQUIVALENT, 0, report, baseline, [], 150.0)
    assert (verdict.verdict, verdict.killed_by, verdict.gate) == ("not killed", (), ())


@pytest.mark.parametrize("rc", [1, 2, None])
def test_a_server_that_never_served_is_unjudged(baseline: Path, rc: int | None) -> None:
    verdict = oracle.judge(EQUIVALENT, rc, None, baseline, ["REGRESSION x"], 9.0)
    assert verdict.verdict == "unjudged" and not verdict.wrong_equivalence


def test_an_aborted_suite_is_unjudged(tmp_path: Path, baseline: Path) -> None:
    report = write_run(tmp_path / "run.json", {CHECK: "pass"})
    assert oracle.judge(EQUIVALENT, 3, report, baseline, [], 9.0).verdict == "unjudged"


def verdict_of(first: str, verdict: str) -> Any:
    return oracle.Verdict("m", "policy/sampling_route.py", first, verdict, (), (), 0, 1.0)


def test_exit_status_a_killed_equivalent_is_1_and_said_loudly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    killed_equivalent = verdict_of("equivalent", "killed")
    assert oracle.exit_status([verdict_of("survived", "not killed"), killed_equivalent]) == 1
    assert "WRONG EQUIVALENCE" in capsys.readouterr().err
    assert oracle.exit_status([verdict_of("equivalent", "unjudged")]) == 2
    assert oracle.exit_status([verdict_of("survived", "killed")]) == 0  # a unit-test gap found
    assert oracle.exit_status([verdict_of("equivalent", "not killed")]) == 0


def test_main_exits_1_when_the_suite_kills_a_claimed_equivalent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, baseline: Path
) -> None:
    """The whole run through the driver's seams: the tree and the serving are stand-ins."""
    published = json.loads(oracle.campaign.PUBLISHED.read_text())
    entry = next(e for e in published["not_killed"] if e["equivalent_because"])
    candidate = oracle.candidates({"not_killed": [entry]})[0]
    report = write_run(tmp_path / "run.json", {CHECK: "fail"})
    monkeypatch.setattr(oracle, "RECORD", tmp_path / "second-oracle.json")
    monkeypatch.setattr(oracle, "generate", lambda target, bin_dir, root: tmp_path)
    monkeypatch.setattr(
        oracle.campaign, "_diffs", lambda bin_dir, work, names: {names[0]: entry["diff"]}
    )
    monkeypatch.setattr(
        oracle,
        "serve",
        lambda c, work, bin_dir, out, workers, timeout: oracle.judge(
            c, 1, report, baseline, [], 1.0
        ),
    )
    assert oracle.main([candidate.mutant], None, tmp_path, 0, 1.0) == 1
    written = json.loads((tmp_path / "second-oracle.json").read_text())
    assert written["wrong equivalences"] == 1 and written["mutants"][0]["killed_by"] == [CHECK]
    parsed = parse_second_oracle(written, published["plugin_commit"])
    assert (parsed.served, parsed.killed, parsed.wrong_equivalences) == (1, 1, 1)


def test_the_record_merges_by_mutant_and_restarts_on_another_commit() -> None:
    plugin = {"plugin_commit": COMMIT, "not_killed": [{"mutant": "a", "module": "m",
              "status": "survived", "equivalent_because": "x", "diff": ""},
              {"mutant": "b", "module": "m", "status": "survived", "diff": ""}]}  # fmt: skip
    first = oracle.record(None, plugin, [verdict_of("equivalent", "unjudged")], "2026-12-01")
    again = oracle.Verdict("m", "m", "equivalent", "not killed", (), (), 0, 2.0)
    merged = oracle.record(first, plugin, [again], "2026-12-02")
    assert (merged["served"], merged["not killed"], merged["unjudged"]) == (1, 1, 0)
    assert merged["not_killed_by_unit_tests"] == 2
    other = oracle.record({**first, "plugin_commit": "b" * 40}, plugin, [], "2026-12-02")
    assert other["served"] == 0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"killed": 1}, "'killed' (1) is not its entries' (0)"),
        ({"plugin_commit": "b" * 40}, "is not the mutation record's"),
        ({"date": "2999-01-01"}, "in the future"),
        ({"not_killed_by_unit_tests": 0}, "only 0 not killed"),
    ],
)
def test_the_record_is_refused_when_it_contradicts_itself(
    edit: dict[str, Any], message: str
) -> None:
    plugin = {"plugin_commit": COMMIT, "not_killed": [{"mutant": "m", "module": "m",
              "status": "survived", "equivalent_because": "x", "diff": ""}]}  # fmt: skip
    good = oracle.record(None, plugin, [verdict_of("equivalent", "not killed")], "2026-12-01")
    assert parse_second_oracle(good, COMMIT).not_killed == 1
    with pytest.raises(SecondOracleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_second_oracle({**good, **edit}, COMMIT)


# A stand-in of a mutmut 3.8.1 trampolined module (the dispatch of mutation/trampoline.py: the
# variable names "<module>.<mutant>"), in the scratch tree's checkout-shaped plugin directory.
TINY = """
import os
def x_answer__mutmut_orig():
    return "original"
def x_answer__mutmut_1():
    return "mutated"
MUTANTS = {"x_answer__mutmut_1": x_answer__mutmut_1}
def answer():
    module, _, name = os.environ.get("MUTANT_UNDER_TEST", "").rpartition(".")
    chosen = MUTANTS.get(name) if module == __name__ else None
    return (chosen or x_answer__mutmut_orig)()
"""
# The served process starts an engine process the way vLLM does (spawn), which reports.
SERVER = """
import multiprocessing, sys
def engine(queue):
    import tiny_target
    queue.put((tiny_target.answer(), tiny_target.__file__))
if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=engine, args=(queue,))
    process.start()
    print(*queue.get())
    process.join()
"""


def test_the_activation_reaches_the_served_engine_process(tmp_path: Path) -> None:
    package = tmp_path / "served" / "plugin"
    package.mkdir(parents=True)
    (package / "tiny_target.py").write_text(TINY)
    (tmp_path / "server.py").write_text(SERVER)
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MUTANT_UNDER_TEST")}
    env = oracle.served_env(tmp_path, "tiny_target.x_answer__mutmut_1", base)
    out = subprocess.run(
        [sys.executable, str(tmp_path / "server.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()  # fmt: skip
    assert out == ["mutated", str(package / "tiny_target.py")]


def test_preflight_refuses_a_target_imported_from_outside_the_mutated_tree(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "fake_mutmut" / "mutmut" / "mutation"
    fake.mkdir(parents=True)
    for init in (fake.parent / "__init__.py", fake / "__init__.py"):
        init.write_text("")
    (fake / "trampoline.py").write_text(
        "import os\ndef get_mutant_under_test():\n    return os.environ['MUTANT_UNDER_TEST']\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "tiny_target.py").write_text(TINY)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    base = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(fake.parents[1])}
    env = oracle.served_env(tmp_path, "tiny_target.x_answer__mutmut_1", base)
    env["PYTHONPATH"] += os.pathsep + str(elsewhere)
    refusal = oracle.preflight(bin_dir, env, "tiny_target", tmp_path)
    assert refusal is not None and "not the mutated tree" in refusal
    package = tmp_path / "served" / "plugin"
    package.mkdir(parents=True)
    (package / "tiny_target.py").write_text(TINY)
    assert oracle.preflight(bin_dir, env, "tiny_target", tmp_path) is None


def test_the_gate_lines_kept_are_its_verdict_and_regressions(tmp_path: Path) -> None:
    log = tmp_path / "driver.log"
    log.write_text(
        "[emu] suite finished in 195.5 s (pytest exit 0); stopping the server\n"
        "tt-conformance gate: REGRESSION (1 found)\n"
        "Regressions (2):\n  - accuracy top1_agreement: 1.0 -> 0.91\n  - " + "x" * 300 + "\n\n"
        "Notes (1):\n    perf ttft_mean@i128o128c8: the candidate flags it unreliable\n"
        "e2el_mean@i128o128c1   1177 ms   1125 ms   4.4% worse   —   not gated\n"
    )
    assert oracle.gate_lines(log) == [
        "tt-conformance gate: REGRESSION (1 found)",
        "- accuracy top1_agreement: 1.0 -> 0.91",
        "- " + "x" * (oracle.GATE_LINE - 3) + "…",
    ]


def test_successive_limited_runs_work_through_the_list() -> None:
    found = [oracle.Candidate(name, "m", "equivalent", ()) for name in ("a", "b", "c")]
    previous = {
        "plugin_commit": COMMIT,
        "mutants": [
            {"mutant": "a", "verdict": "not killed"},
            {"mutant": "b", "verdict": "unjudged"},
        ],
    }
    assert [c.mutant for c in oracle.pending(found, previous, COMMIT)] == ["b", "c"]
    assert len(oracle.pending(found, previous, "b" * 40)) == 3  # another commit: all again
