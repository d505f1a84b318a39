"""The pytest plugin end to end: check files run through pytester against a fake server."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.conftest import tt_info_text
from tt_conformance.bars import file_digest
from tt_conformance.history import run_files
from tt_conformance.names import installed_version
from tt_conformance.report import load_report

CHECKS_MIXED = """
import pytest

@pytest.fixture
def broken_fixture():
    raise RuntimeError("fixture exploded")

@pytest.mark.isolation
def test_pass(tt_server, tt_record_perf):
    assert tt_server.model == "fake/tiny-model"
    tt_record_perf("ttft_p50@c1", 12.5, "ms", "lower")

@pytest.mark.logprobs
def test_fail(tt_openai_client):
    out = tt_openai_client.completions.create(model="fake/tiny-model", prompt="x", max_tokens=2)
    assert out.choices[0].text == "something else"

def test_skip():
    pytest.skip("capability not declared")

@pytest.mark.xfail(reason="known in code")
def test_marker_xfail():
    assert False

def test_error(broken_fixture):
    pass

class TestGroup:
    @pytest.mark.parametrize("n", [1, 8])
    def test_param(self, n):
        assert n in (1, 8)
"""


def _report(report_dir: Path) -> Any:
    return load_report(report_dir / "latest.json")


def test_report_records_every_outcome(pytester: pytest.Pytester, fake_server, harness_args):
    fake_server.state.tt_metrics = [tt_info_text("N150", "1x1")]
    pytester.makepyfile(test_mixed=CHECKS_MIXED)
    result = pytester.runpytest(
        *harness_args,
        f"--tt-server-url={fake_server.url}",
        "--tt-report-dir=out",
        "--tt-device=N150",
    )
    result.assert_outcomes(passed=3, failed=1, skipped=1, xfailed=1, errors=1)
    report = _report(pytester.path / "out")
    by_id = {c.id: c for c in report.checks}
    assert by_id["test_mixed::test_pass"].outcome == "pass"
    assert by_id["test_mixed::test_pass"].concern == "isolation"
    fail = by_id["test_mixed::test_fail"]
    assert (fail.outcome, fail.concern) == ("fail", "logprobs")
    assert "something else" in fail.reason and "AssertionError" in fail.details
    assert by_id["test_mixed::test_skip"].reason == "capability not declared"
    xfail = by_id["test_mixed::test_marker_xfail"]
    assert (xfail.outcome, xfail.reason, xfail.expected_by) == ("xfail", "known in code", "marker")
    error = by_id["test_mixed::test_error"]
    assert error.outcome == "error" and "fixture exploded" in error.reason
    # Module-derived concern when no concern marker; class and params kept in the id.
    assert by_id["test_mixed::TestGroup::test_param[8]"].concern == "mixed"
    assert report.totals == {
        "pass": 3, "fail": 1, "error": 1, "skip": 1, "xfail": 1, "xpass": 0, "flaky": 0, "total": 7
    }  # fmt: skip
    assert report.perf["ttft_p50@c1"].value == 12.5
    assert report.perf["ttft_p50@c1"].check == "test_mixed::test_pass"
    assert (report.model, report.device, report.mesh_shape) == ("fake/tiny-model", "N150", "1x1")
    assert report.versions.vllm == "0.26.0"
    # The server's plugin build is invisible over HTTP: never the harness's own version.
    assert report.versions.plugin == "0.1.0"  # read from the server's tt_plugin_info
    assert report.versions.harness == installed_version()
    assert report.server.max_model_len == 2048
    assert report.exit_status == 1
    # Markdown and JUnit land next to the JSON by default.
    md = (pytester.path / "out" / "latest.md").read_text()
    assert "test_mixed::test_fail" in md and "ttft_p50@c1" in md
    junit = ET.parse(pytester.path / "out" / "latest.xml").getroot()
    suite = junit.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("7", "1", "1")
    failed_case = next(c for c in suite.iter("testcase") if c.get("name") == "test_fail")
    assert failed_case.find("failure") is not None


def test_each_run_gets_its_own_files_and_latest_follows(
    pytester: pytest.Pytester, fake_server, harness_args
):
    # A server whose plugin does not know its own versions: the flags fill them in.
    fake_server.state.tt_metrics = [
        tt_info_text("T3K", "1x8")
        .replace('plugin_version="0.1.0"', 'plugin_version="unknown"')
        .replace('tt_metal_commit="abc"', 'tt_metal_commit="unknown"')
    ]
    pytester.makepyfile(test_one="def test_a(tt_server):\n    pass\n")
    args = [
        *harness_args,
        f"--tt-server-url={fake_server.url}/v1/",
        "--tt-device=T3K",
        "--tt-plugin-version=9.8.7",
        "--tt-tt-metal-version=abc123",
    ]
    pytester.runpytest(*args).assert_outcomes(passed=1)
    pytester.runpytest(*args).assert_outcomes(passed=1)
    # Default location: reports/<model, path-safe>/<device>/ under the invocation directory.
    report_dir = pytester.path / "reports" / "fake--tiny-model" / "T3K"
    runs = run_files(report_dir)
    assert len(runs) == 2
    second = max(runs, key=lambda p: p.stat().st_mtime_ns)
    latest = load_report(report_dir / "latest.json")
    assert latest.run_id == load_report(second).run_id
    assert latest.mesh_shape == "1x8"
    assert (latest.versions.plugin, latest.versions.tt_metal) == ("9.8.7", "abc123")
    assert latest.server.url == fake_server.url  # "/v1/" suffix normalised away
    assert sorted(p.suffix for p in report_dir.glob(f"{second.stem}.*")) == [".json", ".md", ".xml"]


def test_expectations_turn_failures_into_xfail_and_report_improvements(
    pytester: pytest.Pytester, fake_server, harness_args
):
    pytester.makepyfile(
        test_exp="""
