"""Red team rt44b against the gate's inputs: a launch option smuggled inside a neutral one,
unpinned weights, a saved gate OK judged against another baseline. Each attack refused (exit 2
naming it) or labelled, next to an honest run the same rule lets through.

Pairs are two independent hardware (T3K) runs (`_pair` of test_red_team_rt44_gate.py); the
candidate's file is then edited as the red team edited it."""

from __future__ import annotations

import contextlib
import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harnessgit import commit_all, harness_checkout
from tests.conformance.test_red_team_rt44_gate import _gate, _pair
from tt_conformance.baseline import find_baseline
from tt_conformance.cli import conformance as cli
from tt_conformance.cli import gate as gate_cli
from tt_conformance.independence import clock_problems
from tt_conformance.report import load_report
from tt_conformance.writers import write_report

FIGURE = "ttft_median@i128o128c1"


def _launch_pair(
    tmp_path: Path, make_report: Any, base_args: list[str], cand_args: list[str]
) -> tuple[Path, Path]:
    def launched(args: list[str]) -> Any:
        def edit(d: dict[str, Any]) -> None:
            d["server_options"] = {"max_num_seqs": 32, "vllm_args": ["--max-num-seqs=32", *args]}

        return edit

    b, c = _pair(tmp_path, make_report, launched(cand_args))
    data = json.loads(b.read_text())
    launched(base_args)(data)
    b.write_text(json.dumps(data))
    return b, c


# ------------------------------------- item 3 (#6): an option inside a neutral option's element


@pytest.mark.parametrize(
    ("smuggled", "named"),
    [
        (["--port=8000 --kv-cache-dtype=fp8"], "vllm_args.--port: not given -> '8000 --kv-"),
        (["--uvicorn-log-level=info --kv-cache-dtype=fp8"], "--uvicorn-log-level: not given"),
        (["--port", "8000 --kv-cache-dtype fp8"], "vllm_args.--port: not given -> '8000 --kv"),
        (["--port", "--kv-cache-dtype=fp8"], "vllm_args.--kv-cache-dtype: not given -> 'fp8'"),
        (["--host", "'0.0.0.0'"], "vllm_args.--host: not given -> \"'0.0.0.0'\""),
        # One word, but no port: what the option takes is a port, a host, a log level.
        (["--port=8000--kv-cache-dtype=fp8"], "vllm_args.--port: not given -> '8000--kv-"),
        (["--port=8000\u00a0--kv-cache-dtype=fp8"], "vllm_args.--port: not given -> '8000"),
        (["--uvicorn-log-level=info,fp8"], "vllm_args.--uvicorn-log-level: not given"),
        (["--disable-log-stats", "--dtype=float16"], "vllm_args.--dtype: not given"),
    ],
)
def test_a_neutral_option_carrying_another_in_its_element_is_a_launch_difference(
    tmp_path: Path,
    make_report: Any,
    capsys: pytest.CaptureFixture[str],
    smuggled: list[str],
    named: str,
) -> None:
    """rt44b #6: one argv element '--port=8000 --kv-cache-dtype=fp8' read as the port (launch
    neutral): OK. An element is neutral only when it is exactly one shell word of a neutral
    option (or its value); anything else is kept as the option's value and differs."""
    b, c = _launch_pair(tmp_path, make_report, ["--port=8000"], smuggled)
    assert _gate(b, c) == 2
    assert named in capsys.readouterr().err


def test_honest_neutral_options_each_in_its_own_element_still_gate_ok(
    tmp_path: Path, make_report: Any
) -> None:
    """Control: another port, host and log levels, each exactly a neutral option (or its value
    element); a bare neutral flag takes no value, so the served model after it stays the
    model: the same setup."""
    b, c = _launch_pair(
        tmp_path,
        make_report,
        ["m", "--port=8000", "--host", "0.0.0.0"],
        ["--port", "8001", "--uvicorn-log-level=INFO", "--host=::", "--disable-log-stats", "m"],
    )
    assert _gate(b, c) == 0


# -------------------------- item 5 (#10): a saved gate OK judged against another baseline


def _saved_gate(tmp_path: Path, name: str, *args: str) -> tuple[int, Path]:
    saved = tmp_path / f"{name}.txt"
    with saved.open("w") as fh, contextlib.redirect_stdout(fh):
        code = gate_cli.main(list(args))
    return code, saved


def _summary_title(report: Path, saved: Path, baselines: Path) -> str:
    out = report.parent / f"summary-{saved.stem}-{baselines.name}.md"  # --out appends
    args = ["summary", str(report), "--gate-output", str(saved), "--out", str(out)]
    assert cli.main([*args, "--baselines-dir", str(baselines)]) == 0
    return out.read_text().splitlines()[0]


