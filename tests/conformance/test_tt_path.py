"""TT-path claims against a fake server: a server without the plugin's metrics is not certified,
--tt-device must agree with the mesh it reports, claimed paths pass / fail / report not
exercised from the counters, and the matrix never shows a not-run check as pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.conftest import tt_info_text
from tt_conformance import matrix
from tt_conformance.formats.html import render_matrix_html
from tt_conformance.formats.markdown import render_matrix_markdown
from tt_conformance.rawhttp import parse_prometheus
from tt_conformance.report import load_report
from tt_conformance.ttmetrics import (
    NotExercised,
    host_fallback,
    lanes_carry_rows,
    multi_row_prefill,
    parse_metrics,
    resident_decode,
    stays_on_device,
)

CHECKS = """
import pytest
from tt_conformance.ttmetrics import device_decode, host_fallback

@pytest.mark.tt_path
def test_claims_tt(tt_path):
    tt_path.start()
    tt_path.conclude(device_decode(), host_fallback(["min_p"]))

def test_generic(tt_server, tt_path):
    tt_path.start(required=False)
    tt_path.conclude(device_decode())
"""


def counters(device_decodes: int, min_p_fallbacks: int) -> str:
    return (
        "# TYPE tt_steps_total counter\n"
        f'tt_steps_total{{kind="decode",route="device"}} {device_decodes}.0\n'
        "# TYPE tt_host_fallback_steps_total counter\n"
        f'tt_host_fallback_steps_total{{kind="decode",reason="min_p"}} {min_p_fallbacks}.0\n'
    )


def run(pytester: pytest.Pytester, fake_server, harness_args, *extra: str):
    pytester.makepyfile(test_tt=CHECKS)
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out", *extra
    )
    return result


def outcomes(pytester: pytest.Pytester) -> dict[str, tuple[str, str]]:
    report = load_report(pytester.path / "out" / "latest.json")
    return {c.id.rsplit("::", 1)[-1]: (c.outcome, c.reason) for c in report.checks}


def test_server_without_plugin_metrics_is_not_certified(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    result = run(pytester, fake_server, harness_args, "--tt-device=N150")
    got = outcomes(pytester)
    assert got["test_claims_tt"][0] == "skip"
    assert got["test_claims_tt"][1].startswith("not applicable: the server exposes no TT plugin")
    assert got["test_generic"] == ("pass", "")  # generic checks still run
    report = load_report(pytester.path / "out" / "latest.json")
    assert (report.device, report.mesh_shape) == ("not-tt", None)
    assert report.warnings[0].startswith("not a TT server")
    assert result.stdout.str().count("NOT A TT SERVER") == 1


@pytest.mark.parametrize(
    ("device", "info", "message"),
    [
        ("N150", tt_info_text("N300", "1x2"), "means mesh 1x1, but the server reports"),
        ("emulated", tt_info_text("N300", "1x2"), "runs a hardware mesh"),
        ("N300", tt_info_text("N300", "1x2", emulated_mesh=True), "use --tt-device emulated"),
    ],
)
def test_device_that_disagrees_with_the_server_is_an_error(
    pytester: pytest.Pytester, fake_server, harness_args, device: str, info: str, message: str
) -> None:
    fake_server.state.tt_metrics = [info]
    result = run(pytester, fake_server, harness_args, f"--tt-device={device}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert not (pytester.path / "out").exists()  # no check ran, no report


def test_claimed_path_that_ran_passes(pytester: pytest.Pytester, fake_server, harness_args) -> None:
    info = tt_info_text("N300", "1x2", sample_on_device_mode="all", emulated_mesh=True)
    # Scrapes: the probe, then start/conclude of each check.
    fake_server.state.tt_metrics = [info, info + counters(0, 0), info + counters(5, 2)]
    run(pytester, fake_server, harness_args, "--tt-device=emulated")
    assert outcomes(pytester)["test_claims_tt"] == ("pass", "")


def test_claimed_path_that_did_not_run_fails_naming_it(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    info = tt_info_text("N300", "1x2", sample_on_device_mode="all", emulated_mesh=True)
    fake_server.state.tt_metrics = [info, info + counters(4, 0), info + counters(4, 3)]
    run(pytester, fake_server, harness_args, "--tt-device=emulated")
    outcome, reason = outcomes(pytester)["test_claims_tt"]
    assert outcome == "fail"
    assert "device-sampled decode steps: no decode step was sampled on the device" in reason


def test_path_the_launch_rules_out_is_not_exercised(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    info = tt_info_text("N300", "1x2", sample_on_device_mode=None, emulated_mesh=True)
    fake_server.state.tt_metrics = [info]
    run(pytester, fake_server, harness_args, "--tt-device=emulated")
    got = outcomes(pytester)
    assert got["test_claims_tt"][0] == "skip"
    assert got["test_claims_tt"][1].startswith("not exercised: device-sampled decode steps: ")
    assert "sample_on_device_mode is not set" in got["test_claims_tt"][1]
    assert got["test_generic"][0] == "skip"  # its TT claim is not exercised either


def test_matrix_tells_pass_from_not_run(make_report) -> None:
    partial = make_report({"m::a": "pass", "m::b": "skip"})
    nothing = make_report({"m::a": "skip"}, model="org/model-b")
    cells = matrix.fold([(Path("r.json"), partial), (Path("s.json"), nothing)])
    page = render_matrix_markdown(cells, "now")
    # A skipped check is counted as not run with its reason, never as passed.
    assert "1/2 passed, 1 not run" in page and "not run: m::b" in page
    assert "0/1 passed, 1 not run; not run: " in page
    html_page = render_matrix_html(cells, "now")
    assert "m::b" in html_page and "1/2 passed, 1 not run" in html_page


def test_a_server_without_the_plugin_stays_experimental(make_report, passing_accuracy) -> None:
    from tt_conformance.tiers import derive_tier

    emulated = make_report({"m::a": "pass"}, device="emulated", accuracy=(passing_accuracy,))
    not_tt = make_report({"m::a": "pass"}, device="not-tt", accuracy=(passing_accuracy,))
    assert derive_tier(emulated).tier == "emulated"
    got = derive_tier(not_tt)
    assert got.tier == "experimental" and "no TT plugin" in got.reason
    assert got.next_blocker is not None and "vllm-tt-plugin server" in got.next_blocker


def test_metrics_are_read_with_prometheus_clients_parser() -> None:
    text = tt_info_text("T3K", "1x8") + counters(3, 1)
    info, tt = parse_metrics(text)
    assert info is not None and (info.mesh_device, info.mesh_shape, info.lanes) == ("T3K", "1x8", 1)
    assert tt.value("tt_steps_total", kind="decode") == 3
    assert tt.value("tt_host_fallback_steps_total", reason="min_p") == 1
    samples = parse_prometheus('a_total{x="1"} 2.0\n')
    assert (samples[0].name, samples[0].labels, samples[0].value) == ("a_total", {"x": "1"}, 2.0)
    with pytest.raises(ValueError):
        parse_prometheus("not { prometheus\n")


def test_lane_claim_needs_two_busy_lanes_and_is_not_exercised_on_one_lane() -> None:
    info, before = parse_metrics(tt_info_text("TG", "8x4").replace('lanes="1"', 'lanes="2"'))
    assert info is not None and info.lanes == 2
    _, one = parse_metrics('tt_lane_steps_total{lane="0"} 3.0\ntt_lane_steps_total{lane="1"} 0\n')
    _, both = parse_metrics('tt_lane_steps_total{lane="0"} 3.0\ntt_lane_steps_total{lane="1"} 1\n')
    claim = lanes_carry_rows(2)
    claim.check(both - before, both, info)
    with pytest.raises(AssertionError, match=r"only lane\(s\) \['0'\] of 2"):
        claim.check(one - before, one, info)
    single, _ = parse_metrics(tt_info_text("N150", "1x1"))
    assert single is not None
    with pytest.raises(NotExercised, match="1 lane"):
        claim.check(both, both, single)


def test_device_path_claim_tells_model_limits_from_a_broken_path() -> None:
    info, _ = parse_metrics(tt_info_text("N150", "1x1", sample_on_device_mode="all"))
    assert info is not None
    claim = stays_on_device()

    def after(reason: str) -> object:
        return parse_metrics(
            counters(4, 0) + f'tt_host_fallback_steps_total{{kind="decode",reason="{reason}"}} 2\n'
        )[1]

    _, clean = parse_metrics(counters(4, 0))
    claim.check(clean, clean, info)
    with pytest.raises(NotExercised, match="device sampler does not take every request"):
        claim.check(after("top_k"), after("top_k"), info)  # the model's declared limit
    with pytest.raises(AssertionError, match="left the device path"):
        claim.check(after("min_p"), after("min_p"), info)


def test_fallback_and_resident_claims_are_not_exercised_when_a_model_limit_routed_first() -> None:
    """A model with max_device_top_k (Qwen2-VL: 32) sends a top-k-beyond-limit batch to the host
    before min_p is looked at, and never decodes resident: not exercised, not failed. Any other
    fallback still fails the claim."""
    info, _ = parse_metrics(tt_info_text("N150", "1x1", sample_on_device_mode="all"))
    assert info is not None

    def after(device_decodes: int, reason: str) -> object:
        return parse_metrics(
            counters(device_decodes, 0)
            + f'tt_host_fallback_steps_total{{kind="decode",reason="{reason}"}} 2\n'
            + 'tt_decode_commands_total{command="full_reload"} 3\n'
        )[1]

    for claim in (host_fallback(["min_p"]), resident_decode()):
        with pytest.raises(NotExercised, match="top_k.*beyond this model's device sampler"):
            claim.check(after(0, "top_k"), after(0, "top_k"), info)
        with pytest.raises(AssertionError):
            claim.check(after(0, "logit_bias"), after(0, "logit_bias"), info)
    with pytest.raises(AssertionError, match="resident step"):  # decoded on the device: broken
        resident_decode().check(after(4, "top_k"), after(4, "top_k"), info)


def test_multi_row_prefill_claim_tells_host_sampled_batches_from_unbatched_prefills() -> None:
    """A model whose prefill returns logits (Qwen2-VL's adapter) batches rows but samples them
    on the host: not exercised. Rows prefilled one per call fail the claim."""
    info, _ = parse_metrics(tt_info_text("N150", "1x1", sample_on_device_mode="all"))
    assert info is not None
    claim = multi_row_prefill()

    def with_calls(route: str, calls: int) -> object:
        text = f'tt_multi_row_prefills_total{{route="{route}"}} {calls}\n'
        return parse_metrics(text)[1]

    claim.check(with_calls("device", 1), with_calls("device", 1), info)
    with pytest.raises(NotExercised, match="all sampled on the host"):
        claim.check(with_calls("host", 2), with_calls("host", 2), info)
    with pytest.raises(AssertionError, match="prefilled one by one"):
        claim.check(with_calls("device", 0), with_calls("device", 0), info)
