"""Fixtures for check authors (registered through tt_conformance.pytest_plugin)."""

from __future__ import annotations

import asyncio
import json
import math
import re
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict

import pytest

from tt_conformance.collector import PROP_ACCURACY, PROP_CELL, PROP_PERF
from tt_conformance.rawhttp import RawHttp
from tt_conformance.server import ServerInfo
from tt_conformance.state import harness_state
from tt_conformance.ttpath import TTPath

if TYPE_CHECKING:  # openai is imported lazily: the plugin loads in every pytest run
    import openai

    from tt_conformance.report import AccuracyResult

__all__ = [
    "CLIENT_TIMEOUT",
    "PerfIdentity",
    "RecordAccuracy",
    "RecordCell",
    "RecordPerf",
    "tt_async_openai_client",
    "tt_openai_client",
    "tt_path",
    "tt_raw_http",
    "tt_record_accuracy",
    "tt_record_cell",
    "tt_record_perf",
    "tt_server",
]

CLIENT_TIMEOUT = 600.0  # generous: a cold TT server compiles kernels on its first requests
_PERF_NAME = re.compile(r"^[A-Za-z0-9_.@:/%+-]+$")


class RecordPerf(Protocol):
    def __call__(
        self,
        name: str,
        value: float,
        unit: str,
        better: Literal["lower", "higher"],
        **identity: Any,
    ) -> None: ...


class RecordAccuracy(Protocol):
    def __call__(self, result: AccuracyResult) -> None: ...


class RecordCell(Protocol):
    def __call__(self, concern: str, cell: str) -> None: ...


class PerfIdentity(TypedDict, total=False):
    metric: str
    stat: str
    input_len: int
    output_len: int
    concurrency: int
    samples: int
    flag: str | None


@pytest.fixture(scope="session")
def tt_server(pytestconfig: pytest.Config) -> ServerInfo:
    """The server under test; fails the check with the reason if none is usable."""
    return harness_state(pytestconfig).server_info()


@pytest.fixture(scope="session")
def tt_openai_client(tt_server: ServerInfo) -> Iterator[openai.OpenAI]:
    """Sync client on <url>/v1. max_retries=0: a retried request would hide a server error."""
    import openai

    client = openai.OpenAI(
        base_url=tt_server.api_base,
        api_key=tt_server.api_key or "EMPTY",
        timeout=CLIENT_TIMEOUT,
        max_retries=0,
    )
    yield client
    client.close()


@pytest.fixture
def tt_async_openai_client(tt_server: ServerInfo) -> Iterator[openai.AsyncOpenAI]:
    """A fresh async client per check, usable from any event loop the check starts.

    Connections are not kept alive: a pooled socket belongs to the loop that opened it, and a
    check's loop (asyncio.run) is gone before teardown could close it. Consume or close
    streamed responses inside the check.
    """
    import openai

    client = openai.AsyncOpenAI(
        base_url=tt_server.api_base,
        api_key=tt_server.api_key or "EMPTY",
        timeout=CLIENT_TIMEOUT,
        max_retries=0,
        default_headers={"Connection": "close"},
    )
    yield client
    try:
        asyncio.run(client.close())
    except RuntimeError as exc:  # a running loop (pytest-asyncio) or a socket left open
        warnings.warn(
            f"tt_async_openai_client could not be closed after the check ({exc}); "
            "close streams in the check, or `await tt_async_openai_client.close()` yourself",
            ResourceWarning,
            stacklevel=1,
        )


@pytest.fixture(scope="session")
def tt_raw_http(tt_server: ServerInfo) -> Iterator[RawHttp]:
    """requests-based helper for error bodies, /health, /version, /metrics, /(de)tokenize."""
    helper = RawHttp(
        tt_server.base_url, tt_server.model, timeout=CLIENT_TIMEOUT, api_key=tt_server.api_key
    )
    yield helper
    helper.close()


@pytest.fixture
def tt_record_perf(request: pytest.FixtureRequest) -> RecordPerf:
    """tt_record_perf(name, value, unit, better) adds a figure to the report's perf section.

    Names follow ``<metric>_<stat>@i<in>o<out>c<concurrency>`` (e.g. ``ttft_mean@i128o128c1``
    in ms, ``tt_tps@i128o128c32`` in tok/s); keyword identity keys (metric, stat, input_len,
    output_len, concurrency, samples, flag) say what was measured. A name may be recorded once
    per run.
    """
    item = request.node

    def record(
        name: str,
        value: float,
        unit: str,
        better: Literal["lower", "higher"],
        **identity: Any,
    ) -> None:
        if not isinstance(name, str) or not _PERF_NAME.match(name):
            raise ValueError(
                f"tt_record_perf: name must match {_PERF_NAME.pattern} (no spaces), got {name!r}"
            )
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise ValueError(
                f"tt_record_perf({name!r}): value must be a finite number, got {value!r}"
            )
        if not isinstance(unit, str):
            raise ValueError(f"tt_record_perf({name!r}): unit must be a string, got {unit!r}")
        if better not in ("lower", "higher"):
            raise ValueError(
                f"tt_record_perf({name!r}): better must be 'lower' or 'higher', got {better!r}"
            )
        if any(k == PROP_PERF and json.loads(v)["name"] == name for k, v in item.user_properties):
            raise ValueError(f"tt_record_perf: figure {name!r} already recorded by this check")
        unknown = set(identity) - set(PerfIdentity.__annotations__)
        if unknown:
            raise ValueError(
                f"tt_record_perf({name!r}): unknown identity keys {sorted(unknown)} "
                f"(allowed: {', '.join(PerfIdentity.__annotations__)})"
            )
        figure = {"name": name, "value": float(value), "unit": unit, "better": better, **identity}
        # user_properties travel with the test report, so xdist brings them to the controller.
        item.user_properties.append((PROP_PERF, json.dumps(figure)))

    return record


@pytest.fixture
def tt_record_accuracy(request: pytest.FixtureRequest) -> RecordAccuracy:
    """tt_record_accuracy(result) adds an AccuracyResult to the report's accuracy section."""
    from tt_conformance.accuracy import dump_result

    item = request.node

    def record(result: AccuracyResult) -> None:
        item.user_properties.append((PROP_ACCURACY, dump_result(result)))

    return record


@pytest.fixture
def tt_record_cell(request: pytest.FixtureRequest) -> RecordCell:
    """tt_record_cell(concern, label) records that a situation-matrix cell ran (its requests
    were served and compared): the report's ``matrix_cells`` lists them per concern."""
    item = request.node

    def record(concern: str, cell: str) -> None:
        if not concern or not cell:
            raise ValueError("tt_record_cell: a concern and a cell label are needed")
        item.user_properties.append((PROP_CELL, json.dumps([concern, cell])))

    return record


@pytest.fixture
def tt_path(pytestconfig: pytest.Config, tt_raw_http: RawHttp) -> TTPath:
    """The plugin's counters around a check's requests (ttpath.py); skips on a non-TT server."""
    return TTPath(tt_raw_http, harness_state(pytestconfig).tt)
