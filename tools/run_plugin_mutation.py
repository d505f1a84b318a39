"""The plugin-side mutation campaign: mutmut over the plugin's decision modules.

    python tools/run_plugin_mutation.py                   every target (`tox -e mutation`)
    python tools/run_plugin_mutation.py --module PATH     one target (a path under vllm_tt_plugin/)
    python tools/run_plugin_mutation.py --ci              the fixed sample CI runs
    python tools/run_plugin_mutation.py --list            the targets and their tests
    python tools/run_plugin_mutation.py --rejudge         the last full run, equivalents reapplied
    python tools/run_plugin_mutation.py --second-oracle [--limit N] [--mutant NAME ...]
                                        the not-killed mutants through the emulated suite + gate

Each target is one decision module with the unit test files that exercise it (the oracle). The
driver lays out a scratch tree under .mutation/<target>/ (the package at its top, as mutmut
expects; the rest of the repository linked in), runs `mutmut run` there with one worker, reads
mutmut's per-mutant exit codes and classifies each mutant itself:

- killed: a test ran and failed (pytest exit 1 with a failing call);
- survived: the tests passed, or no selected test reaches the mutated function;
- timeout: mutmut stopped the run at its CPU-time limit;
- unjudged: anything else (a collection error, an error outside a test's call,
  tests/mutation_verdict.py; a crash). Neither a timeout nor an unjudged run is a kill.

A survivor is either listed in reports/mutation/equivalent-mutants.json with why it is
equivalent, or a gap in the tests; the run exits 1 while any survivor is unexplained, or any
listed equivalent matches no mutant of a module it ran in full (a stale entry). The score is
killed / (mutants - equivalents). A full run writes reports/mutation/plugin.json (per module and
per concern, date, plugin commit, tool version); --module and --ci runs write under .mutation/.
--second-oracle serves each mutant of that record the unit tests did not kill (equivalents too)
through the emulated suite and its gate, one at a time (tools/plugin_second_oracle.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "conformance"))  # this tree's harness, not an installed one

# The targets and concerns the pages check a record against: one list.
from tt_conformance.mutation import MUTATION_CONCERNS, MUTATION_TARGETS  # noqa: E402

PACKAGE = "vllm_tt_plugin"
LOCK = REPO / "requirements" / "lock" / "mutation.txt"
# Scratch trees per kind of run (full, ci, module): a sample never overwrites the verdicts of
# the last full run, which --rejudge reads again.
SCRATCH = REPO / ".mutation"
PUBLISHED = REPO / "reports" / "mutation" / "plugin.json"
# The commit a full run's trees were made at (under .mutation/full/): --rejudge re-reads only
# trees of the record's own commit.
COMMIT_STAMP = "commit"
EQUIVALENTS = REPO / "reports" / "mutation" / "equivalent-mutants.json"
TOOL = "mutmut 3.8.1"
UNJUDGED_EXIT = 40  # tests/mutation_verdict.py
# mutmut's CPU-time limit per mutant is (tests' clean time + constant) x multiplier x 2.
TIMEOUT_MULTIPLIER = 5.0
TIMEOUT_CONSTANT = 2.0
# Top-level entries the scratch tree must not link: the package and tests are copied by mutmut,
# the rest is state.
NOT_LINKED = {"plugin", "tests", ".git", ".mutation", ".tox", ".venv", ".venv-mut", "mutants"}


@dataclass(frozen=True)
class Target:
    """One decision module, the concern it decides and the unit tests that judge it."""

    module: str  # path under plugin/vllm_tt_plugin/
    concern: str
    tests: tuple[str, ...]

    @property
    def key(self) -> str:
        return self.module.removesuffix(".py").replace("/", ".")

    @property
    def dotted(self) -> str:
        return f"{PACKAGE}.{self.key}"


TARGETS = tuple(Target(module, concern, tests) for module, concern, tests in MUTATION_TARGETS)

# CI's fixed sample: mutant names (globs) per target, a few per decision, all known killed or
# equivalent. A name that matches no mutant fails the run (the function changed: re-pick).
CI_SAMPLE: dict[str, tuple[str, ...]] = {
    # the interleave choice, and the two accounting faults the campaign found
    "policy/step_policy.py": ("*choose__mutmut_1?", "*record__mutmut_8", "*record__mutmut_18"),
    # the non-resident reload rule among the planner's choices
    "contract/reload_contract.py": ("*plan__mutmut_1[5-9]",),
    # the temperature and top-k bounds of the host-only rules
    "policy/sampling_route.py": ("*host_only_feature__mutmut_3[0-4]",),
}


@dataclass
class Mutant:
    name: str
    status: str  # killed, survived, no test, timeout, unjudged
    exit_code: int | None
    line: int | None = None
    diff: str = ""
    equivalent_because: str | None = None


@dataclass
class ModuleResult:
    module: str
    concern: str
    tests: list[str]
    seconds: float
    mutants: list[Mutant] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return counts(self.mutants)


def classify(exit_code: int | None) -> str:
    """A mutant's verdict from the exit code mutmut recorded for its test run."""
    if exit_code == 1:
        return "killed"
    if exit_code == 0:
        return "survived"
    if exit_code in (5, 33):  # no selected test calls the mutated function
        return "no test"
    if exit_code in (24, -24, 36, 152, 255, -9):  # SIGXCPU at mutmut's limit, then SIGKILL
        return "timeout"
    return "unjudged"  # never run, collection error, UNJUDGED_EXIT, internal error, crash


