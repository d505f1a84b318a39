"""The plugin mutation campaign's second oracle: the emulated suite and its gate, one mutant at a
time, over every mutant the unit tests did not kill (`run_plugin_mutation.py --second-oracle`).

The unit suite is the first oracle. A mutant it lets through is either claimed equivalent
(reports/mutation/equivalent-mutants.json: a judgment) or a survivor; both are served here:

1. the mutants of the last full record (reports/mutation/plugin.json, its ``not_killed``) that
   have no verdict yet (``--limit N``: the next N), or the ones named, are regenerated with
   mutmut (generation only, no tests) in a scratch tree under .mutation/second-oracle/<target>/,
   and each regenerated mutant's change must be the record's (else the source moved since the
   record: run the campaign again);
2. tools/run_emu_conformance.py (the driver of `tox -e emu`: the same server, suite and gate)
   runs with the mutmut env's interpreter, the mutated tree first on PYTHONPATH and
   ``MUTANT_UNDER_TEST=<mutant>``: mutmut 3.8.1's trampolines read that variable in every
   process (mutmut/mutation/trampoline.py, get_mutant_under_test), so the vLLM server and its
   engine processes run the mutant. A preflight checks, with the same environment, that the
   target module imports from the mutated tree and sees the mutant as active;
3. the run is judged like a model-side mutant (tools/run_mutants.py):
   - killed: a check that passes in the baseline fails, or the gate found a regression (exit 1);
   - not killed: the suite and the gate passed;
   - unjudged: no report (the server never came up), or the run ended without a verdict (the
     gate refusing its input, a suite timeout). Never a kill.

A mutant claimed equivalent that this oracle kills is a wrong claim: the run says so and exits 1
(remove the claim and add the unit test that kills it). Exit 2 when a mutant stayed unjudged,
else 0. Verdicts are merged into reports/mutation/second-oracle.json (per mutant: verdict, the
failing checks or gate lines, seconds), a record of the same plugin commit as plugin.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))

import run_plugin_mutation as campaign  # noqa: E402
from run_emu_conformance import DEVICE  # noqa: E402
from run_mutants import MODEL, failing_checks  # noqa: E402

from tt_conformance.history import run_files  # noqa: E402
from tt_conformance.second_oracle import ORACLE, SCHEMA  # noqa: E402

RECORD = REPO / "reports" / "mutation" / "second-oracle.json"
SCRATCH = campaign.SCRATCH / "second-oracle"
GATE_PREFIX = "tt-conformance gate"  # its verdict ("... gate: REGRESSION (2 found)") or refusal
GATE_LINE = 240  # characters kept of a gate line (a regression quotes the tokens it compared)


@dataclass(frozen=True)
class Candidate:
    """One mutant the unit tests did not kill, as the record lists it."""

    mutant: str
    module: str
    first_oracle: str  # equivalent, survived, no test, timeout, unjudged
    change: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    mutant: str
    module: str
    first_oracle: str
    verdict: str  # killed | not killed | unjudged
    killed_by: tuple[str, ...]  # checks failing here that pass in the baseline
    gate: tuple[str, ...]  # the gate's regression lines
    exit_status: int | None
    seconds: float
    note: str = ""

    @property
    def wrong_equivalence(self) -> bool:
        return self.first_oracle == "equivalent" and self.verdict == "killed"


def candidates(record: Mapping[str, Any]) -> list[Candidate]:
    """Every mutant the record's unit oracle did not kill, equivalents included."""
    found = []
    for entry in record.get("not_killed", []):
        first = "equivalent" if entry.get("equivalent_because") else str(entry["status"])
        change = tuple(campaign.change_of(str(entry.get("diff", ""))))
        found.append(Candidate(str(entry["mutant"]), str(entry["module"]), first, change))
    return found


def choose(found: Sequence[Candidate], names: Sequence[str], limit: int | None) -> list[Candidate]:
    """The named candidates (an unknown name is an error), else all; at most ``limit``."""
    if names:
        by_name = {c.mutant: c for c in found}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise SystemExit(f"--mutant {unknown[0]!r} is not a not-killed mutant of the record")
        found = [by_name[n] for n in names]
    return list(found[:limit] if limit is not None else found)


