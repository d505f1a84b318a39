"""tt-conformance: black-box conformance harness for OpenAI-compatible vLLM servers.

Nothing here imports vLLM or vllm_tt_plugin. The layers (docs/ARCHITECTURE.md), each importing
only the ones above it:

    foundation   names, envs, datafile, numfmt
    data model   report, expectations, tiers, matrix, gate, history, provenance, ttmetrics,
                 server, rawhttp, perfshapes, perfstats, benchimport, accuracy, longtasks,
                 chisquare, fisher, identity, selection, rederive
                 (no output format)
    formats      formats.json, formats.markdown, formats.junit, formats.html, formats.text
    writers      writers (every file written), baseline (promote, gate a run)
    entry points pytest side (pytest_plugin, fixtures, ttpath, state, collector, reporting,
                 serverlock, abort, checks) and commands (cli.conformance, cli.matrix, cli.gate,
                 schema)

The public API is ``__all__`` below (loaded on first use, so ``import tt_conformance`` stays
cheap in every pytest run) and each module's own ``__all__``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tt_conformance.names import installed_version

if TYPE_CHECKING:
    from tt_conformance.baseline import gate_run, promote
    from tt_conformance.expectations import Expectations, ExpectationsError, load_expectations
    from tt_conformance.gate import GateResult, compare
    from tt_conformance.matrix import MatrixCell, find_reports, fold
    from tt_conformance.report import CheckResult, PerfFigure, Report, ReportError, load_report
    from tt_conformance.tiers import derive_tier
    from tt_conformance.writers import build_site, write_matrix, write_report

__version__ = installed_version()

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "CheckResult": "report",
    "PerfFigure": "report",
    "Report": "report",
    "ReportError": "report",
    "load_report": "report",
    "Expectations": "expectations",
    "ExpectationsError": "expectations",
    "load_expectations": "expectations",
    "derive_tier": "tiers",
    "MatrixCell": "matrix",
    "find_reports": "matrix",
    "fold": "matrix",
    "GateResult": "gate",
    "compare": "gate",
    "gate_run": "baseline",
    "promote": "baseline",
    "build_site": "writers",
    "write_matrix": "writers",
    "write_report": "writers",
}

__all__ = [
    "CheckResult",
    "Expectations",
    "ExpectationsError",
    "GateResult",
    "MatrixCell",
    "PerfFigure",
    "Report",
    "ReportError",
    "__version__",
    "build_site",
    "compare",
    "derive_tier",
    "find_reports",
    "fold",
    "gate_run",
    "load_expectations",
    "load_report",
    "promote",
    "write_matrix",
    "write_report",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tt_conformance' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tt_conformance.{module}"), name)
