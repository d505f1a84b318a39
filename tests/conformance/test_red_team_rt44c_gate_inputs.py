"""Red team rt44c against a saved gate OK (#10, #11) and pinned weights (#9b).

A saved gate OK (#10, #11): the summary took an OK judged against a
doctored baseline and expectations that merely sat where it looked, in a --baselines-dir
outside git or written over the committed files in the work tree. Those inputs count only as
committed at HEAD of the harness's repository (committed.head_file); each attack is "not an OK
for this run", saying why, next to an honest OK the same rule lets through.

A repository under tmp_path is made the harness's checkout (harnessgit.py) and holds the
committed baseline; the last test gates the real committed emulated baseline in this one."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harnessgit import commit_all, git, harness_checkout
from tests.conformance.test_red_team_rt44_gate import _gate, _pair
from tt_conformance.baseline import baseline_dir_of
from tt_conformance.cli import conformance as cli
from tt_conformance.cli import gate as gate_cli
from tt_conformance.identity import weights_pinned
from tt_conformance.report import load_report
from tt_conformance.writers import write_report

REPORTS = Path(__file__).resolve().parents[2] / "reports"
FIGURE = "ttft_median@i128o128c1"
EXCUSE = {"expected_failures": [{"check": "m::b", "reason": "known on this build"}]}


def _saved_gate(tmp_path: Path, baseline: Path, candidate: Path) -> Path:
    """The gate's stdout saved to a file, as CI saves it for the summary step (the
    expectations are those next to the baseline)."""
    saved = tmp_path / f"gate{len(list(tmp_path.glob('gate*.txt')))}.txt"
    with saved.open("w") as fh, contextlib.redirect_stdout(fh):
        assert gate_cli.main(["--baseline", str(baseline), "--candidate", str(candidate)]) == 0
    return saved


def _title(report: Path, saved: Path, baselines: Path) -> str:
    out = report.parent / f"summary{len(list(report.parent.glob('summary*')))}.md"  # appended
    args = ["summary", str(report), "--gate-output", str(saved), "--out", str(out)]
    assert cli.main([*args, "--baselines-dir", str(baselines)]) == 0
    return out.read_text().splitlines()[0]


def _doctor(column: Path, doctored: Path) -> Path:
    """A baseline failing what the candidate fails, with expectations excusing it."""
    column.mkdir(parents=True, exist_ok=True)
    shutil.copy(doctored, column / "baseline.json")
    (column / "expectations.json").write_text(json.dumps({"schema_version": 2, **EXCUSE}))
    return column / "baseline.json"


@pytest.fixture
def setup(tmp_path: Path, make_report: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The harness's repository with a committed baseline passing m::b, a candidate failing
    it (a regression against that baseline) and a doctored baseline failing it too."""
    repo = tmp_path / "repo"
    harness_checkout(repo, monkeypatch)

    def run(name: str, b: str, ttft: float = 100.0, **kwargs: Any) -> Path:
        perf = {FIGURE: (ttft, "ms", "lower")}
        report = make_report({"m::a": "pass", "m::b": b}, device="T3K", perf=perf, **kwargs)
        return write_report(report, tmp_path / name).json

    baselines = repo / "reports" / "baselines"
    promoted = run("b", "pass")
    assert cli.main(["baseline", "promote", str(promoted), "--baselines-dir", str(baselines)]) == 0
    committed = baseline_dir_of(baselines, load_report(promoted)) / "baseline.json"
    # The committed expectations gate the figure at 10 %.
    tolerance = {"schema_version": 2, "perf_tolerances": {FIGURE: 0.1}}
    (committed.parent / "expectations.json").write_text(json.dumps(tolerance))
    commit_all(repo, "baseline")
    runs = {"c": run("c", "fail", tt_metal="v2"), "slow": run("s", "pass", 300.0, tt_metal="v2")}
    for candidate in runs.values():
        assert gate_cli.main(["--baseline", str(committed), "--candidate", str(candidate)]) == 1
    return {"repo": repo, "baselines": baselines, "committed": committed, **runs,
            "doctored": run("d", "fail"), "passing": run("p", "pass", tt_metal="v2")}  # fmt: skip


def _outside_git(s: dict[str, Path], tmp_path: Path) -> Path:
    return tmp_path / "bl"


def _untracked_in_repo(s: dict[str, Path], tmp_path: Path) -> Path:
    return s["repo"] / "reports" / "my-baselines"


def _staged_in_repo(s: dict[str, Path], tmp_path: Path) -> Path:
    return s["repo"] / "reports" / "staged"


def _own_repository(s: dict[str, Path], tmp_path: Path) -> Path:
    (tmp_path / "own").mkdir()
    git(tmp_path / "own", "init", "-q")
    return tmp_path / "own" / "baselines"


@pytest.mark.parametrize(
    ("where", "why"),
    [
        (_outside_git, "is not in the harness's git repository (not under "),
        (_untracked_in_repo, "is not committed at HEAD of the harness's repository"),
        (_staged_in_repo, "is not committed at HEAD of the harness's repository"),
        (_own_repository, "is not in the harness's git repository (not under "),
    ],
)
def test_an_ok_against_baselines_nobody_committed_is_not_an_ok_for_the_run(
    tmp_path: Path,
    setup: dict[str, Path],
    where: Callable[[dict[str, Path], Path], Path],
    why: str,
) -> None:
    """rt44c #10: --baselines-dir at a directory outside git holding a baseline that fails what
    the run fails and expectations excusing it: the OK judged against exactly those titled the
    run. Nor is a directory of the harness's checkout that git does not hold at HEAD (untracked,
    only staged) committed, nor one committed to a repository of the attacker's own."""
    baselines = where(setup, tmp_path)
    doctored = _doctor(baseline_dir_of(baselines, load_report(setup["c"])), setup["doctored"])
    if where is _staged_in_repo:
        git(setup["repo"], "add", ".")
    if where is _own_repository:
        commit_all(tmp_path / "own", "doctored")
    title = _title(setup["c"], _saved_gate(tmp_path, doctored, setup["c"]), baselines)
    assert "gate OK" not in title
    assert title.startswith("## gate output not recognised (the run's baseline files are not ")
    assert why in title and title.count("not an OK for this run)") == 1