def pending(
    found: Sequence[Candidate], previous: Mapping[str, Any] | None, commit: str
) -> list[Candidate]:
    """The candidates the record of this commit has no verdict for yet (an unjudged run is served
    again): successive ``--limit`` runs work through the list."""
    if not previous or previous.get("plugin_commit") != commit:
        return list(found)
    done = {v["mutant"] for v in previous.get("mutants", []) if v.get("verdict") != "unjudged"}
    return [c for c in found if c.mutant not in done]


def judge(
    candidate: Candidate,
    rc: int | None,
    report: Path | None,
    baseline: Path,
    gate_lines: Sequence[str],
    seconds: float,
) -> Verdict:
    """One served mutant's verdict from the driver's exit status and report."""

    def verdict(status: str, killed_by: Sequence[str] = (), note: str = "") -> Verdict:
        gate = tuple(gate_lines) if status == "killed" else ()
        return Verdict(
            candidate.mutant, candidate.module, candidate.first_oracle, status,
            tuple(killed_by), gate, rc, round(seconds, 1), note,
        )  # fmt: skip

    if report is None:
        return verdict("unjudged", note=f"no report written (exit {rc}): the server never served")
    failing = failing_checks(report, baseline)
    if failing:
        return verdict("killed", failing)
    if rc == 0:
        return verdict("not killed", note="suite and gate passed")
    if rc == 1:  # the gate's regression code: an accuracy or gated-figure regression
        return verdict("killed", note="the gate found a regression with no new failing check")
    return verdict("unjudged", note=f"exit {rc} with no new failing check: the run was not judged")


# --- the mutated tree ----------------------------------------------------------------------

_GENERATE = """
import sys
from mutmut.__main__ import create_mutants
from mutmut.mutation.trampoline import set_mutant_under_test
from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir
set_mutant_under_test("mutant_generation")
copy_src_dir()
copy_also_copy_files()
create_mutants(1)
"""

# Run in the served environment: where the target imports from, and the mutant it sees active.
_PREFLIGHT = """
import importlib, json, sys
from mutmut.mutation.trampoline import get_mutant_under_test
module = importlib.import_module(sys.argv[1])
print(json.dumps({"file": module.__file__, "active": get_mutant_under_test()}))
"""


def generate(target: campaign.Target, bin_dir: Path, root: Path) -> Path:
    """The target's mutants written (not run) into a fresh scratch tree; the tree."""
    work: Path = campaign.prepare(target, root)
    with (root / f"{target.key}.generate.log").open("w") as log:
        subprocess.run(
            [str(bin_dir / "python"), "-c", _GENERATE],
            cwd=work, stdout=log, stderr=subprocess.STDOUT, check=True,
        )  # fmt: skip
    checkout_view(work)
    return work


def checkout_view(work: Path) -> Path:
    """A checkout-shaped tree around the mutated package (``work/served``): the plugin finds the
    bundled checkpoint and the stubs only from ``<checkout>/plugin/vllm_tt_plugin`` (utils/
    checkout.py resolves its own file, so the package is copied, not linked); every other entry
    of the repository is linked in, the git metadata too (the served plugin's commit)."""
    served = work / "served"
    shutil.rmtree(served, ignore_errors=True)
    (served / "plugin").mkdir(parents=True)
    shutil.copytree(work / "mutants" / campaign.PACKAGE, served / "plugin" / campaign.PACKAGE)
    for entry in (REPO / "plugin").iterdir():
        if entry.name != campaign.PACKAGE:
            (served / "plugin" / entry.name).symlink_to(entry)
    for entry in REPO.iterdir():
        if entry.name not in ("plugin", ".mutation", ".tox", "mutants"):
            (served / entry.name).symlink_to(entry)
    return served


