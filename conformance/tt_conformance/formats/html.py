"""HTML pages (jinja2 templates, autoescaped): the matrix, history and compare pages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tt_conformance.formats.templates import render_template
from tt_conformance.formats.views import Comparison, matrix_rows, pivot, run_context
from tt_conformance.history import CellStory, Run
from tt_conformance.matrix import KEY_PERF, MatrixCell, all_concerns
from tt_conformance.mutation import NO_CAMPAIGN, PublishedScore

__all__ = [
    "render_compare_html",
    "render_compare_index_html",
    "render_history_html",
    "render_matrix_html",
    "render_run_html",
]


def render_matrix_html(
    cells: Sequence[MatrixCell],
    generated_at: str,
    links: bool = False,
    stories: dict[tuple[str, str, str], CellStory | None] | None = None,
    mutation: PublishedScore = NO_CAMPAIGN,
) -> str:
    """The matrix page: standalone (matrix.html) or the site's index with links; ``stories``
    (the site's, from every kept run) add "since" and "last good" to the pivot; ``mutation``
    is the plugin's last mutation campaign (or none recorded)."""
    concerns = all_concerns([c.report for c in cells])
    return render_template(
        "matrix.html.jinja",
        rows=matrix_rows(cells, concerns),
        pivot=pivot(cells, stories, links),
        concerns=concerns,
        generated_at=generated_at,
        key_perf=[label for label, _ in KEY_PERF],
        links=links,
        mutation=mutation,
    )


def render_run_html(run: Run, generated_at: str, mutation: PublishedScore = NO_CAMPAIGN) -> str:
    """One run's page on the site (``mutation``: the last plugin mutation campaign)."""
    return render_template("run.html.jinja", **run_context(run, generated_at, mutation))


def render_history_html(context: dict[str, Any]) -> str:
    """A model and device's history page (context: `views.history_context`)."""
    return render_template("history.html.jinja", **context)


def render_compare_html(comparison: Comparison, generated_at: str) -> str:
    return render_template("compare.html.jinja", c=comparison, generated_at=generated_at)


def render_compare_index_html(comparisons: Sequence[Comparison], generated_at: str) -> str:
    return render_template(
        "compare_index.html.jinja", comparisons=comparisons, generated_at=generated_at
    )
