"""The load benchmark's plan and verdict (benchmarks/load_driver.py) without a server: the
checks that the engine test and benchmarks/load_aborts.py rely on do fail on each violation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.load_driver import (
    AbortKind,
    LoadConfig,
    LoadResult,
    Outcome,
    Peaks,
    ServerState,
    Status,
    longest_uses,
    parse_metrics,
    plan_requests,
    violations,
)

CONFIG = LoadConfig(requests=40, abort_frac=0.3, distinct_prompts=4, max_max_tokens=8, seed=3)


def test_plan_is_deterministic_with_the_asked_share_of_aborts() -> None:
    plan = plan_requests(CONFIG)
    assert plan == plan_requests(CONFIG)
    aborts = [r for r in plan if r.abort is not AbortKind.NONE]
    assert len(aborts) == round(CONFIG.requests * CONFIG.abort_frac)
    closes = [r for r in aborts if r.abort is AbortKind.AFTER_TOKENS]
    assert all(0 <= r.abort_after < r.max_tokens for r in closes)
    assert {r.prompt for r in plan} <= set(range(CONFIG.distinct_prompts))


@pytest.mark.parametrize(
    ("field", "value"),
    [("abort_frac", 1.5), ("requests", 0), ("concurrency", 0), ("min_max_tokens", 0)],
)
def test_bad_config_names_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        LoadConfig(**{field: value})


def state(finished: float, kv: float = 0.0, running: float = 0.0) -> ServerState:
    return ServerState(running, 0.0, kv, {"stop": 0.0, "length": finished}, 0.0)


def clean_result() -> LoadResult:
    """Every request behaves: a finished request gets its solo prefix, an aborted one a prefix."""
    plan = plan_requests(CONFIG)
    refs = {key: [100 + i for i in range(n)] for key, n in longest_uses(plan).items()}
    outcomes = []
    for r in plan:
        ref = refs[(r.prompt, r.ignore_eos)]
        if r.abort is AbortKind.NONE:
            outcomes.append(Outcome(r.index, Status.FINISHED, ref[: r.max_tokens], "length"))
        else:
            outcomes.append(Outcome(r.index, Status.ABORTED, ref[: r.abort_after]))
    finished = sum(1 for o in outcomes if o.status is Status.FINISHED)
    first = next(iter(refs.values()))
    return LoadResult(
        config=CONFIG,
        outcomes=outcomes,
        references=refs,
        wall_s=1.0,
        reference_s=1.0,
        max_in_flight=8,
        peaks=Peaks(),
        before=state(0.0),
        after=state(float(finished)),
        drain_s=0.0,
        after_check=Outcome(-1, Status.FINISHED, list(first), "length"),
    )


def test_a_clean_run_has_no_violation() -> None:
    assert violations(clean_result()) == []


def first_finished(result: LoadResult) -> int:
    return next(i for i, o in enumerate(result.outcomes) if o.status is Status.FINISHED)


def test_each_broken_invariant_is_reported() -> None:
    result = clean_result()
    i = first_finished(result)
    result.outcomes[i].tokens[0] += 1
    assert any("differs from its solo run at token 0" in v for v in violations(result))

    result = clean_result()
    i = first_finished(result)
    result.outcomes[i] = Outcome(result.outcomes[i].index, Status.TIMEOUT, detail="no end")
    assert any(f"request {i} stuck" in v for v in violations(result))

    result = clean_result()
    result.after = replace(result.after, kv_usage=0.25)
    assert any("not drained" in v and "kv_usage=0.25" in v for v in violations(result))

    result = clean_result()
    aborted = next(o for o in result.outcomes if o.status is Status.ABORTED and o.tokens)
    aborted.tokens[-1] = -1
    assert any("not a prefix of its solo run" in v for v in violations(result))

    result = clean_result()
    result.after = state(0.0)  # the server finished none of what the client saw finish
    assert any("vllm:request_success_total" in v for v in violations(result))

    result = clean_result()
    result.timed_out = True
    assert any("did not end within" in v for v in violations(result))


def test_metrics_are_read_from_vllm_and_plugin_series() -> None:
    text = "\n".join(
        [
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="ref"} 3.0',
            "# TYPE vllm:num_requests_waiting gauge",
            'vllm:num_requests_waiting{engine="0",model_name="ref"} 2.0',
            "# TYPE vllm:kv_cache_usage_perc gauge",
            'vllm:kv_cache_usage_perc{engine="0",model_name="ref"} 0.5',
            "# TYPE vllm:request_success counter",
            'vllm:request_success_total{engine="0",finished_reason="stop",model_name="ref"} 4.0',
            'vllm:request_success_total{engine="0",finished_reason="length",model_name="ref"} 6.0',
            "# TYPE tt_preempted_requests counter",
            "tt_preempted_requests_total 7.0",
            "# TYPE tt_lane_steps counter",
            'tt_lane_steps_total{lane="0"} 5.0',
            'tt_lane_steps_total{lane="1"} 2.0',
        ]
    )
    got = parse_metrics(text + "\n")
    assert (got.running, got.waiting, got.kv_usage, got.preempted) == (3.0, 2.0, 0.5, 7.0)
    assert got.finished == {"stop": 4.0, "length": 6.0}
    assert got.lane_steps == {"0": 5.0, "1": 2.0}
    assert not got.drained
