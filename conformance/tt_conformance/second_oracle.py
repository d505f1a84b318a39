"""The plugin mutation campaign's second oracle, as recorded (reports/mutation/second-oracle.json).

tools/run_plugin_mutation.py --second-oracle serves each mutant the unit tests did not kill
(survivors, and every one claimed equivalent) through the emulated suite and its gate, and merges
the verdicts here. The record is refused, naming the field, when a count is not its entries',
a verdict or a first-oracle status is unknown, a mutant appears twice, the date is not an ISO
date of the past, or its commit is not the main record's (plugin.json): verdicts of another
commit judged other mutants.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

__all__ = [
    "ORACLE",
    "SCHEMA",
    "VERDICTS",
    "SecondOracleError",
    "SecondOracleRecord",
    "load_second_oracle",
    "parse_second_oracle",
]

SCHEMA = 1
ORACLE = "emulated suite + gate"
VERDICTS = ("killed", "not killed", "unjudged")
FIRST_ORACLE = ("equivalent", "survived", "no test", "timeout", "unjudged")
_COMMIT = re.compile(r"[0-9a-f]{40}")


class SecondOracleError(ValueError):
    """The second oracle's record is malformed or contradicts itself or the main record."""


@dataclass(frozen=True)
class SecondOracleRecord:
    date: str
    plugin_commit: str
    candidates: int  # mutants the unit tests did not kill in the main record
    served: int
    killed: int
    not_killed: int
    unjudged: int
    wrong_equivalences: int  # claimed equivalent, killed here

    def summary(self) -> str:
        """One line for the pages."""
        text = (
            f"Second oracle (emulated suite + gate): {self.served} of {self.candidates} mutants "
            f"the unit tests did not kill served, {self.killed} killed, {self.not_killed} not "
            f"killed, {self.unjudged} unjudged ({self.date})"
        )
        if self.wrong_equivalences:
            text += f"; {self.wrong_equivalences} WRONG equivalence claim(s)"
        return text


def _int(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SecondOracleError(f"'{name}' must be a count, got {value!r}")
    return value


def parse_second_oracle(
    data: Any, plugin_commit: str, today: date | None = None
) -> SecondOracleRecord:
    """The record from its JSON, checked against the main record's ``plugin_commit``."""
    if not isinstance(data, dict):
        raise SecondOracleError("the record must be a JSON object")
    if data.get("schema") != SCHEMA or data.get("oracle") != ORACLE:
        raise SecondOracleError(f"'schema' must be {SCHEMA} and 'oracle' {ORACLE!r}")
    raw = data.get("date")
    try:
        when = date.fromisoformat(str(raw))
    except ValueError:
        raise SecondOracleError(f"'date' is not an ISO date: {raw!r}") from None
    if when > (today or datetime.now(timezone.utc).date()):
        raise SecondOracleError(f"'date' ({raw}) is in the future")
    commit = data.get("plugin_commit")
    if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):
        raise SecondOracleError(f"'plugin_commit' is not a 40-digit git commit: {commit!r}")
    if commit != plugin_commit:
        raise SecondOracleError(
            f"'plugin_commit' {commit[:12]} is not the mutation record's ({plugin_commit[:12]})"
        )
    entries = data.get("mutants")
    if not isinstance(entries, list):
        raise SecondOracleError("'mutants' must be a list")
    tally = dict.fromkeys(VERDICTS, 0)
    wrong = 0
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"mutants[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("mutant"), str):
            raise SecondOracleError(f"{where} must be an object naming its 'mutant'")
        if entry["mutant"] in seen:
            raise SecondOracleError(f"{where}: {entry['mutant']} appears twice")
        seen.add(entry["mutant"])
        verdict, first = entry.get("verdict"), entry.get("first_oracle")
        if verdict not in VERDICTS or first not in FIRST_ORACLE:
            raise SecondOracleError(
                f"{where}: 'verdict' {verdict!r} or 'first_oracle' {first!r} is unknown"
            )
        killed_by, gate = entry.get("killed_by"), entry.get("gate")
        if not isinstance(killed_by, list) or not isinstance(gate, list):
            raise SecondOracleError(f"{where}: 'killed_by' and 'gate' must be lists")
        if verdict != "killed" and (killed_by or gate):
            raise SecondOracleError(f"{where}: a {verdict} mutant names failing checks")
        tally[verdict] += 1
        wrong += first == "equivalent" and verdict == "killed"
    counts = {name: _int(data, name) for name in ("served", *VERDICTS, "wrong equivalences")}
    expected = {"served": len(entries), **tally, "wrong equivalences": wrong}
    for name, value in expected.items():
        if counts[name] != value:
            raise SecondOracleError(f"'{name}' ({counts[name]}) is not its entries' ({value})")
    candidates = _int(data, "not_killed_by_unit_tests")
    if len(entries) > candidates:
        raise SecondOracleError(
            f"{len(entries)} mutants served, only {candidates} not killed by the unit tests"
        )
    return SecondOracleRecord(
        str(raw), commit, candidates, len(entries), tally["killed"], tally["not killed"],
        tally["unjudged"], wrong,
    )  # fmt: skip


def load_second_oracle(
    path: Path, plugin_commit: str, today: date | None = None
) -> SecondOracleRecord | None:
    """The record at ``path``, or None when the second oracle never ran (no file)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return parse_second_oracle(data, plugin_commit, today)
    except (OSError, json.JSONDecodeError, SecondOracleError) as exc:
        raise SecondOracleError(f"{path}: {exc}") from None
