"""The `tt_raw_http` fixture: plain HTTP against the server, for what the OpenAI client hides.

Use it for error bodies and status codes of malformed requests, and for the non-OpenAI
endpoints /health, /version, /metrics, /tokenize and /detokenize.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import requests

from tt_conformance.server import bearer

__all__ = [
    "DEFAULT_TIMEOUT",
    "ApiError",
    "MetricSample",
    "RawHttp",
    "parse_prometheus",
]

DEFAULT_TIMEOUT = 600.0


@dataclass(frozen=True)
class ApiError:
    """An OpenAI-style error body, tolerant of both vLLM shapes:
    ``{"error": {"message", "type", "code"}}`` and ``{"object": "error", "message", ...}``."""

    status: int
    message: str
    type: str | None
    code: Any
    body: Any

    @classmethod
    def from_response(cls, resp: requests.Response) -> ApiError:
        try:
            body: Any = resp.json()
        except ValueError:
            body = resp.text
        inner = body.get("error", body) if isinstance(body, dict) else {}
        if not isinstance(inner, dict):  # {"error": "text"}
            inner = {"message": str(inner)}
        return cls(
            status=resp.status_code,
            message=str(inner.get("message", "" if isinstance(body, dict) else body)),
            type=inner.get("type"),
            code=inner.get("code"),
            body=body,
        )


@dataclass(frozen=True)
class MetricSample:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    value: float = math.nan


def parse_prometheus(text: str) -> list[MetricSample]:
    """Every sample of a Prometheus text exposition (what vLLM serves at /metrics), read with
    prometheus_client's parser; a malformed body raises ValueError."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        MetricSample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


class RawHttp:
    """A requests.Session bound to the server's base URL. No retries: they would hide errors."""

    def __init__(
        self,
        base_url: str,
        model: str,
        timeout: float = DEFAULT_TIMEOUT,
        api_key: str | None = None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update(bearer(api_key))

    def close(self) -> None:
        self.session.close()

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", self.timeout)
        return self.session.get(self.url(path), **kwargs)

    def post(self, path: str, json: Any = None, **kwargs: Any) -> requests.Response:
        """POST a JSON body as is (malformed bodies welcome: pass data=... for raw bytes)."""
        kwargs.setdefault("timeout", self.timeout)
        return self.session.post(self.url(path), json=json, **kwargs)

    def completions(self, body: dict[str, Any]) -> requests.Response:
        """POST /v1/completions; "model" defaults to the model under test."""
        return self.post("/v1/completions", {"model": self.model, **body})

    def chat(self, body: dict[str, Any]) -> requests.Response:
        """POST /v1/chat/completions; "model" defaults to the model under test."""
        return self.post("/v1/chat/completions", {"model": self.model, **body})

    def health(self) -> requests.Response:
        return self.get("/health")

    def version(self) -> str:
        resp = self.get("/version")
        resp.raise_for_status()
        return str(resp.json()["version"])

    def metrics_text(self) -> str:
        resp = self.get("/metrics")
        resp.raise_for_status()
        return resp.text

    def metrics(self) -> list[MetricSample]:
        return parse_prometheus(self.metrics_text())

    def metric_value(self, name: str, **labels: str) -> float | None:
        """Sum of the samples called `name` whose labels include `labels`; None if absent."""
        values = [
            s.value
            for s in self.metrics()
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        return sum(values) if values else None

    def tokenize(self, prompt: str | None = None, **body: Any) -> list[int]:
        """POST /tokenize with a prompt (or messages=[...] and other body fields)."""
        payload: dict[str, Any] = {"model": self.model, **body}
        if prompt is not None:
            payload["prompt"] = prompt
        resp = self.post("/tokenize", payload)
        resp.raise_for_status()
        return [int(t) for t in resp.json()["tokens"]]

    def detokenize(self, tokens: list[int]) -> str:
        resp = self.post("/detokenize", {"model": self.model, "tokens": tokens})
        resp.raise_for_status()
        return str(resp.json()["prompt"])

    @staticmethod
    def error_of(resp: requests.Response) -> ApiError:
        return ApiError.from_response(resp)
