"""Reload-command planning for every transition of the contract's table; remap application."""

from __future__ import annotations

import pytest

from vllm_tt_plugin.contract.reload_contract import (
    FULL_RELOAD,
    HOST_STEP_RELOAD,
    INPUTS_ONLY,
    PAGE_TABLE_ONLY,
    STEADY,
    DecodeStep,
    ReloadCommand,
    ReloadContractError,
    ReloadPlanner,
    apply_remap,
)
from vllm_tt_plugin.policy.sampling_route import Route

AB = ("a", "b", None, None)


def step(layout=AB, route=Route.DEVICE, blocks=(1, 1, 0, 0), remap=None) -> DecodeStep:
    return DecodeStep(layout=layout, route=route, block_counts=blocks, slot_remap=remap)


def steady_planner() -> ReloadPlanner:
    planner = ReloadPlanner()
    planner.commit_prefill()
    planner.commit_decode(step())
    return planner


def test_first_decode_is_a_full_reload() -> None:
    assert ReloadPlanner().plan(step()) == FULL_RELOAD


def test_prefill_to_decode_is_a_full_reload() -> None:
    planner = steady_planner()
    planner.commit_prefill()  # a prefill ran (new request, chunk completion, resume replay)
    assert planner.plan(step()) == FULL_RELOAD


def test_layout_change_is_a_full_reload() -> None:
    planner = steady_planner()
    assert planner.plan(step(layout=("a", None, None, None), blocks=(1, 0, 0, 0))) == FULL_RELOAD
    assert planner.plan(step(layout=("a", "c", None, None))) == FULL_RELOAD


def test_host_to_device_switch_is_a_full_reload() -> None:
    planner = steady_planner()
    planner.commit_decode(step(route=Route.HOST))
    assert planner.plan(step()) == FULL_RELOAD


def test_host_sampling_reloads_every_step_without_reset() -> None:
    planner = steady_planner()
    command = planner.plan(step(route=Route.HOST))
    assert command == HOST_STEP_RELOAD
    assert command.reload_inputs and not command.reset_sampling_state
    # The device does not sample: its sampling parameters are neither used nor sent (the
    # spec's reload_sampling_params = device_sampling and transition; tt-metal's
    # require_full_input_reload refuses them from an adapter without a device sampler).
    assert not command.reload_sampling_params
    planner.commit_decode(step(route=Route.HOST))
    assert planner.plan(step(route=Route.HOST)) == HOST_STEP_RELOAD


def test_steady_device_decode_keeps_inputs_resident() -> None:
    planner = steady_planner()
    assert planner.plan(step()) == STEADY


def test_kv_allocation_change_reloads_page_table_only() -> None:
    planner = steady_planner()
    command = planner.plan(step(blocks=(2, 1, 0, 0)))
    assert command == PAGE_TABLE_ONLY
    assert not command.reload_inputs  # no drain: the resident tokens stay valid


def test_remap_forces_full_reload_and_is_carried() -> None:
    planner = steady_planner()
    command = planner.plan(step(remap=(1, 0, 2, 3), layout=("b", "a", None, None)))
    assert command.is_full_reload and command.slot_remap == (1, 0, 2, 3)


def test_view_advances_only_on_commit() -> None:
    planner = steady_planner()
    changed = step(layout=("a", None, None, None), blocks=(1, 0, 0, 0))
    assert planner.plan(changed) == FULL_RELOAD
    # the model rejected the call: nothing committed, the same reload is owed again
    assert planner.plan(changed) == FULL_RELOAD
    planner.commit_decode(changed)
    assert planner.plan(changed) == STEADY


def test_legacy_reset_batch_flag() -> None:
    assert ReloadPlanner.legacy_reset_batch(FULL_RELOAD)
    assert ReloadPlanner.legacy_reset_batch(HOST_STEP_RELOAD)
    assert ReloadPlanner.legacy_reset_batch(PAGE_TABLE_ONLY)
    assert not ReloadPlanner.legacy_reset_batch(STEADY)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        (
            {"reload_inputs": True, "reload_page_table": True},
            "reload_inputs and reload_page_table are never both set: a full reload already "
            "carries the page table",
        ),
        ({"reset_sampling_state": True}, "reset_sampling_state requires reload_inputs"),
        (
            {"reload_page_table": True, "reset_sampling_state": True},
            "reset_sampling_state requires reload_inputs",
        ),
        ({"reload_inputs": True, "slot_remap": (0, 0, 1)}, r"slot_remap \[0, 0, 1\] is not a"),
    ],
)
def test_incoherent_commands_are_refused(kwargs: dict, reason: str) -> None:
    with pytest.raises(ReloadContractError, match=reason):
        ReloadCommand(**kwargs)


def test_without_resident_inputs_every_device_decode_reloads_its_inputs() -> None:
    """A model that keeps no inputs resident gets them on every decode; a step that needs a
    full reload (sampling state reset included) still gets the full reload."""
    planner = ReloadPlanner(resident_inputs=False)
    assert planner.plan(step()) == FULL_RELOAD
    planner.commit_decode(step())
    assert planner.plan(step()) == INPUTS_ONLY
    assert planner.plan(step(blocks=(2, 1, 0, 0))) == INPUTS_ONLY
    assert planner.plan(step(route=Route.HOST)) == HOST_STEP_RELOAD


def test_v1_kwargs() -> None:
    assert FULL_RELOAD.v1_kwargs() == {
        "reload_inputs": True,
        "reload_page_table": False,
        "reload_sampling_params": True,
        "reset_sampling_state": True,
    }


def test_apply_remap_gather_semantics_exactly_once() -> None:
    values = ["s0", "s1", "s2", "s3"]
    remap = [2, 0, 3, 1]
    once = apply_remap(values, remap)
    assert once == ["s2", "s0", "s3", "s1"]
    assert apply_remap(once, remap) != once  # applying twice is observable
    with pytest.raises(ReloadContractError, match="slot_remap has 3 entries for 4 slots"):
        apply_remap(values, [0, 1, 2])
    with pytest.raises(ReloadContractError, match=r"slot_remap \[0, 1, 1, 2\] is not a"):
        apply_remap(values, [0, 1, 1, 2])
