"""Shared fixtures for the harness tests: a tiny in-process fake OpenAI-compatible server and
helpers to run check files through the tt_conformance plugin with pytester.

No vLLM, no plugin import: the harness is a black box over HTTP, so a fake server is the honest
way to test it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

CONFORMANCE_SRC = Path(__file__).resolve().parents[2] / "conformance"


def pytest_configure(config: pytest.Config) -> None:
    # `pytester` is not a default plugin, and a non-root conftest may not set pytest_plugins.
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@dataclass
class FakeState:
    models: list[dict[str, Any]]
    version: str = "0.26.0"
    models_status: int = 200
    requests: list[tuple[str, str]] = field(default_factory=list)
    # Every request's Authorization header (None when absent), in order.
    auth: list[str | None] = field(default_factory=list)
    # When set, /v1/* answers 401 without "Authorization: Bearer <api_key>" (vLLM --api-key).
    api_key: str | None = None
    # Labels of a tt_plugin_info sample served on /metrics (None: no such metric).
    plugin_info: dict[str, str] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # TT plugin samples appended to /metrics, one body per scrape (the last one repeats);
    # empty: a server without the TT plugin.
    tt_metrics: list[str] = field(default_factory=list)
    scrapes: int = 0
    # GET /health answers this; POST /_control {"health_status": 503} changes it (abort tests).
    health_status: int = 200

    def tt_text(self) -> str:
        with self.lock:
            if not self.tt_metrics:
                return ""
            text = self.tt_metrics[min(self.scrapes, len(self.tt_metrics) - 1)]
            self.scrapes += 1
            return text


def tt_info_text(mesh_device: str, mesh_shape: str, **tt_options: Any) -> str:
    """A tt_plugin_info sample as the plugin exposes it (docs/METRICS.md)."""
    options = json.dumps(tt_options, separators=(",", ":")).replace('"', '\\"')
    return (
        "# HELP tt_plugin_info vllm-tt-plugin build and launch\n"
        "# TYPE tt_plugin_info gauge\n"
        f'tt_plugin_info{{lanes="1",max_model_len="2048",max_num_seqs="8",'
        f'mesh_device="{mesh_device}",mesh_shape="{mesh_shape}",model_class="m.C",'
        f'plugin_version="0.1.0",tt_metal_commit="abc",tt_options="{options}",'
        f'ttnn_version="1.0"}} 1.0\n'
    )


def _handler(state: FakeState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            return

        def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self) -> bool:
            """Record the request; False (after answering 401) when the key is wrong."""
            header = self.headers.get("Authorization")
            with state.lock:
                state.requests.append((self.command, self.path))
                state.auth.append(header)
            if (
                state.api_key
                and self.path.startswith("/v1")
                and header != f"Bearer {state.api_key}"
            ):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self._send(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self) -> None:
            if not self._record():
                return
            if self.path == "/v1/models":
                if state.models_status != 200:
                    self._send(state.models_status, {"error": {"message": "boom"}})
                else:
                    self._send(200, {"object": "list", "data": state.models})
            elif self.path == "/version":
                self._send(200, {"version": state.version})
            elif self.path == "/health":
                self._send(state.health_status, "", "text/plain")
            elif self.path.startswith("/slow"):
                # A request the server never answers in time (a wedged engine).
                time.sleep(float(self.path.partition("?s=")[2] or 60))
                self._send(200, {"ok": True})
            elif self.path == "/metrics":
                info = ""
                if state.plugin_info is not None:
                    # Exposed exactly as the plugin does: a prometheus_client Info.
                    from prometheus_client import CollectorRegistry, Info, generate_latest

                    registry = CollectorRegistry()
                    Info("tt_plugin", "plugin build", registry=registry).info(state.plugin_info)
                    info = generate_latest(registry).decode()
                self._send(
                    200,
                    info + "# HELP vllm:num_requests_running running\n"
                    "# TYPE vllm:num_requests_running gauge\n"
                    'vllm:num_requests_running{model_name="m",engine="0"} 2.0\n'
                    'vllm:num_requests_running{model_name="m",engine="1"} 1.0\n'
                    'vllm:kv_cache_usage_perc{model_name="m"} 0.25\n' + state.tt_text(),
                    "text/plain; version=0.0.4",
                )
            else:
                self._send(404, {"error": {"message": f"no route {self.path}", "code": 404}})

        def do_POST(self) -> None:
            if not self._record():
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self._send(
                    400,
                    {"error": {"message": "invalid JSON", "type": "BadRequestError", "code": 400}},
                )
                return
            model = body.get("model")
            if self.path in ("/v1/completions", "/v1/chat/completions") and model not in [
                m["id"] for m in state.models
            ]:
                self._send(
                    404,
                    {
                        "error": {
                            "message": f"model {model!r} does not exist",
                            "type": "NotFoundError",
                            "code": 404,
                        }
                    },
                )
                return
            if self.path == "/_control":
                with state.lock:
                    state.health_status = int(body.get("health_status", state.health_status))
                self._send(200, {"health_status": state.health_status})
            elif self.path == "/v1/completions":
                if int(body.get("max_tokens", 1)) < 1:
                    self._send(
                        400,
                        {
                            "object": "error",
                            "message": "max_tokens must be at least 1",
                            "type": "BadRequestError",
                            "code": 400,
                        },
                    )
                    return
                self._send(200, {
                    "id": "cmpl-1", "object": "text_completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "text": " world", "logprobs": None,
                                 "finish_reason": "length", "token_ids": [7, 8]}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
                })  # fmt: skip
            elif self.path == "/v1/chat/completions":
                self._send(200, {
                    "id": "chat-1", "object": "chat.completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                 "finish_reason": "stop", "logprobs": None}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
                })  # fmt: skip
            elif self.path == "/tokenize":
                tokens = [ord(ch) for ch in body.get("prompt", "")]
                self._send(200, {"tokens": tokens, "count": len(tokens), "max_model_len": 2048})
            elif self.path == "/detokenize":
                self._send(200, {"prompt": "".join(chr(t) for t in body.get("tokens", []))})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}", "code": 404}})

    return Handler


@dataclass
class FakeServer:
    url: str
    state: FakeState


def fake_state() -> FakeState:
    return FakeState(
        models=[
            {"id": "fake/tiny-model", "object": "model", "created": 0, "owned_by": "vllm",
             "root": "fake/tiny-model", "parent": None, "max_model_len": 2048},
        ]
    )  # fmt: skip


def fake_httpd(state: FakeState) -> ThreadingHTTPServer:
    """The fake server bound to 127.0.0.1:<free port> (not yet serving)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    return httpd


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    """A fake vLLM OpenAI server on 127.0.0.1:<free port>, always shut down after the test."""
    state = fake_state()
    httpd = fake_httpd(state)
    thread = threading.Thread(target=httpd.serve_forever, name="fake-vllm", daemon=True)
    thread.start()
    try:
        yield FakeServer(url=f"http://127.0.0.1:{httpd.server_address[1]}", state=state)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def _plugin_installed() -> bool:
    return any(ep.name == "tt_conformance" for ep in metadata.entry_points(group="pytest11"))


