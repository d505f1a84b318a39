"""How ``--data_parallel_size`` maps onto TT: in-process lanes or vLLM's standard DP.

Lane-DP (Galaxy generators, GPT-OSS, and model classes declaring
``supports_lane_data_parallel``): one engine process drives one device mesh; N lanes of M
sequences each are scheduled by TTLaneCoordinator. Every other model runs vLLM's own
multi-process DP, one engine core and TT submesh per rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_tt_plugin.utils.device_discovery import DeviceGroups
from vllm_tt_plugin.utils.log import get_logger

if TYPE_CHECKING:
    from vllm.config import ParallelConfig, VllmConfig

    from vllm_tt_plugin.config import TTOptions
    from vllm_tt_plugin.launch.capabilities import ModelCapabilities
    from vllm_tt_plugin.model_registry import ModelTarget

logger = get_logger(__name__)


@dataclass(frozen=True)
class LaneLayout:
    lanes: int
    seqs_per_lane: int

    @property
    def max_num_seqs(self) -> int:
        return self.lanes * self.seqs_per_lane


@dataclass(frozen=True)
class DataParallelLayout:
    """How this launch runs --data_parallel_size (recorded in the launch plan)."""

    lanes: LaneLayout  # 1 lane of max_num_seqs unless lane-DP
    device_groups: DeviceGroups | None = None  # standard DP only


def is_lane_model(target: ModelTarget, caps: ModelCapabilities | None = None) -> bool:
    """Lane-DP from the registry entry, else from the class's declared capabilities."""
    if target.lane_data_parallel:
        return True
    if caps is None:
        from vllm_tt_plugin.launch.capabilities import ModelCapabilities

        caps = ModelCapabilities.from_model_class(target.load_class())
    return caps.supports_lane_data_parallel


class DataParallelError(ValueError):
    """A data-parallel launch the TT backend cannot serve."""


def configure(
    vllm_config: VllmConfig, target: ModelTarget, caps: ModelCapabilities, options: TTOptions
) -> DataParallelLayout:
    """Apply the DP mode to the config (once, in the platform hook) and return it."""
    parallel = vllm_config.parallel_config
    scheduler = vllm_config.scheduler_config
    dp = parallel.data_parallel_size
    if dp <= 1:
        return DataParallelLayout(LaneLayout(1, scheduler.max_num_seqs))
    if is_lane_model(target, caps):
        layout = LaneLayout(lanes=dp, seqs_per_lane=scheduler.max_num_seqs)
        parallel.data_parallel_size = 1
        parallel.data_parallel_size_local = 1
        parallel.data_parallel_rank = 0
        parallel.data_parallel_rank_local = None
        parallel.distributed_executor_backend = "uni"
        scheduler.max_num_seqs = layout.max_num_seqs
        if scheduler.max_num_batched_tokens < layout.max_num_seqs:
            scheduler.max_num_batched_tokens = layout.max_num_seqs
        logger.info(
            "TT: running single-process lane-DP: %d lanes x %d sequences (max_num_seqs %d), "
            "one engine, one device mesh",
            layout.lanes,
            layout.seqs_per_lane,
            layout.max_num_seqs,
        )
        return DataParallelLayout(layout)
    model_config = vllm_config.model_config
    if model_config is not None and model_config.is_moe:
        raise DataParallelError(
            f"--data-parallel-size {dp} with a MoE model ({target.arch}) is not supported on TT: "
            "standard multi-process DP would split the experts' mesh. Serve it with "
            "--data-parallel-size 1."
        )
    groups = _configure_device_groups(vllm_config, options, dp)
    return DataParallelLayout(LaneLayout(1, scheduler.max_num_seqs), groups)


def _configure_device_groups(vllm_config: VllmConfig, options: TTOptions, dp: int) -> DeviceGroups:
    """Standard DP: discover each rank's device group and check any --device-ids against it."""
    from vllm_tt_plugin.launch.mesh_spec import mesh_spec_from_env
    from vllm_tt_plugin.utils.device_discovery import discover_device_groups

    groups = discover_device_groups(mesh_spec_from_env(), dp, options.emulated_mesh)
    parallel = vllm_config.parallel_config
    user_ids = parallel.assigned_physical_gpu_ids
    if user_ids is not None:
        # TT ranks own whole device groups: --device-ids is accepted only when it lists every
        # rank's discovered group, in rank order (vLLM's own per-rank slice of it is unused).
        start = 0
        for rank, group in enumerate(groups.groups):
            shard = list(user_ids[start : start + len(group)])
            start += len(group)
            if shard != list(group):
                raise DataParallelError(
                    f"--device-ids {list(user_ids)} gives DP rank {rank} devices {shard}, but TT "
                    f"discovered its device group as {list(group)} (MESH_DEVICE split into {dp} "
                    f"submeshes of shape {groups.submesh_shape}). Remove --device-ids; TT assigns "
                    "each rank its group through TT_VISIBLE_DEVICES."
                )
        if start != len(user_ids):
            raise DataParallelError(
                f"--device-ids {list(user_ids)} lists {len(user_ids)} devices, but the {dp} TT "
                f"device groups {[list(g) for g in groups.groups]} hold {start}. Remove "
                "--device-ids; TT assigns each rank its group through TT_VISIBLE_DEVICES."
            )
    logger.info(
        "TT: standard DP over %d ranks, device groups %s (submesh %s)",
        dp,
        [list(g) for g in groups.groups],
        groups.submesh_shape,
    )
    return groups


@dataclass(frozen=True)
class RankDevices:
    rank: int
    group: list[int]
    submesh_shape: tuple[int, int]
    all_groups: tuple[tuple[int, ...], ...] = ()

    def check_visible(self, visible: list[int] | None) -> bool:
        """Accept a TT_VISIBLE_DEVICES this rank sees; True when it must be narrowed to the group.

        Exact match with the group is the per-rank assignment. vLLM 0.26.0 sets no per-rank
        value for a platform's device variable, so every rank inherits the parent's: a value
        listing every rank's group is that parent-wide restriction and is narrowed. Anything
        else (another group, part of it, or a superset that misses other ranks' groups) is a
        wrong per-rank assignment and refused.
        """
        if visible is None or visible == self.group:
            return False
        covered = {device for group in self.all_groups for device in group}
        if set(self.group) < set(visible) and covered <= set(visible):
            return True
        raise DataParallelError(
            f"TT_VISIBLE_DEVICES={visible} for DP rank {self.rank} does not match its discovered "
            f"device group {self.group}: a per-rank value must equal the group exactly (a "
            f"parent-wide value must list every rank's group, {[list(g) for g in self.all_groups]}"
            "); or unset it"
        )


def rank_devices(
    device_groups: DeviceGroups | None, parallel: ParallelConfig
) -> RankDevices | None:
    """This DP rank's device group (standard DP only; the groups come from the launch plan)."""
    if device_groups is None:
        return None
    groups = device_groups.groups
    rank = parallel.data_parallel_rank_local
    if rank is None:
        rank = parallel.data_parallel_rank
    if not 0 <= rank < len(groups):
        raise DataParallelError(
            f"DP rank {rank} has no device group in {[list(g) for g in groups]}"
        )
    return RankDevices(rank, list(groups[rank]), device_groups.submesh_shape, groups)