def test_a_saved_gate_ok_titles_a_run_only_against_its_committed_baseline_and_expectations(
    tmp_path: Path, make_report: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rt44b #10: a failing run gated OK against a doctored baseline failing the same check,
    with its own expectations calling it an expected failure; the saved OK titled the run's
    summary "gate OK". The gate names the baseline, candidate and expectations it judged by
    digest; the summary takes the OK only when those are the committed ones for the run."""

    def run(name: str, b: str, ttft: float = 100.0, **kwargs: Any) -> Path:
        perf = {FIGURE: (ttft, "ms", "lower")}
        report = make_report({"m::a": "pass", "m::b": b}, device="T3K", perf=perf, **kwargs)
        return write_report(report, tmp_path / name).json

    def expectations(path: Path, **entries: Any) -> Path:
        path.write_text(json.dumps({"schema_version": 2, **entries}))
        return path

    harness_checkout(tmp_path / "repo", monkeypatch)  # committed: at HEAD of the harness's repo
    baselines = tmp_path / "repo" / "baselines"
    promoted = run("b", "pass")
    assert cli.main(["baseline", "promote", str(promoted), "--baselines-dir", str(baselines)]) == 0
    c = run("c", "fail", tt_metal="v2")
    committed_base = find_baseline(baselines, load_report(c))
    assert committed_base is not None
    # The committed expectations gate the figure at 10 %.
    expectations(committed_base.parent / "expectations.json", perf_tolerances={FIGURE: 0.1})
    commit_all(tmp_path / "repo", "baseline")
    assert gate_cli.main(["--baseline", str(committed_base), "--candidate", str(c)]) == 1
    failure = {"check": "m::b", "reason": "known on this build"}
    excuse = expectations(tmp_path / "own.json", expected_failures=[failure])
    # Another baseline failing the same check, judged by its own expectations: OK.
    d = run("d", "fail")
    code, saved = _saved_gate(
        tmp_path, "doctored", "--baseline", str(d), "--candidate", str(c),
        "--expectations", str(excuse),
    )  # fmt: skip
    assert code == 0
    judged = r"^judged: baseline sha256:\S+, candidate sha256:\S+, expectations sha256:\S+$"
    assert re.search(judged, saved.read_text(), re.M)
    title = _summary_title(c, saved, baselines)
    assert "gate OK" not in title
    assert title.startswith(
        "## gate output not recognised (it judged another baseline than the committed one for "
        "this run's setup: not an OK for this run)"
    )
    # The committed baseline, judged by other expectations than those committed with it: a
    # 3x slower figure made informational.
    slow = run("s", "pass", ttft=300.0, tt_metal="v2")
    assert gate_cli.main(["--baseline", str(committed_base), "--candidate", str(slow)]) == 1
    loose = expectations(tmp_path / "loose.json", perf_tolerances={FIGURE: None})
    code, saved = _saved_gate(
        tmp_path, "excused", "--baseline", str(committed_base), "--candidate", str(slow),
        "--expectations", str(loose),
    )  # fmt: skip
    assert code == 0
    assert _summary_title(slow, saved, baselines).startswith(
        "## gate output not recognised (it judged by other expectations than the committed ones"
    )
    # No baseline committed for the run under the summary's directory: no OK for it either.
    assert _summary_title(slow, saved, tmp_path / "empty").startswith(
        "## gate output not recognised (no baseline is committed for this run's model and device"
    )
    # Honest control: a passing run gated against the committed baseline (its expectations
    # found next to it) titles its summary with the OK.
    passing = run("p", "pass", tt_metal="v2")
    code, saved = _saved_gate(
        tmp_path, "honest", "--baseline", str(committed_base), "--candidate", str(passing)
    )
    assert code == 0
    title = _summary_title(passing, saved, baselines)  # weights recorded by neither (said)
    assert title.startswith("## gate OK (no regression; same weights not proven) — ")


# -------------------------------------------- item 9 (#17): unpinned weights on both runs


@pytest.mark.parametrize(
    "weights",
    [
        "meta-llama/Llama-3.1-8B-Instruct@unresolved",
        "meta-llama/Llama-3.1-8B-Instruct@main",
        "meta-llama/Llama-3.1-8B-Instruct@0e9e39f",  # a short hash: not a whole commit
        "files-sha256:0123456789abcdef",  # file names and sizes only
    ],
)
def test_the_same_unpinned_weights_on_both_runs_do_not_give_an_unqualified_ok(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str], weights: str
) -> None:
    """rt44b #17: server.weights '<repo>@unresolved' on both runs: 'everything else is equal',
    OK. The same name of a hub head (or branch, or file sizes) proves no same checkpoint: the
    verdict line qualifies the OK and the identity says why."""

    def unpinned(d: dict[str, Any]) -> None:
        d["server"]["weights"] = weights

    b, c = _pair(tmp_path, make_report, unpinned)
    data = json.loads(b.read_text())
    unpinned(data)
    b.write_text(json.dumps(data))
    assert _gate(b, c) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "tt-conformance gate: OK (no regression; same weights not proven)"
    assert f"weights unpinned on both sides ({weights!r}: no commit" in out
    assert "under test: tt_metal: 'v1' -> 'v2'" in out


@pytest.mark.parametrize(
    "weights",
    [
        "meta-llama/Llama-3.1-8B-Instruct@0e9e39f7d0a0d4f2b4b1c7f9a3e2d1c0b9a8f7e6",
        "sha256:d9473f7d8eb9575d",
    ],
)
def test_the_same_pinned_weights_on_both_runs_gate_an_unqualified_ok(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str], weights: str
) -> None:
    """Control: a repository at a whole commit, or a digest of the files' bytes, on both runs:
    the same checkpoint, a plain OK. Weights pinned on one run only still differ (exit 2)."""

    def pinned(d: dict[str, Any]) -> None:
        d["server"]["weights"] = weights

    b, c = _pair(tmp_path, make_report, pinned)
    data = json.loads(b.read_text())
    pinned(data)
    b.write_text(json.dumps(data))
    assert _gate(b, c) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "tt-conformance gate: OK (no regression)"
    assert "weights" not in out
    data["server"]["weights"] = "meta-llama/Llama-3.1-8B-Instruct@unresolved"
    b.write_text(json.dumps(data))
    assert _gate(b, c) == 2
    assert "weights: 'meta-llama/Llama-3.1-8B-Instruct@unresolved' -> " in capsys.readouterr().err


# ------------------------------- item 8 (#16): a resynthesised copy of the committed baseline

EMU = Path(__file__).resolve().parents[2] / "reports"
EMU_BASE = EMU / "baselines" / "tt-reference-llama" / "emulated-T3K" / "baseline.json"
EMU_RERUN = EMU / "history" / "tt-reference-llama" / "emulated-T3K"


def _resynthesised(data: dict[str, Any]) -> dict[str, Any]:
    """rt44b resynth.py: the baseline under a new run id, every time 3 h later, durations
    x 1.15 (the top of its U(0.85, 1.15)) with the checks' times left as shifted, base figures
    x 1.02, the derived ones recomputed from them (restated.py), another plugin commit."""
    out: dict[str, Any] = json.loads(json.dumps(data))
    out["run_id"] = "20261207T082909Z-5e5e5e5e"

    def later(stamp: str) -> str:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00")) + timedelta(hours=3)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    out["started_at"], out["finished_at"] = later(out["started_at"]), later(out["finished_at"])
    for c in out["checks"]:
        c.update({k: later(c[k]) for k in ("started_at", "finished_at") if c.get(k)})
        c["duration_s"] = round(c["duration_s"] * 1.15, 6)
    perf = out["perf"]
    for fig in perf.values():
        if fig["stat"] not in ("count", "max") and fig["metric"] not in ("tps_user", "tt_tps"):
            fig["value"] *= 1.02
    for name, fig in perf.items():
        shape = name.partition("@")[2]
        if fig["metric"] == "tps_user":
            fig["value"] = 1000.0 / perf[name.replace("tps_user", "tpot")]["value"]
        if fig["metric"] == "tt_tps":
            fig["value"] = 1000.0 / perf[f"tpot_median@{shape}"]["value"] * fig["concurrency"]
    out["versions"]["plugin_commit"] = "335cc33d6d1d192a613aabaee50ea173597d40b1"
    return out


def test_a_resynthesised_copy_whose_checks_outlast_their_own_times_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """rt44b #16: gate --axis plugin OK on a resynthesised copy of the committed baseline. The
    report stores no raw samples to re-derive a figure from (statistics only; derived figures
    are re-derived from their base, restated.py), but a check's duration is the sum of its
    pytest phases, all inside its own recorded start and end: a duration stretched without its
    times contradicts them (exit 2 naming the field). A copy re-timed consistently is the known
    limit (docs/CONFORMANCE.md, "What the copy check can and cannot see")."""
    copy = tmp_path / "copy.json"
    copy.write_text(json.dumps(_resynthesised(json.loads(EMU_BASE.read_text()))))
    assert _gate(EMU_BASE, copy, "--axis", "plugin") == 2
    err = capsys.readouterr().err
    assert "took longer than their own start-to-end, e.g. " in err


def test_every_committed_run_keeps_its_checks_inside_their_own_times(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Control: every committed report (real runs) meets the rule, and the committed re-run of
    the emulated llama baseline under another plugin commit still gates OK."""
    for path in sorted(EMU.glob("**/*.json")):
        data = json.loads(path.read_text())
        if data.get("kind") == "tt-conformance-report":
            assert clock_problems(load_report(path)) == [], path
    base_run = load_report(EMU_BASE).run_id
    (rerun,) = [p for p in EMU_RERUN.glob("*.json") if load_report(p).run_id != base_run]
    assert _gate(EMU_BASE, rerun, "--axis", "plugin") == 0
    assert capsys.readouterr().out.startswith("tt-conformance gate: OK (no regression)\n")
