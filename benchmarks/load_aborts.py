"""Load with client aborts on the host-emulated mesh (#12 "Load, proven").

Serves the bundled reference model with the real vLLM OpenAI server (127.0.0.1, a free port,
always stopped), runs each distinct prompt alone first (the greedy references), then drives
N streaming requests with bounded concurrency, varied prompt lengths and max_tokens, greedy,
a share of them closed by the client early (some before the first token), and checks:

- no request lost or stuck (each finished or was aborted by the client, within its bound);
- the server drained afterwards: nothing running or waiting, vllm:kv_cache_usage_perc 0;
- every finished output equals its solo run token for token (aborted streams: a prefix of it).

    python benchmarks/load_aborts.py --requests 1000 --abort-frac 0.3 --lanes 4 [--json FILE]

Exits 1 on any violation (each printed), 0 otherwise. The invariants and the driver live in
benchmarks/load_driver.py (the engine test tests/engine/test_load_aborts.py runs the same core).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "plugin"))

from benchmarks.load_driver import (  # noqa: E402
    LoadConfig,
    LoadServer,
    drive,
    make_prompts,
    ordinary_token_ids,
    summary,
    violations,
)
from benchmarks.results import write_json  # noqa: E402
from vllm_tt_plugin.emulation.server import BUNDLED_MODEL  # noqa: E402


def machine() -> str:
    cores = os.cpu_count()
    return f"{platform.node()} ({cores} cores, {platform.machine()}, {platform.python_version()})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = LoadConfig()
    parser.add_argument("--requests", type=int, default=defaults.requests)
    parser.add_argument("--abort-frac", type=float, default=defaults.abort_frac)
    parser.add_argument("--lanes", type=int, choices=(1, 4), default=1)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument(
        "--prompts",
        type=int,
        default=defaults.distinct_prompts,
        help="distinct prompts (each run solo first)",
    )
    parser.add_argument("--max-prompt-len", type=int, default=defaults.max_prompt_len)
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=defaults.max_max_tokens,
        help="max_tokens is drawn from [1, this]",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--request-timeout", type=float, default=defaults.request_timeout_s)
    parser.add_argument("--run-timeout", type=float, default=defaults.run_timeout_s)
    parser.add_argument(
        "--kv-tokens", type=int, default=None, help="KV tokens per lane (default: LoadServer's)"
    )
    parser.add_argument(
        "--step-ms", type=float, default=0.0, help="TT_EMULATED_STEP_MS for the emulated device"
    )
    parser.add_argument("--model", type=Path, default=BUNDLED_MODEL)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    try:
        config = LoadConfig(
            requests=args.requests,
            abort_frac=args.abort_frac,
            concurrency=args.concurrency,
            distinct_prompts=args.prompts,
            max_prompt_len=args.max_prompt_len,
            max_max_tokens=args.max_tokens,
            seed=args.seed,
            request_timeout_s=args.request_timeout,
            run_timeout_s=args.run_timeout,
        )
        serving = LoadServer(
            lanes=args.lanes, kv_tokens_per_lane=args.kv_tokens, step_ms=args.step_ms
        )
    except ValueError as exc:
        parser.error(str(exc))
    if not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: no config.json there")
    prompts = make_prompts(config, ordinary_token_ids(args.model))

    def progress(done: int, total: int) -> None:
        if done % max(1, total // 10) == 0 or done == total:
            print(f"[load] {done}/{total} requests ended", flush=True)

    started = time.monotonic()
    server = serving.server(args.model)
    with server:
        print(
            f"[load] {args.lanes} lane(s) healthy at {server.url} after "
            f"{time.monotonic() - started:.1f} s (log {server.log_path})",
            flush=True,
        )
        result = asyncio.run(drive(server.url, config, prompts, on_progress=progress))
    problems = violations(result)
    lanes_used = [lane for lane, n in summary(result)["lane_steps"].items() if n > 0]
    if len(lanes_used) < serving.lanes:
        problems.append(f"only lanes {lanes_used} of {serving.lanes} carried rows")
    figures: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "serving": serving.describe(),
        "config": {k: v for k, v in vars(config).items()},
        "figures": summary(result),
        "violations": problems,
        "passed": not problems,
    }
    print(json.dumps(figures["figures"], indent=2))
    for problem in problems[:50]:
        print(f"VIOLATION: {problem}")
    if len(problems) > 50:
        print(f"... and {len(problems) - 50} more")
    if args.json:
        write_json(args.json, figures, indent=2)
    print(f"[load] {'PASSED' if not problems else f'FAILED ({len(problems)} violations)'}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
