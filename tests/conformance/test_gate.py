"""Release gate: every outcome of comparing a candidate with a baseline, and the exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tt_conformance import gate
from tt_conformance.cli import gate as gate_cli
from tt_conformance.expectations import expectations_from_dict
from tt_conformance.report import CollectionError
from tt_conformance.writers import write_report

BASE = {"m::a": "pass", "m::b": "pass", "m::c": "fail", "m::d": "xfail", "m::e": "pass"}


def _exp(**fields: Any):
    return expectations_from_dict({"schema_version": 1, **fields}, "e.json")


def test_identical_reports_pass(make_report) -> None:
    result = gate.compare(make_report(BASE), make_report(BASE))
    assert result.exit_code == gate.EXIT_OK
    assert result.regressions == [] and result.improvements == []
    assert any("m::c: still failing" in n for n in result.notes)


def test_pass_to_fail_is_a_regression(make_report) -> None:
    result = gate.compare(make_report(BASE), make_report({**BASE, "m::a": "fail"}))
    assert result.exit_code == gate.EXIT_REGRESSION
    assert result.regressions == ["m::a: pass -> fail: why fail"]


def test_pass_to_error_and_pass_to_skip_are_regressions(make_report) -> None:
    candidate = make_report({**BASE, "m::a": "error", "m::b": "skip"})
    result = gate.compare(make_report(BASE), candidate)
    assert result.regressions == [
        "m::a: pass -> error: why error",
        "m::b: pass -> skip, no longer verified: why skip",
    ]


def test_missing_check_is_a_regression(make_report) -> None:
    candidate = {k: v for k, v in BASE.items() if k != "m::e"}
    result = gate.compare(make_report(BASE), make_report(candidate))
    assert result.regressions == ["m::e: missing from the candidate (baseline: pass)"]


def test_candidate_collection_error_is_a_regression(make_report) -> None:
    cand = make_report(
        BASE, collection_errors=(CollectionError(nodeid="checks/t.py", message="E ImportError"),)
    )
    result = gate.compare(make_report(BASE), cand)
    assert result.regressions == ["collection error in checks/t.py: E ImportError"]


def test_improvements_are_listed_not_gated(make_report) -> None:
    result = gate.compare(make_report(BASE), make_report({**BASE, "m::c": "pass", "m::d": "xpass"}))
    assert result.exit_code == gate.EXIT_OK
    assert result.improvements == [
        "m::c: fail -> pass",
        "m::d: xfail -> xpass, expected failure now passes (update the expectations)",
        "tier rose from fail to experimental",
    ]


def test_expected_failure_per_expectations_is_not_a_regression(make_report) -> None:
    exp = _exp(expected_failures=[{"check": "m::a", "reason": "tt-metal #123"}])
    # Whether the run applied the expectation (xfail) or not (fail), the gate accepts it.
    for outcome in ("fail", "xfail"):
        result = gate.compare(make_report(BASE), make_report({**BASE, "m::a": outcome}), exp)
        assert result.exit_code == gate.EXIT_OK, outcome
        assert len(result.expected) == 2  # m::a and the already-expected m::d


def test_xfail_not_in_gate_expectations_is_a_regression(make_report) -> None:
    # The run turned m::a into xfail (a code marker or other expectations), but the gate's
    # expectations do not list it: a check that passed in the baseline is no longer verified.
    candidate = make_report({**BASE, "m::a": "xfail"})
    result = gate.compare(make_report(BASE), candidate)
    assert result.exit_code == gate.EXIT_REGRESSION
    assert result.regressions == [
        "m::a: pass -> xfail, not an expected failure in the gate's expectations: why xfail"
    ]
    # Listed by the gate's expectations: accepted. Already xfail in the baseline: still expected.
    listed = _exp(expected_failures=[{"check": "m::*", "reason": "known"}])
    assert gate.compare(make_report(BASE), candidate, listed).exit_code == gate.EXIT_OK
    assert "m::d: xfail -> xfail, expected failure: why xfail" in result.expected


def test_empty_baseline_fails_closed(make_report) -> None:
    with pytest.raises(gate.GateInputError, match="has no checks"):
        gate.compare(make_report({}), make_report(BASE))


def test_flaky_pass_is_not_a_regression_but_flaky_total_failure_is(make_report) -> None:
    exp = _exp(flaky=[{"check": "m::a", "reason": "timing"}])
    ok = gate.compare(make_report(BASE), make_report({**BASE, "m::a": "flaky"}), exp)
    assert ok.exit_code == gate.EXIT_OK and ok.flaky == ["m::a: why flaky"]
    bad = gate.compare(make_report(BASE), make_report({**BASE, "m::a": "fail"}), exp)
    assert bad.regressions == [
        "m::a: pass -> fail (listed as flaky, failed every attempt): why fail"
    ]


def test_new_checks_are_notes(make_report) -> None:
    result = gate.compare(make_report(BASE), make_report({**BASE, "m::new": "fail"}))
    assert result.exit_code == gate.EXIT_OK
    assert "m::new: new check, fail: why fail" in result.notes


@pytest.mark.parametrize(
    ("better", "base", "cand", "verdict"),
    [
        ("lower", 100.0, 109.0, "ok"),
        ("lower", 100.0, 111.0, "regression"),  # latency up 11 % > 10 %
        ("lower", 100.0, 85.0, "improvement"),
        ("higher", 1000.0, 905.0, "ok"),
        ("higher", 1000.0, 890.0, "regression"),  # throughput down 11 %
        ("higher", 1000.0, 1200.0, "improvement"),
    ],
)
def test_perf_tolerance_is_direction_aware(make_report, better, base, cand, verdict) -> None:
    unit = "ms" if better == "lower" else "tok/s"
    result = gate.compare(
        make_report(BASE, perf={"fig": (base, unit, better)}),
        make_report(BASE, perf={"fig": (cand, unit, better)}),
        default_tolerance=0.10,
    )
    assert [p.verdict for p in result.perf] == [verdict]
    assert (result.exit_code == gate.EXIT_REGRESSION) == (verdict == "regression")


def test_perf_is_informational_without_a_tolerance(make_report) -> None:
    # Emulated serving figures are informational unless the gate sets a tolerance.
    result = gate.compare(
        make_report(BASE, device="emulated", perf={"ttft": (100.0, "ms", "lower"),
                                                   "tput": (50.0, "tok/s", "higher")}),
        make_report(BASE, device="emulated", perf={"ttft": (900.0, "ms", "lower"),
                                                   "tput": (5.0, "tok/s", "higher")}),
    )  # fmt: skip
    assert [(p.verdict, p.tolerance) for p in result.perf] == [("not gated", None)] * 2
    assert result.exit_code == gate.EXIT_OK and result.regressions == []
    # A default_perf_tolerance in the expectations gates them.
    gated = gate.compare(
        make_report(BASE, perf={"ttft": (100.0, "ms", "lower")}),
        make_report(BASE, perf={"ttft": (900.0, "ms", "lower")}),
        _exp(default_perf_tolerance=0.5),
    )
    assert [p.verdict for p in gated.perf] == ["regression"]


def test_hardware_perf_is_gated_at_the_default_tolerance(make_report) -> None:
    base = make_report(
        BASE, perf={"ttft": (100.0, "ms", "lower"), "tps": (50.0, "tok/s", "higher")}
    )
    worse = make_report(
        BASE, perf={"ttft": (115.0, "ms", "lower"), "tps": (46.0, "tok/s", "higher")}
    )
    result = gate.compare(base, worse)  # device N150: hardware
    assert {p.name: (p.verdict, p.tolerance) for p in result.perf} == {
        "ttft": ("regression", gate.HARDWARE_PERF_TOLERANCE),
        "tps": ("ok", gate.HARDWARE_PERF_TOLERANCE),
    }
    assert result.exit_code == gate.EXIT_REGRESSION
    # null in the expectations keeps a hardware figure informational.
    assert gate.compare(base, worse, _exp(perf_tolerances={"ttft": None})).exit_code == 0


def test_a_figure_the_baseline_flags_is_not_gated_one_only_the_candidate_flags_is(
    make_report,
) -> None:
    def flagged(report):
        fig = report.perf["ttft"].model_copy(update={"flag": "burst delivery: x"})
        return report.replace(perf={"ttft": fig})

    base = make_report(BASE, perf={"ttft": (100.0, "ms", "lower")})
    cand = make_report(BASE, perf={"ttft": (900.0, "ms", "lower")})
    result = gate.compare(flagged(base), cand, default_tolerance=0.1)
    assert [p.verdict for p in result.perf] == ["unreliable"]
    assert result.exit_code == gate.EXIT_OK
    assert any("the baseline's is flagged unreliable: burst delivery" in n for n in result.notes)
    # The candidate's own word cannot excuse its drop (no raw samples to re-derive it from).
    result = gate.compare(base, flagged(cand), default_tolerance=0.1)
    assert [p.verdict for p in result.perf] == ["regression"]
    assert any("the candidate flags it unreliable (burst delivery" in n for n in result.notes)


def test_perf_tolerance_from_expectations(make_report) -> None:
    perf_b = {"ttft": (100.0, "ms", "lower"), "tpot": (10.0, "ms", "lower")}
    perf_c = {"ttft": (125.0, "ms", "lower"), "tpot": (30.0, "ms", "lower")}
    exp = _exp(perf_tolerances={"ttft": 0.3, "tpot": None})
    result = gate.compare(make_report(BASE, perf=perf_b), make_report(BASE, perf=perf_c), exp)
    assert {p.name: p.verdict for p in result.perf} == {"ttft": "ok", "tpot": "not gated"}
    assert result.exit_code == gate.EXIT_OK


def test_missing_perf_figure(make_report) -> None:
    base = make_report(BASE, perf={"ttft": (100.0, "ms", "lower")})
    result = gate.compare(base, make_report(BASE), default_tolerance=0.10)
    assert result.regressions == ["perf ttft: missing from the candidate"]
    ungated = gate.compare(base, make_report(BASE), _exp(perf_tolerances={"ttft": None}), 0.10)
    assert ungated.exit_code == gate.EXIT_OK
    emulated = base.replace(device="emulated")
    no_tolerance = gate.compare(emulated, make_report(BASE, device="emulated"))
    assert no_tolerance.exit_code == gate.EXIT_OK  # emulated, no tolerance at all


def test_perf_unit_change_is_bad_input(make_report) -> None:
    with pytest.raises(gate.GateInputError, match="'ttft' changed from 'ms'/lower"):
        gate.compare(
            make_report(BASE, perf={"ttft": (100.0, "ms", "lower")}),
            make_report(BASE, perf={"ttft": (0.1, "s", "lower")}),
        )


# ----------------------------------------------------------------------------- CLI


# BASE's failing and expected-failing checks, explained: the gate holds its baseline to
# promote's bar (red team 44, item 6).
BASE_KNOWN = [{"check": "m::c", "reason": "known"}, {"check": "m::d", "reason": "known"}]


def _write(tmp_path: Path, name: str, report) -> Path:
    path = write_report(report, tmp_path / name).json
    if name == "base":
        known = {"schema_version": 1, "expected_failures": BASE_KNOWN}
        (path.parent / "expectations.json").write_text(json.dumps(known))
    return path


def test_cli_regression_diff_and_exit_code(tmp_path: Path, make_report, capsys) -> None:
    b = _write(
        tmp_path, "base", make_report(BASE, perf={"tpot": (10.0, "ms", "lower")}, tt_metal="v1")
    )
    candidate = make_report(
        {**BASE, "m::b": "fail", "m::c": "pass"},
        perf={"tpot": (13.0, "ms", "lower")},
        tt_metal="v2",
    )
    c = _write(tmp_path, "cand", candidate)
    args = ["--baseline", str(b), "--candidate", str(c), "--default-perf-tolerance", "0.1"]
    assert gate_cli.main(args) == gate.EXIT_REGRESSION
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "tt-conformance gate: REGRESSION (2 found)"  # the first line
    assert "tt-metal v1" in out and "tt-metal v2" in out
    assert "  - m::b: pass -> fail: why fail" in out
    assert "  - perf tpot: 10 -> 13 ms (30.0% worse, tolerance 10.0%)" in out
    assert "  + m::c: fail -> pass" in out


def test_cli_perf_is_not_gated_by_default(tmp_path: Path, make_report, capsys) -> None:
    perf_b, perf_c = {"tpot": (10.0, "ms", "lower")}, {"tpot": (100.0, "ms", "lower")}
    b = _write(tmp_path, "base", make_report(BASE, device="emulated", perf=perf_b))
    c = _write(tmp_path, "cand", make_report(BASE, device="emulated", perf=perf_c))
    assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == gate.EXIT_OK
    out = capsys.readouterr().out
    assert "OK (no regression; same weights not proven)" in out
    assert "900.0% worse" in out and "not gated" in out
    args = ["--baseline", str(b), "--candidate", str(c), "--default-perf-tolerance", "0.5"]
    assert gate_cli.main(args) == gate.EXIT_REGRESSION
    assert "  - perf tpot: 10 -> 100 ms (900.0% worse, tolerance 50.0%)" in capsys.readouterr().out


def test_cli_empty_baseline_fails_closed(tmp_path: Path, make_report, capsys) -> None:
    b = _write(tmp_path, "base", make_report({}))
    c = _write(tmp_path, "cand", make_report(BASE))
    assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "failing closed" in err and "has no checks" in err


def test_cli_ok_uses_expectations_next_to_baseline(tmp_path: Path, make_report, capsys) -> None:
    b = _write(tmp_path, "base", make_report(BASE))
    (b.parent / "expectations.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "expected_failures": [{"check": "m::a", "reason": "known"}, *BASE_KNOWN],
            }
        )
    )
    c = _write(tmp_path, "cand", make_report({**BASE, "m::a": "fail"}))
    assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == gate.EXIT_OK
    out = capsys.readouterr().out
    assert f"expectations: {b.parent / 'expectations.json'}" in out
    assert (
        "OK (no regression; same weights not proven)" in out
        and "~ m::a: pass -> fail, expected failure: known" in out
    )


@pytest.mark.parametrize("which", ["baseline", "candidate"])
def test_cli_missing_or_malformed_report_fails_closed(tmp_path: Path, make_report, capsys, which):
    good = _write(tmp_path, "good", make_report(BASE))
    missing = tmp_path / "nope.json"
    args = {"baseline": good, "candidate": good, which: missing}
    assert (
        gate_cli.main(["--baseline", str(args["baseline"]), "--candidate", str(args["candidate"])])
        == gate.EXIT_BAD_INPUT
    )
    assert f"{missing}: report file not found" in capsys.readouterr().err
    malformed = tmp_path / "malformed.json"
    data = json.loads(good.read_text())
    del data["checks"][0]["outcome"]
    malformed.write_text(json.dumps(data))
    args[which] = malformed
    assert (
        gate_cli.main(["--baseline", str(args["baseline"]), "--candidate", str(args["candidate"])])
        == gate.EXIT_BAD_INPUT
    )
    err = capsys.readouterr().err
    assert "failing closed" in err and "field 'checks[0].outcome': missing required field" in err


def test_cli_bad_expectations_and_mismatch(tmp_path: Path, make_report, capsys) -> None:
    b = _write(tmp_path, "base", make_report(BASE))
    c = _write(tmp_path, "cand", make_report(BASE, device="T3K"))
    assert gate_cli.main(["--baseline", str(b), "--candidate", str(c)]) == gate.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "device: 'N150' -> 'T3K'" in err and "--allow-difference" in err
    # Another device is another baseline: no option accepts it (issue 44, item 8).
    args = ["--baseline", str(b), "--candidate", str(c), "--allow-difference", "device"]
    assert gate_cli.main(args) == gate.EXIT_BAD_INPUT
    assert "device cannot be under test or an allowed difference" in capsys.readouterr().err
    run = make_report(BASE)
    longer = _write(
        tmp_path, "long", run.replace(server=run.server.model_copy(update={"max_model_len": 4096}))
    )
    args = ["--baseline", str(b), "--candidate", str(longer), "--allow-difference", "max_model_len"]
    assert gate_cli.main(args) == gate.EXIT_OK
    assert "allowed difference: max_model_len: 2048 -> 4096" in capsys.readouterr().out
    with pytest.raises(SystemExit) as usage:  # not an axis name: argparse's usage error
        gate_cli.main([*args, "--axis", "tt-metal"])
    assert usage.value.code == gate.EXIT_BAD_INPUT
    assert "unknown identity axis 'tt-metal'" in capsys.readouterr().err
    bad = tmp_path / "e.json"
    bad.write_text("{not json")
    code = gate_cli.main(["--baseline", str(b), "--candidate", str(b), "--expectations", str(bad)])
    assert code == gate.EXIT_BAD_INPUT
    assert "e.json: expectations file is not valid JSON" in capsys.readouterr().err
    code = gate_cli.main(
        ["--baseline", str(b), "--candidate", str(b), "--default-perf-tolerance", "-1"]
    )
    assert code == gate.EXIT_BAD_INPUT


def test_perf_table_words_the_direction() -> None:
    from tt_conformance.formats.text import change_text

    assert change_text(0.25) == "25.0% worse"
    assert change_text(-0.2) == "20.0% better"
    assert change_text(0.0) == "unchanged"
    assert change_text(None) == "—"
