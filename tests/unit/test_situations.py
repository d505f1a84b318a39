"""Situations the runner counts (observability/situations.py): each row's situation agrees with
an independent reading of KV block membership (the block of a position is position // size),
and the recorder's stats and the scraped counters count the same rows."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.unit.metrics_files import scrape, value
from vllm_tt_plugin.contract.reload_contract import STEADY
from vllm_tt_plugin.observability.situations import (
    Situation,
    decode_situations,
    prefill_situations,
)
from vllm_tt_plugin.observability.step_recorder import StepRecorder
from vllm_tt_plugin.policy.sampling_route import Route, RouteDecision

DEVICE = RouteDecision(Route.DEVICE, "device sampling")
HOST = RouteDecision(Route.HOST, "min_p")


def shares_block_with_previous(position: int, size: int) -> bool:
    """The token at ``position`` lands in the block that already holds ``position - 1``."""
    return position > 0 and (position - 1) // size == position // size


@pytest.mark.parametrize("size", [1, 16, 32, 64])
def test_a_prefill_row_is_mid_block_exactly_when_its_block_already_holds_kv(size: int) -> None:
    for start in range(0, 4 * size + 2):
        found = prefill_situations([start], size)
        mid = found.get(Situation.PREFILL_START_MID_BLOCK, 0)
        on = found.get(Situation.PREFILL_START_ON_BLOCK, 0)
        assert mid == int(shares_block_with_previous(start, size)), (start, size, found)
        # A later start that opens a fresh block: a block-aligned hit or chunk.
        assert on == int(start > 0 and not shares_block_with_previous(start, size)), (start, size)


def test_prefill_rows_are_counted_one_by_one() -> None:
    starts = [0, 0, 16, 17, 40, 48, 5]
    assert prefill_situations(starts, 16) == {
        Situation.PREFILL_START_MID_BLOCK: 3,  # 17, 40, 5
        Situation.PREFILL_START_ON_BLOCK: 2,  # 16, 48
    }
    assert prefill_situations([0, 0], 16) == {}  # fresh prompts: no situation


@pytest.mark.parametrize(
    ("on_device", "penalties", "logprobs"), list(itertools.product((False, True), repeat=3))
)
def test_a_decode_step_counts_new_blocks_always_and_sampling_only_on_the_device(
    on_device: bool, penalties: bool, logprobs: bool
) -> None:
    positions = [31, 32, 33, 64, 7, 96]
    found = decode_situations(positions, 32, on_device, penalties, logprobs)
    fresh = sum(1 for p in positions if not shares_block_with_previous(p, 32))
    assert found.get(Situation.DECODE_NEW_BLOCK) == fresh == 3
    assert found.get(Situation.DEVICE_DECODE_PENALTIES, 0) == int(on_device and penalties)
    assert found.get(Situation.DEVICE_DECODE_LOGPROBS, 0) == int(on_device and logprobs)


def test_the_recorder_and_the_counters_count_the_same_situations(metrics_dir: Path) -> None:
    rec = StepRecorder(lanes=1)
    rec.prefill_done(DEVICE, 2, 1, prefill_situations([0, 20], 16))
    rec.prefill_done(None, 0, 1, prefill_situations([32], 16))
    for positions, decision in (([47, 48], DEVICE), ([48, 49], HOST), ([64, 65], DEVICE)):
        found = decode_situations(positions, 16, decision.on_device, True, False)
        rec.decode_done(STEADY, decision, False, {0}, found)
    rec.decode_done(STEADY, DEVICE, False, {0})  # nothing found: nothing counted
    samples = scrape(metrics_dir)
    want = {
        "prefill_start_mid_block": 1,
        "prefill_start_on_block": 1,
        "decode_new_block": 3,  # 48 (device), 48 (host), 64
        "device_decode_penalties": 2,
    }
    assert rec.stats.situations == want
    for situation, count in want.items():
        assert value(samples, "tt_situations_total", situation=situation) == count
    assert "situations={" in rec.stats.summary()