@pytest.fixture
def harness_args(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Arguments that make a pytester run load the harness whether or not it is installed."""
    for name in ("TT_SERVER_URL", "PYTEST_ADDOPTS", "PYTEST_XDIST_AUTO_NUM_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    if _plugin_installed():
        return ["-p", "no:cacheprovider"]
    # Running from a checkout without `pip install -e .`: load the module by name instead.
    monkeypatch.syspath_prepend(str(CONFORMANCE_SRC))
    existing = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(CONFORMANCE_SRC), *([existing] if existing else [])])
    )
    return ["-p", "no:cacheprovider", "-p", "tt_conformance.pytest_plugin"]


@pytest.fixture
def make_report() -> Any:
    """Factory for small valid Report objects: make_report({"m::t": "pass"}, perf={...})."""
    from tt_conformance.report import CheckResult, PerfFigure, Report, ServerSnapshot, Versions
    from tt_conformance.selection import coverage_of
    from tt_conformance.tiers import derive_tier

    counter = iter(range(1, 10_000))

    def build(
        outcomes: dict[str, str],
        *,
        perf: dict[str, tuple[float, str, str]] | None = None,
        model: str = "org/model-a",
        device: str = "N150",
        finished_at: str = "2025-01-01T00:00:00Z",
        tt_metal: str = "v1",
        collection_errors: tuple[Any, ...] = (),
        accuracy: tuple[Any, ...] = (),
        coverage: Any = "whole",
    ) -> Report:
        n = next(counter)
        report = Report(
            run_id=f"20250101T000000Z-{n:08x}",
            started_at="2025-01-01T00:00:00Z",
            finished_at=finished_at,
            model=model,
            device=device,
            mesh_shape="1x1",
            versions=Versions(vllm="0.26.0", plugin="0.1.0", tt_metal=tt_metal, harness="0.1.0"),
            server=ServerSnapshot(
                url="http://127.0.0.1:1", max_num_seqs=32, lanes=1, max_model_len=2048
            ),
            server_options={"max_num_seqs": 32},
            expectations_file=None,
            exit_status=0,
            checks=tuple(
                CheckResult(
                    id=cid,
                    nodeid=cid.replace(".", "/", 1),
                    concern="isolation",
                    outcome=outcome,
                    reason="" if outcome == "pass" else f"why {outcome}",
                    # Each report times its checks afresh, as real runs do (the gate refuses a
                    # candidate whose durations repeat the baseline's: independence.py).
                    duration_s=round(0.5 + random.Random(f"{n}-{i}").random() / 10, 6),
                    attempts=2 if outcome == "flaky" else 1,
                    expected_by="expectations" if outcome in ("xfail", "xpass") else None,
                )
                for i, (cid, outcome) in enumerate(outcomes.items())
            ),
            perf={
                name: PerfFigure(
                    name=name,
                    value=value,
                    unit=unit,
                    better=better,
                    check="checks.test_perf::test_snapshot",
                )
                for name, (value, unit, better) in (perf or {}).items()
            },
            collection_errors=collection_errors,
            accuracy=accuracy,
        )
        if coverage == "whole":
            # A full run of a suite made of the modules of these checks (coverage is always
            # derived from the checks; a report without it certifies nothing).
            suite = sorted({c.id.partition("::")[0] for c in report.checks}) or ["m"]
            coverage = coverage_of(report.checks, deselected=0, keyword=None, markers=None,
                                   args=(), suite=suite, device=device, lanes=1)  # fmt: skip
        report = report.replace(coverage=coverage)
        # The tier its checks give, stored as the harness's writer stores it (schema 4 requires
        # one); a test that changes the report after this derives it again where it matters.
        return report.replace(tier=derive_tier(report))

    return build


@pytest.fixture
def passing_accuracy() -> Any:
    from tt_conformance.report import AccuracyResult

    return AccuracyResult(
        task="tt-patterns", check="m::acc", score=0.9, ci_low=0.83, ci_high=0.94,
        num_samples=100, correct=90, reference=0.9, tolerance=0.02, verdict="pass",
    )  # fmt: skip


# What a fresh clone's reports/ holds; local runs (reports/<model>/, gitignored) are left out so
# that tests "over the committed reports" see the same data everywhere.
PUBLISHED = ("MATRIX.md", "matrix.html", "baselines", "history")


def published_reports(dest: Path) -> Path:
    """A copy of the committed reports tree under ``dest``; returns its reports/ folder."""
    source = Path(__file__).resolve().parents[2] / "reports"
    out = dest / "reports"
    for part in PUBLISHED:
        src, dst = source / part, out / part
        if src.is_dir():
            shutil.copytree(src, dst)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    return out


# The tests' small reports record suites of made-up modules ("m", "checks.test_x"); the harness
# holds every recorded suite to its shipped manifest, so this declares those suites the tests'
# own (selection.fixture_suites: a test's word, never a report's). A suite naming any shipped
# module is still judged against the manifest. Tests of the manifest itself request
# `shipped_manifest_only`, which withdraws the declaration.
@pytest.fixture(autouse=True)
def _fixture_suites() -> Iterator[None]:
    from tt_conformance import selection

    with selection.fixture_suites(lambda suite: True):
        yield


@pytest.fixture
def shipped_manifest_only() -> Iterator[None]:
    from tt_conformance import selection

    with selection.fixture_suites(lambda suite: False):
        yield


@pytest.fixture
def vouch(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """vouch(report): the report with an expectations file stating its stored bars, recorded
    with its digest as a run records the file it was judged by (bars.py: bars nothing vouches
    for are self-asserted and cannot certify functional or complete)."""
    from tt_conformance.bars import file_digest
    from tt_conformance.longtasks import PASSKEY_TASK

    def build(report: Any) -> Any:
        targets = {
            t.figure: {
                "reference": t.reference, "source": t.source, "functional": t.functional,
                "complete": t.complete, "target": t.target,
            }
            for t in report.perf_targets
        }  # fmt: skip
        accuracy = {
            a.task: {
                "task": a.task,
                **({"threshold": a.threshold} if a.reference is None else {}),
                **({} if a.reference is None else {"reference": a.reference}),
                "tolerance": a.tolerance,
            }
            for a in report.accuracy
            if a.task != PASSKEY_TASK
        }
        data = {"schema_version": 2, "perf_targets": targets, "accuracy": list(accuracy.values())}
        path = tmp_path_factory.mktemp("bars") / "expectations.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        return report.replace(expectations_file=str(path), expectations_digest=file_digest(path))

    return build