def counts(mutants: Iterable[Mutant]) -> dict[str, int]:
    """Totals and the score: killed over the mutants not shown equivalent."""
    result = {"total": 0, "killed": 0, "survived": 0, "equivalent": 0, "timeout": 0, "unjudged": 0}
    for mutant in mutants:
        result["total"] += 1
        if mutant.equivalent_because is not None:
            result["equivalent"] += 1
        elif mutant.status in ("survived", "no test"):
            result["survived"] += 1
        else:
            result[mutant.status] += 1
    return result


def score(totals: dict[str, int]) -> float | None:
    judged = totals["total"] - totals["equivalent"]
    return round(totals["killed"] / judged, 4) if judged else None


# --- equivalents ---------------------------------------------------------------------------


def change_of(diff: str) -> list[str]:
    """The lines a mutant removes and adds (stripped): its identity across renumbering."""
    body = [line for line in diff.splitlines() if not line.startswith(("---", "+++", "@@"))]
    return [line[0] + line[1:].strip() for line in body if line[:1] in "+-" and line[1:].strip()]


def function_of(name: str, target: Target) -> str:
    """mutmut's function part of a mutant name (``xǁClassǁmethod`` or ``x_function``)."""
    return name.removeprefix(target.dotted + ".").rsplit("__mutmut_", 1)[0]


class EquivalentsError(Exception):
    """The equivalents list is missing or malformed (exit 2: not a verdict on the mutants)."""


# A reason must say why: a few words, not the label itself.
MIN_WHY_WORDS = 4
BOILERPLATE_WHY = {"equivalent", "equivalent mutant", "no effect", "n/a", "todo", "same"}


def load_equivalents(path: Path | None = None) -> list[dict[str, object]]:
    """The listed equivalents; EquivalentsError names what is wrong with the file (it is
    required: without it every listed equivalent would silently count as a survivor)."""
    path = path or EQUIVALENTS
    if not path.is_file():
        raise EquivalentsError(f'{path}: missing (an empty list is {{"equivalent": []}})')
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EquivalentsError(f"{path}: not readable JSON: {exc}") from None
    entries = data.get("equivalent") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise EquivalentsError(f"{path}: must be an object whose 'equivalent' is a list")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise EquivalentsError(f"{path}: equivalent[{index}] must be an object")
        for key in ("module", "function", "change", "why"):
            if not entry.get(key):
                raise EquivalentsError(f"{path}: equivalent[{index}] lacks '{key}'")
        why = entry["why"]
        if (
            not isinstance(why, str)
            or len(why.split()) < MIN_WHY_WORDS
            or why.strip().lower().rstrip(".") in BOILERPLATE_WHY
        ):
            raise EquivalentsError(
                f"{path}: equivalent[{index}] 'why' {why!r} does not say why (at least "
                f"{MIN_WHY_WORDS} words)"
            )
    return list(entries)


