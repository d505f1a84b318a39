"""Coverage: what a run selected of the harness's suite, and whether that covers the suite.

A run is *full* when

- every check module of the shipped manifest (``checks/MANIFEST.json``: each module's name and
  the SHA-256 of its file) ran at least one check, and none was deleted or edited since the
  manifest was written (``modified_modules``: an installed harness whose checks were changed
  certifies nothing);
- every check the manifest lists for a module that ran is among the run's checks (``checks``:
  the module's check ids, suiteids.py; a function parametrised from the server's options or the
  expectations is listed ``name[*]`` and needs one instance): a check dropped from a module that
  ran is named in ``missing_checks``. A check the server cannot run is still collected and
  skipped, and the harness judges that skip (below); a check absent from the run was dropped;
- pytest deselected nothing (no ``-k``/``-m`` that dropped a check, no ``--deselect``) and no
  single check was picked by node id;
- every *applicable* concern ran: a concern whose checks were all skipped counts only when the
  harness itself ruled it out from the server's identity (`skip_kind`: no TT plugin on a
  ``not-tt`` server, too few lanes, not a block-output model). A check skipped by the
  expectations file is a *waiver*, never coverage: a concern left with waivers and other skips
  only is not run, and the run is partial.

Anything less is *partial*: tiers.py gives it no TT tier, the matrix never lets it displace a
full run, and ``baseline promote`` refuses it. Waivers in a concern that ran are listed
(``waived``) and cap the tier below complete (tiers.py).

`coverage_of` builds the record when a run ends; `derive_coverage` rebuilds it from a report's
own checks and stored selection (rederive.py compares the two). Data only: the pytest side
(reporting.py) hands in what pytest was asked and what ran.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal

from tt_conformance.committed import commit_state, committed_file, harness_repository
from tt_conformance.names import NOT_TT_DEVICE
from tt_conformance.report import CheckResult, Coverage, Report
from tt_conformance.suiteids import check_ids, covers, module_concern
from tt_conformance.ttmetrics import NOT_APPLICABLE

__all__ = [
    "BLOCK_OUTPUT_ABSENT",
    "CHECKS_PACKAGE",
    "DESELECTED_KEY",
    "MANIFEST_KIND",
    "MANIFEST_NAME",
    "MANIFEST_PATH",
    "NEEDS_LANES",
    "OPTIONAL_CONCERNS",
    "OPTIONAL_NOT_RUN",
    "WAIVED",
    "SkipKind",
    "SuiteState",
    "Yardstick",
    "concern_coverage",
    "concern_of",
    "coverage_of",
    "derive_coverage",
    "fixture_suites",
    "foreign_suite",
    "installed_files",
    "installed_suite",
    "manifest_text",
    "missing_checks",
    "modules_declaring",
    "read_manifest",
    "read_manifest_checks",
    "read_manifest_concerns",
    "skip_kind",
    "suite_modules",
    "yardstick_for",
]

CHECKS_PACKAGE = "tt_conformance.checks"
DESELECTED_KEY = "tt_conformance_deselected"  # an xdist worker's count, in its workeroutput
MANIFEST_NAME = "MANIFEST.json"
MANIFEST_KIND = "tt-conformance-suite-manifest"
# The requires_lanes skip's reason starts so (pytest_plugin.py): the server cannot run it.
NEEDS_LANES = "needs a server serving"
# The expectations' skips (pytest_plugin.py): a waiver, decided by a file, not by the server.
WAIVED = "skipped by expectations:"
# test_block_output's module fixture: the model is no block-output model (a capability probe).
BLOCK_OUTPUT_ABSENT = "not a block-output server"
# Model classes that serve block output (DiffusionGemma's block diffusion, the reference block
# model): on a server whose recorded class is none of these, the block probe's skip is borne out.
_BLOCK_CLASS = re.compile(r"Block|Diffusion")
_LANES_NEEDED = re.compile(re.escape(NEEDS_LANES) + r" >= (\d+)")
# An optional concern's skip when the harness was not given what it needs (the forward
# reference without a checkpoint, or without torch + transformers): the concern is not run and
# the report says so, but it does not cap the tier. Only the concerns listed here may say so.
OPTIONAL_NOT_RUN = "forward reference not run:"
OPTIONAL_CONCERNS = frozenset({"forward_reference"})

SkipKind = Literal["not_applicable", "waived", "optional", "other"]
# What a check module must declare for a server-identity excuse to hold for its checks: the
# requires_lanes marker (pytest_plugin.py skips with NEEDS_LANES) and the tt_path marker or
# fixture (skipped with NOT_APPLICABLE on a server without the plugin). The excuse is the
# harness's, from its own modules, never the words a report stores on any check.
_LANES_MARKER = b"pytest.mark.requires_lanes"
_TT_PATH_MARKER = b"tt_path"


def _file_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def installed_files() -> dict[str, bytes]:
    """The check modules in the installed package, by module name, with their bytes (what
    `installed_suite` holds against the manifest)."""
    out: dict[str, bytes] = {}
    for entry in resources.files(CHECKS_PACKAGE).iterdir():
        if entry.name.startswith("test_") and entry.name.endswith(".py"):
            out[f"{CHECKS_PACKAGE}.{entry.name.removesuffix('.py')}"] = entry.read_bytes()
    return dict(sorted(out.items()))


def manifest_text() -> str:
    """The manifest of the check modules as they are now (``python -m tt_conformance.schema``
    writes it; a test fails while the shipped one is stale)."""
    files = installed_files()
    modules = {name: _file_digest(data) for name, data in files.items()}
    checks = {name: check_ids(name) for name in files}
    concerns = {name: module_concern(name) for name in files}
    body = {"kind": MANIFEST_KIND, "modules": modules, "checks": checks, "concerns": concerns}
    return json.dumps(body, indent=2) + "\n"


def read_manifest() -> dict[str, str]:
    """The shipped manifest: check module -> digest of its file."""
    text = (resources.files(CHECKS_PACKAGE) / MANIFEST_NAME).read_text(encoding="utf-8")
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("kind") != MANIFEST_KIND:
        raise ValueError(f"{CHECKS_PACKAGE}/{MANIFEST_NAME}: not a suite manifest")
    return {str(k): str(v) for k, v in data["modules"].items()}


def read_manifest_checks() -> dict[str, tuple[str, ...]]:
    """The shipped manifest's check ids per module (``function`` or ``function[params]``)."""
    text = (resources.files(CHECKS_PACKAGE) / MANIFEST_NAME).read_text(encoding="utf-8")
    data = json.loads(text)
    checks = data.get("checks") if isinstance(data, dict) else None
    if not isinstance(checks, dict):
        raise ValueError(f"{CHECKS_PACKAGE}/{MANIFEST_NAME}: lists no check ids")
    return {str(k): tuple(str(i) for i in v) for k, v in checks.items()}


