"""Per-session harness state: parsed options, the server probe, expectations, the collector."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tt_conformance import envs
from tt_conformance.abort import AbortInfo, HealthWatch
from tt_conformance.collector import ResultCollector
from tt_conformance.expectations import Expectations, ExpectationsError, load_expectations
from tt_conformance.identity import AXES, unknown_axes
from tt_conformance.names import (
    NOT_TT_DEVICE,
    default_expectations_path,
    default_report_dir,
    normalize_device,
)
from tt_conformance.perfshapes import PerfShape, parse_perf_shapes
from tt_conformance.provenance import Discovered, Flags, ProvenanceError, discover
from tt_conformance.report import new_run_id, utc_now_iso
from tt_conformance.server import (
    ServedModel,
    ServerInfo,
    ServerProbe,
    ServerSetupError,
    normalize_base_url,
    probe_server,
    resolve_model,
    wait_for_server,
)
from tt_conformance.ttmetrics import TTProbe
from tt_conformance.writers import WrittenReport

__all__ = [
    "NO_SERVER_MESSAGE",
    "STATE_KEY",
    "WORKERINPUT_KEY",
    "HarnessOptions",
    "HarnessState",
    "build_state",
    "harness_state",
]

WORKERINPUT_KEY = "tt_conformance"
NO_SERVER_MESSAGE = (
    "no server under test: pass --tt-server-url http://HOST:PORT (or set TT_SERVER_URL) "
    "pointing at a running OpenAI-compatible vLLM server"
)


@dataclass(frozen=True)
class HarnessOptions:
    server_url: str | None
    model_name: str | None
    device: str
    report_dir: Path | None
    expectations: Path | None
    baselines_dir: Path
    server_options: Any
    flaky_retries: int
    require_server: bool
    wait_for_server_s: float
    gate: bool
    gate_axes: tuple[str, ...]
    flags: Flags
    api_key: str | None
    perf_shapes: tuple[PerfShape, ...]
    args: tuple[str, ...]
    cwd: str

    @classmethod
    def from_config(
        cls, config: pytest.Config, env: Mapping[str, str] | None = None
    ) -> HarnessOptions:
        """The options from pytest's command line, the environment (``env``, default
        ``os.environ``) filling in what the command line leaves out."""
        base = Path(config.invocation_params.dir)

        def path_opt(name: str) -> Path | None:
            value = config.getoption(name)
            return None if value in (None, "") else (base / value).resolve()

        url = config.getoption("tt_server_url") or envs.TT_SERVER_URL.get(env)
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
            value = config.getoption(name)
            if value is not None and value < minimum:
                raise pytest.UsageError(f"{flag} must be >= {minimum}, got {value}")
        wait_s = float(config.getoption("tt_wait_for_server") or 0.0)
        if wait_s < 0:
            raise pytest.UsageError(f"--tt-wait-for-server must be >= 0 seconds, got {wait_s:g}")
        bad_axes = unknown_axes(config.getoption("tt_gate_axis") or ())
        if bad_axes:
            raise pytest.UsageError(
                f"--tt-gate-axis: unknown identity axis {', '.join(map(repr, bad_axes))}; "
                f"known: {', '.join(AXES)}"
            )
        raw_device = config.getoption("tt_device") or envs.MESH_DEVICE.get(env) or "unknown"
        try:
            device = normalize_device(str(raw_device))
        except ValueError as exc:
            raise pytest.UsageError(f"--tt-device / MESH_DEVICE: {exc}") from None
        try:
            shapes = parse_perf_shapes(config.getoption("tt_perf_shapes"))
        except ValueError as exc:
            raise pytest.UsageError(f"--tt-perf-shapes: {exc}") from None
        api_key = (
            config.getoption("tt_api_key")
            or envs.first_set(envs.OPENAI_API_KEY, envs.VLLM_API_KEY, env=env)
            or None
        )
        return cls(
            server_url=url,
            model_name=config.getoption("tt_model_name") or None,
            device=device,
            report_dir=path_opt("tt_report_dir"),
            expectations=path_opt("tt_expectations"),
            baselines_dir=path_opt("tt_baselines_dir") or base / "reports" / "baselines",
            server_options=_parse_server_options(config.getoption("tt_server_options")),
            flaky_retries=config.getoption("tt_flaky_retries"),
            require_server=bool(config.getoption("tt_require_server")),
            wait_for_server_s=wait_s,
            gate=bool(config.getoption("tt_gate")),
            gate_axes=tuple(config.getoption("tt_gate_axis") or ()),
            # The server under test may run any plugin build (or none): what it publishes in
            # tt_plugin_info wins; the flags fill in for servers without it.
            flags=Flags(
                max_num_seqs=config.getoption("tt_max_num_seqs"),
                lanes=config.getoption("tt_lanes"),
                mesh_shape=config.getoption("tt_mesh_shape") or None,
                plugin_version=config.getoption("tt_plugin_version") or None,
                tt_metal_version=config.getoption("tt_tt_metal_version") or None,
            ),
            api_key=api_key,
            perf_shapes=shapes,
            args=tuple(str(a) for a in config.invocation_params.args),
            cwd=str(base),
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
    discovered: Discovered | None = None
    watch: HealthWatch | None = None  # abort.py, in processes that run checks
    worker_abort: AbortInfo | None = None  # xdist controller: the first worker's abort
    deselected: int = 0  # checks pytest deselected (-k, -m, --deselect); a worker's, under xdist

    @property
    def facts(self) -> Discovered:
        """Discovered server facts (flags and defaults when nothing could be discovered)."""
        if self.discovered is None:
            self.discovered = discover(None, None, self.options.flags, self.options.device)
        return self.discovered

    @property
    def abort(self) -> AbortInfo | None:
        """Why the run was stopped early, if it was (this process's watch or a worker's)."""
        own = self.watch.info if self.watch is not None else None
        return own or self.worker_abort

    @property
    def tt(self) -> TTProbe:
        return self.facts.tt

    @property
    def not_tt(self) -> bool:
        """A usable server that shows no TT plugin: never labelled as TT hardware."""
        return self.facts.device == NOT_TT_DEVICE

    @property
    def device(self) -> str:
        return self.facts.device

    @property
    def model_name(self) -> str:
        if self.model is not None:
            return self.model.id
        return self.options.model_name or "unknown"

    def server_info(self) -> ServerInfo:
        """The `tt_server` fixture's value; pytest.fail with the reason when there is none."""
        if self.setup_error or self.model is None or self.options.server_url is None:
            pytest.fail(self.setup_error or NO_SERVER_MESSAGE, pytrace=False)
        return ServerInfo(
            base_url=self.options.server_url,
            model=self.model.id,
            max_num_seqs=self.facts.max_num_seqs,
            lanes=self.facts.lanes,
            device=self.device,
            max_model_len=self.facts.max_model_len,
            vllm_version=(self.probe.vllm_version if self.probe else None) or "unknown",
            api_key=self.options.api_key,
        )

    def worker_payload(self) -> dict[str, Any]:
        return {
            "probe": self.probe.to_json() if self.probe else None,
            "expectations": str(self.expectations_path) if self.expectations_path else None,
            "lock": str(self.lock_path) if self.lock_path else None,
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
            if options.wait_for_server_s > 0 and not wait_for_server(
                options.server_url, options.wait_for_server_s, options.api_key
            ):
                state.setup_error = (
                    f"the server at {options.server_url} did not answer /health with 200 within "
                    f"--tt-wait-for-server {options.wait_for_server_s:g} s"
                )
            state.probe = probe_server(options.server_url, api_key=options.api_key)
        try:
            state.model = resolve_model(state.probe, options.model_name, options.server_url)
        except ServerSetupError as exc:
            state.setup_error = state.setup_error or str(exc)
    try:
        state.discovered = discover(state.probe, state.model, options.flags, options.device)
    except ProvenanceError as exc:
        raise pytest.UsageError(f"tt-conformance: {exc}") from None
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