@pytest.mark.parametrize("edited", ["baseline", "expectations"])
def test_an_ok_against_committed_files_edited_in_the_work_tree_is_not_an_ok_for_the_run(
    tmp_path: Path, setup: dict[str, Path], edited: str
) -> None:
    """rt44c #11: the doctored files written over the committed ones in place (the default
    --baselines-dir): a baseline failing what the run fails with expectations excusing it, or
    the committed baseline with expectations making a 3x slower figure informational. The gate
    judged exactly those files, so the digests matched. Committed means HEAD's bytes."""
    committed = setup["committed"]
    expectations = committed.parent / "expectations.json"
    if edited == "baseline":
        _doctor(committed.parent, setup["doctored"])
        candidate = setup["c"]
    else:
        loose = {"schema_version": 2, "perf_tolerances": {FIGURE: None}}
        expectations.write_text(json.dumps(loose))
        candidate = setup["slow"]
    title = _title(candidate, _saved_gate(tmp_path, committed, candidate), setup["baselines"])
    assert "gate OK" not in title
    assert title.startswith("## gate output not recognised (the run's baseline files are not ")
    assert f"{edited}.json is modified in the work tree since its commit: not an OK" in title


def test_an_ok_against_the_committed_baseline_and_expectations_titles_the_run(
    tmp_path: Path, setup: dict[str, Path]
) -> None:
    """Control: a passing run gated against the committed baseline (its committed expectations
    found next to it) titles its summary with the OK; so does it after a doctored edit is
    undone (the work tree holds HEAD's bytes again)."""
    committed, passing, baselines = setup["committed"], setup["passing"], setup["baselines"]
    saved = _saved_gate(tmp_path, committed, passing)
    assert _title(passing, saved, baselines).startswith(
        "## gate OK (no regression; same weights not proven) — "
    )
    original = committed.read_bytes()
    committed.write_bytes(original + b"\n")  # the same report, other bytes: edited all the same
    assert "not an OK" in _title(passing, _saved_gate(tmp_path, committed, passing), baselines)
    committed.write_bytes(original)
    assert _title(passing, saved, baselines).startswith("## gate OK (no regression; ")


def test_a_real_gate_ok_against_the_committed_emulated_baseline_titles_the_run(
    tmp_path: Path,
) -> None:
    """Control on this repository's own files: the committed re-run of the emulated llama
    baseline under another plugin commit, gated against the committed baseline and
    expectations (the summary's default --baselines-dir, reports/baselines), is titled OK."""
    column = REPORTS / "baselines" / "tt-reference-llama" / "emulated-T3K"
    base_run = load_report(column / "baseline.json").run_id
    history = REPORTS / "history" / "tt-reference-llama" / "emulated-T3K"
    (rerun,) = [p for p in history.glob("*.json") if load_report(p).run_id != base_run]
    saved = tmp_path / "gate.txt"
    with saved.open("w") as fh, contextlib.redirect_stdout(fh):
        args = ["--baseline", str(column / "baseline.json"), "--candidate", str(rerun)]
        assert gate_cli.main([*args, "--axis", "plugin"]) == 0
    out = tmp_path / "summary.md"
    args = ["summary", str(rerun), "--gate-output", str(saved), "--out", str(out)]
    assert cli.main([*args, "--baselines-dir", str(REPORTS / "baselines")]) == 0
    assert out.read_text().startswith("## gate OK (no regression) — ")


# ------------------------------------------ #9b: an all-zero commit or digest pins nothing


@pytest.mark.parametrize(
    ("weights", "pinned"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct@" + "0" * 40, False),  # git's null object name
        ("sha256:" + "0" * 16, False),
        ("meta-llama/Llama-3.1-8B-Instruct@0e9e39f249a16976918f6564b8830bc894c89659", True),
        ("meta-llama/Llama-3.1-8B-Instruct@" + "0" * 39 + "1", True),
        ("sha256:d9473f7d8eb9575d", True),
    ],
)
def test_an_all_zero_commit_or_digest_does_not_pin_the_weights(
    tmp_path: Path,
    make_report: Any,
    capsys: pytest.CaptureFixture[str],
    weights: str,
    pinned: bool,
) -> None:
    """rt44c #9b: 'repo@000...0' had the form of a whole commit, so the same on both runs gave
    an unqualified OK. All zeros is a placeholder (no commit, no digest of any bytes): the OK
    says the same weights are not proven. Control: a real commit or digest (zeros in it are
    fine) gives a plain OK."""

    def weigh(d: dict[str, Any]) -> None:
        d["server"]["weights"] = weights

    assert weights_pinned(weights) is pinned
    b, c = _pair(tmp_path, make_report, weigh)
    data = json.loads(b.read_text())
    weigh(data)
    b.write_text(json.dumps(data))
    assert _gate(b, c) == 0
    first = capsys.readouterr().out.splitlines()[0]
    qualified = "tt-conformance gate: OK (no regression; same weights not proven)"
    assert first == ("tt-conformance gate: OK (no regression)" if pinned else qualified)
