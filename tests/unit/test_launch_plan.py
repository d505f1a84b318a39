"""The launch plan: resolved once by the platform hook from a real VllmConfig, carried across
the engine's process boundary, and the single source the serving path reads its decisions from.
"""

from __future__ import annotations

import json
import multiprocessing
from multiprocessing.context import SpawnContext
from typing import Any

import pytest
from vllm.sampling_params import SamplingParams

from vllm_tt_plugin.launch.launch_plan import (
    PLAN_KEY,
    LaunchPlan,
    LaunchPlanError,
    find_plan,
    read_plan,
)
from vllm_tt_plugin.platform import TTPlatform
from vllm_tt_plugin.policy import block_output
from vllm_tt_plugin.policy.sampling_route import Route, choose_route
from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.utils.device_discovery import GROUPS_ENV

FAKES = "tests.unit.fakes.models"
PLAIN = SamplingParams(temperature=0.7, top_k=10, top_p=0.9, seed=3)
NOT_SET = "sample_on_device_mode not set"
COMPAT = "always_compat_sampling"
DECODE_ONLY = "sample_on_device_mode=decode_only"

# (sample_on_device_mode, always_compat_sampling, model class) -> the host reason of
# (prefill, decode), None meaning "may sample on the device"; "refused" = the launch fails.
DEVICE_SAMPLING_TABLE: list[tuple[str | None, bool, str, Any]] = [
    (None, False, "CapableModel", (NOT_SET, NOT_SET)),
    (None, True, "CapableModel", (COMPAT, COMPAT)),
    ("all", False, "CapableModel", (None, None)),
    ("all", True, "CapableModel", (COMPAT, COMPAT)),
    ("decode_only", False, "CapableModel", (DECODE_ONLY, None)),
    ("decode_only", True, "CapableModel", (COMPAT, COMPAT)),
    (None, False, "BareModel", (NOT_SET, NOT_SET)),
    (None, True, "BareModel", (COMPAT, COMPAT)),
    ("all", False, "BareModel", "refused"),
    ("all", True, "BareModel", "refused"),
    ("decode_only", False, "BareModel", "refused"),
    ("decode_only", True, "BareModel", "refused"),
]


def tt_options(mode: str | None, compat: bool) -> dict[str, Any]:
    options: dict[str, Any] = {"always_compat_sampling": compat}
    if mode is not None:
        options["sample_on_device_mode"] = mode
    return options


@pytest.mark.parametrize(("mode", "compat", "model", "expected"), DEVICE_SAMPLING_TABLE)
def test_device_sampling_decisions(
    make_config: Any, mode: str | None, compat: bool, model: str, expected: Any
) -> None:
    if expected == "refused":
        # vLLM's pydantic validation wraps the platform's TTConfigurationError.
        with pytest.raises(Exception, match="'sample_on_device_mode'=.* does not declare"):
            make_config(model_class=f"{FAKES}:{model}", tt=tt_options(mode, compat))
        return
    plan = read_plan(make_config(model_class=f"{FAKES}:{model}", tt=tt_options(mode, compat)))
    assert (plan.prefill.host_reason, plan.decode.host_reason) == expected
    for kind in (StepKind.PREFILL, StepKind.DECODE):
        step = plan.step(kind)
        assert step.device_sampling is (step.host_reason is None)
        # Serving routes a plain request by exactly this decision, giving the same reason.
        decision = choose_route(plan, kind, [PLAIN])
        assert decision.on_device is step.device_sampling
        if not step.device_sampling:
            assert (decision.route, decision.reason) == (Route.HOST, step.host_reason)


@pytest.mark.parametrize(
    ("trace_mode", "prefill", "decode"),
    [("all", True, True), ("decode_only", False, True), ("none", False, False)],
)
def test_traced_step_kinds(make_config: Any, trace_mode: str, prefill: bool, decode: bool) -> None:
    plan = read_plan(make_config(tt={"trace_mode": trace_mode}))
    assert (plan.prefill.traced, plan.decode.traced) == (prefill, decode)
    # Resident decode inputs need the split async contract and a captured decode trace.
    assert plan.resident_decode_inputs is decode


@pytest.mark.parametrize("model", ["CapableModel", "BareModel"])
def test_feature_switches_follow_the_gated_config(make_config: Any, model: str) -> None:
    """The plan records what the platform's gates left on vLLM's config (one decision)."""
    config = make_config(model_class=f"{FAKES}:{model}", async_scheduling=True)
    plan = read_plan(config)
    capable = model == "CapableModel"
    assert plan.async_overlap is capable is bool(config.scheduler_config.async_scheduling)
    assert plan.chunked_prefill is capable is config.scheduler_config.enable_chunked_prefill
    assert plan.prefix_caching is capable is config.cache_config.enable_prefix_caching
    assert plan.capabilities.supports_sample_on_device is capable
    assert plan.model.target == f"{FAKES}:{model}"