def mark_equivalents(
    result: ModuleResult, target: Target, entries: Sequence[dict[str, object]]
) -> list[dict[str, object]]:
    """Mark the survivors an entry explains; return the entries of this module that matched none."""
    mine = [entry for entry in entries if entry["module"] == target.module]
    used: set[int] = set()
    for mutant in result.mutants:
        if mutant.status not in ("survived", "no test"):
            continue
        for index, entry in enumerate(mine):
            if entry["function"] == function_of(mutant.name, target) and entry[
                "change"
            ] == change_of(mutant.diff):
                mutant.equivalent_because = str(entry["why"])
                used.add(index)
                break
    return [entry for index, entry in enumerate(mine) if index not in used]


# --- running mutmut ------------------------------------------------------------------------


def mutation_env(env_dir: Path) -> Path:
    """A venv that sees the running (shared vLLM) interpreter's packages, with the locked mutmut
    added. `venv --system-site-packages` would expose the base Python's, not this venv's: a .pth
    adds this interpreter's site-packages (with their own .pth files) after the venv's own."""
    stamp = env_dir / "lock-digest"
    digest = LOCK.read_text().splitlines()[2]  # the inputs-digest line tools/lock.py writes
    python = env_dir / "bin" / "python"
    if not (python.is_file() and stamp.is_file() and stamp.read_text() == digest):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(env_dir)], check=True)
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        shared = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
        lines = [f"import site; site.addsitedir({path!r})" for path in shared]
        (Path(site) / "_shared_env.pth").write_text("\n".join(lines) + "\n")
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--require-hashes",
             "-r", str(LOCK)],
            check=True,
        )  # fmt: skip
        stamp.write_text(digest)
    return env_dir / "bin"


def prepare(target: Target, root: Path) -> Path:
    """A fresh scratch tree for one target: the package on top, the repository linked in."""
    work = root / target.key
    shutil.rmtree(work, ignore_errors=True)
    (work / "mutants").mkdir(parents=True)
    (work / PACKAGE).symlink_to(REPO / "plugin" / PACKAGE)
    (work / "tests").symlink_to(REPO / "tests")
    for entry in REPO.iterdir():
        if entry.name not in NOT_LINKED and not entry.name.startswith(".venv"):
            (work / "mutants" / entry.name).symlink_to(entry)
    options = {
        "source_paths": PACKAGE,
        "only_mutate": f"{PACKAGE}/{target.module}",
        "pytest_add_cli_args_test_selection": "\n".join(target.tests),
        "pytest_add_cli_args": "\n".join(
            ["-p", "no:cacheprovider", "-p", "tests.mutation_verdict"]
        ),
        "timeout_multiplier": str(TIMEOUT_MULTIPLIER),
        "timeout_constant": str(TIMEOUT_CONSTANT),
        "use_git_change_detection": "false",
    }
    lines = ["[mutmut]"]
    for key, value in options.items():
        lines.append(f"{key} = " + value.replace("\n", "\n    "))
    (work / "setup.cfg").write_text("\n".join(lines) + "\n")
    return work


