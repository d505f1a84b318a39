"""pytest plugin of the tt-conformance harness (entry point ``pytest11: tt_conformance``).

A black-box harness for any OpenAI-compatible vLLM server: it never imports vLLM or the plugin.
Run the suite against a server with::

    pytest --pyargs tt_conformance.checks -n 4 --dist loadgroup \\
        --tt-server-url http://127.0.0.1:8000 --tt-device N150 --tt-tt-metal-version v0.62.0

The harness stays inert (fixtures and markers only) unless one of --tt-server-url /
TT_SERVER_URL, --tt-report-dir or --tt-expectations is given, so unrelated suites in the same
environment are untouched.

Options
    --tt-server-url URL      server under test (env TT_SERVER_URL); ".../v1" is accepted
    --tt-model-name NAME     model under test; default: the only base model in GET /v1/models
    --tt-max-num-seqs N      the server's --max-num-seqs per lane; default: the plugin's
                             tt_plugin_info metric, else 32. A value that disagrees with the
                             server is a usage error naming both.
    --tt-lanes N             lane-DP lanes of the server (default: tt_plugin_info, else 1)
    --tt-device NAME         N150, N300, T3K, GALAXY (TG), P150X4, ..., emulated;
                             case-insensitive (default $MESH_DEVICE, else the server's mesh).
                             Must agree with the server's tt_plugin_info (usage error, exit
                             4); a server without it is reported as device "not-tt"
    --tt-mesh-shape RxC      default: tt_plugin_info, else derived from the device name
    --tt-api-key KEY         bearer token (env OPENAI_API_KEY / VLLM_API_KEY) sent by every
                             client: openai, raw HTTP, streaming, the probe
    --tt-perf-shapes LIST    serving shapes IN/OUT@C (default 128/128@1,128/128@max)
    --tt-report-dir DIR      default reports/<model>/<device>/ (names made path-safe)
    --tt-expectations FILE   default <baselines>/<model>/<device>/expectations.json if present
    --tt-baselines-dir DIR   default reports/baselines
    --tt-tt-metal-version V, --tt-plugin-version V   versions of the server's tt-metal and
                             vllm-tt-plugin for servers without tt_plugin_info (what the
                             server publishes wins; default "unknown", never the harness's own)
    --tt-server-options TXT  how the server was launched (JSON or free text), recorded verbatim
    --tt-flaky-retries N     re-runs (pytest-rerunfailures) of checks the expectations list as
                             flaky (default 2)
    --tt-gate                gate the run against <baselines>/<model>/<device>/baseline.json
                             when it exists (tox -e hw uses it)
    --tt-gate-axis NAME      an identity axis under test besides tt_metal and ttnn (repeat;
                             identity.py): any other difference from the baseline fails closed
    --timeout S              pytest-timeout's per-check limit (default here: 900 s per check)
    --tt-wait-for-server S   wait up to S seconds for /health 200 before probing (default 0)
    --tt-require-server      usage error (exit 4) without a server URL (tox -e hw uses it)
    --tt-reference-checkpoint PATH   the served checkpoint (env TT_REFERENCE_CHECKPOINT): the
                             forward_reference concern compares the served logprobs with
                             transformers on it (needs torch + transformers); without it
                             that concern is skipped and the run is partial

Server gone mid-run (abort.py)
    Every process that runs checks probes GET /health every second and after each failed
    check. When the server stops answering 200 (connection refused, no answer within 2 s, any
    other status; two polls in a row), a check blocked on it is interrupted, the run stops
    after it and the report gets a top-level "aborted" status with the reason; the matrix
    shows the run as aborted and --tt-gate fails it.

Fixtures for check authors (all named tt_*: this plugin loads in every pytest run of the
environment, so it must not take or shadow the generic names other suites give their fixtures)
    tt_server: ServerInfo            session; base_url, api_base, model, max_num_seqs, lanes,
                                     device, max_model_len (from /v1/models), vllm_version.
                                     Fails the check with a clear message when no server is
                                     configured or reachable.
    tt_openai_client: openai.OpenAI  session; base_url <url>/v1, api_key --tt-api-key (or
                                     "EMPTY"), timeout 600 s, max_retries 0
    tt_async_openai_client: openai.AsyncOpenAI   per check; use inside one event loop
    tt_raw_http: RawHttp             session; get/post/completions/chat, health(), version(),
                                     metrics()/metric_value(), tokenize(), detokenize(),
                                     error_of(response) -> ApiError
    tt_record_perf(name, value, unit, better, **identity)   per check; better is "lower" or
                                     "higher"; identity: metric, stat, input_len, output_len,
                                     concurrency, flag (why a figure is unreliable)
    tt_record_accuracy(result)       per check; an AccuracyResult for the report's accuracy
    tt_record_cell(concern, label)   per check; a situation-matrix cell that ran (the report's
                                     matrix_cells)
    tt_path: TTPath                  per check; tt_path.start() before the requests,
                                     tt_path.conclude(*claims) after them (ttpath.py): fails
                                     when a claimed TT path did not run, skips as "not
                                     exercised" when the launch rules it out

Markers
    Concern markers (isolation, seeding, sampling_fallback, penalties, logprobs,
    structured_output, kv_capacity, lanes, decode_reload, errors, serving_perf, accuracy) set
    a check's concern in the report; without one the module name minus "test_" is used.
    requires_lanes(n=2) skips a check unless the server has >= n lanes. slow marks long checks.
    tt_path marks a check that claims a TT behaviour: on a server without the TT plugin's
    metrics it is reported "not applicable" (skipped) before it runs.
    A check's id in reports and expectations is ``<module>::<name[params]>``, for example
    ``tt_conformance.checks.test_isolation::test_parallel_prompts[8]``.

Parallel runs (pytest-xdist)
    Workers run checks and forward their reports; the controller alone folds them into ONE
    report. Checks that need the server to themselves (KV capacity, perf snapshots, anything
    that measures or fills the whole batch) carry ``@pytest.mark.xdist_group("exclusive")`` and
    the suite is run with ``--dist loadgroup``: all exclusive checks then run one after another
    on a single worker, and a lock file shared by the workers (see serverlock.py) keeps every
    other check off the server while an exclusive check runs (setup to teardown). Without
    xdist, checks run one at a time anyway.
"""

