"""Output formats: each module turns results (reports, matrix cells, gate results, run
histories) into one format and returns text; none writes files (`tt_conformance.writers`
does) and none is imported by the data model.

    json      reports and run indexes as published JSON
    markdown  reports, the matrix, history, compare pages, the CI step summary
    junit     reports as JUnit XML (TT's CI data collector)
    html      the matrix, history and compare pages
    text      the gate's plain-text verdict

`cells` (Markdown table cells), `templates` (the jinja2 environment) and `views` (the rows and
contexts the Markdown and HTML pages share) serve them.
"""

from __future__ import annotations

__all__: list[str] = []
