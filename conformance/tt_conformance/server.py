"""What the harness knows about the server under test, and how it finds out (GET /v1/models,
GET /version, the plugin's ``tt_plugin_info`` on GET /metrics). Probing happens once per run, in
the pytest controller process."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests

from tt_conformance.ttmetrics import parse_metrics

__all__ = [
    "PROBE_TIMEOUT",
    "ServedModel",
    "ServerInfo",
    "ServerProbe",
    "ServerSetupError",
    "bearer",
    "normalize_base_url",
    "parse_plugin_info",
    "probe_server",
    "resolve_model",
    "wait_for_server",
]

PROBE_TIMEOUT = (10.0, 30.0)  # (connect, read) seconds: a dead server must not hang the run


class ServerSetupError(RuntimeError):
    """The server cannot be used for this run (not configured, unreachable, wrong model)."""


@dataclass(frozen=True)
class ServerInfo:
    """The `tt_server` fixture: the server under test as the checks see it."""

    base_url: str  # e.g. http://127.0.0.1:8000 (no trailing /v1)
    model: str
    max_num_seqs: int
    lanes: int
    device: str
    max_model_len: int | None
    vllm_version: str
    api_key: str | None = field(default=None, repr=False)  # never printed in a failure

    @property
    def auth_headers(self) -> dict[str, str]:
        return bearer(self.api_key)

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/v1"


@dataclass(frozen=True)
class ServedModel:
    id: str
    max_model_len: int | None
    parent: str | None


@dataclass(frozen=True)
class ServerProbe:
    """Outcome of probing: either served models + version, or an error message."""

    models: tuple[ServedModel, ...] = ()
    vllm_version: str | None = None
    error: str | None = None
    # Labels of the plugin's tt_plugin_info sample; empty when the server publishes none (not a
    # vllm-tt-plugin server, metrics off, or an older plugin build). Provenance (provenance.py)
    # and TT detection (ttmetrics.TTProbe) both read this one probe.
    plugin_info: dict[str, str] = field(default_factory=dict)
    metrics_error: str | None = None  # why GET /metrics could not be read, if it could not
    # tt_situations_total by situation at the probe: the start of the run's count (situations.py).
    situations: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # Plain data so that pytest-xdist can hand it to the workers.
        return {
            "models": [asdict(m) for m in self.models],
            "vllm_version": self.vllm_version,
            "error": self.error,
            "plugin_info": dict(self.plugin_info),
            "metrics_error": self.metrics_error,
            "situations": dict(self.situations),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerProbe:
        return cls(
            models=tuple(ServedModel(**m) for m in data.get("models", [])),
            vllm_version=data.get("vllm_version"),
            error=data.get("error"),
            plugin_info=dict(data.get("plugin_info") or {}),
            metrics_error=data.get("metrics_error"),
            situations=dict(data.get("situations") or {}),
        )

    def info(self, key: str) -> str | None:
        """A tt_plugin_info label, None when absent or "unknown"."""
        value = self.plugin_info.get(key)
        return None if value in (None, "", "unknown") else value

    def info_bool(self, key: str) -> bool | None:
        value = self.info(key)
        return {"true": True, "false": False}.get(value.lower()) if value is not None else None

    def info_int(self, key: str) -> int | None:
        value = self.info(key)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None


def bearer(api_key: str | None) -> dict[str, str]:
    """The Authorization header every client of the harness sends when a key is configured."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def parse_plugin_info(metrics_text: str) -> dict[str, str]:
    """Labels of ``tt_plugin_info`` in a /metrics body ({} when absent or unparseable)."""
    try:
        info, _ = parse_metrics(metrics_text)
    except ValueError:
        return {}
    return info.to_json() if info is not None else {}


def normalize_base_url(url: str) -> str:
    """Accept http://host:port, .../ or .../v1 and return http://host:port[/prefix]."""
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"--tt-server-url / TT_SERVER_URL: expected http(s)://host:port, got {url!r}"
        )
    if text.endswith("/v1"):
        text = text[: -len("/v1")]
    return text


