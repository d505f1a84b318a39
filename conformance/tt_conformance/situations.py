"""Which situations faults live in the run created, as the server counted them.

The plugin counts rows (steps for the sampling situations) that put the model in situations
such as a prefill chunk starting inside a KV block or a decode token opening a new block
(``tt_situations_total``, the plugin's observability/situations.py). The harness reads the
counters at the run's probe and again when the run ends; the difference is what the run
created. vLLM, not the client, decides chunking, prefix hits and batch shapes, so this is
measured rather than assumed from the requests sent. Server-wide: another client's traffic
during the run counts too (the report says so).
"""

from __future__ import annotations

from collections.abc import Mapping

import requests

from tt_conformance.server import PROBE_TIMEOUT, bearer
from tt_conformance.ttmetrics import parse_metrics

__all__ = ["UNCOUNTED", "run_situations"]

# Every warning of a run whose situations could not be counted starts so.
UNCOUNTED = "situations not counted"


def run_situations(
    start: Mapping[str, float], base_url: str, api_key: str | None
) -> tuple[dict[str, int] | None, str | None]:
    """(situations created since ``start``, why none could be counted). ``start`` is the
    probe's reading; empty means the server published no situations (not TT, or an older
    plugin): nothing is read."""
    if not start:
        return None, None
    try:
        resp = requests.get(f"{base_url}/metrics", timeout=PROBE_TIMEOUT, headers=bearer(api_key))
        resp.raise_for_status()
        _, counters = parse_metrics(resp.text)
    except (requests.RequestException, ValueError) as exc:
        return None, f"{UNCOUNTED}: GET /metrics at the end of the run failed ({exc})"
    end = counters.situations()
    created = {name: end.get(name, 0.0) - before for name, before in start.items()}
    created.update({name: value for name, value in end.items() if name not in start})
    if any(value < 0 for value in created.values()):
        # The counters went back: the server restarted during the run.
        return None, f"{UNCOUNTED}: the server's counters went back during the run"
    return {name: int(value) for name, value in sorted(created.items())}, None
