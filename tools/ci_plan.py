"""CI's plan (`.ci/plan.json`): the steps, what each needs, the cores it keeps busy, its budget;
read, checked and re-recorded here, run by tools/ci_run.py.

Every number must be finite (JSON's NaN and Infinity would switch a budget off) and every step
name a plain word (it names a bash function and a log file), so a plan either runs as written or
is refused with the step and field named (exit 2 in ci_run).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")  # `-` maps to `_` in steps.sh; no `_` to collide
PLAN_FIELDS = {"cores", "total_budget_s", "margin", "steps"}
MARGIN_FIELDS = {"ratio", "min_s"}
STEP_FIELDS = {"name", "budget_s", "cpu", "needs", "junit", "why"}


class PlanError(ValueError):
    """The plan (or a times file) cannot be used as written; the message names what is wrong."""


@dataclass(frozen=True)
class Margin:
    ratio: float
    min_s: float

    def allowance(self, budget_s: float) -> float:
        """How long a step with this budget may take before the run fails."""
        return budget_s + max(self.ratio * budget_s, self.min_s)


@dataclass(frozen=True)
class Step:
    name: str
    budget_s: float
    cpu: int = 1
    needs: tuple[str, ...] = ()
    junit: tuple[str, ...] = ()  # glob patterns, relative to the repository
    why: str = ""


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    margin: Margin
    total_budget_s: float
    cores: int
    repo: Path  # the tree the steps run in: the plan's .ci/ folder's parent
    script: Path

    def step(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise PlanError(f"no step named {name!r} in the plan")


def _unknown(raw: dict[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(raw) - known)
    if extra:
        raise PlanError(f"{where}: unknown field(s) {extra}; known: {sorted(known)}")


def _number(
    raw: dict[str, Any], key: str, where: str, minimum: float = 0.0, maximum: float = math.inf
) -> float:
    value = raw.get(key)
    number = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            number = math.inf
    if not (math.isfinite(number) and minimum <= number <= maximum):
        bound = f" and <= {maximum:g}" if math.isfinite(maximum) else ""
        raise PlanError(
            f"{where}: {key!r} must be a finite number >= {minimum:g}{bound}, got {value!r}"
        )
    return number


def _integer(raw: dict[str, Any], key: str, where: str, lo: int, hi: int, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise PlanError(f"{where}: {key!r} must be an integer from {lo} to {hi}, got {value!r}")
    return value


def _names(raw: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PlanError(f"{where}: {key!r} must be a list of non-empty strings, got {value!r}")
    return tuple(value)


def parse_plan(data: Any, repo: Path) -> Plan:
    """A plan from its JSON form, refused with the offending step and field named."""
    if not isinstance(data, dict):
        raise PlanError("the plan must be a JSON object")
    _unknown(data, PLAN_FIELDS, "plan")
    margin_raw = data.get("margin")
    if not isinstance(margin_raw, dict):
        raise PlanError("'margin' must be an object with 'ratio' and 'min_s'")
    _unknown(margin_raw, MARGIN_FIELDS, "margin")
    margin = Margin(_number(margin_raw, "ratio", "margin"), _number(margin_raw, "min_s", "margin"))
    cores = _integer(data, "cores", "plan", 1, 1024, default=0)
    total = _number(data, "total_budget_s", "plan", minimum=1)
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise PlanError("'steps' must be a non-empty list")
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise PlanError(
                f"steps[{i}]: 'name' must match {NAME_RE.pattern} (a bash function and a log "
                f"file are named after it), got {name!r}"
            )
        assert isinstance(raw, dict)
        where = f"step {name!r}"
        _unknown(raw, STEP_FIELDS, where)
        steps.append(
            Step(
                name=name,
                budget_s=_number(raw, "budget_s", where, minimum=1, maximum=total),
                cpu=_integer(raw, "cpu", where, 0, cores, default=1),
                needs=_names(raw, "needs", where),
                junit=_names(raw, "junit", where),
                why=str(raw.get("why", "")),
            )
        )
    names = [s.name for s in steps]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PlanError(f"step names must be unique: {dupes}")
    for step in steps:
        for need in step.needs:
            if need not in names:
                raise PlanError(f"step {step.name!r} needs {need!r}, which is not a step")
            if names.index(need) >= names.index(step.name):
                raise PlanError(
                    f"step {step.name!r} needs {need!r}, which is not listed before it: list "
                    "steps in an order that runs (this also rules out cycles)"
                )
    return Plan(tuple(steps), margin, total, cores, repo, repo / ".ci" / "steps.sh")


def load_plan(path: Path) -> Plan:
    """The plan at PATH; its steps run in the tree that holds it (PATH is <tree>/.ci/*.json)."""
    path = path.resolve()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PlanError(f"cannot read the plan {path}: {exc}") from exc
    return parse_plan(data, path.parent.parent)


def select(plan: Plan, only: Sequence[str]) -> Plan:
    """The named steps and everything they need (for a local run of part of CI)."""
    if not only:
        return plan
    wanted: set[str] = set()
    todo = list(only)
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend(plan.step(name).needs)
    return replace(plan, steps=tuple(s for s in plan.steps if s.name in wanted))


def record(plan_path: Path, times_path: Path) -> list[str]:
    """Rewrite the plan's budgets from a ci-times.json of a whole, passing run of this plan;
    returns the changed lines. Anything else is refused (a failed run's times, another plan's,
    a partial run's, numbers that are not finite or exceed the total)."""
    plan = load_plan(plan_path)
    try:
        times = json.loads(times_path.read_text())
        steps = {s["name"]: s for s in times["steps"]}
        verdict = times["verdict"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PlanError(f"cannot read the times file {times_path}: {exc!r}") from exc
    if verdict != "passed":
        raise PlanError(
            f"{times_path}: that run's verdict is {verdict!r}; record only a passing run"
        )
    ours = {s.name for s in plan.steps}
    if set(steps) != ours:
        missing, extra = sorted(ours - set(steps)), sorted(set(steps) - ours)
        raise PlanError(
            f"{times_path} is not a whole run of this plan: missing {missing}, extra {extra}"
        )
    data = json.loads(Path(plan_path).read_text())
    changes = []
    for raw in data["steps"]:
        got = steps[raw["name"]]
        seconds = _number(got, "seconds", f"times of {raw['name']!r}", 0, plan.total_budget_s)
        budget = min(max(10, math.ceil(seconds / 10.0) * 10), int(plan.total_budget_s))
        if budget != raw["budget_s"]:
            changes.append(f"{raw['name']}: {raw['budget_s']} -> {budget} s")
            raw["budget_s"] = budget
    Path(plan_path).write_text(json.dumps(data, indent=1) + "\n")
    return changes
