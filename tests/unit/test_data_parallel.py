"""--data_parallel_size on TT: lanes for lane models, standard DP with device groups otherwise."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import write_checkpoint_config
from tests.unit.test_tt_scheduler import (
    assert_same_schedule,
    count_steady,
    feed_back,
    make_scheduler,
    request,
    step_kind,
    trace_steps,
    workload,
)
from vllm_tt_plugin.lane_scheduler import TTLaneCoordinator, merge_outputs
from vllm_tt_plugin.launch.data_parallel import LaneLayout, rank_devices
from vllm_tt_plugin.launch.launch_plan import read_plan
from vllm_tt_plugin.launch.mesh_spec import MeshSpec
from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.policy.step_output import TTSchedulerOutput
from vllm_tt_plugin.scheduler import TTAsyncScheduler, TTScheduler, scheduler_class
from vllm_tt_plugin.utils.device_discovery import (
    GROUPS_ENV,
    DeviceDiscoveryError,
    discover_device_groups,
    discover_in_process,
    submesh_shape,
)

if TYPE_CHECKING:
    from vllm.v1.request import Request

FAKES = "tests.unit.fakes.models"


def _groups(config: Any) -> tuple[tuple[int, ...], ...] | None:
    groups = read_plan(config).device_groups
    return None if groups is None else groups.groups


def test_lane_model_converts_dp_to_lanes(make_config: Any) -> None:
    config = make_config(model_class=f"{FAKES}:LaneModel", data_parallel_size=4, max_num_seqs=8)
    assert config.parallel_config.data_parallel_size == 1
    assert config.parallel_config.distributed_executor_backend == "uni"
    assert config.scheduler_config.max_num_seqs == 32
    plan = read_plan(config)
    assert plan.lanes == LaneLayout(lanes=4, seqs_per_lane=8) and plan.device_groups is None
    assert (
        config.scheduler_config.scheduler_cls == "vllm_tt_plugin.lane_scheduler.TTLaneCoordinator"
    )


@pytest.mark.parametrize(
    ("env", "lanes"),
    [
        ({"TT_LLAMA_TEXT_VER": "llama3_70b_galaxy"}, True),
        ({"TT_LLAMA_TEXT_VER": "tt_transformers"}, False),
    ],
)
def test_which_registry_targets_are_lane_models(env: dict[str, str], lanes: bool) -> None:
    from vllm_tt_plugin.launch.data_parallel import is_lane_model
    from vllm_tt_plugin.model_registry import TTModelRegistry

    target = TTModelRegistry.from_env(env).resolve("TTLlamaForCausalLM")
    assert target.lane_data_parallel is lanes
    if lanes:
        assert is_lane_model(target)  # decided from the registry, no import of tt-metal needed


def test_gpt_oss_is_a_lane_model() -> None:
    from vllm_tt_plugin.model_registry import TTModelRegistry

    assert TTModelRegistry.from_env({}).resolve("TTGptOssForCausalLM").lane_data_parallel


def test_dp_one_changes_nothing(make_config: Any) -> None:
    config = make_config(model_class=f"{FAKES}:LaneModel", max_num_seqs=8)
    assert read_plan(config).lanes == LaneLayout(lanes=1, seqs_per_lane=8)
    assert read_plan(config).device_groups is None
    assert config.scheduler_config.max_num_seqs == 8
    assert config.scheduler_config.get_scheduler_cls() is scheduler_class(read_plan(config))


def test_standard_dp_discovers_groups(make_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESH_DEVICE", "T3K")
    monkeypatch.delenv(GROUPS_ENV, raising=False)
    config = make_config(data_parallel_size=2, tt={"emulated_mesh": True})
    assert config.parallel_config.data_parallel_size == 2
    groups = read_plan(config).device_groups
    assert groups is not None
    assert groups.groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert groups.submesh_shape == (1, 4)
    config.parallel_config.data_parallel_rank_local = 1
    rank = rank_devices(groups, config.parallel_config)
    assert rank is not None and rank.group == [4, 5, 6, 7] and rank.submesh_shape == (1, 4)


def test_conflicting_device_ids_fail_before_mesh_creation(
    make_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MESH_DEVICE", "N300")
    monkeypatch.delenv(GROUPS_ENV, raising=False)
    with pytest.raises(Exception, match="--device-ids \\[1, 0\\] gives DP rank 0 devices \\[1\\]"):
        make_config(data_parallel_size=2, device_ids=[1, 0], tt={"emulated_mesh": True})
    # an assignment equal to the discovered groups is accepted
    config = make_config(data_parallel_size=2, device_ids=[0, 1], tt={"emulated_mesh": True})
    assert _groups(config) == ((0,), (1,))
    with pytest.raises(Exception, match="lists 3 devices, but the 2 TT device groups"):
        make_config(data_parallel_size=2, device_ids=[0, 1, 2], tt={"emulated_mesh": True})


def test_device_ids_must_list_whole_multi_device_groups(
    make_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MESH_DEVICE", "T3K")
    monkeypatch.delenv(GROUPS_ENV, raising=False)
    emulated = {"emulated_mesh": True}
    config = make_config(data_parallel_size=2, device_ids=list(range(8)), tt=emulated)
    assert _groups(config) == ((0, 1, 2, 3), (4, 5, 6, 7))
    swapped = [4, 5, 6, 7, 0, 1, 2, 3]
    with pytest.raises(Exception, match=r"gives DP rank 0 devices \[4, 5, 6, 7\], but TT"):
        make_config(data_parallel_size=2, device_ids=swapped, tt=emulated)
    with pytest.raises(Exception, match=r"gives DP rank 0 devices \[0, 1\]"):
        make_config(data_parallel_size=2, device_ids=[0, 1], tt=emulated)


def test_moe_with_standard_dp_is_rejected(make_config: Any, tmp_path: Path) -> None:
    moe = write_checkpoint_config(
        tmp_path / "moe",
        architectures=["ReferenceLlamaForCausalLM"],
        model_type="mixtral",
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    with pytest.raises(Exception, match="MoE model .* is not supported on TT"):
        make_config(model=moe, data_parallel_size=2)


@pytest.mark.parametrize(
    ("shape", "dp", "sub"),
    [
        ((1, 8), 2, (1, 4)),
        ((8, 4), 4, (2, 4)),
        ((1, 2), 2, (1, 1)),
        ((8, 4), 8, (1, 4)),
        ((2, 4), 4, (2, 1)),
    ],
)
def test_submesh_shapes(shape: tuple[int, int], dp: int, sub: tuple[int, int]) -> None:
    assert submesh_shape(*shape, dp) == sub


def test_impossible_split_is_named() -> None:
    with pytest.raises(DeviceDiscoveryError, match="cannot split the \\(1,8\\) mesh .* 3 equal"):
        submesh_shape(1, 8, 3)


def test_emulated_discovery_groups_tile_the_mesh() -> None:
    groups = discover_in_process(8, 4, 4, emulated=True)
    assert groups.submesh_shape == (2, 4)
    assert [list(g) for g in groups.groups] == [
        list(range(0, 8)),
        list(range(8, 16)),
        list(range(16, 24)),
        list(range(24, 32)),
    ]
    groups = discover_in_process(2, 4, 4, emulated=True)  # column split: ids are row-major
    assert [list(g) for g in groups.groups] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_discovery_subprocess_and_environment_reuse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GROUPS_ENV, raising=False)
    spec = MeshSpec("T3K", 1, 8)
    groups = discover_device_groups(spec, 4, emulated=True)  # runs the discovery subprocess
    assert [list(g) for g in groups.groups] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    import os

    assert GROUPS_ENV in os.environ
    # A different (mesh, dp) is discovered again rather than reusing a stale result.
    assert len(discover_device_groups(spec, 2, emulated=True).groups) == 2


def test_real_discovery_without_chips_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GROUPS_ENV, raising=False)
    with pytest.raises(DeviceDiscoveryError, match="discovery .* failed"):
        discover_device_groups(MeshSpec("T3K", 1, 8), 2, emulated=False)


# --- the lane coordinator over real vLLM schedulers ------------------------------------------


def make_coordinator(config: Any, num_blocks: int) -> TTLaneCoordinator:
    base = make_scheduler(config, num_blocks)  # builds the KV config the engine would
    return TTLaneCoordinator(
        vllm_config=config,
        kv_cache_config=base.kv_cache_config,
        structured_output_manager=base.structured_output_manager,
        block_size=config.cache_config.block_size,
    )


def private_reaches(source: str) -> list[str]:
    """Every ``x._name`` in ``source`` whose ``x`` is not ``self`` (dunders aside)."""
    import ast

    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not (node.attr.startswith("__") and node.attr.endswith("__"))
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    ]


def test_the_coordinator_drives_its_lanes_through_public_members_only() -> None:
    # The scheduler's lane API (TTSchedulerBase) is what a lane offers the coordinator; its
    # private state stays the scheduler's own.
    from vllm_tt_plugin import lane_scheduler

    assert private_reaches(Path(lane_scheduler.__file__).read_text()) == []
    # The scan sees such a reach (what lane_scheduler.py did before the lane API).
    assert private_reaches("lane._vllm_ns = 0\nself._pending = {}") == ["line 1: lane._vllm_ns"]


def test_least_loaded_placement_and_sticky_lanes(make_config: Any) -> None:
    config = make_config(model_class=f"{FAKES}:LaneModel", data_parallel_size=4, max_num_seqs=2)
    coord = make_coordinator(config, num_blocks=64)
    reqs = [request(8, 4) for _ in range(8)]
    for r in reqs:
        coord.add_request(r)
    assert [coord.lane_of[r.request_id] for r in reqs] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert all(len(lane.waiting) == 2 for lane in coord.lanes)
    out = coord.schedule()
    assert set(out.req_lanes.values()) == {0, 1, 2, 3}
    assert all(out.req_lanes[r.request_id] == coord.lane_of[r.request_id] for r in reqs)


def _lane_output(lane: int, resumed: bool) -> Any:
    from vllm.v1.core.sched.output import CachedRequestData, SchedulerOutput

    ids = [f"l{lane}-a", f"l{lane}-b"]
    return SchedulerOutput(
        scheduled_new_reqs=[f"new-{lane}"],
        scheduled_cached_reqs=CachedRequestData(
            req_ids=ids,
            resumed_req_ids={ids[0]} if resumed else set(),
            new_token_ids=[[lane]],
            all_token_ids={ids[0]: [lane, lane]} if resumed else {},
            new_block_ids=[None, ([lane],)],
            num_computed_tokens=[10 * lane, 10 * lane + 1],
            num_output_tokens=[lane, lane + 1],
        ),
        num_scheduled_tokens={ids[0]: 1, ids[1]: 1, f"new-{lane}": 5},
        total_num_scheduled_tokens=7,
        scheduled_spec_decode_tokens={},
        scheduled_encoder_inputs={f"new-{lane}": [0]},
        num_common_prefix_blocks=[0, 0],
        finished_req_ids={f"done-{lane}"},
        free_encoder_mm_hashes=[f"h{lane}"],
        preempted_req_ids={f"pre-{lane}"} if lane else None,
    )


def test_merged_step_joins_the_lanes_in_lane_order() -> None:
    lanes = [_lane_output(0, resumed=False), _lane_output(1, resumed=True)]
    merged = merge_outputs(lanes, StepKind.PREFILL)
    cached = merged.scheduled_cached_reqs
    assert cached.req_ids == ["l0-a", "l0-b", "l1-a", "l1-b"]
    assert cached.resumed_req_ids == {"l1-a"}
    assert cached.all_token_ids == {"l1-a": [1, 1]}
    assert cached.new_block_ids == [None, ([0],), None, ([1],)]
    assert cached.num_computed_tokens == [0, 1, 10, 11]
    assert cached.num_output_tokens == [0, 1, 1, 2]
    assert cached.new_token_ids == [[0], [1]]
    assert merged.scheduled_new_reqs == ["new-0", "new-1"]
    assert merged.total_num_scheduled_tokens == 14
    assert list(merged.num_scheduled_tokens) == [
        "l0-a", "l0-b", "new-0", "l1-a", "l1-b", "new-1"
    ]  # fmt: skip
    assert merged.req_lanes == {
        "l0-a": 0, "l0-b": 0, "new-0": 0, "l1-a": 1, "l1-b": 1, "new-1": 1
    }  # fmt: skip
    assert merged.step_kind is StepKind.PREFILL
    # What the runner asks when it places a new or resumed row.
    assert merged.lane_of("new-1") == 1 and merged.lane_of("l0-b") == 0
    assert merged.lane_of("not-scheduled", 3) == 3
    single = TTSchedulerOutput.of(lanes[1], StepKind.PREFILL)  # one lane: no lane map
    assert (
        single.lane_of("new-1", 2) == 2 and single.scheduled_new_reqs is lanes[1].scheduled_new_reqs
    )
    assert merged.scheduled_encoder_inputs == {"new-0": [0], "new-1": [0]}
    assert merged.num_common_prefix_blocks == [0, 0]
    assert merged.finished_req_ids == {"done-0", "done-1"}
    assert merged.free_encoder_mm_hashes == ["h0", "h1"]
    assert merged.preempted_req_ids == {"pre-1"}


def test_lanes_share_the_step_mode_and_finish(make_config: Any) -> None:
    config = make_config(model_class=f"{FAKES}:LaneModel", data_parallel_size=2, max_num_seqs=2)
    coord = make_coordinator(config, num_blocks=64)
    emitted: dict[str, list[int]] = {}
    first = request(8, 6)
    coord.add_request(first)  # lane 0 starts decoding
    feed_back(coord, coord.schedule(), emitted)
    coord.add_request(request(100, 6))  # lane 1 gets prefill work
    pattern = ""
    for _ in range(40):
        if not coord.has_requests():
            break
        out = coord.schedule()
        kinds = {
            step_kind(coord.lanes[coord.lane_of[r]], _only(out, r))
            for r in out.num_scheduled_tokens
        }
        assert len(kinds) <= 1, f"lanes diverged in one step: {out.num_scheduled_tokens}"
        pattern += kinds.pop() if kinds else "."
        feed_back(coord, out, emitted)
    assert "P" in pattern and "D" in pattern
    assert all(len(tokens) == 6 for tokens in emitted.values())


def _only(out: Any, req_id: str) -> Any:
    from copy import copy

    view = copy(out)
    view.num_scheduled_tokens = {req_id: out.num_scheduled_tokens[req_id]}
    return view


def test_forced_prefill_admitting_nothing_falls_back_to_decode(make_config: Any) -> None:
    config = make_config(
        model_class=f"{FAKES}:LaneModel",
        data_parallel_size=2,
        max_num_seqs=2,
        max_model_len=256,
        max_num_batched_tokens=256,
    )
    coord = make_coordinator(config, num_blocks=5)
    a, b = request(60, 30), request(60, 30)
    coord.add_request(a)
    coord.add_request(b)
    feed_back(coord, coord.schedule(), {})
    coord.add_request(request(250, 2))
    out = coord.schedule()
    assert set(out.num_scheduled_tokens) == {a.request_id, b.request_id}
    assert all(n == 1 for n in out.num_scheduled_tokens.values())


def lane_workload() -> tuple[list[Request], dict[int, list[Request]]]:
    """Two lanes of two: lane 0's third request waits next to a decoding one once the short
    one finishes; a late arrival lands in lane 1 after it emptied, while lane 0 still decodes."""
    reqs = [request(10, 100), request(10, 60), request(10, 5), request(10, 60), request(10, 30)]
    return reqs, {75: [request(10, 10)]}


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize(
    ("seqs", "kv_blocks", "make_work"), [(4, 5, workload), (2, 64, lane_workload)]
)
def test_steady_lane_passes_schedule_what_the_derivation_does(
    make_config: Any,
    monkeypatch: pytest.MonkeyPatch,
    seqs: int,
    kv_blocks: int,
    make_work: Any,
    async_scheduling: bool,
) -> None:
    # On a steady decode step the coordinator runs the lanes' vLLM passes back to back without
    # readiness or work facts; with that off (every step derived per lane) the same requests
    # are scheduled step by step: through preemption and resumption under KV pressure, a
    # request waiting in a lane next to a decoding one, and an arrival in an empty lane.
    traces = []
    steady_steps = []
    for shortcut in (True, False):
        config = make_config(
            model_class=f"{FAKES}:LaneModel",
            data_parallel_size=2,
            max_num_seqs=seqs,  # per lane
            max_model_len=256,
            max_num_batched_tokens=256,
            async_scheduling=async_scheduling,
        )
        coord = make_coordinator(config, num_blocks=kv_blocks)
        # Every lane is the plan's scheduler class: vLLM's async bookkeeping exactly when asked.
        lane_class = TTAsyncScheduler if async_scheduling else TTScheduler
        assert all(type(lane) is lane_class for lane in coord.lanes)
        if shortcut:
            steady_steps = count_steady(coord, monkeypatch)
        else:
            monkeypatch.setattr(coord, "_steady_passes", lambda throttle: None)
        reqs, arrivals = make_work()
        traces.append(trace_steps(coord, reqs, arrivals))
        if not shortcut and kv_blocks == 5:
            assert sum(r.num_preemptions for r in reqs) > 0
    assert_same_schedule(traces, steady_steps[0], reqs, arrivals)


def test_lane_results_merge_per_client_in_lane_order() -> None:
    from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
    from vllm.v1.metrics.stats import PrefixCacheStats, SchedulerStats

    def out(req_id: str) -> EngineCoreOutput:
        return EngineCoreOutput(request_id=req_id, new_token_ids=[1])

    def stats(lane: int) -> SchedulerStats:
        return SchedulerStats(
            num_running_reqs=lane + 1,
            num_waiting_reqs=2 * lane,
            kv_cache_usage=0.1 * (lane + 1),
            prefix_cache_stats=PrefixCacheStats(requests=lane, queries=10, hits=lane * 3),
            kv_cache_eviction_events=[f"ev{lane}"] if lane else [],  # type: ignore[list-item]
        )

    results = [
        {0: EngineCoreOutputs(outputs=[out("a0"), out("b0")], scheduler_stats=stats(0))},
        {
            0: EngineCoreOutputs(outputs=[out("a1")], scheduler_stats=stats(1)),
            1: EngineCoreOutputs(outputs=[out("c1")], finished_requests={"c1"}),
        },
        {
            1: EngineCoreOutputs(outputs=[out("c2")], finished_requests={"c2"}),
            0: EngineCoreOutputs(outputs=[], scheduler_stats=stats(2)),
        },
    ]
    coord = TTLaneCoordinator.__new__(TTLaneCoordinator)  # the merge reads lane_of only
    coord.lane_of = {"c1": 1, "c2": 2, "a0": 0}
    step = merge_outputs([_lane_output(0, resumed=False)], StepKind.DECODE)
    step.finished_req_ids = {"c1", "c2"}
    merged = coord._merge_results(step, results)
    assert sorted(merged) == [0, 1]
    assert [o.request_id for o in merged[0].outputs] == ["a0", "b0", "a1"]
    assert [o.request_id for o in merged[1].outputs] == ["c1", "c2"]
    assert merged[1].finished_requests == {"c1", "c2"}
    assert merged[1].scheduler_stats is None
    total = merged[0].scheduler_stats
    assert (total.num_running_reqs, total.num_waiting_reqs) == (6, 6)
    assert total.kv_cache_usage == pytest.approx(0.2)
    p = total.prefix_cache_stats
    assert (p.requests, p.queries, p.hits) == (3, 30, 9)
    assert total.kv_cache_eviction_events == ["ev1", "ev2"]
    assert coord.lane_of == {"a0": 0}  # finished requests leave the lane map


def test_kv_budget_is_per_lane(make_config: Any) -> None:
    """Each lane has its own KV pool: headroom is one block per sequence of a lane."""
    from tests.unit.fakes.models import LaneModel
    from vllm_tt_plugin.adapter.model_adapter import ModelAdapter
    from vllm_tt_plugin.loader import ResolvedModel
    from vllm_tt_plugin.model_registry import ModelTarget
    from vllm_tt_plugin.worker import TTWorker

    config = make_config(model_class=f"{FAKES}:LaneModel", data_parallel_size=4, max_num_seqs=8)
    worker = TTWorker(config, local_rank=0, rank=0, distributed_init_method="tcp://127.0.0.1:1")
    worker.resolved = ResolvedModel(
        ModelTarget("TTReferenceLlamaForCausalLM", f"{FAKES}:LaneModel", "override"),
        LaneModel,
    )
    worker.adapter = ModelAdapter(LaneModel)
    budget = worker.get_num_available_blocks_tt()
    assert budget.seqs_per_lane == 8  # not the global 32
    assert budget.num_blocks == 131072 // 64 + 8 + 1


@pytest.mark.parametrize(
    ("visible", "error"),
    [
        (None, None),
        ("4,5,6,7", None),
        ("0,1,2,3,4,5,6,7", None),  # parent-wide visibility, inherited by every rank
        ("7,6,5,4,3,2,1,0", None),  # the same parent-wide set, in another order
        # A strict superset of the group that misses another rank's group is no parent-wide
        # value: a wrong per-rank assignment.
        ("3,4,5,6,7", "a per-rank value must equal the group exactly"),
        ("0,1,2,3", "TT_VISIBLE_DEVICES=\\[0, 1, 2, 3\\] for DP rank 1 does not match"),
        ("4,5,6", "does not match its discovered device group \\[4, 5, 6, 7\\]"),
    ],
)
def test_rank_opens_only_its_group(
    make_config: Any, monkeypatch: pytest.MonkeyPatch, visible: str | None, error: str | None
) -> None:
    from vllm_tt_plugin.worker import TTWorker

    monkeypatch.setenv("MESH_DEVICE", "T3K")
    monkeypatch.delenv(GROUPS_ENV, raising=False)
    # The worker exports its group in TT_VISIBLE_DEVICES: setenv first so the test restores it.
    monkeypatch.setenv("TT_VISIBLE_DEVICES", "")
    monkeypatch.delenv("TT_VISIBLE_DEVICES")
    config = make_config(data_parallel_size=2, tt={"emulated_mesh": True})
    config.parallel_config.data_parallel_rank_local = 1
    if visible is not None:
        monkeypatch.setenv("TT_VISIBLE_DEVICES", visible)
    worker = TTWorker(config, local_rank=0, rank=0, distributed_init_method="tcp://127.0.0.1:1")
    if error is not None:
        with pytest.raises(ValueError, match=error):
            worker.init_device()
        return
    worker.init_device()
    try:
        assert os.environ["TT_VISIBLE_DEVICES"] == "4,5,6,7"
        assert worker.mesh is not None
        assert worker.mesh.device.get_device_ids() == [4, 5, 6, 7]
        assert worker.mesh.spec.shape == (1, 4)
    finally:
        worker.shutdown()


@pytest.mark.parametrize(
    ("model_class", "dp"), [(f"{FAKES}:CapableModel", 2), (f"{FAKES}:LaneModel", 4)]
)
def test_in_process_engine_core_is_refused_with_dp_before_any_device_opens(
    make_config: Any, monkeypatch: pytest.MonkeyPatch, model_class: str, dp: int
) -> None:
    def no_discovery(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("device discovery (a mesh open) ran before the refusal")

    monkeypatch.setattr(
        "vllm_tt_plugin.utils.device_discovery.discover_device_groups", no_discovery
    )
    monkeypatch.setenv("MESH_DEVICE", "T3K")
    monkeypatch.delenv(GROUPS_ENV, raising=False)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with pytest.raises(
        ValueError,
        match=rf"VLLM_ENABLE_V1_MULTIPROCESSING=0 is not compatible with --data-parallel-size {dp}",
    ):
        make_config(model_class=model_class, data_parallel_size=dp, tt={"emulated_mesh": True})


def test_in_process_engine_core_without_dp_is_accepted(
    make_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    config = make_config(tt={"emulated_mesh": True})
    assert config.parallel_config.data_parallel_size == 1
