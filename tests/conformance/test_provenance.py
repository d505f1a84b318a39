"""Provenance: tt_plugin_info parsing, server facts over flags, device names, run info, and
the bearer token every client sends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Info, generate_latest

from tests.conformance.conftest import tt_info_text
from tt_conformance.formats.json import report_to_dict
from tt_conformance.names import KNOWN_MESH_SHAPES, mesh_shape_for, normalize_device
from tt_conformance.provenance import Flags, ProvenanceError, discover, redact
from tt_conformance.report import load_report
from tt_conformance.server import ServedModel, ServerProbe, parse_plugin_info

# The label set fixed in the brief (unknown values are the string "unknown").
INFO = {
    "plugin_version": "0.3.1",
    "ttnn_version": "0.62.0",
    "tt_metal_commit": "abc1234",
    "mesh_device": "T3K",
    "mesh_shape": "1x8",
    "model_class": "TtLlamaForCausalLM",
    "lanes": "2",
    "max_num_seqs": "16",
    "max_model_len": "4096",
    "tt_options": '{"sample_on_device_mode":"all"}',
}


def _metrics_text(labels: dict[str, str]) -> str:
    registry = CollectorRegistry()
    Info("tt_plugin", "vllm-tt-plugin build and configuration", registry=registry).info(labels)
    return "# TYPE vllm:x gauge\nvllm:x 1.0\n" + generate_latest(registry).decode()


def test_plugin_info_round_trips_through_prometheus_client() -> None:
    assert parse_plugin_info(_metrics_text(INFO)) == INFO
    assert parse_plugin_info("# TYPE vllm:x gauge\nvllm:x 1.0\n") == {}
    assert parse_plugin_info("garbage {{{ not metrics") == {}


def test_server_facts_win_over_flags_and_defaults() -> None:
    probe = ServerProbe(models=(ServedModel("m", 4096, None),), plugin_info=INFO)
    found = discover(probe, probe.models[0], Flags(), "T3K")
    assert (found.max_num_seqs, found.lanes, found.max_model_len) == (16, 2, 4096)
    assert (found.plugin_version, found.ttnn_version, found.tt_metal_version) == (
        "0.3.1", "0.62.0", "abc1234",
    )  # fmt: skip
    assert found.mesh_shape == "1x8" and found.model_class == "TtLlamaForCausalLM"
    assert found.tt_options == {"sample_on_device_mode": "all"}
    assert {"max_num_seqs", "lanes", "plugin_version", "ttnn_version"} <= set(found.discovered)
    # Agreeing flags are fine.
    assert discover(probe, None, Flags(max_num_seqs=16, lanes=2), "T3K").max_num_seqs == 16


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (Flags(max_num_seqs=32), "--tt-max-num-seqs 32 disagrees with the server, which reports "
                                 "max_num_seqs = 16"),
        (Flags(lanes=1), "--tt-lanes 1 disagrees with the server, which reports lanes = 2"),
        (Flags(mesh_shape="1x2"), "--tt-mesh-shape 1x2 disagrees"),
    ],
)  # fmt: skip
def test_a_flag_that_disagrees_with_the_server_is_an_error(flags: Flags, needle: str) -> None:
    probe = ServerProbe(plugin_info=INFO)
    with pytest.raises(ProvenanceError, match=needle):
        discover(probe, None, flags, "T3K")


def test_without_the_info_metric_flags_and_defaults_are_used() -> None:
    probe = ServerProbe(models=(ServedModel("m", 2048, None),))
    found = discover(probe, probe.models[0], Flags(max_num_seqs=8, plugin_version="0.1.0"), "N300")
    assert (found.max_num_seqs, found.lanes, found.mesh_shape) == (8, 1, None)  # not-tt
    assert (found.plugin_version, found.ttnn_version) == ("0.1.0", "unknown")
    assert found.discovered == ("max_model_len",)
    assert found.device == "not-tt" and found.warnings[0].startswith("not a TT server")
    assert discover(ServerProbe(), None, Flags(), "unknown").max_num_seqs == 32
    unknowns = {**INFO, "ttnn_version": "unknown", "max_num_seqs": "unknown"}
    found = discover(ServerProbe(plugin_info=unknowns), None, Flags(max_num_seqs=4), "T3K")
    assert found.ttnn_version == "unknown" and found.max_num_seqs == 4


@pytest.mark.parametrize(
    ("given", "canonical"),
    [("t3k", "T3K"), ("T3K", "T3K"), (" n150 ", "N150"), ("TG", "GALAXY"), ("galaxy", "GALAXY"),
     ("p150x4", "P150X4"), ("P150x8", "P150X8"), ("BH-Galaxy", "BLACKHOLE_GALAXY"),
     ("Emulated", "emulated"), ("UNKNOWN", "unknown")],
)  # fmt: skip
def test_device_names_are_case_insensitive(given: str, canonical: str) -> None:
    assert normalize_device(given) == canonical


def test_unknown_device_names_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown device 'n151'.*known: N150"):
        normalize_device("n151")


def test_device_list_agrees_with_the_plugin_mesh_spec() -> None:
    # One list per side (the harness never imports the plugin at run time); they must agree.
    from vllm_tt_plugin.launch.mesh_spec import NAMED_MESHES

    for name, spec in NAMED_MESHES.items():
        canonical = normalize_device(name)
        assert canonical in KNOWN_MESH_SHAPES, name
        assert mesh_shape_for(name) == f"{spec.rows}x{spec.cols}", name


def test_api_keys_never_reach_the_report() -> None:
    assert redact(["-q", "--tt-api-key", "s3cret", "--tt-api-key=other", "x"]) == [
        "-q", "--tt-api-key", "***", "--tt-api-key=***", "x",
    ]  # fmt: skip


CHECK_USES_EVERY_CLIENT = """
import asyncio

