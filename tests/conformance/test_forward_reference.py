"""The forward-pass reference (``tt_conformance.forward``): served output that is partial or
malformed is refused, and the per-position comparison fails the faults it exists for (a moved
distribution, a wrong greedy token, a token masked out of the served top-k) while passing
float32 noise. The skip without a checkpoint leaves the concern not run (never covered)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from tt_conformance.forward import (
    EMULATED_TOLERANCE,
    ReferenceRow,
    ServedStep,
    compare_position,
    served_steps,
    vocab_problems,
)
from tt_conformance.report import CheckResult
from tt_conformance.selection import concern_coverage

K = 5


@dataclass
class Logprobs:
    """What the openai client hands the check (CompletionChoice.logprobs)."""

    top_logprobs: Any
    token_logprobs: Any


def top(values: dict[int, float]) -> dict[str, float]:
    return {f"token_id:{t}": v for t, v in values.items()}


def distribution(shift: float = 0.0, vocab: int = 12) -> dict[int, float]:
    logits = {t: -0.7 * t + (shift if t == 3 else 0.0) for t in range(vocab)}
    z = math.log(sum(math.exp(v) for v in logits.values()))
    return {t: v - z for t, v in logits.items()}


def served_of(dist: dict[int, float], token: int | None = None) -> ServedStep:
    ranked = dict(sorted(dist.items(), key=lambda kv: -kv[1])[:K])
    token = max(dist, key=lambda t: dist[t]) if token is None else token
    ranked.setdefault(token, dist[token])
    return ServedStep(token, ranked)


def row_of(dist: dict[int, float], served: ServedStep) -> ReferenceRow:
    ranked = dict(sorted(dist.items(), key=lambda kv: -kv[1])[:K])
    return ReferenceRow(ranked, {t: dist[t] for t in (served.token, *served.top)})


# --- refusing partial or malformed served output -------------------------------------------
def good_choice() -> tuple[list[int], Logprobs]:
    dist = distribution()
    tops = [top(dict(sorted(dist.items(), key=lambda kv: -kv[1])[:K]))] * 3
    return [0, 0, 0], Logprobs(tops, [dist[0]] * 3)


def test_well_formed_logprobs_parse() -> None:
    ids, lp = good_choice()
    steps = served_steps(ids, lp, K)
    assert [s.token for s in steps] == ids and all(len(s.top) == K for s in steps)


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda ids, lp: (ids, None), "no logprobs"),
        (lambda ids, lp: (ids, Logprobs(None, lp.token_logprobs)), "lack top_logprobs"),
        (lambda ids, lp: (ids, Logprobs(lp.top_logprobs[:2], lp.token_logprobs)), "partial"),
        (lambda ids, lp: ([*ids, 0], lp), "partial"),
        (
            lambda ids, lp: (
                ids,
                Logprobs([dict(list(t.items())[:3]) for t in lp.top_logprobs], lp.token_logprobs),
            ),
            "asked for 5",
        ),
        (
            lambda ids, lp: (
                ids,
                Logprobs([{"a": -1.0} | t for t in lp.top_logprobs], lp.token_logprobs),
            ),
            "token_id:N",
        ),
        (lambda ids, lp: ([7, 7, 7], lp), "not listed"),
        (lambda ids, lp: (ids, Logprobs(lp.top_logprobs, [None] * 3)), "not finite"),
        (
            lambda ids, lp: (
                ids,
                Logprobs(
                    [{**t, "token_id:11": math.nan} for t in lp.top_logprobs], lp.token_logprobs
                ),
            ),
            "not finite",
        ),
    ],
)
def test_partial_or_malformed_logprobs_are_refused(mutate: Any, words: str) -> None:
    ids, lp = mutate(*good_choice())
    with pytest.raises(AssertionError, match=words):
        served_steps(ids, lp, K)


def test_served_ids_outside_the_checkpoints_vocabulary_are_named() -> None:
    steps = {"p": [ServedStep(3, {3: -0.1, 1030: -3.0})]}
    assert vocab_problems(steps, 1024) == ["p position 0: token ids [1030] >= vocab 1024"]
    assert vocab_problems(steps, 2048) == []


# --- the comparison ------------------------------------------------------------------------
def test_the_same_distribution_with_float32_noise_agrees() -> None:
    dist = distribution()
    noisy = {t: v + 2e-5 * (-1) ** t for t, v in dist.items()}
    served = served_of(noisy)
    verdict = compare_position(served, row_of(dist, served), EMULATED_TOLERANCE)
    assert verdict.problems == () and verdict.max_abs_diff < 1e-4


def test_a_moved_distribution_fails_on_values() -> None:
    dist, moved = distribution(), distribution(shift=0.3)
    served = served_of(moved)
    verdict = compare_position(served, row_of(dist, served), EMULATED_TOLERANCE)
    assert any("differ from the reference" in p for p in verdict.problems)
    # The same move passes a tolerance that allows it (hardware numerics): values decide.
    assert compare_position(served, row_of(dist, served), 0.5).problems == ()


def test_a_greedy_token_the_reference_does_not_rank_first_fails() -> None:
    dist = distribution()
    served = served_of(dist, token=2)  # logprob 1.4 nats below the best
    problems = compare_position(served, row_of(dist, served), EMULATED_TOLERANCE).problems
    assert any("greedy token 2" in p for p in problems)


def test_a_token_masked_out_of_the_served_top_k_fails() -> None:
    dist = distribution()
    masked = {t: v for t, v in dist.items() if t != 1}
    z = math.log(sum(math.exp(v) for v in masked.values()))
    served = served_of({t: v - z for t, v in masked.items()})
    row = row_of(dist, served)
    problems = compare_position(served, row, 1.0).problems  # even with values not compared
    assert any("reference token 1" in p and "missing" in p for p in problems)


def test_the_reference_best_missing_from_the_served_top_fails() -> None:
    dist = distribution()
    swapped = dict(dist)
    swapped[0], swapped[11] = dist[11], dist[0]  # the device ranks token 11 first
    served = served_of(swapped)
    problems = compare_position(served, row_of(dist, served), 1.0).problems
    assert any("best token 0 is not in the served top" in p for p in problems)


def test_a_tie_within_the_tolerance_is_no_failure() -> None:
    dist = distribution()
    tie = dict(dist)
    tie[1] = dist[0] - 1e-4  # token 1 within float32 noise of the best
    served = served_of(tie, token=1)
    row = row_of(tie, ServedStep(1, served.top))
    assert compare_position(served, row, EMULATED_TOLERANCE).problems == ()


# --- not run is never covered ------------------------------------------------------------
@pytest.mark.parametrize(
    ("reason", "not_run"),
    [
        # optional: without a checkpoint the concern does not make the run partial (the tier's
        # reason names it: test_red_team_tiers.py)
        ("forward reference not run: no checkpoint given", ()),
        # any other skip of every check of the concern: not run
        ("not exercised: no prefix-cache hits", ("forward_reference",)),
    ],
)
def test_a_skipped_forward_reference_is_not_run_unless_optional(
    reason: str, not_run: tuple[str, ...]
) -> None:
    checks = [
        CheckResult(
            id="m::test_batched_chunked_long_prompts",
            nodeid="n",
            concern="forward_reference",
            outcome="skip",
            reason=reason,
        ),
        CheckResult(id="m2::t", nodeid="n2", concern="logprobs", outcome="pass"),
    ]
    assert concern_coverage(checks, "emulated-T3K", 1).not_run == not_run


@pytest.mark.parametrize(("block", "cap"), [(64, 1024), (64, 512), (32, 512), (64, 200)])
def test_wave_prompts_cross_blocks_and_their_decode_crosses_one_more(block: int, cap: int) -> None:
    from tt_conformance.checks.test_forward_reference import GENERATED, wave_lengths

    lengths = wave_lengths(block, cap, 8)
    assert lengths and len(set(lengths)) == len(lengths)
    for n in lengths:
        assert n >= block and n + GENERATED <= cap  # past the first block, inside the context
        assert (n + GENERATED // 2) % block == 0  # decode reaches a block's first slot
