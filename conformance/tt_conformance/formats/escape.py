"""Report text made inert where it is shown: no field of a report can write a line of its own.

A report's free text (model name, versions, check ids, reasons, a tier's reason) is data from a
run, or from whoever wrote the file. Rendered raw, a newline in it starts a line that may read
as the gate's verdict ("tt-conformance gate: OK", "# Gate: OK"), and markdown or HTML in it
becomes markup. Every such field goes through one of these before it reaches the gate's text or
the step summary.
"""

from __future__ import annotations

import html
import re
import unicodedata

__all__ = [
    "code_span",
    "fence_for",
    "flat_text",
    "md_inline",
    "md_link_text",
    "md_text",
    "one_line",
]

# Characters that start or end inline markdown, a table cell or a heading's closing sequence.
_MARKDOWN = re.compile(r"([\\`*_\[\]#|~!])")


def one_line(text: object) -> str:
    """``text`` on one line: line breaks, other control characters and Unicode line or
    paragraph separators (and bidirectional overrides) shown as escapes, never obeyed."""
    out = []
    for ch in str(text):
        if ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def flat_text(text: object) -> str:
    """``text`` on one line as a table shows it: each run of whitespace (line breaks, Unicode
    line and paragraph separators included) one space, other control characters as escapes."""
    return one_line(" ".join(str(text).split()))


def md_text(text: object) -> str:
    """``text`` as literal text in a Markdown table cell, heading or list item: `flat_text`,
    with no HTML (``&`` and ``<`` as entities: no tag, no entity of the report's), no cell
    break (``\\`` and ``|`` escaped) and no heading (a leading ``#`` escaped). Emphasis stays
    (it adds no line and no tag); `md_inline` escapes that too."""
    flat = flat_text(text).replace("\\", "\\\\").replace("|", "\\|")
    flat = flat.replace("&", "&amp;").replace("<", "&lt;")
    # A leading "#" after a list marker would make the item a heading.
    return "\\" + flat if flat.startswith("#") else flat


def md_link_text(text: object) -> str:
    """`md_text` inside a link's [text]: brackets escaped too, so none closes it early."""
    return md_text(text).replace("[", "\\[").replace("]", "\\]")


def md_inline(text: object) -> str:
    """``text`` as literal inline markdown: one line, HTML escaped, markdown escaped."""
    return _MARKDOWN.sub(r"\\\1", html.escape(one_line(text), quote=False))


def code_span(text: object) -> str:
    """``text`` as one inline code span whose delimiter no backtick run inside can close."""
    inner = one_line(text)
    longest = max((len(run) for run in re.findall(r"`+", inner)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if inner.startswith("`") or inner.endswith("`") else ""
    return f"{fence}{pad}{inner}{pad}{fence}"


def fence_for(text: str) -> str:
    """A code fence longer than any backtick run in ``text`` (at least three)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)