@lru_cache(maxsize=1)
def read_manifest_concerns() -> Mapping[str, str]:
    """The shipped manifest's concern per module: a check's concern is its module's, never
    the report's word (skip_kind's excuses, rederive's comparison)."""
    text = (resources.files(CHECKS_PACKAGE) / MANIFEST_NAME).read_text(encoding="utf-8")
    data = json.loads(text)
    concerns = data.get("concerns") if isinstance(data, dict) else None
    if not isinstance(concerns, dict):
        raise ValueError(f"{CHECKS_PACKAGE}/{MANIFEST_NAME}: lists no concerns")
    return {str(k): str(v) for k, v in concerns.items()}


@lru_cache(maxsize=2)
def modules_declaring(marker: bytes) -> frozenset[str]:
    """The shipped check modules whose source declares ``marker`` (a module edited away from
    the manifest already makes the run partial)."""
    shipped = set(read_manifest())
    return frozenset(n for n, data in installed_files().items() if n in shipped and marker in data)


def concern_of(check: CheckResult) -> str:
    """The check's concern: its module's in the shipped manifest; the stored one only for a
    module the manifest does not know (a test's made-up module, which certifies nothing)."""
    return read_manifest_concerns().get(_module_of(check.id), check.concern)


def missing_checks(
    checks: Sequence[CheckResult], modules: Sequence[str], listed: Mapping[str, Sequence[str]]
) -> tuple[str, ...]:
    """The listed checks of the modules that ran that the run does not hold."""
    ran: dict[str, list[str]] = {}
    for c in checks:
        module, _, name = c.id.partition("::")
        ran.setdefault(module, []).append(name)
    return tuple(
        f"{module}::{entry}"
        for module in modules
        if module in ran
        for entry in listed.get(module, ())
        if not covers(entry, ran[module])
    )


