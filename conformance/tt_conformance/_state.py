"""Per-session harness state: parsed options, the server probe, expectations, the collector."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tt_conformance._names import (
    default_expectations_path,
    default_report_dir,
    mesh_shape_for,
)
from tt_conformance.collector import ResultCollector
from tt_conformance.expectations import Expectations, ExpectationsError, load_expectations
from tt_conformance.report import WrittenReport, new_run_id, utc_now_iso
from tt_conformance.server import (
    ServedModel,
    ServerInfo,
    ServerProbe,
    ServerSetupError,
    normalize_base_url,
    probe_server,
    resolve_model,
)
from tt_conformance.ttpath import TTProbe, device_disagreement, probe_tt

WORKERINPUT_KEY = "tt_conformance"
# The report's device label for a server that is not a TT server (no tt_plugin_info).
NOT_TT_DEVICE = "not-tt"
NO_SERVER_MESSAGE = (
    "no server under test: pass --tt-server-url http://HOST:PORT (or set TT_SERVER_URL) "
    "pointing at a running OpenAI-compatible vLLM server"
)


@dataclass(frozen=True)
class HarnessOptions:
    server_url: str | None
    model_name: str | None
    max_num_seqs: int
    lanes: int
    device: str
    mesh_shape: str | None
    report_dir: Path | None
    expectations: Path | None
    baselines_dir: Path
    tt_metal_version: str
    plugin_version: str
    server_options: Any
    flaky_retries: int
    require_server: bool

    @classmethod
    def from_config(cls, config: pytest.Config) -> HarnessOptions:
        base = Path(config.invocation_params.dir)

        def path_opt(name: str) -> Path | None:
            value = config.getoption(name)
            return None if value in (None, "") else (base / value).resolve()

        url = config.getoption("tt_server_url") or os.environ.get("TT_SERVER_URL") or None
        if url:
            try:
                url = normalize_base_url(url)
            except ValueError as exc:
                raise pytest.UsageError(str(exc)) from None
        for name, flag, minimum in (
            ("tt_max_num_seqs", "--tt-max-num-seqs", 1),
            ("tt_lanes", "--tt-lanes", 1),
            ("tt_flaky_retries", "--tt-flaky-retries", 0),
        ):
            if config.getoption(name) < minimum:
                raise pytest.UsageError(
                    f"{flag} must be >= {minimum}, got {config.getoption(name)}"
                )
        device = str(config.getoption("tt_device")).strip() or "unknown"
        return cls(
            server_url=url,
            model_name=config.getoption("tt_model_name") or None,
            max_num_seqs=config.getoption("tt_max_num_seqs"),
            lanes=config.getoption("tt_lanes"),
            device=device,
            mesh_shape=config.getoption("tt_mesh_shape") or mesh_shape_for(device),
            report_dir=path_opt("tt_report_dir"),
            expectations=path_opt("tt_expectations"),
            baselines_dir=path_opt("tt_baselines_dir") or base / "reports" / "baselines",
            tt_metal_version=config.getoption("tt_tt_metal_version") or "unknown",
            # The server under test may run any plugin build (or none): only the caller knows
            # which, so the harness's own installed version is never substituted for it.
            plugin_version=config.getoption("tt_plugin_version") or "unknown",
            server_options=_parse_server_options(config.getoption("tt_server_options")),
            flaky_retries=config.getoption("tt_flaky_retries"),
            require_server=bool(config.getoption("tt_require_server")),
        )

    @property
    def active(self) -> bool:
        """The harness only acts (reports, ids, expectations) when asked to; otherwise it stays
        out of the way of unrelated test suites in the same environment."""
        return bool(self.server_url or self.report_dir or self.expectations)


def _parse_server_options(text: str | None) -> Any:
    if text is None or text == "":
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # free text such as a command line is recorded verbatim


@dataclass
class HarnessState:
    options: HarnessOptions
    is_worker: bool
    probe: ServerProbe | None = None
    model: ServedModel | None = None
    setup_error: str | None = None
    expectations: Expectations = field(default_factory=Expectations)
    expectations_path: Path | None = None
    collector: ResultCollector | None = None
    report_dir: Path | None = None
    run_id: str = field(default_factory=new_run_id)
    started_at: str = field(default_factory=utc_now_iso)
    written: WrittenReport | None = None
    lock_path: Path | None = None
    tt: TTProbe = field(default_factory=TTProbe)

    @property
    def not_tt(self) -> bool:
        """A usable server that shows no TT plugin: never labelled as TT hardware."""
        return self.model is not None and not self.setup_error and not self.tt.is_tt

    @property
    def device(self) -> str:
        return NOT_TT_DEVICE if self.not_tt else self.options.device

    @property
    def mesh_shape(self) -> str | None:
        if self.not_tt:
            return None
        if self.tt.info is not None and self.tt.info.mesh_shape != "unknown":
            return self.tt.info.mesh_shape
        return self.options.mesh_shape

    @property
    def model_name(self) -> str:
        if self.model is not None:
            return self.model.id
        return self.options.model_name or "unknown"

    def server_info(self) -> ServerInfo:
        """The `server` fixture's value; pytest.fail with the reason when there is none."""
        if self.setup_error or self.model is None or self.options.server_url is None:
            pytest.fail(self.setup_error or NO_SERVER_MESSAGE, pytrace=False)
        return ServerInfo(
            base_url=self.options.server_url,
            model=self.model.id,
            max_num_seqs=self.options.max_num_seqs,
            lanes=self.options.lanes,
            device=self.device,
            max_model_len=self.model.max_model_len,
            vllm_version=(self.probe.vllm_version if self.probe else None) or "unknown",
        )

    def worker_payload(self) -> dict[str, Any]:
        return {
            "probe": self.probe.to_json() if self.probe else None,
            "expectations": str(self.expectations_path) if self.expectations_path else None,
            "lock": str(self.lock_path) if self.lock_path else None,
            "tt": self.tt.to_json(),
        }