def test_known_broken():
    assert False, "still broken"

def test_known_fixed():
    pass

def test_unlisted():
    pass
"""
    )
    exp = pytester.path / "exp.json"
    exp.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "expected_failures": [
                    {"check": "test_exp::test_known_*", "reason": "issue 42: broken on device"}
                ],
                "flaky": [{"check": "test_gone::*", "reason": "stale entry"}],
            }
        )
    )
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out",
        f"--tt-expectations={exp}",
    )  # fmt: skip
    result.assert_outcomes(passed=1, xfailed=1, xpassed=1)
    report = _report(pytester.path / "out")
    broken = report.check("test_exp::test_known_broken")
    fixed = report.check("test_exp::test_known_fixed")
    assert broken is not None and fixed is not None
    assert (broken.outcome, broken.reason, broken.expected_by) == (
        "xfail", "issue 42: broken on device", "expectations"
    )  # fmt: skip
    assert fixed.outcome == "xpass" and fixed.expected_by == "expectations"
    assert report.expectations_file == str(exp)
    assert report.expectations_digest == file_digest(exp)  # the bars' file, as it was (bars.py)
    assert any("test_gone::*" in w for w in report.warnings)


FLAKY_CHECK = """
import pytest
from pathlib import Path

SETUPS = []

@pytest.fixture
def attempt():
    counter = Path(__file__).with_name("attempts.txt")
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    SETUPS.append(n + 1)
    return n + 1

def test_flaky(attempt, tt_record_perf):
    tt_record_perf(f"figure_attempt{attempt}", attempt, "", "higher")
    assert attempt >= PASS_FROM, f"attempt {attempt} unlucky"

def test_after():
    # the function fixture was set up again for every attempt
    assert SETUPS == list(range(1, len(SETUPS) + 1))
"""


def _flaky_expectations(path: Path) -> Path:
    exp = path / "exp.json"
    exp.write_text(
        json.dumps(
            {"schema_version": 1, "flaky": [{"check": "test_fl::test_flaky", "reason": "race"}]}
        )
    )
    return exp


def test_flaky_check_passing_on_retry_is_recorded_as_flaky(
    pytester: pytest.Pytester, fake_server, harness_args
):
    pytester.makepyfile(test_fl=FLAKY_CHECK.replace("PASS_FROM", "3"))
    exp = _flaky_expectations(pytester.path)
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out",
        f"--tt-expectations={exp}",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    flaky = _report(pytester.path / "out").check("test_fl::test_flaky")
    assert flaky is not None
    assert (flaky.outcome, flaky.attempts) == ("flaky", 3)
    assert "attempt 1 unlucky" in flaky.reason
    # Only the passing attempt's perf figure survives.
    assert list(_report(pytester.path / "out").perf) == ["figure_attempt3"]


def test_flaky_check_is_retried_under_xdist(pytester: pytest.Pytester, fake_server, harness_args):
    """tox -e hw runs with xdist: pytest-rerunfailures' attempts still fold into one check."""
    pytester.makepyfile(test_fl=FLAKY_CHECK.replace("PASS_FROM", "2"))
    exp = _flaky_expectations(pytester.path)
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out",
        f"--tt-expectations={exp}", "-n", "2",
    )  # fmt: skip
    # Warnings (e.g. assertion rewriting of the editable install) are not outcomes.
    outcomes = {k: v for k, v in result.parseoutcomes().items() if k not in ("warnings", "warning")}
    assert outcomes == {"passed": 2, "rerun": 1}
    report = _report(pytester.path / "out")
    flaky = report.check("test_fl::test_flaky")
    assert flaky is not None
    assert (flaky.outcome, flaky.attempts) == ("flaky", 2)
    assert "attempt 1 unlucky" in flaky.reason
    assert list(report.perf) == ["figure_attempt2"]


