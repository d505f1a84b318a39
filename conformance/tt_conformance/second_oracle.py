"""The plugin mutation campaign's second oracle, as recorded (reports/mutation/second-oracle.json).

tools/run_plugin_mutation.py --second-oracle serves each mutant the unit tests did not kill
(survivors, and every one claimed equivalent) through the emulated suite and its gate, and merges
the verdicts here. The record only judges what the main record (plugin.json) lists, so it is read
against it and refused, naming the field, when:
- its commit is not the main record's, or its total of not-killed mutants is not the number the
  main record lists (a "3 of 3" coverage claim over a campaign that let 111 through);
- an entry is not one of the main record's not-killed mutants with the same module and the same
  first-oracle status, or a mutant appears twice;
- a verdict carries no evidence of its own kind (killed: failing checks, or the gate's regression
  verdict with its exit status 1; not killed: none and exit status 0; unjudged: none and a reason);
- a count is not its entries', a date is before the campaign or after today (entries: after the
  record's), or a run's seconds are not a positive time under a day.
A mutant the main record claims equivalent and this oracle kills is a wrong equivalence: counted
from the main record's claim, whatever the entry says, and shown loudly on the pages.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

__all__ = [
    "GATE_REGRESSION",
    "ORACLE",
    "SCHEMA",
    "VERDICTS",
    "Campaign",
    "NotKilled",
    "SecondOracleError",
    "SecondOracleRecord",
    "load_second_oracle",
    "parse_second_oracle",
]

SCHEMA = 1
ORACLE = "emulated suite + gate"
VERDICTS = ("killed", "not killed", "unjudged")
FIRST_ORACLE = ("equivalent", "survived", "no test", "timeout", "unjudged")
# The gate's verdict line for a regression (tt_conformance/formats/text.py, render_gate).
GATE_REGRESSION = re.compile(r"tt-conformance gate: REGRESSION \(\d+ found\)")
MAX_SECONDS = 86_400.0  # one served run; the suite's own timeout is far below a day
_COMMIT = re.compile(r"[0-9a-f]{40}")


class SecondOracleError(ValueError):
    """The second oracle's record is malformed or contradicts itself or the main record."""


@dataclass(frozen=True)
class NotKilled:
    """One mutant the main record's unit tests did not kill."""

    mutant: str
    module: str
    first_oracle: str  # "equivalent" when claimed, else the record's status


@dataclass(frozen=True)
class Campaign:
    """What the main record says the second oracle may judge."""

    date: str
    plugin_commit: str
    not_killed: tuple[NotKilled, ...]


@dataclass(frozen=True)
class SecondOracleRecord:
    date: str
    plugin_commit: str
    candidates: int  # mutants the unit tests did not kill in the main record
    served: int
    killed: int
    not_killed: int
    unjudged: int
    wrong_equivalences: tuple[str, ...]  # claimed equivalent in the main record, killed here

    def summary(self) -> str:
        """One line for the pages: an unjudged run is served but not judged."""
        judged = self.killed + self.not_killed
        text = (
            f"Second oracle (emulated suite + gate), of the {self.candidates} mutants the unit "
            f"tests did not kill: {judged} judged ({self.killed} killed, {self.not_killed} not "
            f"killed), {self.unjudged} unjudged, {self.candidates - self.served} not yet served "
            f"({self.date})"
        )
        if self.wrong_equivalences:
            names = ", ".join(name.rpartition(".")[2] for name in self.wrong_equivalences[:3])
            more = ", ..." if len(self.wrong_equivalences) > 3 else ""
            text += (
                f"; WRONG EQUIVALENCE: {len(self.wrong_equivalences)} mutant(s) the mutation "
                f"record claims equivalent were killed ({names}{more})"
            )
        return text