STATE_KEY = pytest.StashKey[HarnessState]()


def harness_state(config: pytest.Config) -> HarnessState:
    return config.stash[STATE_KEY]


def build_state(config: pytest.Config) -> HarnessState:
    options = HarnessOptions.from_config(config)
    if options.require_server and not options.server_url:
        raise pytest.UsageError(f"tt-conformance: {NO_SERVER_MESSAGE}")
    workerinput = getattr(config, "workerinput", None)
    state = HarnessState(options=options, is_worker=workerinput is not None)
    if not options.active:
        return state
    handed: dict[str, Any] | None = (workerinput or {}).get(WORKERINPUT_KEY)
    if not options.server_url:
        state.setup_error = NO_SERVER_MESSAGE
    else:
        if handed is not None and handed.get("probe") is not None:
            # Workers reuse the controller's probe: one request per run, one consistent answer.
            state.probe = ServerProbe.from_json(handed["probe"])
        else:
            state.probe = probe_server(options.server_url)
        try:
            state.model = resolve_model(state.probe, options.model_name, options.server_url)
        except ServerSetupError as exc:
            state.setup_error = str(exc)
        if state.model is not None:
            _probe_tt_plugin(state, options, handed)
    if handed is not None:
        path = handed.get("expectations")
        state.expectations_path = Path(path) if path else None
        state.lock_path = Path(handed["lock"]) if handed.get("lock") else None
    elif options.expectations is not None:
        state.expectations_path = options.expectations
    else:
        candidate = default_expectations_path(options.baselines_dir, state.model_name, state.device)
        state.expectations_path = candidate if candidate.is_file() else None
    if state.expectations_path is not None:
        try:
            state.expectations = load_expectations(state.expectations_path)
        except ExpectationsError as exc:
            raise pytest.UsageError(f"--tt-expectations: {exc}") from None
    if not state.is_worker:
        # The lock file workers share for xdist_group("exclusive"); gone with the session.
        lock_dir = Path(tempfile.mkdtemp(prefix="tt-conformance-"))
        config.add_cleanup(lambda: shutil.rmtree(lock_dir, ignore_errors=True))
        state.lock_path = lock_dir / "server.lock"
        state.collector = ResultCollector()
        state.report_dir = options.report_dir or default_report_dir(
            Path(config.invocation_params.dir), state.model_name, state.device
        )
    return state


def _probe_tt_plugin(
    state: HarnessState, options: HarnessOptions, handed: dict[str, Any] | None
) -> None:
    """Is it a TT server (tt_plugin_info on /metrics), and does --tt-device agree with it?"""
    assert options.server_url is not None
    if handed is not None and handed.get("tt") is not None:
        state.tt = TTProbe.from_json(handed["tt"])
        return
    state.tt = probe_tt(options.server_url)
    if state.tt.info is not None:
        problem = device_disagreement(options.device, options.mesh_shape, state.tt.info)
        if problem:
            raise pytest.UsageError(f"tt-conformance: {problem}")
