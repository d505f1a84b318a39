"""Serving statistics (TT / vllm bench serve definitions) and unreliable-figure detection."""

from __future__ import annotations

import numpy as np
import pytest

from tt_conformance.perfshapes import PerfShape, parse_perf_shapes
from tt_conformance.perfstats import StreamTiming, delivery_problems, quantile, wave_figures


def steady(sent: float, ttft: float, tpot: float, n: int) -> StreamTiming:
    return StreamTiming(sent=sent, chunks=tuple((sent + ttft + i * tpot, 1) for i in range(n)))


@pytest.mark.parametrize("q", [0.0, 0.5, 0.9, 0.99, 1.0])
def test_quantile_matches_numpy_linear_percentile(q: float) -> None:
    values = [5.0, 1.0, 9.0, 2.5, 7.0, 3.0, 11.0]
    assert quantile(values, q) == pytest.approx(np.percentile(values, q * 100))


def test_wave_figures_follow_the_published_definitions() -> None:
    streams = [steady(0.0, 0.050, 0.010, 11), steady(0.0, 0.070, 0.020, 11)]
    figs = {
        (f.metric, f.stat): f for f in wave_figures(streams, 0.27, concurrency=2, input_len=128)
    }
    assert figs[("ttft", "mean")].value == pytest.approx(60.0)
    assert figs[("tpot", "median")].value == pytest.approx(15.0)
    assert figs[("e2el", "mean")].value == pytest.approx((150 + 270) / 2)
    assert figs[("itl", "mean")].value == pytest.approx(15.0)
    assert figs[("tps_user", "mean")].value == pytest.approx(1000 / 15)  # 1000 / mean TPOT
    assert figs[("tps_user", "p99")].value == pytest.approx(1000 / np.percentile([10, 20], 99))
    # vllm bench serve's output throughput: every token over the wave's wall time.
    assert figs[("output_throughput", "value")].value == pytest.approx(22 / 0.27)
    assert figs[("request_throughput", "value")].value == pytest.approx(2 / 0.27)
    # TT's t/s (tt-metal's LLM table): t/s/u x batch, t/s/u = 1000 / median TPOT (15 ms).
    assert figs[("tt_tps", "value")].value == pytest.approx(1000 / 15 * 2)
    assert figs[("tt_tps", "value")].value > figs[("output_throughput", "value")].value
    # Prefill: the prompt's tokens over each request's TTFT (128 / 50 ms and 128 / 70 ms).
    assert figs[("prefill_tps", "mean")].value == pytest.approx((128 / 0.05 + 128 / 0.07) / 2)
    assert figs[("ttft", "p99")].better == "lower" and figs[("tt_tps", "value")].better == "higher"
    assert figs[("itl", "mean")].samples == 20 and figs[("ttft", "mean")].samples == 2


def test_clean_streams_have_no_problems() -> None:
    streams = [steady(0.0, 0.05, 0.01, 64) for _ in range(4)]
    assert delivery_problems(streams, [0.0001] * 50) == []


def test_multi_token_chunks_are_burst_delivery() -> None:
    bursty = StreamTiming(sent=0.0, chunks=tuple((0.05 + i * 0.04, 4) for i in range(16)))
    (problem,) = delivery_problems([bursty], [])
    assert problem.startswith("burst delivery: 64 tokens arrived in 16 chunks")


def test_clumped_arrivals_are_burst_arrival() -> None:
    # One token per chunk, but they arrive in clumps of four: three gaps of ~0, then 40 ms.
    times = [0.05 + (i // 4) * 0.04 + (i % 4) * 0.0001 for i in range(64)]
    clumped = StreamTiming(sent=0.0, chunks=tuple((t, 1) for t in times))
    (problem,) = delivery_problems([clumped], [])
    assert problem.startswith("burst arrival:")


def test_a_late_event_loop_is_a_starved_client() -> None:
    streams = [steady(0.0, 0.05, 0.01, 64)]
    (problem,) = delivery_problems(streams, [0.008] * 40)
    assert problem.startswith("CPU-starved client: event-loop lag p90 8.0 ms")


def test_perf_shapes_parse_and_refuse() -> None:
    assert parse_perf_shapes(None) == (PerfShape(128, 128, 1), PerfShape(128, 128, None))
    assert parse_perf_shapes("100/100@32") == (PerfShape(100, 100, 32),)
    assert PerfShape(128, 128, None).resolve(16) == 16
    for bad, needle in (("128x128@1", "expected IN/OUT@C"), ("128/1@1", "output length >= 2"),
                        ("1/2@1,1/2@1", "given twice")):  # fmt: skip
        with pytest.raises(ValueError, match=needle):
            parse_perf_shapes(bad)