def suite_modules() -> tuple[str, ...]:
    """The check modules this harness ships, from its manifest (not from the directory: a
    deleted module is still part of the suite, and missing from the run)."""
    return tuple(sorted(read_manifest()))


@dataclass(frozen=True)
class SuiteState:
    modules: tuple[str, ...]  # the manifest's modules
    modified: tuple[str, ...]  # "<module> (deleted|edited|not in the manifest)"


def installed_suite() -> SuiteState:
    """The manifest against the installed check files."""
    shipped = read_manifest()
    files = installed_files()
    modified = []
    for name, digest in shipped.items():
        data = files.get(name)
        if data is None:
            modified.append(f"{name} (deleted)")
        elif _file_digest(data) != digest:
            modified.append(f"{name} (edited)")
    modified += [f"{name} (not in the manifest)" for name in files if name not in shipped]
    return SuiteState(suite_modules(), tuple(modified))


def _module_of(check_id: str) -> str:
    return check_id.partition("::")[0]


def skip_kind(
    check: CheckResult, device: str, lanes: int, model_class: str | None = None
) -> SkipKind:
    """Why a skipped check did not run, as the harness judges it from the server's identity:
    not applicable only when the identity bears the reason out (a "no TT plugin" skip on a
    server recorded as TT, or a "needs lanes" skip on a server with enough lanes, is not)."""
    reason = check.reason
    if reason.startswith(WAIVED):
        return "waived"
    module = _module_of(check.id)
    if reason.startswith(NOT_APPLICABLE):
        declared = module in modules_declaring(_TT_PATH_MARKER)
        return "not_applicable" if declared and device == NOT_TT_DEVICE else "other"
    needed = _LANES_NEEDED.match(reason)
    if needed is not None:
        # Only a check whose module asks for lanes may be excused by too few of them: the
        # same words copied onto a logprobs check are a plain skip.
        declared = module in modules_declaring(_LANES_MARKER)
        return "not_applicable" if declared and lanes < int(needed.group(1)) else "other"
    # The concern-bound excuses hold only for the checks the manifest gives that concern:
    # the stored concern is the report's word (a logprobs check relabelled block_output).
    if reason.startswith(OPTIONAL_NOT_RUN):
        return "optional" if concern_of(check) in OPTIONAL_CONCERNS else "other"
    if reason.startswith(BLOCK_OUTPUT_ABSENT):
        # Only the block-output probe may say so, and only of a server recorded as serving
        # another kind of model: the same words on a KV-capacity check are a waiver.
        borne_out = model_class is not None and not _BLOCK_CLASS.search(model_class)
        return "not_applicable" if concern_of(check) == "block_output" and borne_out else "other"
    return "other"


def _declared_excuse(check: CheckResult) -> bool:
    module = _module_of(check.id)
    if check.reason.startswith(NOT_APPLICABLE):
        return module in modules_declaring(_TT_PATH_MARKER)
    if check.reason.startswith(NEEDS_LANES):
        return module in modules_declaring(_LANES_MARKER)
    return False


@dataclass(frozen=True)
class ConcernCoverage:
    waived: tuple[str, ...]  # check ids skipped by the expectations
    not_run: tuple[str, ...]  # applicable concerns none of whose checks ran