def _int(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SecondOracleError(f"'{name}' must be a count, got {value!r}")
    return value


def _date(raw: Any, where: str, earliest: date, latest: date, latest_is: str) -> date:
    try:
        when = date.fromisoformat(str(raw))
    except ValueError:
        raise SecondOracleError(f"{where}'date' is not an ISO date: {raw!r}") from None
    if when > latest:
        raise SecondOracleError(f"{where}'date' ({raw}) is after {latest_is} ({latest})")
    if when < earliest:
        raise SecondOracleError(
            f"{where}'date' ({raw}) is before the mutation campaign it judges ({earliest})"
        )
    return when


def _texts(entry: Mapping[str, Any], name: str, where: str) -> list[str]:
    value = entry.get(name)
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise SecondOracleError(f"{where}'{name}' must be a list of non-empty lines")
    return value


def _evidence(entry: Mapping[str, Any], verdict: str, where: str) -> None:
    """A verdict stands on evidence of its own kind, and only on that."""
    killed_by, gate = _texts(entry, "killed_by", where), _texts(entry, "gate", where)
    status, note = entry.get("exit_status"), entry.get("note")
    if status is not None and (not isinstance(status, int) or isinstance(status, bool)):
        raise SecondOracleError(f"{where}'exit_status' must be an integer or null: {status!r}")
    if verdict == "killed":
        by_gate = status == 1 and any(GATE_REGRESSION.fullmatch(line) for line in gate)
        if not killed_by and not by_gate:
            raise SecondOracleError(
                f"{where}a killed mutant names no failing check and no gate regression (the "
                "gate's 'REGRESSION (n found)' line with exit status 1)"
            )
    elif killed_by or gate:
        raise SecondOracleError(f"{where}a {verdict} mutant names failing checks or gate lines")
    elif verdict == "not killed" and status != 0:
        raise SecondOracleError(f"{where}a not killed mutant's run exited {status!r}, not 0")
    elif verdict == "unjudged" and not (isinstance(note, str) and note.strip()):
        raise SecondOracleError(f"{where}an unjudged mutant gives no reason ('note')")


def _entry(
    entry: Any, where: str, expected: Mapping[str, NotKilled], earliest: date, latest: date
) -> tuple[str, str]:
    """One entry checked against the main record's; its verdict and mutant."""
    if not isinstance(entry, dict) or not isinstance(entry.get("mutant"), str):
        raise SecondOracleError(f"{where}must be an object naming its 'mutant'")
    listed = expected.get(entry["mutant"])
    if listed is None:
        raise SecondOracleError(
            f"{where}{entry['mutant']!r} is not one of the mutation record's not-killed mutants"
        )
    if entry.get("module") != listed.module:
        raise SecondOracleError(
            f"{where}'module' {entry.get('module')!r} is not the mutation record's "
            f"({listed.module!r})"
        )
    first = entry.get("first_oracle")
    if first not in FIRST_ORACLE or first != listed.first_oracle:
        raise SecondOracleError(
            f"{where}'first_oracle' {first!r} is not the mutation record's "
            f"({listed.first_oracle!r})"
        )
    verdict = entry.get("verdict")
    if verdict not in VERDICTS:
        raise SecondOracleError(f"{where}'verdict' {verdict!r} is not one of {VERDICTS}")
    _evidence(entry, verdict, where)
    seconds = entry.get("seconds")
    if (
        not isinstance(seconds, int | float)
        or isinstance(seconds, bool)
        or not math.isfinite(seconds)  # NaN compares false to every bound
        or not 0 < seconds < MAX_SECONDS
    ):
        raise SecondOracleError(f"{where}'seconds' must be a time above 0 under a day: {seconds!r}")
    _date(entry.get("date"), where, earliest, latest, "the record's date")
    return verdict, listed.first_oracle


def parse_second_oracle(
    data: Any, campaign: Campaign, today: date | None = None
) -> SecondOracleRecord:
    """The record from its JSON, checked against the main record ``campaign``."""
    if not isinstance(data, dict):
        raise SecondOracleError("the record must be a JSON object")
    if data.get("schema") != SCHEMA or data.get("oracle") != ORACLE:
        raise SecondOracleError(f"'schema' must be {SCHEMA} and 'oracle' {ORACLE!r}")
    earliest = date.fromisoformat(campaign.date)
    raw = data.get("date")
    now = today or datetime.now(timezone.utc).date()
    when = _date(raw, "", earliest, now, "today")
    commit = data.get("plugin_commit")
    if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):
        raise SecondOracleError(f"'plugin_commit' is not a 40-digit git commit: {commit!r}")
    if commit != campaign.plugin_commit:
        raise SecondOracleError(
            f"'plugin_commit' {commit[:12]} is not the mutation record's "
            f"({campaign.plugin_commit[:12]})"
        )
    candidates = _int(data, "not_killed_by_unit_tests")
    if candidates != len(campaign.not_killed):
        raise SecondOracleError(
            f"'not_killed_by_unit_tests' ({candidates}) is not the number of not-killed mutants "
            f"the mutation record lists ({len(campaign.not_killed)})"
        )
    entries = data.get("mutants")
    if not isinstance(entries, list):
        raise SecondOracleError("'mutants' must be a list")
    expected = {listed.mutant: listed for listed in campaign.not_killed}
    tally = dict.fromkeys(VERDICTS, 0)
    wrong: list[str] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"mutants[{index}]: "
        verdict, first = _entry(entry, where, expected, earliest, when)
        if entry["mutant"] in seen:
            raise SecondOracleError(f"{where}{entry['mutant']} appears twice")
        seen.add(entry["mutant"])
        tally[verdict] += 1
        if first == "equivalent" and verdict == "killed":
            wrong.append(entry["mutant"])
    _counts_agree(data, len(entries), tally, wrong)
    return SecondOracleRecord(
        str(raw), commit, candidates, len(entries), tally["killed"], tally["not killed"],
        tally["unjudged"], tuple(wrong),
    )  # fmt: skip


def _counts_agree(
    data: Mapping[str, Any], served: int, tally: Mapping[str, int], wrong: Sequence[str]
) -> None:
    counts = {name: _int(data, name) for name in ("served", *VERDICTS, "wrong equivalences")}
    expected = {"served": served, **tally, "wrong equivalences": len(wrong)}
    for name, value in expected.items():
        if counts[name] != value:
            raise SecondOracleError(f"'{name}' ({counts[name]}) is not its entries' ({value})")


def load_second_oracle(
    path: Path, campaign: Campaign, today: date | None = None
) -> SecondOracleRecord | None:
    """The record at ``path``, or None when the second oracle never ran (no file)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return parse_second_oracle(data, campaign, today)
    except (OSError, json.JSONDecodeError, SecondOracleError) as exc:
        raise SecondOracleError(f"{path}: {exc}") from None
