"""Coverage: what a run selected of the harness's suite, and whether that is the whole suite.

A run is *full* when every check module the harness ships ran at least one check and pytest
deselected nothing (no ``-k``/``-m`` that dropped a check, no ``--deselect``, no single test
picked by node id). Anything less is *partial*: tiers.py gives it no TT tier, the matrix never
lets it displace a full run, and ``baseline promote`` refuses it. Skips are not a selection:
a check skipped as not applicable to this server (a non-TT server, too few lanes) or for
another reason still ran and says why, so it is counted, not held against coverage.

Data only: the pytest side (reporting.py) hands in what pytest was asked and what ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources

from tt_conformance.report import CheckResult, Coverage
from tt_conformance.ttmetrics import NOT_APPLICABLE

__all__ = ["CHECKS_PACKAGE", "DESELECTED_KEY", "NEEDS_LANES", "coverage_of", "suite_modules"]

CHECKS_PACKAGE = "tt_conformance.checks"
DESELECTED_KEY = "tt_conformance_deselected"  # an xdist worker's count, in its workeroutput
# The requires_lanes skip's reason starts so (pytest_plugin.py): the server cannot run it.
NEEDS_LANES = "needs a server serving"


def suite_modules() -> tuple[str, ...]:
    """The check modules this harness ships (``tt_conformance.checks.test_*``)."""
    names = (
        entry.name.removesuffix(".py")
        for entry in resources.files(CHECKS_PACKAGE).iterdir()
        if entry.name.startswith("test_") and entry.name.endswith(".py")
    )
    return tuple(sorted(f"{CHECKS_PACKAGE}.{name}" for name in names))


def _module_of(check_id: str) -> str:
    return check_id.partition("::")[0]


def coverage_of(
    checks: Sequence[CheckResult],
    *,
    deselected: int,
    keyword: str | None,
    markers: str | None,
    args: Iterable[str],
    suite: Sequence[str] | None = None,
) -> Coverage:
    """The run's coverage from the checks that ran and how pytest was asked to select them."""
    modules = suite_modules() if suite is None else tuple(suite)
    ran = {_module_of(c.id) for c in checks}
    missing = tuple(m for m in modules if m not in ran)
    given = tuple(str(a) for a in args)
    picked = tuple(a for a in given if "::" in a)
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
    skipped = [c for c in checks if c.outcome == "skip"]
    not_applicable = sum(1 for c in skipped if c.reason.startswith((NOT_APPLICABLE, NEEDS_LANES)))
    return Coverage(
        full=not why,
        selected=len(checks),
        deselected=deselected,
        keyword=keyword or None,
        markers=markers or None,
        args=given,
        missing_modules=missing,
        not_applicable=not_applicable,
        skipped_other=len(skipped) - not_applicable,
        partial_because=tuple(why),
    )