def test_flaky_check_failing_every_attempt_is_a_failure(
    pytester: pytest.Pytester, fake_server, harness_args
):
    pytester.makepyfile(test_fl=FLAKY_CHECK.replace("PASS_FROM", "99"))
    exp = _flaky_expectations(pytester.path)
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out",
        f"--tt-expectations={exp}", "--tt-flaky-retries=1",
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    flaky = _report(pytester.path / "out").check("test_fl::test_flaky")
    assert flaky is not None
    assert (flaky.outcome, flaky.attempts) == ("fail", 2)
    assert flaky.reason.startswith("failed all 2 attempts")


def test_unlisted_checks_are_not_retried(pytester: pytest.Pytester, fake_server, harness_args):
    pytester.makepyfile(test_fl=FLAKY_CHECK.replace("PASS_FROM", "2"))
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out"
    )
    result.assert_outcomes(passed=1, failed=1)
    assert _report(pytester.path / "out").check("test_fl::test_flaky").attempts == 1


def test_without_server_url_checks_fail_with_a_clear_message(
    pytester: pytest.Pytester, harness_args
):
    pytester.makepyfile(test_ns="def test_needs_server(tt_server):\n    pass\n")
    result = pytester.runpytest(*harness_args, "--tt-report-dir=out")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no server under test: pass --tt-server-url*TT_SERVER_URL*"])
    report = _report(pytester.path / "out")
    assert report.checks[0].outcome == "error"
    assert "--tt-server-url" in report.checks[0].reason
    assert any("--tt-server-url" in w for w in report.warnings)


def test_harness_is_inert_without_its_options(pytester: pytest.Pytester, harness_args):
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest(*harness_args, "--junitxml=j.xml")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "reports").exists()
    # No harness properties leak into unrelated suites' JUnit files.
    assert "tt_check" not in (pytester.path / "j.xml").read_text()


def _fixtures_by_module(lines: list[str]) -> dict[str, set[str]]:
    """``pytest --fixtures``: the names listed under each "fixtures defined from M" header."""
    found: dict[str, set[str]] = {}
    module = None
    for line in lines:
        header = re.search(r"fixtures defined from (\S+)", line)
        if header:
            module = header.group(1)
            found.setdefault(module, set())
        elif module and (entry := re.match(r"([A-Za-z_]\w*)( \[\w+ scope\])? -- ", line)):
            found[module].add(entry.group(1))
    return found


def test_every_harness_fixture_is_named_tt(pytester: pytest.Pytester, harness_args):
    # The plugin loads in every pytest run of the environment: a generic name (server,
    # raw_http, ...) would stand in for another suite's missing fixture, or be shadowed by it.
    pytester.makepyfile(test_one="def test_a():\n    pass\n")
    listed = _fixtures_by_module(pytester.runpytest(*harness_args, "--fixtures").outlines)
    harness = {
        n for m, names in listed.items() if m.split(".")[0] == "tt_conformance" for n in names
    }
    assert {"tt_server", "tt_raw_http", "tt_path"} <= harness  # the listing was read
    assert sorted(n for n in harness if not n.startswith("tt_")) == []
    pytester.makepyfile(test_two="def test_b(server):\n    pass\n")
    result = pytester.runpytest(*harness_args, "test_two.py")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'server' not found*"])


def test_require_server_refuses_to_start(pytester: pytest.Pytester, harness_args):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(*harness_args, "--tt-require-server")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tt-server-url*"])


def test_unreachable_server_is_reported_not_hung(pytester: pytest.Pytester, harness_args):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    pytester.makepyfile(test_x="def test_x(tt_server):\n    pass\n")
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url=http://127.0.0.1:{port}", "--tt-report-dir=out"
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*cannot reach the server at http://127.0.0.1:{port}*"])


