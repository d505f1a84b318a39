"""The jinja2 environment of the templated pages (``templates/``: Markdown and HTML alike)."""

from __future__ import annotations

import functools

from jinja2 import Environment, PackageLoader, StrictUndefined

from tt_conformance.formats.escape import code_span, fence_for, md_inline, md_link_text, md_text
from tt_conformance.history import UNKNOWN
from tt_conformance.matrix import CONCERN_STATES, short_check, tier_of
from tt_conformance.names import path_component
from tt_conformance.numfmt import format_number

__all__ = ["CONCERN_CLASS", "OUTCOME_CLASS", "TIER_CLASS", "environment", "render_template"]

CONCERN_CLASS = {
    "pass": "c-pass",
    "pass with expected failures": "c-expected",
    "pass with waivers": "c-waived",
    "pass, some not run": "c-partial",
    "fail": "c-fail",
    "not run": "c-notrun",
}
# A check's outcome on a run's page, in the concern states' colours.
OUTCOME_CLASS = {
    "pass": "c-pass",
    "xpass": "c-pass",
    "flaky": "c-partial",
    "xfail": "c-expected",
    "skip": "c-notrun",
    "fail": "c-fail",
    "error": "c-fail",
}
TIER_CLASS = {
    "complete": "s-complete",
    "functional": "s-functional",
    "experimental": "s-experimental",
    "emulated": "s-emulated",
    "partial": "s-partial",
    "fail": "s-fail",
    "aborted": "s-fail",
}


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("tt_conformance", "templates"),
        autoescape=lambda name: bool(name and name.endswith(".html.jinja")),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = lambda v: "—" if v is None else format_number(float(v))
    env.filters["short"] = short_check
    env.filters["tier"] = lambda report: tier_of(report).tier  # derived, never the stored one
    env.filters["slug"] = path_component
    env.filters["inline"] = md_inline
    env.filters["code"] = code_span
    env.filters["fence"] = fence_for
    # Report text in a Markdown page: one line, no HTML, no cell break (formats/escape.py).
    env.filters["md"] = md_text
    env.filters["md_link"] = md_link_text
    env.globals["UNKNOWN"] = UNKNOWN
    env.globals["CONCERN_CLASS"] = CONCERN_CLASS
    env.globals["TIER_CLASS"] = TIER_CLASS
    env.globals["OUTCOME_CLASS"] = OUTCOME_CLASS
    env.globals["CONCERN_STATES"] = CONCERN_STATES
    return env


@functools.cache
def environment() -> Environment:
    """Built on first use: the pytest plugin imports the writers in every pytest run."""
    return _environment()


def render_template(name: str, **context: object) -> str:
    return environment().get_template(name).render(**context)