def concern_coverage(
    checks: Sequence[CheckResult], device: str, lanes: int, model_class: str | None = None
) -> ConcernCoverage:
    by_concern: dict[str, list[CheckResult]] = {}
    for c in checks:
        by_concern.setdefault(concern_of(c), []).append(c)
    not_run = []
    for concern, members in sorted(by_concern.items()):
        if any(c.outcome != "skip" for c in members):
            continue
        kinds = {skip_kind(c, device, lanes, model_class) for c in members}
        if kinds <= {"not_applicable", "optional"}:
            continue
        not_run.append(concern or "(no concern)")
    waived = tuple(
        sorted(
            c.id for c in checks if c.outcome == "skip" and skip_kind(c, device, lanes) == "waived"
        )
    )
    return ConcernCoverage(waived, tuple(not_run))


def coverage_of(
    checks: Sequence[CheckResult],
    *,
    deselected: int,
    keyword: str | None,
    markers: str | None,
    args: Iterable[str],
    suite: Sequence[str] | None = None,
    modified: Sequence[str] = (),
    device: str = "unknown",
    lanes: int = 1,
    model_class: str | None = None,
    suite_checks: Mapping[str, Sequence[str]] | None = None,
) -> Coverage:
    """The run's coverage from the checks that ran, how pytest was asked to select them and
    the server's identity (device, lanes: what is applicable). ``suite_checks`` are the check
    ids per module (default: the shipped manifest's)."""
    modules = suite_modules() if suite is None else tuple(suite)
    ran = {_module_of(c.id) for c in checks}
    missing = tuple(m for m in modules if m not in ran)
    listed = read_manifest_checks() if suite_checks is None else suite_checks
    dropped = missing_checks(checks, modules, listed)
    given = tuple(str(a) for a in args)
    picked = tuple(a for a in given if "::" in a)
    concerns = concern_coverage(checks, device, lanes, model_class)
    why: list[str] = []
    if deselected:
        how = ", ".join(
            f"{flag} {value!r}" for flag, value in (("-k", keyword), ("-m", markers)) if value
        )
        why.append(f"{deselected} check(s) deselected" + (f" ({how})" if how else ""))
    if picked:
        why.append(f"single checks picked by node id: {', '.join(picked[:3])}")
    if missing:
        short = [m.removeprefix(f"{CHECKS_PACKAGE}.") for m in missing]
        why.append(
            f"{len(missing)} of {len(modules)} check modules did not run: {', '.join(short[:4])}"
            + (" …" if len(short) > 4 else "")
        )
    if dropped:
        short = [d.removeprefix(f"{CHECKS_PACKAGE}.") for d in dropped]
        why.append(
            f"{len(dropped)} check(s) of modules that ran did not run: {', '.join(short[:3])}"
            + (" …" if len(short) > 3 else "")
        )
    if modified:
        why.append(
            f"the harness's check modules differ from its manifest: {', '.join(modified[:3])}"
            + (" …" if len(modified) > 3 else "")
        )
    if concerns.not_run:
        why.append(
            "concerns that apply here did not run (skipped, waived by the expectations or not "
            f"exercised): {', '.join(concerns.not_run)}"
        )
    skipped = [c for c in checks if c.outcome == "skip"]
    # The counts keep their first meaning: skips whose reason is the harness's own not
    # applicable one (no TT plugin, too few lanes) on a check whose module declares it, and the
    # rest (whether the server bears the reason out is the tier's and the concerns' business).
    not_applicable = sum(1 for c in skipped if _declared_excuse(c))
    return Coverage(
        full=not why,
        selected=len(checks),
        deselected=deselected,
        keyword=keyword or None,
        markers=markers or None,
        args=given,
        missing_modules=missing,
        missing_checks=dropped,
        not_applicable=not_applicable,
        skipped_other=len(skipped) - not_applicable,
        partial_because=tuple(why),
        suite=tuple(modules),
        modified_modules=tuple(modified),
        waived=concerns.waived,
        concerns_not_run=concerns.not_run,
    )


