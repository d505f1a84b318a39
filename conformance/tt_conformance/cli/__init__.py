"""The harness's commands, each a thin argparse layer over the data model, formats and writers:

    conformance  ``tt-conformance`` (baseline promote, summary, import-bench, history add,
                 report-dir)
    matrix       ``tt-conformance-matrix`` (the support matrix and the site)
    gate         ``tt-conformance-gate`` (a candidate report against a baseline)

Each is also ``python -m tt_conformance.cli.<name>``.
"""

from __future__ import annotations

__all__: list[str] = []
