"""Load with client aborts, bounded for CI: the invariants of benchmarks/load_aborts.py (#12).

The same driver core (benchmarks/load_driver.py) on the plain path with fewer requests: every
request finished or was aborted by the client within its bound, the server drained (nothing
running or waiting, KV usage 0), and every finished greedy output equals its solo run. The KV
pool is smaller than the batch can use, so requests are also preempted and resumed while others
are aborted. The 1,000-request runs on both paths are the benchmark's (docs/RELIABILITY.md).
"""

from __future__ import annotations

import asyncio

from benchmarks.load_driver import (
    LoadConfig,
    LoadServer,
    Status,
    drive,
    make_prompts,
    ordinary_token_ids,
    summary,
    violations,
)
from tests.engine.harness import MODEL_DIR

CONFIG = LoadConfig(
    requests=160,
    abort_frac=0.3,
    concurrency=48,
    distinct_prompts=12,
    max_max_tokens=32,
    request_timeout_s=60.0,
    run_timeout_s=240.0,
)


def test_load_with_client_aborts_loses_nothing_leaks_no_kv_and_matches_solo_runs() -> None:
    serving = LoadServer(lanes=1)
    prompts = make_prompts(CONFIG, ordinary_token_ids(MODEL_DIR))
    with serving.server(MODEL_DIR) as server:
        result = asyncio.run(drive(server.url, CONFIG, prompts))
    problems = violations(result)
    figures = summary(result)
    assert problems == [], "\n".join([*problems[:20], f"figures: {figures}"])
    # The run exercised what it claims: aborts before the first token and mid-stream, a full
    # batch with a queue behind it, and preemption.
    mid_stream = [o for o in result.outcomes if o.status is Status.ABORTED and o.tokens]
    assert figures["aborted_before_first_token"] > 0, figures
    assert mid_stream, figures
    assert figures["finished"] >= CONFIG.requests // 2, figures
    assert figures["server_peak_running"] >= serving.max_num_seqs // 2, figures
    assert figures["preempted"] > 0, figures
