"""``tt-conformance-matrix``: fold a tree of reports into the support matrix (and the site).

Usage: tt-conformance-matrix [REPORT_DIR] [--out-md FILE] [--out-html FILE] [--site DIR]
                             [--include-baselines] [--replace]

REPORT_DIR (default ``reports``) is searched recursively for report JSON files (other JSON, such
as expectations, is ignored; so is the ``baselines/`` subtree unless --include-baselines). The
newest report per model x device is shown (a lane-DP server, lanes > 1, is its own column).
Outputs default to REPORT_DIR/MATRIX.md and REPORT_DIR/matrix.html.

The published matrix never shrinks by accident: when the MATRIX.md it would overwrite (--out-md,
and --site's) holds rows (model, device) the new inputs lack, nothing is written and the rows
are named (e.g. a bare run without --include-baselines, the published rows being baselines);
--replace drops them. Exit codes: 0 written, 2 bad input (missing directory, malformed report,
rows that would disappear, an output that is not a matrix this command wrote).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tt_conformance.matrix import (
    STATUS_ABORTED,
    STATUS_FAIL,
    MatrixError,
    dropped_rows,
    find_reports,
    fold,
)
from tt_conformance.report import utc_now_iso
from tt_conformance.writers import build_site, write_matrix

__all__ = ["EXIT_BAD_INPUT", "EXIT_OK", "main"]

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tt-conformance-matrix",
        description="Fold conformance reports into a model x device support matrix.",
    )
    parser.add_argument("report_dir", nargs="?", default="reports", type=Path)
    parser.add_argument("--out-md", type=Path, default=None, help="default REPORT_DIR/MATRIX.md")
    parser.add_argument(
        "--out-html", type=Path, default=None, help="default REPORT_DIR/matrix.html"
    )
    parser.add_argument(
        "--site",
        type=Path,
        default=None,
        help="also build the site (matrix, history and compare pages) into this directory",
    )
    parser.add_argument(
        "--include-baselines",
        action="store_true",
        help="also consider reports under baselines/ directories",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="write even when the new matrix drops rows (model, device) the existing one has",
    )
    args = parser.parse_args(argv)
    out_md = args.out_md or args.report_dir / "MATRIX.md"
    out_html = args.out_html or args.report_dir / "matrix.html"
    published = [out_md] + ([args.site / "MATRIX.md"] if args.site is not None else [])
    try:
        found = find_reports(args.report_dir, args.include_baselines)
        cells = fold(found)
    except MatrixError as exc:
        print(f"tt-conformance-matrix: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        dropped = {} if args.replace else dropped_rows(cells, published)
    except MatrixError as exc:
        print(f"tt-conformance-matrix: error: {exc}; pass --replace to overwrite", file=sys.stderr)
        return EXIT_BAD_INPUT
    if dropped:
        hint = "" if args.include_baselines else " (baselines/ left out: no --include-baselines)"
        for path, rows in dropped.items():
            print(
                f"tt-conformance-matrix: error: {path} has {len(rows)} row(s) that no input "
                f"report{hint} provides: {'; '.join(rows)}. Nothing written; pass --replace to "
                "drop them",
                file=sys.stderr,
            )
        return EXIT_BAD_INPUT
    generated = utc_now_iso()
    write_matrix(cells, generated, out_md, out_html)
    failing = sum(1 for c in cells if c.status in (STATUS_FAIL, STATUS_ABORTED))
    print(f"matrix: {len(cells)} model x device entries ({failing} failing)")
    print(f"markdown: {out_md}\nhtml: {out_html}")
    if args.site is not None:
        pages = build_site(found, args.site, generated)
        print(
            f"site: {args.site / 'index.html'} ({len(pages['history']) // 2} history pages, "
            f"{(len(pages['compare']) - 1) // 2} comparisons)"
        )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