def wait_for_server(base_url: str, seconds: float, api_key: str | None = None) -> bool:
    """Poll ``GET /health`` until it answers 200 or ``seconds`` pass (``--tt-wait-for-server``):
    a server still starting is waited for, one that never comes up fails the run at the bound."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            resp = requests.get(f"{base_url}/health", headers=bearer(api_key), timeout=2.0)
            if resp.status_code == 200:
                return True
        except requests.RequestException:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))


def probe_server(
    base_url: str, session: requests.Session | None = None, api_key: str | None = None
) -> ServerProbe:
    http = session or requests.Session()
    http.headers.update(bearer(api_key))
    try:
        return _probe(http, base_url, api_key)
    finally:
        if session is None:
            http.close()


def _probe(http: requests.Session, base_url: str, api_key: str | None) -> ServerProbe:
    try:
        resp = http.get(f"{base_url}/v1/models", timeout=PROBE_TIMEOUT)
        if resp.status_code == 401:
            hint = (
                "the API key sent was refused"
                if api_key
                else "the server wants an API key: pass --tt-api-key KEY (or set "
                "OPENAI_API_KEY / VLLM_API_KEY)"
            )
            return ServerProbe(error=f"GET {base_url}/v1/models returned HTTP 401: {hint}")
        if resp.status_code != 200:
            return ServerProbe(
                error=f"GET {base_url}/v1/models returned HTTP {resp.status_code}: "
                f"{resp.text[:300]}"
            )
        models = _parse_models(resp.json())
    except requests.RequestException as exc:
        return ServerProbe(error=f"cannot reach the server at {base_url}: {exc}")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return ServerProbe(error=f"GET {base_url}/v1/models returned an unexpected body: {exc!r}")
    version: str | None = None
    try:
        vresp = http.get(f"{base_url}/version", timeout=PROBE_TIMEOUT)
        body = vresp.json() if vresp.status_code == 200 else None
        if isinstance(body, dict) and body.get("version"):
            version = str(body["version"])
    except (requests.RequestException, ValueError):
        version = None  # /version is informational; the report then says "unknown"
    # Without the info metric provenance degrades to flags and the server is not certified as
    # TT (ttmetrics.py); the generic checks still run.
    info: dict[str, str] = {}
    situations: dict[str, float] = {}
    error: str | None = None
    try:
        mresp = http.get(f"{base_url}/metrics", timeout=PROBE_TIMEOUT)
        if mresp.status_code != 200:
            error = f"GET /metrics returned HTTP {mresp.status_code}"
        else:
            parsed, counters = parse_metrics(mresp.text)
            info = parsed.to_json() if parsed is not None else {}
            situations = counters.situations()
    except requests.RequestException as exc:
        error = f"GET /metrics failed: {exc}"
    except ValueError as exc:
        error = f"GET /metrics is not Prometheus text: {exc}"
    return ServerProbe(
        models=models,
        vllm_version=version,
        plugin_info=info,
        metrics_error=error,
        situations=situations,
    )


def _parse_models(body: Any) -> tuple[ServedModel, ...]:
    entries = body["data"]
    if not isinstance(entries, list):
        raise ValueError("'data' is not a list")
    out = []
    for entry in entries:
        mml = entry.get("max_model_len")
        out.append(
            ServedModel(
                id=str(entry["id"]),
                max_model_len=int(mml)
                if isinstance(mml, int) and not isinstance(mml, bool)
                else None,
                parent=entry.get("parent"),
            )
        )
    return tuple(out)


def resolve_model(probe: ServerProbe, requested: str | None, base_url: str) -> ServedModel:
    """Pick the model under test: the requested one (must be served) or the only base model."""
    if probe.error:
        raise ServerSetupError(probe.error)
    served = ", ".join(m.id for m in probe.models) or "none"
    if requested:
        for model in probe.models:
            if model.id == requested:
                return model
        raise ServerSetupError(
            f"--tt-model-name {requested!r} is not served by {base_url} (served: {served})"
        )
    # LoRA adapters are listed with a parent; the base model has none.
    roots = [m for m in probe.models if not m.parent]
    if len(roots) == 1:
        return roots[0]
    if not roots:
        raise ServerSetupError(f"{base_url}/v1/models lists no model")
    raise ServerSetupError(
        f"{base_url} serves several models ({served}); choose one with --tt-model-name"
    )