def test_requested_model_must_be_served(pytester: pytest.Pytester, fake_server, harness_args):
    pytester.makepyfile(test_x="def test_x(tt_server):\n    pass\n")
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-model-name=other/model",
        "--tt-report-dir=out",
    )  # fmt: skip
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*--tt-model-name 'other/model' is not served by*(served: fake/tiny-model)*"]
    )


def test_several_served_models_need_a_name(pytester: pytest.Pytester, fake_server, harness_args):
    fake_server.state.models.append({"id": "second", "parent": None, "max_model_len": 4096})
    pytester.makepyfile(
        test_x="def test_x(tt_server):\n    assert tt_server.max_model_len == 4096\n"
    )
    common = [*harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out"]
    pytester.runpytest(*common).stdout.fnmatch_lines(["*choose one with --tt-model-name*"])
    pytester.runpytest(*common, "--tt-model-name=second").assert_outcomes(passed=1)


def test_default_expectations_come_from_the_baselines_tree(
    pytester: pytest.Pytester, fake_server, harness_args
):
    fake_server.state.tt_metrics = [tt_info_text("N300", "1x2")]
    pytester.makepyfile(test_b="def test_broken():\n    assert False\n")
    exp_dir = pytester.path / "reports" / "baselines" / "fake--tiny-model" / "N300"
    exp_dir.mkdir(parents=True)
    (exp_dir / "expectations.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "expected_failures": [{"check": "test_b::test_broken", "reason": "known"}],
            }
        )
    )
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-device=N300"
    )
    result.assert_outcomes(xfailed=1)
    report = _report(pytester.path / "reports" / "fake--tiny-model" / "N300")
    assert report.expectations_file == str(exp_dir / "expectations.json")


def test_malformed_expectations_are_a_usage_error(
    pytester: pytest.Pytester, fake_server, harness_args
):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    bad = pytester.path / "exp.json"
    bad.write_text(json.dumps({"schema_version": 1, "flaky": [{"check": "x"}]}))
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", f"--tt-expectations={bad}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{bad}: field 'flaky[[]0[]].reason': missing required field*"])


