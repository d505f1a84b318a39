"""Status tiers derived from checks, the accuracy verdict and the perf targets."""

from __future__ import annotations

import pytest

from tt_conformance.expectations import Expectations, PerfTarget
from tt_conformance.report import CollectionError, PerfFigure
from tt_conformance.tiers import derive_tier, evaluate_targets

TARGETS = Expectations(
    perf_targets={
        "tps_user_mean@i128o128c1": PerfTarget(reference=100.0, source="published: table"),
        "ttft_mean@i128o128c1": PerfTarget(reference=50.0, source="theoretical"),
    }
)


def _with_perf(report, tps_user: float, ttft: float, flag: str | None = None):
    def fig(name, value, unit, better):
        return PerfFigure(name=name, value=value, unit=unit, better=better, check="c", flag=flag)

    perf = {
        "tps_user_mean@i128o128c1": fig("tps_user_mean@i128o128c1", tps_user, "tok/s/u", "higher"),
        "ttft_mean@i128o128c1": fig("ttft_mean@i128o128c1", ttft, "ms", "lower"),
    }
    with_perf = report.replace(perf=perf)
    return with_perf.replace(perf_targets=evaluate_targets(with_perf, TARGETS))


def test_targets_are_fractions_of_the_reference_in_the_right_direction(
    make_report, passing_accuracy
) -> None:
    report = _with_perf(make_report({"m::a": "pass"}, accuracy=(passing_accuracy,)), 60.0, 100.0)
    by_name = {t.figure: t for t in report.perf_targets}
    assert by_name["tps_user_mean@i128o128c1"].fraction == 0.6  # 60 of 100 tok/s/u
    assert by_name["tps_user_mean@i128o128c1"].met == "complete"
    assert by_name["ttft_mean@i128o128c1"].fraction == 0.5  # 50 ms reference, 100 ms measured
    assert by_name["ttft_mean@i128o128c1"].met == "complete"
    missing = evaluate_targets(make_report({"m::a": "pass"}), TARGETS)
    assert {t.met for t in missing} == {"missing"}


@pytest.mark.parametrize(
    ("outcomes", "accuracy", "perf", "tier", "reason", "blocker"),
    [
        ({"m::a": "fail"}, True, None, "fail", "1 failing check(s): m::a", "experimental needs"),
        ({"m::a": "pass"}, False, None, "experimental", "accuracy not measured",
         "functional needs a passing accuracy verdict"),
        ({"m::a": "pass"}, True, (5.0, 100.0), "experimental", "below the functional target",
         "functional needs every perf target"),
        ({"m::a": "pass"}, True, (30.0, 60.0), "functional", "functional fraction",
         "complete needs perf at the complete fraction"),
        ({"m::a": "pass", "m::b": "xfail"}, True, (90.0, 50.0), "functional", "functional",
         "no expected failures"),
        ({"m::a": "pass"}, True, (90.0, 50.0), "complete", "complete fraction", None),
        ({"m::a": "pass"}, True, None, "experimental", "no hardware performance evidence",
         "functional needs perf targets"),
    ],
)  # fmt: skip
def test_tiers(
    make_report, passing_accuracy, vouch, outcomes, accuracy, perf, tier, reason, blocker
):
    report = make_report(outcomes, accuracy=(passing_accuracy,) if accuracy else ())
    if perf is not None:
        report = vouch(_with_perf(report, *perf))
    got = derive_tier(report)
    assert got.tier == tier and reason in got.reason
    assert (got.next_blocker is None) if blocker is None else (blocker in got.next_blocker)


def test_failing_accuracy_and_collection_errors_fail(make_report, passing_accuracy) -> None:
    bad = passing_accuracy.model_copy(update={"verdict": "fail", "score": 0.5, "correct": 50})
    assert derive_tier(make_report({"m::a": "pass"}, accuracy=(bad,))).tier == "fail"
    broken = make_report(
        {"m::a": "pass"}, collection_errors=(CollectionError(nodeid="x.py", message="E"),)
    )
    assert derive_tier(broken).tier == "fail"
    assert derive_tier(make_report({})).reason == "no checks ran"


def test_emulated_perf_is_informational(make_report, passing_accuracy) -> None:
    report = _with_perf(
        make_report({"m::a": "pass"}, device="emulated", accuracy=(passing_accuracy,)), 1.0, 1e4
    )
    got = derive_tier(report)
    # Not TT hardware: its own label, never a TT tier, whatever its (informational) perf says.
    assert got.tier == "emulated" and "host-emulated mesh: no TT hardware tier" in got.reason
    assert "accuracy passes" in got.reason
    cpu = derive_tier(make_report({"m::a": "pass"}, device="cpu", accuracy=(passing_accuracy,)))
    assert cpu.tier == "experimental" and "not TT hardware" in cpu.reason


def test_unreliable_figures_do_not_meet_targets(make_report, passing_accuracy) -> None:
    report = _with_perf(
        make_report({"m::a": "pass"}, accuracy=(passing_accuracy,)), 90.0, 50.0, flag="burst"
    )
    assert {t.met for t in report.perf_targets} == {"unreliable"}
    assert derive_tier(report).tier == "experimental"


def test_the_passkey_score_alone_is_not_the_accuracy_verdict(make_report, passing_accuracy):
    """The long-context check records its passkey score as accuracy; without the expectations'
    task the tier stays experimental, and a failing passkey score fails the run."""
    from tt_conformance.longtasks import PASSKEY_TASK

    passkey = passing_accuracy.model_copy(update={"task": PASSKEY_TASK, "check": "m::passkey"})
    alone = derive_tier(make_report({"m::a": "pass"}, accuracy=(passkey,)))
    assert alone.tier == "experimental" and "accuracy not measured" in alone.reason
    both = derive_tier(make_report({"m::a": "pass"}, accuracy=(passing_accuracy, passkey)))
    assert both.tier == "experimental" and "accuracy passes" in both.reason
    missed = passkey.model_copy(update={"verdict": "fail", "score": 0.5, "correct": 50})
    assert derive_tier(make_report({"m::a": "pass"}, accuracy=(passing_accuracy, missed))).tier == (
        "fail"
    )


def test_a_score_recorded_by_an_expected_failure_does_not_fail_the_tier(
    make_report, passing_accuracy
):
    from tt_conformance.longtasks import PASSKEY_TASK

    missed = passing_accuracy.model_copy(
        update={
            "task": PASSKEY_TASK,
            "check": "m::passkey",
            "verdict": "fail",
            "score": 0.1,
            "correct": 10,
        }
    )
    expected = make_report(
        {"m::a": "pass", "m::passkey": "xfail"}, accuracy=(passing_accuracy, missed)
    )
    got = derive_tier(expected)
    assert got.tier == "experimental" and "accuracy passes" in got.reason
    assert "passkey" not in got.reason
    unexpected = make_report(
        {"m::a": "pass", "m::passkey": "pass"}, accuracy=(passing_accuracy, missed)
    )
    assert derive_tier(unexpected).tier == "fail"