def test_clients(tt_server, tt_openai_client, tt_async_openai_client, tt_raw_http):
    tt_openai_client.completions.create(model=tt_server.model, prompt="x", max_tokens=2)
    async def go():
        stream = await tt_async_openai_client.completions.create(
            model=tt_server.model, prompt="x", max_tokens=2, stream=False)
        return stream
    asyncio.run(go())
    assert tt_raw_http.completions({"prompt": "x", "max_tokens": 2}).status_code == 200
    assert tt_raw_http.health().status_code == 200
"""


def test_api_key_is_sent_by_every_client(
    pytester: pytest.Pytester, fake_server, harness_args, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_server.state.api_key = "s3cret"
    pytester.makepyfile(test_clients=CHECK_USES_EVERY_CLIENT)
    url = f"--tt-server-url={fake_server.url}"
    result = pytester.runpytest(*harness_args, url, "--tt-report-dir=out", "--tt-api-key=s3cret")
    result.assert_outcomes(passed=1)
    assert set(fake_server.state.auth) == {"Bearer s3cret"}
    report = load_report(pytester.path / "out" / "latest.json")
    assert "s3cret" not in json.dumps(report_to_dict(report))
    assert "--tt-api-key=***" in report.run.command
    # The environment variables vLLM and openai use work too.
    monkeypatch.setenv("VLLM_API_KEY", "s3cret")
    pytester.runpytest(*harness_args, url).assert_outcomes(passed=1)


def test_without_the_key_the_run_fails_naming_the_option(
    pytester: pytest.Pytester, fake_server, harness_args, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "VLLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    fake_server.state.api_key = "s3cret"
    pytester.makepyfile(test_clients=CHECK_USES_EVERY_CLIENT)
    result = pytester.runpytest(*harness_args, f"--tt-server-url={fake_server.url}")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*HTTP 401*pass --tt-api-key*"])


def test_report_carries_discovered_provenance(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    fake_server.state.plugin_info = {**INFO, "max_model_len": "2048"}
    pytester.makepyfile(test_clients=CHECK_USES_EVERY_CLIENT)
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out",
        "--tt-device=t3k",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    report = load_report(pytester.path / "out" / "latest.json")
    assert report.device == "T3K" and report.mesh_shape == "1x8"
    assert (report.versions.plugin, report.versions.ttnn, report.versions.tt_metal) == (
        "0.3.1", "0.62.0", "abc1234",
    )  # fmt: skip
    assert (report.server.max_num_seqs, report.server.lanes) == (16, 2)
    assert report.server.model_class == "TtLlamaForCausalLM"
    (check,) = report.checks
    assert check.started_at and check.finished_at and check.started_at <= check.finished_at
    assert report.run is not None and report.run.host and "--tt-device=t3k" in report.run.command


def test_disagreeing_flag_is_a_usage_error(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    fake_server.state.plugin_info = INFO
    pytester.makepyfile(test_clients=CHECK_USES_EVERY_CLIENT)
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-max-num-seqs=32"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tt-max-num-seqs 32 disagrees*max_num_seqs = 16*"])


def test_device_defaults_to_mesh_device(
    pytester: pytest.Pytester, fake_server, harness_args, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MESH_DEVICE", "n300")
    fake_server.state.tt_metrics = [tt_info_text("N300", "1x2")]
    pytester.makepyfile(test_clients=CHECK_USES_EVERY_CLIENT)
    pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out"
    ).assert_outcomes(passed=1)
    assert load_report(pytester.path / "out" / "latest.json").device == "N300"
    monkeypatch.setenv("MESH_DEVICE", "n999")
    result = pytester.runpytest(*harness_args, f"--tt-server-url={fake_server.url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_collect_only_writes_no_report(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    pytester.makepyfile(test_clients=CHECK_USES_EVERY_CLIENT)
    args = [*harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out"]
    pytester.runpytest(*args).assert_outcomes(passed=1)
    latest = pytester.path / "out" / "latest.json"
    before = latest.read_text()
    files = sorted(Path(pytester.path / "out").iterdir())
    assert pytester.runpytest(*args, "--collect-only").ret == 0
    assert pytester.runpytest(*args, "-k", "nothing_matches").ret == 5
    assert sorted(Path(pytester.path / "out").iterdir()) == files
    assert latest.read_text() == before


def test_bad_perf_shapes_are_a_usage_error(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    pytester.makepyfile(test_clients=CHECK_USES_EVERY_CLIENT)
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-perf-shapes=128x128"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tt-perf-shapes: bad perf shape '128x128'*"])


def test_one_probe_decides_the_reports_device_and_feeds_tt_detection() -> None:
    model = ServedModel("m", 4096, None)
    probe = ServerProbe(models=(model,), plugin_info=INFO)
    found = discover(probe, model, Flags(), "unknown")
    assert (found.device, found.mesh_shape, found.tt.is_tt) == ("T3K", "1x8", True)
    emulated = {**INFO, "tt_options": '{"emulated_mesh":true}'}
    found = discover(ServerProbe(models=(model,), plugin_info=emulated), model, Flags(), "unknown")
    assert found.device == "emulated-T3K"  # one name per emulated mesh
    # The bare "emulated" a caller types becomes the mesh the server emulates; another
    # emulated mesh is a contradiction.
    emulated_probe = ServerProbe(models=(model,), plugin_info=emulated)
    assert discover(emulated_probe, model, Flags(), "emulated").device == "emulated-T3K"
    with pytest.raises(ProvenanceError, match="emulated-N300, but the server emulates"):
        discover(emulated_probe, model, Flags(), "emulated-N300")
    with pytest.raises(ProvenanceError, match="--tt-device N300 means mesh 1x2"):
        discover(probe, model, Flags(), "N300")
    # /metrics unreadable: not TT, and the reason says why.
    broken = ServerProbe(models=(model,), metrics_error="GET /metrics returned HTTP 500")
    found = discover(broken, model, Flags(), "T3K")
    assert (found.device, found.mesh_shape, found.tt.is_tt) == ("not-tt", None, False)
    assert "HTTP 500" in found.warnings[0]
    assert ServerProbe.from_json(broken.to_json()) == broken