from __future__ import annotations

from typing import Any

import pytest

from tt_conformance.abort import HealthWatch
from tt_conformance.collector import (
    PROP_CHECK,
    PROP_CONCERN,
    PROP_EXPECTED_BY,
    fallback_check_id,
)
from tt_conformance.fixtures import (
    tt_async_openai_client,
    tt_openai_client,
    tt_path,
    tt_raw_http,
    tt_record_accuracy,
    tt_record_cell,
    tt_record_perf,
    tt_server,
)
from tt_conformance.names import CONCERN_MARKERS, OTHER_MARKERS
from tt_conformance.reporting import SessionReporter
from tt_conformance.selection import DESELECTED_KEY, NEEDS_LANES, WAIVED
from tt_conformance.serverlock import ServerLockPlugin
from tt_conformance.state import STATE_KEY, WORKERINPUT_KEY, build_state, harness_state
from tt_conformance.ttmetrics import NOT_APPLICABLE

__all__ = [
    "BASE_PROPERTIES",
    "DEFAULT_CHECK_TIMEOUT_S",
    "check_id_for",
    "concern_for",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_configure_node",
    "pytest_report_header",
    "pytest_runtest_setup",
    "tt_async_openai_client",
    "tt_openai_client",
    "tt_path",
    "tt_raw_http",
    "tt_record_accuracy",
    "tt_record_cell",
    "tt_record_perf",
    "tt_server",
]

DEFAULT_CHECK_TIMEOUT_S = 900.0

