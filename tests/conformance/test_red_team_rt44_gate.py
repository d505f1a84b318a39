"""Red team rt44 against the gate: each attack that got a false OK, now refused (exit 2 naming
the field) or judged honestly, next to an honest run the same rule lets through.

Pairs are two independent hardware (T3K) runs built with `_timed_run` (they pass the copy
floor); the candidate's file is then edited as the attacker edited it."""

from __future__ import annotations

import json
import random
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harnessgit import commit_all, harness_checkout
from tests.conformance.test_red_team import ACCURACY, honest  # noqa: F401
from tests.conformance.test_red_team_gate import EMU_BASELINE, _timed_run
from tt_conformance.baseline import baseline_dir_of
from tt_conformance.cli import conformance as cli
from tt_conformance.cli import gate as gate_cli
from tt_conformance.identity import launch_options, profile_key
from tt_conformance.report import PerfFigure, PerfTargetResult, load_report
from tt_conformance.selection import coverage_of
from tt_conformance.tiers import derive_tier
from tt_conformance.writers import write_report

FIG = "ttft_median@i128o128c1"


def _pair(tmp_path: Path, make_report: Any, edit: Any) -> tuple[Path, Path]:
    base = _timed_run(make_report, 1, device="T3K")
    cand = _timed_run(make_report, 2, device="T3K", tt_metal="v2")
    b = write_report(base, tmp_path / "base").json
    c = write_report(cand, tmp_path / "cand").json
    data = json.loads(c.read_text())
    edit(data)
    c.write_text(json.dumps(data))
    return b, c


def _gate(b: Path, c: Path, *extra: str) -> int:
    return gate_cli.main(["--baseline", str(b), "--candidate", str(c), *extra])


def _slower(data: dict[str, Any], factor: float = 3.0) -> None:
    data["perf"][FIG]["value"] *= factor


# ------------------------------------- finding 3: the candidate describes its own figure


