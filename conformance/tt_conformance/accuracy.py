"""Accuracy tasks: local JSONL datasets, scoring rules, the score's confidence interval and the
verdict against the expectations; and, when lm-eval is installed, its ``local-completions`` path.

A task is one of
- a bundled task name (`BUNDLED_TASKS`, files under ``tasks/`` in this package), e.g.
  ``tt-patterns``: continuations of the bundled reference models' training patterns;
- a JSONL file of your own, one item a line::

      {"prompt": "Q: What is 2 plus 3?\\nA:", "expected": "5", "scoring": "regex",
       "pattern": "is (-?[0-9.,]+)", "max_tokens": 16, "stop": ["\\n"]}

  ``scoring`` is ``exact`` (the normalised completion equals ``expected``), ``contains``
  (``expected`` occurs in the completion) or ``regex`` (the first, or with ``"group": "last"``
  the last, match of ``pattern`` is extracted, group 1 if the pattern has one, and compared like
  ``exact``: the gsm8k way). Normalising strips whitespace, ``,`` and ``$`` and a final ``.``;
- ``lm-eval:<task>`` (needs ``pip install lm-eval``; skipped otherwise). Its datasets must
  already be in the local Hugging Face cache: the harness runs it offline, so nothing downloads
  at run time.

Greedy decoding (temperature 0) throughout, so a score is reproducible and comparable with the
reference measured with transformers on the same checkpoint (tools/measure_accuracy_reference.py).

Every result stores its items' outcomes (`ItemOutcome`: an id digesting the item, correct or
not), for every task kind: the gate pairs two runs item by item (paired.py). An lm-eval item's
id digests its ``doc_id`` and lm-eval's ``doc_hash``; its outcome is the headline metric of the
sample (a metric that is not 0 or 1 per sample gives no items and no correct count).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from tt_conformance import envs
from tt_conformance.datafile import Strict, describe
from tt_conformance.expectations import AccuracyExpectation
from tt_conformance.report import AccuracyResult, ItemOutcome

__all__ = [
    "BUNDLED_TASKS",
    "LM_EVAL_PREFIX",
    "Z_95",
    "LmEvalScore",
    "TaskError",
    "TaskItem",
    "bundled_task_path",
    "dump_result",
    "extract",
    "item_id",
    "item_outcomes",
    "lm_eval_model_args",
    "load_task",
    "normalise",
    "pick_lm_eval_metric",
    "resolve_task",
    "run_lm_eval",
    "verdict",
    "wilson_interval",
]

BUNDLED_TASKS: dict[str, str] = {"tt-patterns": "tt-patterns.jsonl"}
LM_EVAL_PREFIX = "lm-eval:"
Z_95 = 1.959963984540054


class TaskError(ValueError):
    """A task file is missing or malformed; the message names the file, line and field."""


class TaskItem(Strict):
    prompt: str = Field(min_length=1)
    expected: str
    scoring: Literal["exact", "contains", "regex"] = "exact"
    pattern: str | None = None
    group: Literal["first", "last"] = "first"
    max_tokens: int = Field(default=16, ge=1)
    stop: tuple[str, ...] = ("\n",)

    @model_validator(mode="after")
    def _pattern(self) -> TaskItem:
        if self.scoring == "regex":
            if not self.pattern:
                raise ValueError("scoring 'regex' needs a 'pattern'")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern {self.pattern!r} is not a regex: {exc}") from None
        return self

    @property
    def id(self) -> str:
        return item_id(self.prompt, self.expected)

    def score(self, completion: str) -> bool:
        if self.scoring == "contains":
            return self.expected in completion
        if self.scoring == "exact":
            return normalise(completion) == normalise(self.expected)
        assert self.pattern is not None
        found = extract(self.pattern, completion, self.group)
        return found is not None and normalise(found) == normalise(self.expected)


def item_id(*parts: object) -> str:
    """A short digest naming an item by its content (prompt and answer), so two runs pair the
    same items and an edited item is another item."""
    text = json.dumps([str(p) for p in parts], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def item_outcomes(scored: Iterable[tuple[str, bool]]) -> tuple[ItemOutcome, ...]:
    """(id, correct) pairs as the report stores them; a repeated item gets ``#2``, ``#3``."""
    seen: dict[str, int] = {}
    out = []
    for ident, correct in scored:
        seen[ident] = seen.get(ident, 0) + 1
        name = ident if seen[ident] == 1 else f"{ident}#{seen[ident]}"
        out.append(ItemOutcome(id=name, correct=bool(correct)))
    return tuple(out)


def normalise(text: str) -> str:
    out = text.strip().replace(",", "").replace("$", "")
    return out[:-1].rstrip() if out.endswith(".") else out


def extract(pattern: str, text: str, group: str = "first") -> str | None:
    matches = list(re.finditer(pattern, text))
    if not matches:
        return None
    match = matches[0] if group == "first" else matches[-1]
    if match.groups():
        return next((g for g in match.groups() if g is not None), "")
    return match.group(0)


def bundled_task_path(name: str) -> Path:
    return Path(str(resources.files("tt_conformance") / "tasks" / BUNDLED_TASKS[name]))


def load_task(path: Path) -> list[TaskItem]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TaskError(f"{path}: cannot read the task file: {exc.strerror or exc}") from None
    items = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(TaskItem.model_validate_json(line, strict=True))
        except ValidationError as exc:
            raise TaskError(describe(exc, f"{path}:{number}")) from None
    if not items:
        raise TaskError(f"{path}: the task file has no items")
    return items