def test_requires_lanes_marker(pytester: pytest.Pytester, fake_server, harness_args):
    pytester.makepyfile(
        test_l="""
import pytest

@pytest.mark.requires_lanes(4)
def test_lanes(tt_server):
    assert tt_server.lanes >= 4
"""
    )
    common = [*harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out"]
    pytester.runpytest(*common).assert_outcomes(skipped=1)
    assert (
        "needs a server serving >= 4 lane-DP lanes (this server: 1;"
        in _report(pytester.path / "out").checks[0].reason
    )
    pytester.runpytest(*common, "--tt-lanes=4").assert_outcomes(passed=1)


def test_collection_errors_are_recorded(pytester: pytest.Pytester, fake_server, harness_args):
    pytester.makepyfile(
        test_broken="import not_a_module_anywhere\n", test_ok="def test_ok():\n    pass\n"
    )
    pytester.runpytest(*harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out")
    report = _report(pytester.path / "out")
    assert [e.nodeid for e in report.collection_errors] == ["test_broken.py"]
    assert "not_a_module_anywhere" in report.collection_errors[0].message


def test_fixtures_reach_the_server(pytester: pytest.Pytester, fake_server, harness_args):
    fake_server.state.tt_metrics = [
        tt_info_text("N300", "1x2", emulated_mesh=True).replace('lanes="1"', 'lanes="2"')
    ]
    pytester.makepyfile(
        test_fx="""
import asyncio
import pytest

def test_server_fields(tt_server):
    assert tt_server.api_base == tt_server.base_url + "/v1"
    assert (tt_server.max_num_seqs, tt_server.lanes, tt_server.device) == (8, 2, "emulated-N300")
    assert tt_server.vllm_version == "0.26.0"

def test_raw_http(tt_raw_http):
    assert tt_raw_http.health().status_code == 200
    assert tt_raw_http.version() == "0.26.0"
    assert tt_raw_http.tokenize("hi") == [104, 105]
    assert tt_raw_http.detokenize([104, 105]) == "hi"
    assert tt_raw_http.metric_value("vllm:num_requests_running") == 3.0
    assert tt_raw_http.metric_value("vllm:num_requests_running", engine="1") == 1.0
    assert tt_raw_http.metric_value("vllm:absent") is None
    nested = tt_raw_http.error_of(tt_raw_http.completions({"model": "nope", "prompt": "x"}))
    assert (nested.status, nested.type) == (404, "NotFoundError")
    assert "does not exist" in nested.message
    flat = tt_raw_http.error_of(tt_raw_http.completions({"prompt": "x", "max_tokens": 0}))
    assert (flat.status, flat.message) == (400, "max_tokens must be at least 1")

def test_sync_client(tt_openai_client, tt_server):
    out = tt_openai_client.chat.completions.create(
        model=tt_server.model, messages=[{"role": "user", "content": "hi"}]
    )
    assert out.choices[0].message.content == "hi"
    assert tt_openai_client.max_retries == 0

def test_async_client(tt_async_openai_client, tt_server):
    async def run():
        out = await tt_async_openai_client.completions.create(
            model=tt_server.model, prompt="x", max_tokens=2
        )
        return out.choices[0].text
    assert asyncio.run(run()) == " world"

def test_record_perf_rejects_bad_input(tt_record_perf):
    with pytest.raises(ValueError, match="better must be"):
        tt_record_perf("x", 1.0, "ms", "smaller")
    with pytest.raises(ValueError, match="finite"):
        tt_record_perf("x", float("nan"), "ms", "lower")
    with pytest.raises(ValueError, match="no spaces"):
        tt_record_perf("has space", 1.0, "ms", "lower")
    tt_record_perf("x", 1, "ms", "lower")
    with pytest.raises(ValueError, match="already recorded"):
        tt_record_perf("x", 2, "ms", "lower")
"""
    )
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out",
        "--tt-max-num-seqs=8", "--tt-lanes=2", "--tt-device=emulated",
        '--tt-server-options={"max_num_seqs": 8}', "-W", "error::ResourceWarning",
    )  # fmt: skip
    result.assert_outcomes(passed=5)
    report = _report(pytester.path / "out")
    assert report.server_options == {"max_num_seqs": 8}
    assert report.mesh_shape == "1x2"  # the mesh the server's plugin reports, not a guess
    # One probe per run (GET /v1/models), not one per check.
    assert fake_server.state.requests.count(("GET", "/v1/models")) == 1


def test_xdist_worker_results_merge_into_one_report(
    pytester: pytest.Pytester, fake_server, harness_args
):
    pytester.makepyfile(
        test_par="""
import os
import time
import pytest

@pytest.mark.parametrize("i", range(8))
def test_shared(i, tt_server, tt_record_perf):
    time.sleep(0.05)  # keep both workers busy so each runs some checks
    tt_record_perf(f"{os.environ['PYTEST_XDIST_WORKER']}_{i}", i + 1, "", "higher")

@pytest.mark.xdist_group("exclusive")
@pytest.mark.parametrize("j", range(2))
def test_exclusive(j, tt_server):
    assert j in (0, 1)

def test_fails():
    assert False
"""
    )
    result = pytester.runpytest_subprocess(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out",
        "-n", "2", "--dist", "loadgroup",
    )  # fmt: skip
    result.assert_outcomes(passed=10, failed=1)
    out = pytester.path / "out"
    assert len(run_files(out)) == 1
    report = _report(out)
    assert report.totals["total"] == 11 and report.totals["fail"] == 1
    assert report.check("test_par::test_exclusive[1]") is not None  # no "@exclusive" in ids
    workers = {name.split("_")[0] for name in report.perf}
    assert workers == {"gw0", "gw1"}
    assert len(report.perf) == 8
    # The controller probed once and handed the result to the workers.
    assert fake_server.state.requests.count(("GET", "/v1/models")) == 1


EXCLUSIVE_CHECKS = """
import os
import time
from pathlib import Path

import pytest

RUNNING = Path(__file__).with_name("running")

def _busy(name, seconds):
    RUNNING.mkdir(exist_ok=True)
    marker = RUNNING / name
    marker.touch()
    try:
        time.sleep(seconds)
        return sorted(p.name for p in RUNNING.iterdir())
    finally:
        marker.unlink()

@pytest.mark.parametrize("i", range(6))
def test_shared(i):
    _busy(f"shared{i}", 0.15)

@pytest.mark.xdist_group("exclusive")
@pytest.mark.parametrize("j", range(2))
def test_exclusive(j):
    assert _busy(f"exclusive{j}", 0.3) == [f"exclusive{j}"]
"""


def test_exclusive_group_has_the_server_to_itself(
    pytester: pytest.Pytester, fake_server, harness_args
):
    pytester.makepyfile(test_excl=EXCLUSIVE_CHECKS)
    result = pytester.runpytest_subprocess(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out",
        "-n", "2", "--dist", "loadgroup",
    )  # fmt: skip
    result.assert_outcomes(passed=8)