def test_an_honest_new_run_gates_ok_and_a_3x_slower_ttft_regresses(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    b, c = _pair(tmp_path, make_report, lambda d: None)
    assert _gate(b, c) == 0
    b, c = _pair(tmp_path / "slow", make_report, _slower)
    capsys.readouterr()
    assert _gate(b, c) == 1
    assert f"perf {FIG}" in capsys.readouterr().out


def test_fewer_samples_declared_by_the_candidate_do_not_ungate_a_figure_the_baseline_gates(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """rt44 G1: 'samples': 1 in the candidate's slow figure gave OK."""

    def edit(d: dict[str, Any]) -> None:
        _slower(d)
        d["perf"][FIG]["samples"] = 1

    b, c = _pair(tmp_path, make_report, edit)
    assert _gate(b, c) == 1
    out = capsys.readouterr().out
    assert f"perf {FIG}: gated as in the baseline, although the candidate's 1 samples" in out
    assert "- perf " + FIG in out


def test_a_statistic_its_name_contradicts_is_inconsistent(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """rt44 G2: 'stat': 'mean' on ttft_median (a mean is not gated by default) gave OK."""

    def edit(d: dict[str, Any]) -> None:
        _slower(d)
        d["perf"][FIG]["stat"] = "mean"

    b, c = _pair(tmp_path, make_report, edit)
    assert _gate(b, c) == 2
    err = capsys.readouterr().err
    assert (
        f"field 'perf.{FIG}.stat': stored stat 'mean', the figure's name makes it 'median'" in err
    )


def test_a_flag_only_the_candidate_carries_does_not_excuse_its_drop(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """rt44 G3: 'flag': 'burst delivery' in the candidate's slow figure gave OK. A report stores
    no raw samples to re-derive the flag from: it is said, and the figure gated."""

    def flagged(slow: bool) -> Any:
        def edit(d: dict[str, Any]) -> None:
            if slow:
                _slower(d)
            d["perf"][FIG]["flag"] = "burst delivery"

        return edit

    b, c = _pair(tmp_path, make_report, flagged(slow=True))
    assert _gate(b, c) == 1
    out = capsys.readouterr().out
    assert f"perf {FIG}: the candidate flags it unreliable (burst delivery); gated" in out
    # Honest control: a flagged figure that did not drop is noted, not a regression.
    b, c = _pair(tmp_path / "ok", make_report, flagged(slow=False))
    assert _gate(b, c) == 0


# ------------------------------------------ finding 5: launch options and model class


def test_launch_options_and_environment_are_part_of_the_setup(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """rt44 G4: the candidate served fp8 KV cache, fp8 weights, float16 under another env:
    'Identity (everything else is equal)', OK. Now every differing option is named, exit 2."""

    def edit(d: dict[str, Any]) -> None:
        d["server_options"] = {
            "max_num_seqs": 32,
            "vllm_args": ["--kv-cache-dtype=fp8", "--quantization", "fp8", "--dtype=float16"],
            "env": {"TT_LLAMA_TEXT_VER": "other"},
        }

    b, c = _pair(tmp_path, make_report, edit)
    assert _gate(b, c) == 2
    err = capsys.readouterr().err
    for named in (
        "vllm_args.--kv-cache-dtype: not given -> 'fp8'",
        "vllm_args.--quantization: not given -> 'fp8'",
        "vllm_args.--dtype: not given -> 'float16'",
        "env.TT_LLAMA_TEXT_VER: not given -> 'other'",
    ):
        assert named in err
    # Allowed by name, the verdict records it.
    assert _gate(b, c, "--allow-difference", "vllm_args", "--allow-difference", "env") == 0
    assert "allowed difference: vllm_args.--kv-cache-dtype" in capsys.readouterr().out


def test_result_neutral_launch_options_do_not_split_the_setup(
    tmp_path: Path, make_report: Any
) -> None:
    """Honest control: another port, host or log level is the same setup (gate, matrix row,
    history series: one profile key)."""

    def launched(*args: str) -> Any:
        def edit(d: dict[str, Any]) -> None:
            d["server_options"] = {"max_num_seqs": 32, "vllm_args": ["--max-num-seqs=32", *args]}

        return edit

    b, c = _pair(tmp_path, make_report, launched("--port", "8001", "--uvicorn-log-level=debug"))
    data = json.loads(b.read_text())
    launched("--port=8000", "--host", "0.0.0.0")(data)
    b.write_text(json.dumps(data))
    assert _gate(b, c) == 0
    base, cand = load_report(b), load_report(c)
    assert launch_options(base) == launch_options(cand)
    assert profile_key(base) == profile_key(cand)
    assert launch_options(cand)["vllm_args.--max-num-seqs"] == "32"


def test_another_model_class_is_another_baseline_and_unrecorded_weights_are_said(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """rt44 G6: another model class under the same served name, weights recorded by neither
    run: OK, nothing said. Now the class is a fixed axis (exit 2, never allowable) and the
    unrecorded weights are stated in the verdict."""

    def edit(d: dict[str, Any]) -> None:
        d["server"]["model_class"] = "SomeOtherForCausalLM"

    b, c = _pair(tmp_path, make_report, edit)
    assert _gate(b, c) == 2
    assert "model_class: not recorded -> 'SomeOtherForCausalLM'" in capsys.readouterr().err
    assert _gate(b, c, "--allow-difference", "model_class") == 2
    b, c = _pair(tmp_path / "same", make_report, lambda d: None)
    capsys.readouterr()
    assert _gate(b, c) == 0
    assert "weights not recorded on either side: cannot tell a checkpoint change" in (
        capsys.readouterr().out
    )


# ------------------------------------------------- finding 8: the tier a report leaves out


def test_a_candidate_with_its_tier_removed_still_drops_a_tier(
    tmp_path: Path, make_report: Any, vouch: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """rt44 G5: baseline complete (T/S/U 55 % of the reference), candidate functional (49 %):
    with 'tier': null and the T/S/U figure's samples cut to 4, OK. The gate compares the tiers
    it derives from both runs, never the stored ones."""

    def run(seed: int, tps: float, metal: str) -> Any:
        r = _timed_run(make_report, seed, device="T3K", tt_metal=metal, accuracy=(ACCURACY,))
        fig = PerfFigure(
            name="tps_user_median@i128o128c1", value=tps, unit="tok/s/u", better="higher",
            check="m::check_0", metric="tps_user", stat="median", samples=16,
        )  # fmt: skip
        frac = tps / 100
        t = PerfTargetResult(
            figure=fig.name, reference=100.0, source="published", functional=0.1, complete=0.5,
            target=0.8, fraction=frac, met="complete" if frac >= 0.5 else "functional",
        )  # fmt: skip
        # TPOT as the harness measures it behind that T/S/U (1000 / TPOT: restated.py).
        tpot = r.perf["tpot_median@i128o128c1"].model_copy(update={"value": 1000 / tps})
        r = r.replace(perf={**r.perf, fig.name: fig, tpot.name: tpot}, perf_targets=(t,))
        cov = coverage_of(
            r.checks, deselected=0, keyword=None, markers=None, args=(), suite=("m",),
            device="T3K", lanes=1,
        )  # fmt: skip
        r = vouch(r.replace(coverage=cov))
        return r.replace(tier=derive_tier(r))

    base, cand = run(1, 55.0, "v1"), run(2, 49.0, "v2")
    b = write_report(base, tmp_path / "base").json
    c = write_report(cand, tmp_path / "cand").json
    data = json.loads(c.read_text())
    data["tier"] = None
    data["perf"]["tps_user_median@i128o128c1"]["samples"] = 4
    c.write_text(json.dumps(data))
    # A schema-4 report stores its tier: null is a removed one, refused naming the field.
    assert _gate(b, c) == 2
    assert "field 'tier': null in a schema-4 report" in capsys.readouterr().err
    # Its stored tier kept, the samples cut: the gate derives the tiers and the drop stands.
    data["tier"] = json.loads(write_report(cand, tmp_path / "kept").json.read_text())["tier"]
    c.write_text(json.dumps(data))
    assert _gate(b, c) == 1
    out = capsys.readouterr().out
    assert "tier dropped from complete to functional" in out
    # Honest control: the same tier on both sides says nothing about tiers.
    c2 = write_report(run(3, 56.0, "v2"), tmp_path / "cand2").json
    assert _gate(b, c2) == 0
    assert "tier" not in capsys.readouterr().out.split("Performance")[0]


# ---------------------------------------------- finding 11: a saved OK of amended content


def test_a_saved_gate_ok_does_not_title_the_report_amended_since(
    tmp_path: Path,
    make_report: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """rt44 G7: gated OK, then amended in place under the same run id (3x slower TTFT, as
    import-bench --replace-own amends a run); the saved OK still titled its summary."""
    b, c = _pair(tmp_path, make_report, lambda d: None)
    baselines = tmp_path / "repo" / "baselines"
    harness_checkout(tmp_path / "repo", monkeypatch)  # an OK counts against committed files
    committed = baseline_dir_of(baselines, load_report(b))  # where promote puts b
    committed.mkdir(parents=True)
    shutil.copy(b, committed / "baseline.json")
    commit_all(tmp_path / "repo", "baseline")
    assert _gate(b, c) == 0
    saved = tmp_path / "gate.txt"
    saved.write_text(capsys.readouterr().out)

    def title() -> str:
        out = tmp_path / f"summary{len(list(tmp_path.glob('summary*')))}.md"  # --out appends
        args = ["summary", str(c), "--gate-output", str(saved), "--out", str(out)]
        assert cli.main([*args, "--baselines-dir", str(baselines)]) == 0
        return out.read_text().splitlines()[0]

    # Honest control: the report the gate judged is titled by its verdict.
    assert title().startswith("## gate OK (no regression; same weights not proven)")
    data = json.loads(c.read_text())
    _slower(data)
    c.write_text(json.dumps(data))
    assert _gate(b, c) == 1
    capsys.readouterr()
    amended = title()
    assert "gate OK" not in amended
    assert amended.startswith("## gate output not recognised (it judged other content")


# --------------------------------------------------- finding 12: a retried pass relabelled


def test_a_retried_pass_relabelled_pass_is_inconsistent(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """rt44 G8: 'outcome': 'pass' with 'attempts': 2 kept (an unlisted flaky check, a
    regression) gave OK. More than one attempt and a pass is 'flaky' by definition."""

    def flaky(d: dict[str, Any]) -> None:
        d["checks"][0].update(outcome="flaky", attempts=2)
        d["totals"] = None

    b, c = _pair(tmp_path, make_report, flaky)
    assert _gate(b, c) == 1  # honest: an unlisted flaky check regresses

    def relabelled(d: dict[str, Any]) -> None:
        d["checks"][0].update(outcome="pass", attempts=2)

    b, c = _pair(tmp_path / "2", make_report, relabelled)
    capsys.readouterr()
    assert _gate(b, c) == 2
    err = capsys.readouterr().err
    assert "field 'checks[0].outcome' (m::check_0): stored 'pass' after 2 attempts" in err


# -------------------------------------------- finding 6: a jittered copy of the baseline


def _jittered_copy(data: dict[str, Any], seed: int = 7) -> dict[str, Any]:
    """rt44_copy_attack.py: the committed baseline under a new run id and window, durations
    x U(0.85, 1.15) re-timed inside the window, each figure x U(0.97, 1.03)."""
    rng = random.Random(seed)
    out: dict[str, Any] = json.loads(json.dumps(data))
    out["run_id"] = "20261206T101500Z-0badc0de"
    start = datetime(2026, 12, 6, 10, 15, 0, tzinfo=timezone.utc)
    at = start + timedelta(seconds=1)

    def iso(t: datetime) -> str:
        return t.isoformat(timespec="seconds").replace("+00:00", "Z")

    for c in out["checks"]:
        took = round(c["duration_s"] * rng.uniform(0.85, 1.15), 6)
        c.update(started_at=iso(at), finished_at=iso(at + timedelta(seconds=took)))
        c["duration_s"] = took
        at += timedelta(seconds=took + 0.02)
    out["started_at"], out["finished_at"] = iso(start), iso(at + timedelta(seconds=1))
    for fig in out["perf"].values():
        fig["value"] *= rng.uniform(0.97, 1.03)
    return out


def test_a_jittered_copy_of_the_committed_baseline_contradicts_its_derived_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """rt44 copy attack: every number jittered on its own, so tokens/s/user is no longer
    1000 / TPOT nor T/S its multiple: the copy is inconsistent (exit 2 naming the figures).
    The honest re-run (derived figures computed from the measured ones) gates OK:
    test_red_team_gate.py::test_the_committed_emulated_baseline_still_gates_ok_..."""
    base = EMU_BASELINE / "baseline.json"
    cand = tmp_path / "candidate.json"
    cand.write_text(json.dumps(_jittered_copy(json.loads(base.read_text()))))
    assert _gate(base, cand) == 2
    err = capsys.readouterr().err
    assert "field 'perf.tps_user_median@i128o128c1.value': stored" in err
    assert "computed from tpot_median@i128o128c1" in err


def test_a_run_flagging_its_own_figure_does_not_hide_its_drop_in_the_history(
    honest: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    """rt44 finding 3, the history's side: the perf-drop marking skipped any flagged figure, so
    a run that flagged its own slow T/S/U showed no drop. A flagged reference still does."""
    from tests.conformance.test_red_team import FIGURE
    from tt_conformance import history

    def flagged(report: Any) -> Any:
        fig = report.perf[FIGURE].model_copy(update={"flag": "burst delivery"})
        return report.replace(perf={**report.perf, FIGURE: fig})

    good = honest(tt_metal="rc35", finished_at="2025-01-01T00:00:00Z")
    slow = honest(tt_metal="rc36", finished_at="2025-01-02T00:00:00Z", tps=20.0)

    def drops(*reports: Any) -> tuple[str, ...]:
        runs = [history.Run(Path(f"{r.run_id}.json"), r) for r in reports]
        story = history.cell_story(runs)
        assert story is not None
        return story.perf_drops

    (line,) = drops(good, flagged(slow))
    assert line.startswith("T/S/U @i128o128c1: 90 -> 20") and "burst delivery" in line
    assert drops(flagged(good), slow) == ()  # honest control: no reliable reference
