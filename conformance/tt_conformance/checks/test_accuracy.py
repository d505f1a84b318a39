"""Accuracy: score the served model on each task of the expectations' ``accuracy`` entries and
compare with the entry's reference (minus tolerance) or threshold.

Records score, 95 % Wilson interval, sample count, every item's outcome and verdict in the
report's ``accuracy`` section (the tier needs a passing verdict for "functional"; the gate pairs
runs by item); a failing verdict fails the check.
Greedy completions, sent at the server's capacity. Nothing downloads: bundled and JSONL tasks
are local files, lm-eval tasks run offline from the local cache. Without an accuracy entry
the check is skipped, and with it the accuracy concern: the run is partial, with no tier
(selection.py: a tier needs every applicable concern run).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from tt_conformance.accuracy import (
    LM_EVAL_PREFIX,
    TaskError,
    item_outcomes,
    resolve_task,
    run_lm_eval,
    verdict,
    wilson_interval,
)
from tt_conformance.checks._support import acomplete, capacity, greedy
from tt_conformance.state import harness_state

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from tt_conformance.accuracy import TaskItem
    from tt_conformance.expectations import AccuracyExpectation
    from tt_conformance.fixtures import RecordAccuracy
    from tt_conformance.server import ServerInfo

pytestmark = [pytest.mark.accuracy]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "entry" not in metafunc.fixturenames:
        return
    entries = list(harness_state(metafunc.config).expectations.accuracy)
    if entries:
        metafunc.parametrize("entry", entries, ids=[e.task for e in entries])
    else:
        metafunc.parametrize("entry", [None], ids=["none"])


def test_accuracy(
    tt_server: ServerInfo,
    tt_async_openai_client: AsyncOpenAI,
    tt_record_accuracy: RecordAccuracy,
    pytestconfig: pytest.Config,
    entry: AccuracyExpectation | None,
) -> None:
    if entry is None:
        pytest.skip(
            "no accuracy entry in the expectations (task, reference or threshold, tolerance, "
            "num_samples): the accuracy concern does not run, so the run gets no tier"
        )
    expectations = harness_state(pytestconfig).expectations
    if entry.task.startswith(LM_EVAL_PREFIX):
        task = entry.task.removeprefix(LM_EVAL_PREFIX)
        try:
            got = run_lm_eval(
                task, tt_server.api_base, tt_server.model, capacity(tt_server), tt_server.api_key,
                entry.num_samples,
            )  # fmt: skip
        except ImportError:
            pytest.skip(f"{entry.task}: lm-eval is not installed (pip install lm-eval)")
        half = 1.959963984540054 * (got.stderr or 0.0)
        interval = (max(0.0, got.score - half), min(1.0, got.score + half))
        result = verdict(entry, got.score, got.n, interval, got.correct, got.items)
    else:
        try:
            items = resolve_task(entry, expectations.task_path(entry.task))
        except TaskError as exc:
            pytest.fail(str(exc), pytrace=False)
        limit = asyncio.Semaphore(capacity(tt_server))

        async def one(item: TaskItem) -> str:
            async with limit:
                out = await acomplete(
                    tt_async_openai_client,
                    tt_server.model,
                    greedy(item.prompt, item.max_tokens, stop=list(item.stop)),
                )
                return out.text

        async def run_all() -> list[str]:
            return list(await asyncio.gather(*(one(i) for i in items)))

        texts = asyncio.run(run_all())
        outcomes = item_outcomes(
            (item.id, item.score(text)) for item, text in zip(items, texts, strict=True)
        )
        correct = sum(o.correct for o in outcomes)
        result = verdict(
            entry, correct / len(items), len(items), wilson_interval(correct, len(items)),
            correct, outcomes,
        )  # fmt: skip
    tt_record_accuracy(result)
    assert result.verdict == "pass", f"accuracy on {entry.task}: {result.reason}"