# The user_properties an item had at collection (check id, concern, expected_by).
BASE_PROPERTIES = pytest.StashKey[list[tuple[str, object]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tt-conformance", "tt-conformance harness")
    group.addoption(
        "--tt-server-url",
        dest="tt_server_url",
        default=None,
        help="OpenAI-compatible vLLM server under test (env TT_SERVER_URL)",
    )
    group.addoption(
        "--tt-model-name",
        dest="tt_model_name",
        default=None,
        help="served model name (default: discovered from GET /v1/models)",
    )
    group.addoption(
        "--tt-max-num-seqs",
        dest="tt_max_num_seqs",
        type=int,
        default=None,
        help="the server's max_num_seqs per lane (default: read from tt_plugin_info, else 32; "
        "an error if it disagrees with the server)",
    )
    group.addoption(
        "--tt-lanes",
        dest="tt_lanes",
        type=int,
        default=None,
        help="lane data-parallel lanes (default: read from tt_plugin_info, else 1)",
    )
    group.addoption(
        "--tt-device",
        dest="tt_device",
        default=None,
        help="device: N150, N300, T3K, GALAXY (TG), P150X4, ..., emulated; case-insensitive "
        "(default: $MESH_DEVICE, else unknown)",
    )
    group.addoption(
        "--tt-api-key",
        dest="tt_api_key",
        default=None,
        help="bearer token for a server started with --api-key (env OPENAI_API_KEY, "
        "VLLM_API_KEY); never written to the report",
    )
    group.addoption(
        "--tt-perf-shapes",
        dest="tt_perf_shapes",
        default=None,
        help="perf shapes IN/OUT@C, comma-separated, C a number or max "
        "(default 128/128@1,128/128@max)",
    )
    group.addoption(
        "--tt-mesh-shape",
        dest="tt_mesh_shape",
        default=None,
        help="mesh shape RxC (default: derived from --tt-device when known)",
    )
    group.addoption(
        "--tt-report-dir",
        dest="tt_report_dir",
        default=None,
        help="report directory (default reports/<model>/<device>/)",
    )
    group.addoption(
        "--tt-expectations",
        dest="tt_expectations",
        default=None,
        help="expectations JSON (default <baselines>/<model>/<device>/expectations.json)",
    )
    group.addoption(
        "--tt-baselines-dir",
        dest="tt_baselines_dir",
        default=None,
        help="where default expectations are looked up (default reports/baselines)",
    )
    group.addoption(
        "--tt-tt-metal-version",
        dest="tt_tt_metal_version",
        default=None,
        help="tt-metal version/commit of the server, recorded in the report",
    )
    group.addoption(
        "--tt-plugin-version",
        dest="tt_plugin_version",
        default=None,
        help="vllm-tt-plugin version of the server, recorded in the report (default unknown)",
    )
    group.addoption(
        "--tt-server-options",
        dest="tt_server_options",
        default=None,
        help="how the server was launched (JSON or free text), recorded",
    )
    group.addoption(
        "--tt-flaky-retries",
        dest="tt_flaky_retries",
        type=int,
        default=2,
        help="retries for checks listed as flaky in the expectations (default 2)",
    )
    group.addoption(
        "--tt-wait-for-server",
        dest="tt_wait_for_server",
        type=float,
        default=0.0,
        help="wait up to SECONDS for the server's /health to answer 200 before the run "
        "(default 0: probe once)",
    )
    group.addoption(
        "--tt-gate",
        dest="tt_gate",
        action="store_true",
        help="gate the run against <baselines>/<model>/<device>/baseline.json when it exists "
        "(exit 1 on regression, 2 when the expectations still hold placeholders)",
    )
    group.addoption(
        "--tt-gate-axis",
        dest="tt_gate_axis",
        action="append",
        default=[],
        metavar="NAME",
        help="with --tt-gate: an identity axis under test besides tt_metal and ttnn (repeat)",
    )
    group.addoption(
        "--tt-reference-checkpoint",
        dest="tt_reference_checkpoint",
        default=None,
        help="the served checkpoint's directory, for the forward_reference concern "
        "(env TT_REFERENCE_CHECKPOINT; needs torch and transformers)",
    )
    group.addoption("--tt-require-server", dest="tt_require_server", action="store_true",
                    help="refuse to run (usage error) without a server URL")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    for name, text in {**CONCERN_MARKERS, **OTHER_MARKERS}.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    state = build_state(config)
    config.stash[STATE_KEY] = state
    if state.collector is not None:
        # One reporter object per session config: no module globals, so nested sessions
        # (pytester) and repeated runs in one process stay separate.
        config.pluginmanager.register(SessionReporter(state), "tt_conformance_reporter")
    if state.is_worker and state.lock_path is not None:
        config.pluginmanager.register(ServerLockPlugin(state.lock_path), "tt_conformance_lock")
    runs_checks = state.is_worker or config.getoption("dist", "no") == "no"
    if runs_checks and state.options.server_url and not state.setup_error:
        # Every process that runs checks watches the server (abort.py); an xdist controller
        # learns of a worker's abort when the worker goes down.
        state.watch = HealthWatch(state.options.server_url, state.options.api_key)
        config.pluginmanager.register(state.watch, "tt_conformance_health_watch")
    if (
        state.options.active
        and state.expectations.flaky
        and state.options.flaky_retries
        and not config.pluginmanager.hasplugin("rerunfailures")
    ):
        raise pytest.UsageError(
            f"expectations {state.expectations_path} list flaky checks, which are re-run with "
            "pytest-rerunfailures: pip install pytest-rerunfailures (or --tt-flaky-retries 0)"
        )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: hand the probe and the expectations path to each worker."""
    state = harness_state(node.config)
    if state.options.active:
        node.workerinput[WORKERINPUT_KEY] = state.worker_payload()


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = harness_state(config)
    if not state.options.active or state.is_worker:
        return []
    lines = [
        f"tt-conformance: server {state.options.server_url or '(none)'}, model "
        f"{state.model_name}, device {state.device}, expectations "
        f"{state.expectations_path or 'none'}"
    ]
    facts = state.facts
    lines.append(
        f"tt-conformance: plugin {facts.plugin_version}, ttnn {facts.ttnn_version}, tt-metal "
        f"{facts.tt_metal_version}; max_num_seqs {facts.max_num_seqs} x {facts.lanes} lane(s); "
        f"read from the server: {', '.join(facts.discovered) or 'nothing'}"
    )
    if state.setup_error:
        lines.append(f"tt-conformance: SERVER NOT USABLE: {state.setup_error}")

    return lines


def check_id_for(item: pytest.Item) -> str:
    """<module __name__>::<class>::<name[params]>: stable across install locations and
    xdist's node id rewriting, unlike the node id."""
    module = getattr(item, "module", None)
    names: list[str] = []
    below_module = False
    for node in item.listchain():
        if below_module:
            names.append(node.name)
        elif isinstance(node, pytest.Module):
            below_module = True
    if module is None or not below_module:
        return fallback_check_id(item.nodeid)
    return f"{module.__name__}::{'::'.join(names)}"


def concern_for(item: pytest.Item) -> str:
    for mark in item.iter_markers():
        if mark.name in CONCERN_MARKERS:
            return mark.name
    module = getattr(item, "module", None)
    base = module.__name__.rsplit(".", 1)[-1] if module is not None else item.nodeid
    return base.removeprefix("test_").removesuffix("_test")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = harness_state(config)
    if not state.options.active:
        return
    # A per-check time limit (pytest-timeout): a wedged server fails the check at the limit
    # instead of the client's 600 s timeout on every request. ``--timeout N`` overrides it.
    limit = None
    if config.pluginmanager.hasplugin("timeout") and not config.getoption("timeout", None):
        limit = DEFAULT_CHECK_TIMEOUT_S
    for item in items:
        if limit is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(limit))
        check_id = check_id_for(item)
        item.user_properties.append((PROP_CHECK, check_id))
        item.user_properties.append((PROP_CONCERN, concern_for(item)))
        skip = state.expectations.skip_entry(check_id)
        if skip is not None:
            # Must not run on this model: skipped before any fixture touches the server.
            item.add_marker(pytest.mark.skip(reason=f"{WAIVED} {skip.reason}"))
            continue
        entry = state.expectations.expected_failure(check_id)
        if entry is not None:
            # Prepended so that the expectations' reason wins over an xfail in the code.
            item.add_marker(pytest.mark.xfail(reason=entry.reason, strict=False), append=False)
            item.user_properties.append((PROP_EXPECTED_BY, "expectations"))
        if state.options.flaky_retries and state.expectations.flaky_entry(check_id) is not None:
            # pytest-rerunfailures re-runs it; the collector folds the attempts into "flaky".
            item.add_marker(pytest.mark.flaky(reruns=state.options.flaky_retries))
        item.stash[BASE_PROPERTIES] = list(item.user_properties)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # A re-run attempt (pytest-rerunfailures counts them in item.execution_count) starts from
    # the collection-time properties: a failed attempt's perf figures do not survive.
    if getattr(item, "execution_count", 1) > 1 and BASE_PROPERTIES in item.stash:
        base = item.stash[BASE_PROPERTIES]
        item.user_properties[:] = base
    # tryfirst: skip before any fixture (and so the server) is touched.
    state = harness_state(item.config)
    if item.get_closest_marker("tt_path") is not None and state.not_tt:
        pytest.skip(f"{NOT_APPLICABLE}: {state.tt.absent_reason}")
    mark = item.get_closest_marker("requires_lanes")
    if mark is None:
        return
    needed = int(mark.args[0] if mark.args else mark.kwargs.get("n", 2))
    lanes = harness_state(item.config).facts.lanes
    if lanes < needed:
        pytest.skip(
            f"{NEEDS_LANES} >= {needed} lane-DP lanes (this server: {lanes}; "
            "read from tt_plugin_info, else --tt-lanes)"
        )


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Count what -k, -m and --deselect dropped: the report's coverage says so (selection.py)."""
    if items:
        state = harness_state(items[0].config)
        state.deselected += len(items)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # An xdist worker collected and deselected; the controller reads this when it goes down.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[DESELECTED_KEY] = harness_state(session.config).deselected