def test_block_model_plan_has_its_canvas(make_config: Any) -> None:
    config = make_config(
        model_class=f"{FAKES}:BlockOutputModel",
        tt={"sample_on_device_mode": "all"},
        max_num_seqs=1,
        async_scheduling=False,
    )
    plan = read_plan(config)
    assert plan.canvas_tokens == 256
    assert not plan.chunked_prefill and not plan.prefix_caching
    # A process re-validating the resolved config still validates requests as a block model.
    block_output.reset_serving()
    TTPlatform.check_and_update_config(config)
    assert block_output.serving_canvas() == 256
    block_output.reset_serving()


def test_interleave_policy_comes_from_the_options(make_config: Any) -> None:
    tt = {
        "decode_interleave_enabled": False,
        "decode_interleave_prefill_steps": 3,
        "decode_interleave_decode_steps": 2,
    }
    interleave = read_plan(make_config(tt=tt)).interleave
    assert (interleave.enabled, interleave.prefill_steps, interleave.decode_steps) == (
        False,
        3,
        2,
    )


def test_fabric_config_stays_off_the_config(make_config: Any) -> None:
    """fabric_config holds ttnn arguments by reference: the plan (on vLLM's config) omits it."""
    plan = read_plan(make_config(model_class=f"{FAKES}:FabricModel"))
    assert plan.capabilities.fabric_config is None
    assert plan.capabilities.supports_sample_on_device


def test_revalidation_keeps_the_resolved_plan(make_config: Any) -> None:
    """vLLM re-runs the platform hook on a config that is already resolved (another process):
    the plan stands, and the lanes folded out of --data-parallel-size are not folded again."""
    config = make_config(model_class=f"{FAKES}:LaneModel", data_parallel_size=2, max_num_seqs=4)
    before = read_plan(config)
    TTPlatform.check_and_update_config(config)
    assert read_plan(config) == before
    assert before.lanes.lanes == 2 and config.scheduler_config.max_num_seqs == 8


def test_missing_plan_is_a_clear_error(make_config: Any) -> None:
    config = make_config()
    del config.additional_config[PLAN_KEY]
    assert find_plan(config) is None
    with pytest.raises(LaunchPlanError, match="TTPlatform.check_and_update_config"):
        read_plan(config)


def test_plan_from_another_plugin_version_is_refused(make_config: Any) -> None:
    config = make_config()
    config.additional_config[PLAN_KEY]["format"] = -1
    with pytest.raises(LaunchPlanError, match="format -1"):
        read_plan(config)


def _read_plans(configs: list[Any], queue: Any) -> None:
    """In the spawned child: re-validate each config as vLLM does, then read its plan."""
    plans = []
    for config in configs:
        TTPlatform.check_and_update_config(config)
        plans.append(read_plan(config))
    queue.put(plans)


def spawned_plans(ctx: SpawnContext, configs: list[Any]) -> list[LaunchPlan]:
    queue = ctx.Queue()
    child = ctx.Process(target=_read_plans, args=(configs, queue))
    child.start()
    try:
        plans: list[LaunchPlan] = queue.get(timeout=300)
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    return plans


def test_plan_survives_a_spawned_process(make_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM spawns the engine core and workers and hands them the pickled VllmConfig; the child
    (which re-runs the platform hook, as vLLM does) reads the very plan the parent resolved."""
    monkeypatch.setenv("MESH_DEVICE", "T3K")
    monkeypatch.delenv(GROUPS_ENV, raising=False)
    configs = [
        make_config(
            model_class=f"{FAKES}:LaneModel",
            data_parallel_size=2,
            max_num_seqs=4,
            tt={"sample_on_device_mode": "decode_only", "trace_mode": "decode_only"},
        ),
        make_config(
            data_parallel_size=2, tt={"emulated_mesh": True, "always_compat_sampling": True}
        ),
    ]
    parents = [read_plan(c) for c in configs]
    assert parents[1].device_groups is not None and parents[0].lanes.lanes == 2
    children = spawned_plans(multiprocessing.get_context("spawn"), configs)
    assert children == parents
    assert all(isinstance(p, LaunchPlan) for p in children)
    # The plan is plain JSON on the config (vLLM hashes additional_config as JSON).
    for config, plan in zip(configs, parents, strict=True):
        wire = json.loads(json.dumps(config.additional_config[PLAN_KEY]))
        assert LaunchPlan.from_json(wire) == plan
