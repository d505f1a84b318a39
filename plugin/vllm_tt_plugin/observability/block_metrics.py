"""Block metrics on the server's ``/metrics`` (block-output models; docs/BLOCK_SERVING.md).

The engine-core process writes prometheus_client multiprocess files into the plugin's metrics
directory (``tt_metrics.metrics_directory()``), which the collector ``tt_metrics`` installs in
the API server reads at every scrape (docs/METRICS.md). One write per block step, never per
token.

Published (vLLM counts logical tokens; these are the model's physical blocks):
- ``tt_block_canvases_total``: canvases committed;
- ``tt_block_committed_tokens_total``: tokens committed up to and including each canvas's first
  stop token (committed tokens per block = this / canvases);
- ``tt_block_seconds_total``: time spent in block steps;
- ``tt_block_latency_seconds``: the last block's latency;
- ``tt_block_throughput_tokens_per_second``: ``256 / block_latency_seconds`` of the last block.
Denoise steps are not published: the model contract exposes no denoise-step count.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from vllm_tt_plugin.observability import tt_metrics
from vllm_tt_plugin.utils.log import get_logger

logger = get_logger(__name__)

_COUNTERS = {
    "tt_block_canvases": "Canvases committed by the block-output model",
    "tt_block_committed_tokens": "Tokens committed up to each canvas's first stop token",
    "tt_block_seconds": "Seconds spent in block steps",
}
_GAUGES = {
    "tt_block_latency_seconds": "Latency of the last block step (seconds)",
    "tt_block_throughput_tokens_per_second": "256 / block_latency_seconds of the last block",
}
_lock = threading.Lock()


class BlockMetrics:
    """The engine-core side: this process's multiprocess files."""

    def __init__(self, directory: str | None = None) -> None:
        if directory is None and tt_metrics.metrics_enabled():
            directory = tt_metrics.metrics_directory()
        self.directory = directory
        self._values: dict[str, float] = {}
        self._files: dict[str, Any] = {}

    def _file(self, prefix: str) -> Any:
        mm = self._files.get(prefix)
        if mm is None:
            from prometheus_client.mmap_dict import MmapedDict

            path = os.path.join(self.directory or "", f"{prefix}_tt-block-{os.getpid()}.db")
            mm = self._files[prefix] = MmapedDict(path)
        return mm

    def _write(self, prefix: str, name: str, sample: str, help_text: str, value: float) -> None:
        from prometheus_client.mmap_dict import mmap_key

        self._file(prefix).write_value(
            mmap_key(name, sample, [], [], help_text), value, time.time()
        )

    def record(self, canvases: int, committed: int, seconds: float, canvas: int) -> None:
        if not self.directory or canvases < 1:
            return
        per_block = seconds / canvases
        with _lock:
            for name, amount in (
                ("tt_block_canvases", canvases),
                ("tt_block_committed_tokens", committed),
                ("tt_block_seconds", seconds),
            ):
                total = self._values.get(name, 0.0) + amount
                self._values[name] = total
                self._write("counter", name, f"{name}_total", _COUNTERS[name], total)
            self._write(
                "gauge_mostrecent",
                "tt_block_latency_seconds",
                "tt_block_latency_seconds",
                _GAUGES["tt_block_latency_seconds"],
                per_block,
            )
            name = "tt_block_throughput_tokens_per_second"
            rate = canvas / per_block if per_block > 0 else 0.0
            self._write("gauge_mostrecent", name, name, _GAUGES[name], rate)