# Which recorded suites are a test's own (judged as recorded): never decided by a report. The
# harness accepts none; tests that build small reports of made-up modules install a rule
# (`fixture_suites`) for their duration.
_fixture_suite_rule: Callable[[Sequence[str]], bool] | None = None


@contextmanager
def fixture_suites(rule: Callable[[Sequence[str]], bool]) -> Iterator[None]:
    """For tests only: recorded suites ``rule`` accepts are judged as recorded, not against
    the shipped manifest. A report claiming this harness is otherwise always held to it."""
    global _fixture_suite_rule
    before, _fixture_suite_rule = _fixture_suite_rule, rule
    try:
        yield
    finally:
        _fixture_suite_rule = before


def foreign_suite(suite: Sequence[str], shipped: Sequence[str]) -> bool:
    """A recorded suite that names none of the harness's modules and that a test declared its
    own (`fixture_suites`); without such a declaration, none is (the report's word is not
    enough: a suite of one made-up module would escape the manifest)."""
    rule = _fixture_suite_rule
    return rule is not None and bool(suite) and not set(suite) & set(shipped) and rule(suite)


# Where the manifest lives in the repository (committed.py reads it at a recorded commit).
MANIFEST_PATH = "conformance/tt_conformance/checks/MANIFEST.json"


@dataclass(frozen=True)
class Yardstick:
    """The manifest a report's coverage is judged against."""

    modules: tuple[str, ...]
    checks: Mapping[str, Sequence[str]]
    concerns: Mapping[str, str]  # each module's concern (its checks')
    label: str | None  # said when the run is partial: why today's manifest judged it


def yardstick_for(report: Report) -> Yardstick:
    """The manifest at the report's harness commit when this checkout's git holds it in the
    harness's history (committed.history_commit): a run is judged by the suite its harness
    shipped, so a module added since neither makes an old run partial nor inconsistent (the
    gate still names a check the candidate lacks). The commit is the report's word, the
    manifest is git's: an older commit's suite is what that harness ran. Otherwise today's
    manifest, labelled; so is a manifest untrue to the check modules committed beside it
    (`_untrue_manifest`). A commit's manifest that lists no check ids or concerns (written
    before they were) is paired with today's of its modules."""
    commit = report.versions.harness_commit
    found = committed_file(commit, MANIFEST_PATH)
    if found is not None:
        try:
            data = json.loads(found[1].decode("utf-8"))
        except ValueError:
            data = None
        untrue = (
            _untrue_manifest(str(harness_repository()), commit.removesuffix("+dirty"), found[1])
            if isinstance(data, dict) and data.get("kind") == MANIFEST_KIND
            else None
        )
        if untrue is not None:
            # A commit of the harness's line whose manifest lists other checks than its
            # modules define is no suite any harness ran: today's judges the run, labelled.
            why = (
                f"judged against this harness's manifest (the one at harness commit "
                f"{commit[:12]} disagrees with the check modules committed beside it: {untrue})"
            )
            return Yardstick(suite_modules(), read_manifest_checks(), read_manifest_concerns(), why)
        if isinstance(data, dict) and data.get("kind") == MANIFEST_KIND:
            modules = tuple(sorted(str(m) for m in data.get("modules", {})))
            listed, named = data.get("checks"), data.get("concerns")
            today, concerns_now = read_manifest_checks(), read_manifest_concerns()
            checks = (
                {str(k): tuple(str(i) for i in v) for k, v in listed.items()}
                if isinstance(listed, dict)
                else {m: today[m] for m in modules if m in today}
            )
            concerns = (
                {str(k): str(v) for k, v in named.items()}
                if isinstance(named, dict)
                else {m: concerns_now[m] for m in modules if m in concerns_now}
            )
            return Yardstick(modules, checks, concerns, None)
    recorded = re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?", commit) is not None
    if not recorded:
        label = None  # no commit recorded: nothing else to judge by, nothing to say
    elif commit_state(commit) == "foreign":
        # A loose or unrelated commit in the object store is no harness's: its manifest is
        # whatever its author wrote.
        label = (
            f"judged against this harness's manifest (harness commit {commit[:12]} is not in "
            "this harness's history)"
        )
    else:
        label = (
            f"judged against this harness's manifest (the one at harness commit {commit[:12]} "
            "cannot be read here)"
        )
    return Yardstick(suite_modules(), read_manifest_checks(), read_manifest_concerns(), label)


