"""The step-choice policy: prefill/decode separation and decode-interleave bounds per knob."""

from __future__ import annotations

import pytest

from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.policy.step_policy import InterleaveConfig, StepPolicy, WorkFacts

BOTH = WorkFacts(prefill_ready=True, decode_ready=True)


def run(policy: StepPolicy, facts: list[WorkFacts]) -> str:
    out = []
    for f in facts:
        mode = policy.choose(f)
        policy.record(mode, f)
        out.append({StepKind.PREFILL: "P", StepKind.DECODE: "D", StepKind.IDLE: "."}[mode])
    return "".join(out)


def test_single_kind_of_work() -> None:
    policy = StepPolicy(InterleaveConfig())
    assert policy.choose(WorkFacts(False, False)) is StepKind.IDLE
    assert policy.choose(WorkFacts(True, False)) is StepKind.PREFILL
    assert policy.choose(WorkFacts(False, True)) is StepKind.DECODE


@pytest.mark.parametrize(
    ("prefill_steps", "decode_steps", "pattern"),
    [
        (2, 1, "PPDPPDPPDPPD"),
        (1, 1, "PDPDPDPDPDPD"),
        (3, 2, "PPPDDPPPDDPP"),
        (2, 3, "PPDDDPPDDDPP"),
    ],
)
def test_interleave_pattern_under_continuous_prefill_pressure(
    prefill_steps: int, decode_steps: int, pattern: str
) -> None:
    policy = StepPolicy(InterleaveConfig(True, prefill_steps, decode_steps))
    assert run(policy, [BOTH] * len(pattern)) == pattern


@pytest.mark.parametrize(("prefill_steps", "decode_steps"), [(1, 1), (2, 1), (4, 2), (3, 5)])
def test_decode_waits_at_most_prefill_steps(prefill_steps: int, decode_steps: int) -> None:
    policy = StepPolicy(InterleaveConfig(True, prefill_steps, decode_steps))
    pattern = run(policy, [BOTH] * 60)
    longest_prefill_run = max(len(r) for r in pattern.split("D"))
    assert longest_prefill_run <= prefill_steps
    decode_runs = [r for r in pattern.split("P") if r]
    if pattern.endswith("D"):
        decode_runs = decode_runs[:-1]  # cut off by the end of the run
    assert decode_runs and all(len(r) == decode_steps for r in decode_runs)


def test_interleave_disabled_starves_decode_while_prefill_waits() -> None:
    policy = StepPolicy(InterleaveConfig(enabled=False))
    assert run(policy, [BOTH] * 8) == "PPPPPPPP"


def test_insertion_never_forces_prefill() -> None:
    policy = StepPolicy(InterleaveConfig(True, 2, 1))
    only_decode = WorkFacts(prefill_ready=False, decode_ready=True)
    assert run(policy, [BOTH, BOTH, BOTH, only_decode, only_decode, BOTH]) == "PPDDDP"


def test_prefill_run_counter_resets_after_plain_decode() -> None:
    policy = StepPolicy(InterleaveConfig(True, 2, 1))
    only_decode = WorkFacts(prefill_ready=False, decode_ready=True)
    # P, then prefill work disappears (D), then returns: the count starts over.
    assert run(policy, [BOTH, only_decode, BOTH, BOTH, BOTH]) == "PDPPD"


@pytest.mark.parametrize("prefill_first", [False, True])
def test_a_decode_step_with_no_prefill_waiting_starts_no_insertion(prefill_first: bool) -> None:
    # With two decode steps per insertion, a decode step that ran because nothing else could
    # is not the first half of an insertion: prefill, once it waits, keeps its priority.
    policy = StepPolicy(InterleaveConfig(True, 2, 2))
    only_decode = WorkFacts(prefill_ready=False, decode_ready=True)
    lead = [BOTH, BOTH] if prefill_first else []
    expected = "PP" if prefill_first else ""
    assert run(policy, [*lead, only_decode, BOTH, BOTH]) == expected + "DPP"


@pytest.mark.parametrize(("prefill_steps", "decode_steps"), [(0, 1), (1, 0), (-1, 2)])
def test_bad_knobs_rejected(prefill_steps: int, decode_steps: int) -> None:
    with pytest.raises(ValueError, match="decode interleave step counts must be >= 1"):
        InterleaveConfig(True, prefill_steps, decode_steps)
