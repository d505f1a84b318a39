"""Facts a report states twice, which must agree: the second statement re-derived from the first.

rederive.py recomputes a report's verdicts; this module holds what the report's own fields fix
beyond them (`contradictions`, called by `rederive.inconsistencies`, so publish, promote and the
gate refuse a report that fails it):

* a figure's statistic is fixed by its name in the figure catalogue (``<metric>_<stat>@<shape>``
  for mean, median and p99, ``<metric>@<shape>`` for a single value): ``ttft_median`` with
  ``stat: "mean"`` is a figure relabelled to escape the gate's default gating;
* figures computed from other figures agree with them (tokens/s/user is 1000 / TPOT of the same
  statistic; TT's t/s is 1000 / median TPOT x concurrency, as test_serving_perf and benchimport
  compute them): a copy whose numbers were jittered one by one breaks these;
* a check that needed more than one attempt and passed is flaky by definition (the harness
  retries only checks listed flaky): ``outcome: "pass"`` with ``attempts: 2`` is a relabelled
  retry.
"""

from __future__ import annotations

import math

from tt_conformance.report import PerfFigure, Report

__all__ = [
    "DERIVED_SLACK",
    "NAMED_STATS",
    "contradictions",
    "derived_source",
    "derived_value",
    "with_derived",
]

NAMED_STATS = ("mean", "median", "p99")
# Stored figures are full floats; bench imports compute theirs from the bench's rounded JSON
# values, identically on both sides. A relative slack of 1e-4 is far above float error and far
# below any real re-run's difference.
DERIVED_SLACK = 1e-4


def _stat_problem(name: str, fig: PerfFigure) -> str | None:
    head = name.partition("@")[0]
    named = next((s for s in NAMED_STATS if head.endswith(f"_{s}")), None)
    if fig.stat is None:
        return None  # written before figures carried a statistic: nothing to contradict
    if named is not None and fig.stat != named:
        return f"stored stat {fig.stat!r}, the figure's name makes it {named!r}"
    if named is None and fig.stat in NAMED_STATS:
        return f"stored stat {fig.stat!r}, the figure's name makes it a single 'value'"
    if fig.metric is not None and head != fig.metric and not head.startswith(f"{fig.metric}_"):
        return f"stored metric {fig.metric!r}, the figure's name makes it {head!r}"
    return None


def derived_source(name: str) -> str | None:
    """The figure ``name`` is computed from (None for a measured one)."""
    head, _, key = name.partition("@")
    if head.startswith("tps_user_"):
        return f"tpot_{head.removeprefix('tps_user_')}@{key}"
    if head == "tt_tps":
        return f"tpot_median@{key}"
    return None


def derived_value(name: str, perf: dict[str, PerfFigure]) -> tuple[str, float] | None:
    """The figure ``name`` is computed from and the value that gives it (None: ``name`` is
    measured, or its source is not in ``perf``, or has another check or source)."""
    fig, source = perf[name], derived_source(name)
    src = None if source is None else perf.get(source)
    if source is None or src is None or src.check != fig.check or src.source != fig.source:
        return None
    if name.startswith("tt_tps"):
        if fig.concurrency is None:
            return None
        return source, 1000.0 / src.value * fig.concurrency
    return source, 1000.0 / src.value


def with_derived(perf: dict[str, PerfFigure]) -> dict[str, PerfFigure]:
    """``perf`` with every derived figure recomputed from its source (a test's re-measured run
    moves its measured figures; the derived ones follow, as the harness computes them)."""
    out = dict(perf)
    for name in perf:
        derived = derived_value(name, perf)
        if derived is not None:
            out[name] = perf[name].model_copy(update={"value": derived[1]})
    return out


def contradictions(report: Report) -> list[str]:
    """Every restated fact of the report that disagrees with what it restates."""
    out: list[str] = []
    for name, fig in sorted(report.perf.items()):
        problem = _stat_problem(name, fig)
        if problem is not None:
            out.append(f"field 'perf.{name}.stat': {problem}")
        derived = derived_value(name, report.perf)
        if derived is not None and not math.isclose(fig.value, derived[1], rel_tol=DERIVED_SLACK):
            out.append(
                f"field 'perf.{name}.value': stored {fig.value:.6g}, computed from "
                f"{derived[0]} it is {derived[1]:.6g}"
            )
    for i, check in enumerate(report.checks):
        if check.attempts > 1 and check.outcome == "pass":
            out.append(
                f"field 'checks[{i}].outcome' ({check.id}): stored 'pass' after "
                f"{check.attempts} attempts, which is 'flaky'"
            )
    return out
