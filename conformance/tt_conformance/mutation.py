"""The plugin-side mutation score the matrix and the site publish (reports/mutation/plugin.json).

tools/run_plugin_mutation.py writes the file after a full campaign (`tox -e mutation`): per
concern of the plugin's decision code, how many mutants the unit tests killed. A green matrix
row is worth as much as the tests behind it; this is the figure that says how much. The file is
read here and refused, naming the field, when it is malformed or its figures do not add up
(killed above total, a score that is not killed / (total - equivalent), modules other than the
targets, counts that are not the listed not-killed mutants, a date in the future, a commit outside
the repository's history): the pages then say that no campaign is recorded, never a figure of
their own. A record whose targets or oracles changed since its commit is shown as stale.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from tt_conformance import committed
from tt_conformance.second_oracle import SecondOracleError, load_second_oracle

__all__ = [
    "COUNT_FIELDS",
    "MUTATION_CONCERNS",
    "MUTATION_TARGETS",
    "NO_CAMPAIGN",
    "ConcernScore",
    "MutationRecord",
    "MutationRecordError",
    "PublishedScore",
    "floor_percent",
    "load_mutation_record",
    "parse_mutation_record",
    "published_score",
]

# The campaign's targets, the one list both read: tools/run_plugin_mutation.py mutates each
# module (a path under plugin/vllm_tt_plugin/) judged by its unit test files (the oracle), and a
# record is refused unless its modules are exactly these.
MUTATION_TARGETS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("policy/sampling_route.py", "sampling route", ("tests/unit/test_sampling_route.py",)),
    ("policy/device_logprobs.py", "sampling route", ("tests/unit/test_sampling_route.py",)),
    ("policy/step_policy.py", "step policy", ("tests/unit/test_step_policy.py",)),
    ("contract/reload_contract.py", "reload planning", ("tests/unit/test_reload_contract.py",)),
    (
        "contract/call_plan.py",
        "call planning",
        (
            "tests/unit/test_call_plan.py",
            "tests/unit/test_adapter_signature_binding.py",
            "tests/unit/test_warmup_forms.py",
            "tests/unit/test_model_adapter.py",
            "tests/unit/test_contract_parity_checker.py",
        ),
    ),
    (
        "input_batch.py",
        "slot / lane mapping",
        (
            "tests/unit/test_input_batch.py",
            "tests/unit/test_step_rows.py",
            "tests/unit/test_seeding_convention.py",
            "tests/unit/test_host_sampler.py",
        ),
    ),
    ("step/decode_inputs.py", "slot / lane mapping", ("tests/unit/test_decode_inputs.py",)),
    # Block-output requests: refused fields and the length admission (max_tokens per canvas).
    ("policy/block_output.py", "request validation", ("tests/unit/test_block_output.py",)),
)
# The decision concerns the campaign mutates, in the targets' order.
MUTATION_CONCERNS = tuple(dict.fromkeys(concern for _, concern, _ in MUTATION_TARGETS))
_TARGET_CONCERN = {module: concern for module, concern, _ in MUTATION_TARGETS}
# Every mutant is exactly one of these; total is their sum.
COUNT_FIELDS = ("killed", "survived", "equivalent", "timeout", "unjudged")
_COMMIT = re.compile(r"[0-9a-f]{40}")
# The driver's verdicts of a mutant the tests let through ("no test": none reaches it).
_SURVIVING = ("survived", "no test")


class MutationRecordError(ValueError):
    """The published mutation record is malformed or its figures contradict each other."""


@dataclass(frozen=True)
class ConcernScore:
    concern: str
    total: int
    killed: int
    survived: int
    equivalent: int
    timeout: int
    unjudged: int
    score: float | None  # killed / (total - equivalent); None when every mutant is equivalent

    @property
    def judged(self) -> int:
        return self.total - self.equivalent

    @property
    def percent(self) -> str:
        return f"{floor_percent(self.killed, self.judged)} %"


def floor_percent(killed: int, judged: int) -> str:
    """killed / judged in percent to 0.1, rounded down: a survivor never shows as 100.0."""
    tenths = killed * 1000 // judged
    return f"{tenths // 10}.{tenths % 10}"


@dataclass(frozen=True)
class MutationRecord:
    date: str
    plugin_commit: str
    tool: str
    oracle: str
    concerns: tuple[ConcernScore, ...]


def _field(data: Mapping[str, Any], name: str, kind: type, where: str) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise MutationRecordError(f"{where}'{name}' must be a {kind.__name__}, got {value!r}")
    return value


def _counts(data: Mapping[str, Any], where: str) -> dict[str, int]:
    counts = {name: _field(data, name, int, where) for name in ("total", *COUNT_FIELDS)}
    for name, value in counts.items():
        if value < 0:
            raise MutationRecordError(f"{where}'{name}' is negative: {value}")
    if counts["killed"] > counts["total"]:
        raise MutationRecordError(
            f"{where}'killed' ({counts['killed']}) exceeds 'total' ({counts['total']})"
        )
    parts = sum(counts[name] for name in COUNT_FIELDS)
    if parts != counts["total"]:
        raise MutationRecordError(
            f"{where}'total' ({counts['total']}) is not the sum of {', '.join(COUNT_FIELDS)} "
            f"({parts})"
        )
    return counts


def _score(data: Mapping[str, Any], counts: Mapping[str, int], where: str) -> float | None:
    judged = counts["total"] - counts["equivalent"]
    expected = round(counts["killed"] / judged, 4) if judged else None
    score = data.get("score")
    if expected is None:
        if score is not None:
            raise MutationRecordError(f"{where}'score' must be null: every mutant is equivalent")
        return None
    if (
        isinstance(score, bool)
        or not isinstance(score, int | float)
        or not math.isfinite(score)  # NaN compares false to every bound
        or abs(score - expected) > 1e-4
    ):
        raise MutationRecordError(
            f"{where}'score' ({score!r}) is not killed / (total - equivalent) = {expected}"
        )
    return expected


def parse_mutation_record(data: Any, today: date | None = None) -> MutationRecord:
    """The record from the file's JSON; MutationRecordError names the first bad field."""
    if not isinstance(data, dict):
        raise MutationRecordError("the record must be a JSON object")
    if data.get("schema") != 1:
        raise MutationRecordError(f"'schema' must be 1, got {data.get('schema')!r}")
    if data.get("campaign") != "full":
        raise MutationRecordError(
            f"'campaign' must be 'full' (a sample is not the record), got {data.get('campaign')!r}"
        )
    raw_date = _field(data, "date", str, "")
    try:
        when = date.fromisoformat(raw_date)
    except ValueError:
        raise MutationRecordError(f"'date' is not an ISO date: {raw_date!r}") from None
    now = today or datetime.now(timezone.utc).date()
    if when > now:
        raise MutationRecordError(f"'date' ({raw_date}) is in the future (today is {now})")
    commit = _field(data, "plugin_commit", str, "")
    if not _COMMIT.fullmatch(commit):
        raise MutationRecordError(f"'plugin_commit' is not a 40-digit git commit: {commit!r}")
    if _field(data, "tree_clean", bool, "") is not True:  # plugin/ or tests/ edited: not HEAD
        raise MutationRecordError("'tree_clean' is false: the campaign ran on an uncommitted tree")
    tool = _field(data, "tool", str, "")
    oracle = _field(data, "oracle", str, "")
    concerns = []
    seen: set[str] = set()
    for index, entry in enumerate(_field(data, "concerns", list, "")):
        if not isinstance(entry, dict):
            raise MutationRecordError(f"concerns[{index}] must be an object")
        name = _field(entry, "concern", str, f"concerns[{index}].")
        where = f"concern '{name}': "
        if name not in MUTATION_CONCERNS:
            raise MutationRecordError(
                f"concerns[{index}].'concern' {name!r} is unknown; known: "
                f"{', '.join(MUTATION_CONCERNS)}"
            )
        if name in seen:
            raise MutationRecordError(f"concerns[{index}].'concern' {name!r} appears twice")
        seen.add(name)
        counts = _counts(entry, where)
        concerns.append(ConcernScore(name, **counts, score=_score(entry, counts, where)))
    absent = [name for name in MUTATION_CONCERNS if name not in seen]
    if absent:
        raise MutationRecordError(f"'concerns' lacks {', '.join(absent)}")
    modules = _check_modules(data, {c.concern: c for c in concerns})
    _check_not_killed(data, modules)
    return MutationRecord(raw_date, commit, tool, oracle, tuple(concerns))


