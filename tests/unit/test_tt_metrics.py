"""tt_metrics: engine-side samples reach a registry through prometheus_client's multiprocess files,
exactly as the API server's /metrics reads them; the switch turns them off; the info is honest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.metrics_files import scrape, value
from vllm_tt_plugin.config import TTOptions
from vllm_tt_plugin.contract.reload_contract import (
    FULL_RELOAD,
    PAGE_TABLE_ONLY,
    STEADY,
    ReloadCommand,
)
from vllm_tt_plugin.launch.mesh_spec import parse_mesh_device
from vllm_tt_plugin.observability import tt_metrics
from vllm_tt_plugin.policy.sampling_route import Route, RouteDecision

DEVICE = RouteDecision(Route.DEVICE, "device sampling")
HOST = RouteDecision(Route.HOST, "min_p")


def test_decisions_are_counted_by_kind_route_reason_and_command(metrics_dir: Path) -> None:
    tt_metrics.observe_prefill(DEVICE)
    tt_metrics.observe_prefill(None, chunks=2)  # two rows ended mid-prompt, none sampled
    tt_metrics.observe_prefill(DEVICE, sampled_rows=3, chunks=1)  # three first tokens, a chunk
    tt_metrics.observe_prefill(HOST, sampled_rows=2)
    tt_metrics.observe_decode(FULL_RELOAD, DEVICE, overlapped=False)
    tt_metrics.observe_decode(STEADY, DEVICE, overlapped=True)
    tt_metrics.observe_decode(STEADY, DEVICE, overlapped=True)
    tt_metrics.observe_decode(PAGE_TABLE_ONLY, DEVICE, overlapped=True)
    remapped = ReloadCommand(reload_inputs=True, reload_sampling_params=True, slot_remap=(1, 0))
    tt_metrics.observe_decode(remapped, HOST, overlapped=False)
    tt_metrics.observe_lanes({0, 1})  # a prefill's lanes
    tt_metrics.observe_lanes({1})
    tt_metrics.observe_decode(STEADY, DEVICE, overlapped=False, lanes={0, 2})  # a decode's
    samples = scrape(metrics_dir)
    assert value(samples, "tt_steps_total", kind="prefill", route="device") == 2
    assert value(samples, "tt_steps_total", kind="prefill", route="host") == 1
    assert value(samples, "tt_multi_row_prefills_total", route="device") == 1
    assert value(samples, "tt_multi_row_prefills_total", route="host") == 1
    assert value(samples, "tt_steps_total", kind="prefill", route="none") == 1
    assert value(samples, "tt_prefill_chunks_total") == 3
    assert value(samples, "tt_steps_total", kind="decode", route="device") == 5
    assert value(samples, "tt_steps_total", kind="decode", route="host") == 1
    assert value(samples, "tt_host_fallback_steps_total", kind="decode", reason="min_p") == 1
    assert value(samples, "tt_decode_commands_total", command="full_reload") == 2
    assert value(samples, "tt_decode_commands_total", command="resident") == 3
    assert value(samples, "tt_decode_commands_total", command="page_table_only") == 1
    assert value(samples, "tt_decode_sampling_resets_total") == 1  # FULL_RELOAD only
    assert value(samples, "tt_slot_remaps_total") == 1
    assert value(samples, "tt_async_overlapped_decodes_total") == 3
    assert value(samples, "tt_lane_steps_total", lane="0") == 2
    assert value(samples, "tt_lane_steps_total", lane="1") == 2
    assert value(samples, "tt_lane_steps_total", lane="2") == 1
    assert value(samples, "tt_multi_lane_steps_total") == 2


def test_increments_reach_the_file_at_a_flush_and_new_series_at_once(metrics_dir: Path) -> None:
    # The step path only adds in memory; the mmap writes happen at a flush (the host-phase
    # publisher's interval, a finished request, exit). A touched series is in the file at once.
    tt_metrics.SLOT_REMAPS.touch()
    tt_metrics.observe_decode(STEADY, DEVICE, overlapped=False)
    tt_metrics.observe_decode(STEADY, DEVICE, overlapped=False)
    before = scrape(metrics_dir, flush=False)
    assert value(before, "tt_slot_remaps_total") == 0
    assert value(before, "tt_steps_total", kind="decode", route="device") is None
    tt_metrics.flush()
    tt_metrics.flush()  # nothing pending: nothing written twice
    after = scrape(metrics_dir, flush=False)
    assert value(after, "tt_steps_total", kind="decode", route="device") == 2
    assert value(after, "tt_decode_commands_total", command="resident") == 2
    tt_metrics.observe_decode(STEADY, DEVICE, overlapped=False)
    assert value(scrape(metrics_dir), "tt_steps_total", kind="decode", route="device") == 3


def test_the_host_phase_publisher_flushes_the_step_counters(metrics_dir: Path) -> None:
    from vllm_tt_plugin.observability import host_phases

    tt_metrics.observe_prefill(DEVICE)
    host_phases.PhaseClock().publish()  # what its thread does every FLUSH_INTERVAL_S
    samples = scrape(metrics_dir, flush=False)
    assert value(samples, "tt_steps_total", kind="prefill", route="device") == 1


def test_publishing_starts_the_host_phase_series_at_zero(metrics_dir: Path) -> None:
    """host_phases registers its series with tt_metrics (the metrics module never imports it):
    once the worker publishes, a scrape shows every phase of both step kinds at zero."""
    code = (
        "from vllm_tt_plugin.observability import host_phases, tt_metrics as m\n"
        "m.publish_info(m.PluginInfo(*'1 c 0.26 2 3 N300 1x2 pkg.Cls 1 4 64 {} w t t f'.split()))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
    samples = scrape(metrics_dir)
    for kind in ("prefill", "decode"):
        for phase in ("schedule_policy", "model_submit", "read_back", "vllm_output"):
            assert value(samples, "tt_host_seconds_total", kind=kind, phase=phase) == 0
        assert value(samples, "tt_host_cpu_seconds_total", kind=kind, part="plugin") == 0
    assert value(samples, "tt_decode_intervals_total") == 0


def test_processes_sum_and_the_info_appears_once(metrics_dir: Path) -> None:
    """Two engine processes (DP ranks): counters add up, identical info labels merge."""
    code = (
        "from vllm_tt_plugin.observability import tt_metrics as m\n"
        "from vllm_tt_plugin.policy.sampling_route import Route, RouteDecision\n"
        "m.observe_prefill(RouteDecision(Route.DEVICE, 'device sampling'))\n"
        "m.publish_info(m.PluginInfo(*'1 c 0.26 2 3 N300 1x2 pkg.Cls 1 4 64 {} w t t f'.split()))\n"
    )
    for _ in range(2):
        subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
    samples = scrape(metrics_dir)
    assert value(samples, "tt_steps_total", kind="prefill", route="device") == 2
    info = [k for k in samples if k[0] == tt_metrics.INFO_NAME]
    assert len(info) == 1 and samples[info[0]] == 1
    assert dict(info[0][1])["mesh_shape"] == "1x2"


def test_switch_off_writes_nothing(metrics_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tt_metrics.ENV_METRICS, "0")
    tt_metrics.observe_prefill(DEVICE)
    tt_metrics.publish_info(
        tt_metrics.PluginInfo(
            *[
                "1",
                "c",
                "0.26",
                "2",
                "3",
                "N150",
                "1x1",
                "m.C",
                "1",
                "1",
                "1",
                "{}",
                "w",
                "t",
                "t",
                "f",
            ]
        )
    )
    assert list(metrics_dir.iterdir()) == []
    assert scrape(metrics_dir) == {}


def test_install_collector_creates_a_directory_children_inherit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(tt_metrics.ENV_METRICS_DIR, raising=False)
    monkeypatch.delenv(tt_metrics.PROM_MULTIPROC_ENV, raising=False)
    monkeypatch.setattr(tt_metrics, "_collector_installed", True)  # keep the global REGISTRY
    tt_metrics.install_collector()
    made = os.environ[tt_metrics.ENV_METRICS_DIR]
    assert Path(made).is_dir()
    assert tt_metrics.metrics_directory() == made
    # vLLM turns on its multiprocess mode later (several API servers): engine processes started
    # after that write where vLLM's collector reads, whatever the plugin made before.
    monkeypatch.setenv(tt_metrics.PROM_MULTIPROC_ENV, "/srv/prom")
    tt_metrics.install_collector()
    assert tt_metrics.metrics_directory() == "/srv/prom"


def test_info_labels_describe_the_launch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TT_METAL_HOME", str(tmp_path))
    (tmp_path / "VERSION").write_text("v0.99.0\n")
    options = TTOptions(sample_on_device_mode="all", emulated_mesh=True)
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    serving = tt_metrics.ServingProfile(str(weights), None, True, False, True)
    info = tt_metrics.collect_info(
        options, parse_mesh_device("T3K"), TTOptions, 2, 16, 4096, serving
    )
    labels = info.labels()
    assert tuple(labels) == tt_metrics.INFO_LABELS
    assert labels["mesh_device"] == "T3K" and labels["mesh_shape"] == "1x8"
    assert labels["model_class"] == "vllm_tt_plugin.config.TTOptions"
    assert (labels["lanes"], labels["max_num_seqs"], labels["max_model_len"]) == ("2", "16", "4096")
    assert labels["tt_metal_commit"] == "v0.99.0"
    assert '"sample_on_device_mode":"all"' in labels["tt_options"]
    assert labels["ttnn_version"] != ""
    # The configuration profile and the weights a report is keyed by come from vLLM's config.
    assert (labels["async_scheduling"], labels["chunked_prefill"], labels["prefix_caching"]) == (
        "true",
        "false",
        "true",
    )
    assert labels["weights"].startswith("sha256:")
    from vllm import __version__ as vllm_version

    assert labels["vllm_version"] == vllm_version


def test_tt_metal_commit_is_git_describe_with_the_release_tag_and_dirty_flag(
    tmp_path: Path,
) -> None:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a", *args],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip

    home = {"TT_METAL_HOME": str(tmp_path)}
    git("init", "-q")
    (tmp_path / "setup.py").write_text("v1\n")
    git("add", "setup.py")
    git("commit", "-q", "-m", "x")
    head = git("rev-parse", "HEAD")
    assert tt_metrics.tt_metal_commit(home) == head[:12]  # no tag yet: the commit itself
    git("tag", "v0.62.0-rc35")
    assert tt_metrics.tt_metal_commit(home) == "v0.62.0-rc35"  # TT's release words
    git("commit", "-q", "--allow-empty", "-m", "y")
    after = git("rev-parse", "HEAD")
    assert tt_metrics.tt_metal_commit(home) == f"v0.62.0-rc35-1-g{after[:12]}"
    (tmp_path / "setup.py").write_text("edited\n")  # a local change to tracked code
    assert tt_metrics.tt_metal_commit(home) == f"v0.62.0-rc35-1-g{after[:12]}-dirty"
    assert tt_metrics.tt_metal_commit({}) == tt_metrics.UNKNOWN


def test_vllm_commit_is_what_the_vllm_build_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm import _version

    recorded = getattr(_version, "__commit_id__", None)
    got = tt_metrics.vllm_commit()
    if isinstance(recorded, str) and recorded:
        assert got in (recorded, recorded.removeprefix("g")) and got != tt_metrics.UNKNOWN
    else:
        assert got == tt_metrics.UNKNOWN
    monkeypatch.setattr(_version, "__commit_id__", "gffd46bfab", raising=False)
    assert tt_metrics.vllm_commit() == "ffd46bfab"
    monkeypatch.setattr(_version, "__commit_id__", None, raising=False)
    assert tt_metrics.vllm_commit() == tt_metrics.UNKNOWN


@pytest.mark.parametrize(("lanes", "tp", "dp"), [(1, "8", "1"), (4, "2", "4"), (8, "1", "8")])
def test_info_labels_carry_tp_x_dp(tmp_path: Path, lanes: int, tp: str, dp: str) -> None:
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    serving = tt_metrics.ServingProfile(str(weights), None, True, False, True)
    labels = tt_metrics.collect_info(
        TTOptions(), parse_mesh_device("T3K"), TTOptions, lanes, 4, 1024, serving, lanes
    ).labels()
    assert (labels["tensor_parallel"], labels["data_parallel"]) == (tp, dp)