def resolve_task(entry: AccuracyExpectation, task_path: Path | None) -> list[TaskItem]:
    """The items of a local task (bundled or JSONL), cut to ``num_samples``."""
    if entry.task in BUNDLED_TASKS:
        path = bundled_task_path(entry.task)
    elif task_path is not None:
        path = task_path
    else:
        known = ", ".join(BUNDLED_TASKS)
        raise TaskError(
            f"accuracy task {entry.task!r}: not a bundled task ({known}), a .jsonl file or "
            f"{LM_EVAL_PREFIX}<task>"
        )
    items = load_task(path)
    if entry.num_samples is not None:
        if entry.num_samples > len(items):
            raise TaskError(
                f"accuracy task {entry.task!r}: num_samples {entry.num_samples} but the task "
                f"has {len(items)} items"
            )
        items = items[: entry.num_samples]
    return items


def wilson_interval(correct: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion: sound at 0 % and 100 %, unlike the normal one."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def verdict(
    entry: AccuracyExpectation,
    score: float,
    n: int,
    interval: tuple[float, float],
    correct: int | None = None,
    items: tuple[ItemOutcome, ...] | None = None,
) -> AccuracyResult:
    passed = score >= entry.bar - 1e-12
    if entry.reference is not None:
        bar = f"reference {entry.reference:.3f} - tolerance {entry.tolerance:.3f} = {entry.bar:.3f}"
    else:
        bar = f"threshold {entry.bar:.3f}"
    return AccuracyResult(
        task=entry.task,
        check="",  # filled in by the collector with the recording check's id
        score=round(score, 6),
        ci_low=round(interval[0], 6),
        ci_high=round(interval[1], 6),
        num_samples=n,
        correct=correct,
        reference=entry.reference,
        threshold=entry.threshold,
        tolerance=entry.tolerance,
        verdict="pass" if passed else "fail",
        reason=f"score {score:.3f} {'>=' if passed else '<'} {bar}",
        items=items,
    )


# ----------------------------------------------------------------------------- lm-eval


@dataclass(frozen=True)
class LmEvalScore:
    metric: str
    score: float
    stderr: float | None
    n: int
    items: tuple[ItemOutcome, ...] | None = None  # None: lm-eval logged no 0/1 sample values

    @property
    def correct(self) -> int | None:
        return None if self.items is None else sum(i.correct for i in self.items)


def lm_eval_model_args(
    api_base: str, model: str, concurrency: int, api_key: str | None
) -> dict[str, Any]:
    del api_key  # lm-eval's local-completions reads it from OPENAI_API_KEY (set by run_lm_eval)
    return {
        "model": model,
        "base_url": f"{api_base}/completions",
        "num_concurrent": concurrency,
        "max_retries": 1,
        "tokenized_requests": False,
    }


def run_lm_eval(
    task: str, api_base: str, model: str, concurrency: int, api_key: str | None, limit: int | None
) -> LmEvalScore:
    """Run one lm-eval task through local-completions, offline; ImportError without lm-eval."""
    import lm_eval  # optional dependency: the caller turns ImportError into a skip

    offline = dict.fromkeys(
        (envs.HF_HUB_OFFLINE, envs.HF_DATASETS_OFFLINE, envs.TRANSFORMERS_OFFLINE), "1"
    )
    if api_key:
        offline[envs.OPENAI_API_KEY] = api_key
    with envs.scoped(offline):
        results = lm_eval.simple_evaluate(
            model="local-completions",
            model_args=lm_eval_model_args(api_base, model, concurrency, api_key),
            tasks=[task],
            limit=limit,
            log_samples=True,  # per-item outcomes: the gate pairs runs by item
        )
    return pick_lm_eval_metric(results, task)


def pick_lm_eval_metric(results: dict[str, Any], task: str) -> LmEvalScore:
    """The task's headline number: exact_match, then acc, then the first numeric metric."""
    metrics = results["results"][task]
    numeric = {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and "_stderr" not in k
    }
    if not numeric:
        raise ValueError(f"lm-eval returned no numeric metric for {task!r}: {metrics}")
    preferred = [k for k in numeric if k.split(",")[0] in ("exact_match", "acc")]
    name = preferred[0] if preferred else sorted(numeric)[0]
    base, _, flt = name.partition(",")
    stderr = metrics.get(f"{base}_stderr,{flt}" if flt else f"{base}_stderr")
    n_samples = results.get("n-samples", {}).get(task, {})
    n = int(n_samples.get("effective", n_samples.get("original", 0)) or 0)
    items = _lm_eval_items(results.get("samples", {}).get(task), base, flt)
    if items is not None and len(items) != n:
        items = None  # not the samples the score counts: no pairing rather than a wrong one
    return LmEvalScore(
        name, numeric[name], float(stderr) if isinstance(stderr, (int, float)) else None, n, items
    )


def _lm_eval_items(samples: Any, metric: str, flt: str) -> tuple[ItemOutcome, ...] | None:
    """Each logged sample's outcome on ``metric`` under filter ``flt`` (lm-eval's
    ``log_samples``: one entry per document and filter, the metric's value under its name)."""
    if not isinstance(samples, list):
        return None
    scored = []
    for sample in samples:
        if not isinstance(sample, dict) or (flt and sample.get("filter", flt) != flt):
            continue
        value = sample.get(metric)
        if not isinstance(value, (bool, int, float)) or value not in (0, 1):
            return None  # not a right-or-wrong metric: no items
        scored.append((item_id(sample.get("doc_id"), sample.get("doc_hash", "")), value == 1))
    return item_outcomes(scored) if scored else None


def dump_result(result: AccuracyResult) -> str:
    return json.dumps(result.model_dump(mode="json"))