def run_mutmut(target: Target, bin_dir: Path, names: Sequence[str], root: Path) -> float:
    """Run mutmut over one target in a fresh scratch tree under ``root``; its wall time."""
    work = prepare(target, root)
    log = root / f"{target.key}.log"
    env = dict(os.environ)
    # The mutated copy is found through mutants/ (mutmut puts it first); the stubs and the
    # harness come from the repository. The repository's plugin/ stays off the path.
    env["PYTHONPATH"] = f"{REPO / 'host_stubs'}{os.pathsep}{REPO / 'conformance'}"
    env.setdefault("VLLM_PLUGINS", "tt,tt_model_registry")
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(
            [str(bin_dir / "mutmut"), "run", "--max-children", "1", *names],
            cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(
            f"mutmut failed on {target.module} (exit {proc.returncode}) before judging mutants: "
            f"see {log}"
        )
    return round(time.monotonic() - started, 1)


def collect(
    target: Target, bin_dir: Path, names: Sequence[str], seconds: float, root: Path
) -> ModuleResult:
    """The verdicts mutmut recorded in the target's scratch tree, with each survivor's diff."""
    work = root / target.key
    meta = work / "mutants" / PACKAGE / f"{target.module}.meta"
    if not meta.is_file():
        raise SystemExit(f"{target.module}: no mutmut results under {work}: run it first")
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    wanted = [name for name in codes if _selected(name, names)]
    result = ModuleResult(target.module, target.concern, list(target.tests), seconds)
    result.mutants = [Mutant(name, classify(codes[name]), codes[name]) for name in sorted(wanted)]
    not_killed = [m.name for m in result.mutants if m.status != "killed"]
    diffs = _diffs(bin_dir, work, not_killed)
    source = (REPO / "plugin" / PACKAGE / target.module).read_text()
    for mutant in result.mutants:
        if mutant.name in diffs:
            mutant.diff = diffs[mutant.name]
            mutant.line = _line_of(source, function_of(mutant.name, target), mutant.diff)
    return result


def _selected(name: str, patterns: Sequence[str]) -> bool:
    from fnmatch import fnmatch

    return not patterns or any(fnmatch(name, pattern) for pattern in patterns)


_DIFF_SCRIPT = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
print(json.dumps({name: get_diff_for_mutant(name) for name in sys.argv[1:]}))
"""


def _diffs(bin_dir: Path, work: Path, names: Sequence[str]) -> dict[str, str]:
    if not names:
        return {}
    out = subprocess.run(
        [str(bin_dir / "python"), "-c", _DIFF_SCRIPT, *names],
        cwd=work, capture_output=True, text=True, check=True,
    )  # fmt: skip
    diffs: dict[str, str] = json.loads(out.stdout.splitlines()[-1])
    return diffs


def _line_of(source: str, function: str, diff: str) -> int | None:
    """The file line of a mutant's first removed line: the occurrence, inside its function,
    whose preceding lines are the diff's context lines."""
    node: ast.AST | None = None
    scope: Sequence[ast.stmt] = ast.parse(source).body
    for part in function.removeprefix("x_").removeprefix("xǁ").split("ǁ"):
        node = next(
            (n for n in scope if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == part),
            None,
        )
        if node is None:
            return None
        scope = node.body
    hunk: list[str] = []  # the lines of the first hunk that removes a line
    for line in diff.splitlines():
        if line.startswith("@@"):
            hunk = []
        elif not line.startswith(("---", "+++")):
            hunk.append(line)
            if line.startswith("-"):
                break
    first = next((i for i, line in enumerate(hunk) if line.startswith("-")), None)
    if first is None or not isinstance(node, ast.FunctionDef):
        return None
    before = [line[1:].strip() for line in hunk[:first]]
    lines = [line.strip() for line in source.splitlines()]
    for number in range(node.lineno, (node.end_lineno or node.lineno) + 1):
        at = number - 1
        if lines[at] == hunk[first][1:].strip() and lines[at - len(before) : at] == before:
            return number
    return node.lineno


# --- the summary ---------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def summary(results: Sequence[ModuleResult], ci: bool) -> dict[str, object]:
    modules = []
    for result in results:
        totals = result.counts()
        modules.append(
            {"module": result.module, "concern": result.concern, "tests": result.tests,
             **totals, "score": score(totals), "seconds": result.seconds}
        )  # fmt: skip
    concerns = []
    for concern in MUTATION_CONCERNS:
        mine = [m for r in results if r.concern == concern for m in r.mutants]
        if mine:
            totals = counts(mine)
            concerns.append({"concern": concern, **totals, "score": score(totals)})
    return {
        "schema": 1,
        "campaign": "ci-sample" if ci else "full",
        "tool": TOOL,
        "oracle": "unit tests",
        "date": datetime.now(timezone.utc).date().isoformat(),
        "plugin_commit": _git("rev-parse", "HEAD"),
        "tree_clean": not _git("status", "--porcelain", "--", "plugin", "tests"),
        "concerns": concerns,
        "modules": modules,
        "not_killed": [
            {
                "module": r.module,
                "line": m.line,
                "mutant": m.name,
                "status": m.status,
                "equivalent_because": m.equivalent_because,
                "diff": m.diff,
            }
            for r in results
            for m in r.mutants
            if m.status != "killed"
        ],
    }


def report(results: Sequence[ModuleResult], stale: Sequence[dict[str, object]]) -> int:
    """Print the per-module figures and every mutant not killed; 1 unless all are explained."""
    failing = 0
    for result in results:
        totals = result.counts()
        print(
            f"{result.module:32} {result.concern:20} {totals['killed']:3}/{totals['total']:<3} "
            f"killed, {totals['equivalent']} equivalent, {totals['survived']} survived, "
            f"{totals['timeout']} timeout, {totals['unjudged']} unjudged ({result.seconds} s)"
        )
        for mutant in result.mutants:
            if mutant.status == "killed":
                continue
            verdict = "equivalent" if mutant.equivalent_because else mutant.status
            failing += mutant.equivalent_because is None
            where = f"plugin/{PACKAGE}/{result.module}:{mutant.line or '?'}"
            print(f"  {verdict}: {where} {mutant.name}")
            for line in change_of(mutant.diff):
                print(f"      {line}")
            if mutant.equivalent_because:
                print(f"      why: {mutant.equivalent_because}")
    for entry in stale:
        failing += 1
        print(f"stale equivalent entry (matches no mutant): {entry['module']} {entry['function']}")
    return 1 if failing else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--module", action="append", help="a target's module (repeatable)")
    parser.add_argument("--ci", action="store_true", help="CI's fixed sample")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument(
        "--rejudge",
        action="store_true",
        help="apply the equivalents list again to the last full run's verdicts (kept under "
        ".mutation/), without running mutants; keeps that run's date and commit",
    )
    parser.add_argument("--env-dir", type=Path, default=REPO / ".tox" / "mutmut")
    second = parser.add_argument_group(
        "second oracle", "serve the mutants the unit tests did not kill through the emulated "
        "suite and its gate (tools/plugin_second_oracle.py; minutes per mutant)"
    )  # fmt: skip
    second.add_argument("--second-oracle", action="store_true", help="run the second oracle")
    second.add_argument("--limit", type=int, help="serve at most this many mutants")
    second.add_argument("--mutant", action="append", default=[], help="only this mutant")
    second.add_argument("--workers", type=int, default=2, help="the suite's pytest-xdist workers")
    second.add_argument("--timeout", type=float, default=1200.0, help="per-mutant suite timeout")
    args = parser.parse_args(argv)
    args.env_dir = args.env_dir.resolve()  # the tools run it from the scratch trees
    if args.second_oracle:
        if args.ci or args.module or args.rejudge or args.list:
            parser.error("--second-oracle serves the last full record: no other mode")
        if args.limit is not None and args.limit < 1:
            parser.error(f"--limit must be >= 1, got {args.limit}")
        import plugin_second_oracle

        bin_dir = mutation_env(args.env_dir)
        return plugin_second_oracle.main(
            args.mutant, args.limit, bin_dir, args.workers, args.timeout
        )
    if args.limit is not None or args.mutant:
        parser.error("--limit and --mutant apply to --second-oracle")
    if args.rejudge and (args.ci or args.module):
        parser.error("--rejudge re-reads the last full run: no --ci or --module")
    if args.list:
        for target in TARGETS:
            print(f"{target.module:32} {target.concern:20} {' '.join(target.tests)}")
        return 0
    by_module = {target.module: target for target in TARGETS}
    unknown = [m for m in args.module or () if m not in by_module]
    if unknown:
        parser.error(f"--module {unknown[0]!r} is not a target; known: {', '.join(by_module)}")
    if args.ci:
        chosen = [by_module[m] for m in CI_SAMPLE]
    else:
        chosen = [by_module[m] for m in args.module] if args.module else list(TARGETS)
    bin_dir = mutation_env(args.env_dir)
    try:
        equivalents = load_equivalents()
    except EquivalentsError as exc:
        print(f"run_plugin_mutation: error: {exc}", file=sys.stderr)
        return 2
    root = SCRATCH / ("ci" if args.ci else "module" if args.module else "full")
    root.mkdir(parents=True, exist_ok=True)
    results, stale = [], []
    previous = json.loads(PUBLISHED.read_text()) if args.rejudge else None
    if previous is not None:
        stamp = root / COMMIT_STAMP
        ran_at = stamp.read_text().strip() if stamp.is_file() else None
        if ran_at != previous.get("plugin_commit"):
            raise SystemExit(
                f"--rejudge: the trees under {root} were run at {ran_at or 'an unrecorded commit'}"
                f", the record at {previous.get('plugin_commit')}: run the full campaign again"
            )
    elif not args.ci and not args.module:
        (root / COMMIT_STAMP).write_text(_git("rev-parse", "HEAD") + "\n")
    for target in chosen:
        names = CI_SAMPLE[target.module] if args.ci else ()
        if previous is None:
            seconds = run_mutmut(target, bin_dir, names, root)
        else:
            ran = {m["module"]: m["seconds"] for m in previous["modules"]}
            seconds = ran.get(target.module, 0.0)  # a missing module: refused below
        result = collect(target, bin_dir, names, seconds, root)
        unmatched_names = [
            n for n in names if not any(_selected(m.name, [n]) for m in result.mutants)
        ]
        if unmatched_names:
            raise SystemExit(
                f"CI sample of {target.module}: {unmatched_names} match no mutant (the function "
                "changed): pick the sample again"
            )
        unmatched = mark_equivalents(result, target, equivalents)
        stale += [] if args.ci else unmatched
        results.append(result)
    full = not args.ci and not args.module
    out = PUBLISHED if full else root / "summary.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = summary(results, args.ci)
    status = report(results, stale)
    if previous is not None:  # the mutants ran then: keep that run's date and commit
        refusal = rejudge_refusal(previous, results) or (
            "survivors unexplained or stale equivalents (above)" if status else None
        )
        if refusal:  # the last record stays: a failed rejudge publishes nothing
            print(f"--rejudge refused, {out.relative_to(REPO)} left as it was: {refusal}")
            return 1
        record.update({k: previous[k] for k in ("date", "plugin_commit", "tree_clean")})
        record["equivalents_rejudged"] = datetime.now(timezone.utc).date().isoformat()
    out.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    print(f"summary: {out.relative_to(REPO)}")
    return status


def rejudge_refusal(previous: dict[str, Any], results: Sequence[ModuleResult]) -> str | None:
    """Why re-read trees are not the run the record describes: a module's mutant count differs
    (a sample's or another commit's tree), or a target is missing from either."""
    before = {m.get("module"): m.get("total") for m in previous.get("modules", [])}
    now = {r.module: len(r.mutants) for r in results}
    for module in sorted(set(before) | set(now), key=str):
        if before.get(module) != now.get(module):
            return (
                f"{module}: {now.get(module)} mutants under .mutation/, {before.get(module)} in "
                "the last full record: run the full campaign again"
            )
    return None


if __name__ == "__main__":
    raise SystemExit(main())