@lru_cache(maxsize=64)
def _untrue_manifest(root: str, commit: str, manifest: bytes) -> str | None:
    """Why the manifest committed at ``commit`` is not true to the check modules committed
    beside it, or None: each module it records is committed there with the digest it records,
    and its check list (when it has one) names the module's own top-level test functions. The
    ids' parameters need pytest to list (suiteids imports the module: no code of a recorded
    commit is run here), so a dropped parameter of a listed function is not seen."""
    data = json.loads(manifest.decode("utf-8"))
    modules, listed = data.get("modules"), data.get("checks")
    if not isinstance(modules, dict) or not modules:
        return "it records no module digests"
    if isinstance(listed, dict) and set(listed) != set(modules):
        return "its check lists and its module digests name different modules"
    folder = MANIFEST_PATH.rpartition("/")[0]
    for name, digest in sorted(modules.items()):
        short = str(name).removeprefix(f"{CHECKS_PACKAGE}.")
        found = committed_file(commit, f"{folder}/{short}.py")
        if found is None:
            return f"{short} is not committed there"
        if _file_digest(found[1]) != digest:
            return f"{short} is not the file whose digest it records"
        ids = listed.get(name) if isinstance(listed, dict) else None
        if ids is None:
            continue  # a manifest from before check lists: its digests are what it says
        named = {str(i).partition("[")[0] for i in ids} if isinstance(ids, list) else set()
        defined = _test_functions(found[1])
        if named != defined:
            odd = sorted(named ^ defined)
            return f"its checks of {short} are not the module's test functions: {odd[:3]}"
    return None


def _test_functions(source: bytes) -> set[str]:
    """The module's top-level ``test_`` functions, read (never run) from its source."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    return {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
    }


def derive_coverage(report: Report) -> Coverage | None:
    """The report's coverage rebuilt from its checks and its stored selection (what pytest was
    asked: deselected count, -k, -m, arguments; the modified modules the run saw), judged
    against this harness's shipped manifest (whether or not the report recorded a suite of its
    modules), never against the modules its own checks came from: those would make a report
    that drops whole modules look full. None when the report recorded no selection (before
    schema 4)."""
    stored = report.coverage
    if stored is None:
        return None
    # A recorded suite of the harness's modules is never the yardstick: a shortened one would
    # make a run of two modules full. The shipped manifest is (rederive names the modules a
    # recorded suite lacks or adds). A report of no suite keeps the modules it recorded
    # missing, so one dropped from the manifest since still counts against it. Only a test's
    # own suite (`fixture_suites`, installed by the test, never read from the report) is taken as
    # recorded.
    yardstick = yardstick_for(report)
    shipped = yardstick.modules
    if foreign_suite(stored.suite, shipped):
        judged: Sequence[str] = stored.suite
    elif stored.suite:
        judged = shipped
    else:
        judged = sorted(set(shipped) | set(stored.missing_modules))
    derived = coverage_of(
        report.checks,
        deselected=stored.deselected,
        keyword=stored.keyword,
        markers=stored.markers,
        args=stored.args,
        suite=judged,
        modified=stored.modified_modules,
        device=report.device,
        lanes=report.server.lanes,
        model_class=report.server.model_class,
        suite_checks=yardstick.checks,
    )
    if derived.full or yardstick.label is None:
        return derived
    return derived.model_copy(
        update={"partial_because": (*derived.partial_because, yardstick.label)}
    )