def _check_modules(
    data: Mapping[str, Any], concerns: Mapping[str, ConcernScore]
) -> dict[str, dict[str, int]]:
    """Each concern's counts are the sums of its modules' (a hand-edited total is caught); the
    counts per module."""
    sums: dict[str, dict[str, int]] = {}
    by_module: dict[str, dict[str, int]] = {}
    for index, entry in enumerate(_field(data, "modules", list, "")):
        if not isinstance(entry, dict):
            raise MutationRecordError(f"modules[{index}] must be an object")
        name = _field(entry, "concern", str, f"modules[{index}].")
        if name not in concerns:
            raise MutationRecordError(f"modules[{index}].'concern' {name!r} has no concern entry")
        counts = _counts(entry, f"modules[{index}].")
        _score(entry, counts, f"modules[{index}].")
        module = _field(entry, "module", str, f"modules[{index}].")
        if _TARGET_CONCERN.get(module) != name:
            raise MutationRecordError(
                f"modules[{index}].'module' {module!r} is not a target of concern {name!r}"
            )
        if module in by_module:
            raise MutationRecordError(f"modules[{index}].'module' {module!r} appears twice")
        tests = entry.get("tests")
        if (
            not isinstance(tests, list)
            or not tests
            or not all(isinstance(test, str) and test for test in tests)
        ):
            raise MutationRecordError(
                f"modules[{index}].'tests' must list the oracle's test files, got {tests!r}"
            )
        by_module[module] = counts
        total = sums.setdefault(name, dict.fromkeys(("total", *COUNT_FIELDS), 0))
        for key, value in counts.items():
            total[key] += value
    missing = [module for module in _TARGET_CONCERN if module not in by_module]
    if missing:  # a full campaign judges every target
        raise MutationRecordError(f"'modules' lacks the targets {', '.join(missing)}")
    for name, concern in concerns.items():
        got = sums.get(name, {})
        for key in ("total", *COUNT_FIELDS):
            if got.get(key, 0) != getattr(concern, key):
                raise MutationRecordError(
                    f"concern '{name}': '{key}' ({getattr(concern, key)}) is not the sum of its "
                    f"modules ({got.get(key, 0)})"
                )
    return by_module