def served_env(work: Path, mutant: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the driver, the server and its engine processes inherit: the mutated tree
    before everything (the installed plugin is an editable finder placed after the path), the
    harness and the stubs from this repository, and the mutant to activate."""
    env = dict(os.environ if base is None else base)
    parts = [str(work / "served" / "plugin"), str(REPO / "conformance"), str(REPO / "host_stubs")]
    env["PYTHONPATH"] = os.pathsep.join([*parts, *filter(None, [env.get("PYTHONPATH", "")])])
    env["MUTANT_UNDER_TEST"] = mutant
    env.setdefault("VLLM_PLUGINS", "tt,tt_model_registry")
    return env


def preflight(bin_dir: Path, env: Mapping[str, str], dotted: str, work: Path) -> str | None:
    """Why the mutant would not be active in the served processes; None when it is."""
    proc = subprocess.run(
        [str(bin_dir / "python"), "-c", _PREFLIGHT, dotted],
        cwd=REPO, env=dict(env), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        return f"the target does not import in the served environment: {proc.stderr[-400:]}"
    seen = json.loads(proc.stdout.splitlines()[-1])
    tree = work / "served" / "plugin"
    if not str(seen["file"]).startswith(str(tree)):
        return f"{dotted} imports from {seen['file']}, not the mutated tree {tree}"
    if seen["active"] != env["MUTANT_UNDER_TEST"]:
        return f"the trampolines see {seen['active']!r} active, not the mutant"
    return None


# --- serving -------------------------------------------------------------------------------


def gate_lines(log: Path) -> list[str]:
    """The gate's verdict line and its regressions from the driver's log (at most 8; the gate's
    text format: tt_conformance/formats/text.py)."""
    if not log.is_file():
        return []
    kept: list[str] = []
    inside = False
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(GATE_PREFIX):
            kept.append(line.strip())
        elif line.startswith("Regressions ("):
            inside = True
        elif inside and line.startswith("  - "):
            kept.append(line.strip())
        else:
            inside = False
    return [line if len(line) <= GATE_LINE else line[: GATE_LINE - 1] + "…" for line in kept[:8]]


def serve(
    candidate: Candidate,
    work: Path,
    bin_dir: Path,
    out: Path,
    workers: int,
    timeout: float,
) -> Verdict:
    """Serve the emulated suite with one mutant active and judge the run."""
    where = out / candidate.mutant
    where.mkdir(parents=True, exist_ok=True)
    env = served_env(work, candidate.mutant)
    started = time.monotonic()
    target = next(t for t in campaign.TARGETS if t.module == candidate.module)
    refusal = preflight(bin_dir, env, target.dotted, work)
    baseline = REPO / "reports" / "baselines" / MODEL / DEVICE / "baseline.json"
    if refusal:
        verdict = judge(candidate, None, None, baseline, [], time.monotonic() - started)
        return Verdict(**{**asdict(verdict), "note": refusal})
    cmd = [
        str(bin_dir / "python"), str(REPO / "tools" / "run_emu_conformance.py"),
        "--reports", str(where / "reports"),
        "--baselines", str(REPO / "reports" / "baselines"),
        "--server-log", str(where / "server.log"),
        "--workers", str(workers),
        "--timeout", str(timeout),
    ]  # fmt: skip
    driver_log = where / "driver.log"
    with driver_log.open("w") as log:
        rc = subprocess.call(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    runs = run_files(where / "reports" / MODEL / DEVICE)
    report = runs[-1] if runs else None
    lines = gate_lines(driver_log)
    return judge(candidate, rc, report, baseline, lines, time.monotonic() - started)


# --- the record ----------------------------------------------------------------------------


def counts(verdicts: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    result = {"served": len(verdicts), "killed": 0, "not killed": 0, "unjudged": 0}
    for v in verdicts:
        result[str(v["verdict"])] += 1
    result["wrong equivalences"] = sum(
        v["first_oracle"] == "equivalent" and v["verdict"] == "killed" for v in verdicts
    )
    return result


def record(
    previous: Mapping[str, Any] | None,
    plugin_record: Mapping[str, Any],
    new: Sequence[Verdict],
    today: str,
) -> dict[str, Any]:
    """The second oracle's record: earlier verdicts of the same plugin commit kept, the new ones
    replacing a mutant's earlier verdict."""
    commit = str(plugin_record["plugin_commit"])
    kept: dict[str, dict[str, Any]] = {}
    if previous and previous.get("plugin_commit") == commit:
        kept = {str(v["mutant"]): dict(v) for v in previous.get("mutants", [])}
    for verdict in new:
        entry = asdict(verdict)
        entry.update(killed_by=list(verdict.killed_by), gate=list(verdict.gate), date=today)
        kept[verdict.mutant] = entry
    order = {c.mutant: i for i, c in enumerate(candidates(plugin_record))}
    mutants = sorted(kept.values(), key=lambda v: order.get(str(v["mutant"]), len(order)))
    return {
        "schema": SCHEMA,
        "oracle": ORACLE,
        "tool": campaign.TOOL,
        "date": today,
        "plugin_commit": commit,
        "not_killed_by_unit_tests": len(order),
        **counts(mutants),
        "mutants": mutants,
    }


def line(v: Verdict) -> str:
    what = ", ".join(c.split("::", 1)[-1] for c in v.killed_by[:3]) or "; ".join(v.gate[:1])
    short = v.mutant.removeprefix(f"{campaign.PACKAGE}.")
    return f"{v.verdict:10} {short:60} ({v.first_oracle}) {v.seconds:6.0f} s  {what or v.note}"


def main(
    names: Sequence[str], limit: int | None, bin_dir: Path, workers: int, timeout: float
) -> int:
    plugin_record = json.loads(campaign.PUBLISHED.read_text())
    head = campaign._git("rev-parse", "HEAD")
    previous = json.loads(RECORD.read_text()) if RECORD.is_file() else None
    found = candidates(plugin_record)
    if not names:
        found = pending(found, previous, str(plugin_record["plugin_commit"]))
    chosen = choose(found, names, limit)
    changed = campaign._git(
        "diff", "--name-only", str(plugin_record["plugin_commit"]), "HEAD", "--", "plugin"
    )
    moved = [t.module for t in campaign.TARGETS if f"{campaign.PACKAGE}/{t.module}" in changed]
    if moved:
        raise SystemExit(
            f"targets changed since the record's commit ({', '.join(moved)}): run the campaign "
            "again first (`tox -e mutation`)"
        )
    trees: dict[str, Path] = {}
    verdicts: list[Verdict] = []
    print(f"[second oracle] {len(chosen)} mutant(s) at {head[:12]}", flush=True)
    for candidate in chosen:
        target = next(t for t in campaign.TARGETS if t.module == candidate.module)
        if target.module not in trees:
            trees[target.module] = generate(target, bin_dir, SCRATCH)
        work = trees[target.module]
        diff = campaign._diffs(bin_dir, work, [candidate.mutant]).get(candidate.mutant, "")
        if tuple(campaign.change_of(diff)) != candidate.change:
            raise SystemExit(
                f"{candidate.mutant}: the regenerated change is not the record's: run the "
                "campaign again first"
            )
        print(f"[second oracle] serving {candidate.mutant}", flush=True)
        verdicts.append(serve(candidate, work, bin_dir, SCRATCH / "runs", workers, timeout))
        print(line(verdicts[-1]), flush=True)
    today = datetime.now(timezone.utc).date().isoformat()
    RECORD.write_text(
        json.dumps(record(previous, plugin_record, verdicts, today), indent=2, ensure_ascii=False)
        + "\n"
    )
    print(f"[second oracle] record: {RECORD}")
    return exit_status(verdicts)


def exit_status(verdicts: Sequence[Verdict]) -> int:
    """1 for a wrong equivalence claim (loudly), 2 for an unjudged mutant, else 0."""
    wrong = [v for v in verdicts if v.wrong_equivalence]
    for v in wrong:
        print(
            f"WRONG EQUIVALENCE: {v.mutant} ({v.module}) is listed in "
            "reports/mutation/equivalent-mutants.json but the emulated suite kills it: remove the "
            "claim and add the unit test that kills it",
            file=sys.stderr,
        )
    if wrong:
        return 1
    return 2 if any(v.verdict == "unjudged" for v in verdicts) else 0
