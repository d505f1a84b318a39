"""The plugin's metrics files as a test reads them: what a scrape of the directory reads, as
the API server's /metrics does (the directory: the ``metrics_dir`` fixture, tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from vllm_tt_plugin.observability import tt_metrics


def scrape(directory: Path, flush: bool = True) -> dict[tuple[str, frozenset], float]:
    """What a scrape reads from the files (after this process's pending increments, unless
    ``flush`` is off)."""
    if flush:
        tt_metrics.flush()
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))