def _not_killed_status(entry: Any, index: int, modules: Mapping[str, Any]) -> tuple[str, str]:
    """The module and count field one not_killed entry stands for."""
    where = f"not_killed[{index}]."
    if not isinstance(entry, dict):
        raise MutationRecordError(f"not_killed[{index}] must be an object")
    module = _field(entry, "module", str, where)
    if module not in modules:
        raise MutationRecordError(f"{where}'module' {module!r} has no modules entry")
    status = entry.get("status")
    because = entry.get("equivalent_because")
    if because is not None:
        if not isinstance(because, str) or not because.strip():
            raise MutationRecordError(f"{where}'equivalent_because' must be a non-empty reason")
        if status not in _SURVIVING:  # only a mutant the tests let through is shown equivalent
            raise MutationRecordError(f"{where}'status' {status!r} cannot be equivalent")
        return module, "equivalent"
    if status in _SURVIVING:
        return module, "survived"
    if status in ("timeout", "unjudged"):
        return module, str(status)
    raise MutationRecordError(f"{where}'status' {status!r} is not a not-killed status")


def _check_not_killed(data: Mapping[str, Any], modules: Mapping[str, Mapping[str, int]]) -> None:
    """Every mutant not killed is listed: per module, each count but killed is the number of
    not_killed entries of that status (a survivor relabelled equivalent, or a list emptied while
    the counts stay, is caught); each equivalent carries its reason."""
    listed = {module: dict.fromkeys(COUNT_FIELDS[1:], 0) for module in modules}
    for index, entry in enumerate(_field(data, "not_killed", list, "")):
        module, status = _not_killed_status(entry, index, modules)
        listed[module][status] += 1
    for module, counts in modules.items():
        for key, value in listed[module].items():
            if counts[key] != value:
                raise MutationRecordError(
                    f"module '{module}': '{key}' ({counts[key]}) is not the number of not_killed "
                    f"entries that are {key} ({value})"
                )


def load_mutation_record(path: Path, today: date | None = None) -> MutationRecord | None:
    """The record at ``path``, or None when no campaign was recorded (no file)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise MutationRecordError(f"{path}: not readable JSON: {exc}") from None
    try:
        return parse_mutation_record(data, today)
    except MutationRecordError as exc:
        raise MutationRecordError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class PublishedScore:
    """What the pages show: the record, or none with the reason a file present was refused;
    ``stale`` names the target modules and oracle test files changed since its commit."""

    record: MutationRecord | None = None
    refused: str | None = None
    stale: tuple[str, ...] = ()
    # The second oracle's line (second-oracle.json beside the record), or why it was refused.
    second_oracle: str | None = None


NO_CAMPAIGN = PublishedScore()
SECOND_ORACLE = "second-oracle.json"  # beside the record


def published_score(
    path: Path, today: date | None = None, committed_only: bool = False
) -> PublishedScore:
    """The record for the pages; a refused file is shown as no campaign, with why. Its commit
    must be one of the harness repository's history (a made-up or foreign commit measured
    nothing here); ``committed_only``: the file must be the one committed at HEAD, as the
    matrix publishes only committed reports."""
    try:
        record = load_mutation_record(path, today)
    except MutationRecordError as exc:
        return PublishedScore(None, str(exc))
    if record is None:
        return NO_CAMPAIGN
    root = committed.harness_repository()
    state = committed.commit_state(record.plugin_commit, root) if root else "absent"
    if state != "history":
        return PublishedScore(
            None,
            f"{path}: 'plugin_commit' {record.plugin_commit[:12]} is not a commit of the harness "
            f"repository's history ({state})",
        )
    if committed_only:
        try:
            committed.head_file(path)
        except committed.NotCommitted as exc:
            return PublishedScore(None, f"{exc} (pass --include-uncommitted)")
    assert root is not None  # a history commit was found in it
    files = [f"plugin/vllm_tt_plugin/{module}" for module, _, _ in MUTATION_TARGETS]
    files += sorted({test for _, _, tests in MUTATION_TARGETS for test in tests})
    changed = committed.changed_since(record.plugin_commit, files, root)
    stale = ("(git cannot tell)",) if changed is None else changed
    return PublishedScore(record, stale=stale, second_oracle=_second_oracle(path, record, today))


def _second_oracle(path: Path, record: MutationRecord, today: date | None) -> str | None:
    """The second oracle's summary line for the pages; None when it never ran."""
    try:
        second = load_second_oracle(path.with_name(SECOND_ORACLE), record.plugin_commit, today)
    except SecondOracleError as exc:
        return f"Second oracle record refused: {exc}"
    return second.summary() if second else None
