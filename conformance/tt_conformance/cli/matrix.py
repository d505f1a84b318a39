"""``tt-conformance-matrix``: fold a tree of reports into the support matrix (and the site).

Usage: tt-conformance-matrix [REPORT_DIR] [--out-md FILE] [--out-html FILE] [--site DIR]
                             [--include-baselines] [--replace]

REPORT_DIR (default ``reports``) is searched recursively for report JSON files (other JSON, such
as expectations, is ignored; so is the ``baselines/`` subtree unless --include-baselines). The
newest report per model x device is shown (a lane-DP server, lanes > 1, is its own column).
Outputs default to REPORT_DIR/MATRIX.md and REPORT_DIR/matrix.html.

Only provably committed runs are published unless --include-uncommitted: a report file must be
tracked and unmodified in a work tree of the harness's own git repository (the checkout this
harness runs from, or for an installed harness the repository it is run in when that holds the
harness's source: a throwaway ``git init`` proves nothing), and its run must have recorded its
plugin and harness commits as commits of that repository's history, neither ``+dirty`` (each
report left out is named on stderr). An inconsistent report (its stored tier or coverage disagrees
with its checks, rederive.py) is refused, never published.

Every output is guarded the same way: the MATRIX.md and matrix.html it would overwrite
(--out-md, --out-html, and --site's MATRIX.md and index.html) must be matrices this command
wrote, holding no row (model, device, configuration) the new inputs lack (e.g. a bare run
without --include-baselines, the published rows being baselines), and --site must be a new or
empty directory or one this command built (its .tt-conformance-site marker); otherwise nothing
is written and the command says why. --replace overrides both. Exit codes: 0 written, 2 bad
input (missing directory, malformed or inconsistent report, rows that would disappear, an
output that is not a matrix this command wrote; or, pages still written, a mutation record or
its second oracle's record refused).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tt_conformance import committed
from tt_conformance.cli.pipes import keeps_verdict
from tt_conformance.matrix import (
    STATUS_ABORTED,
    STATUS_FAIL,
    MatrixError,
    dropped_rows,
    find_reports,
    fold,
)
from tt_conformance.mutation import published_score
from tt_conformance.report import Report, utc_now_iso
from tt_conformance.writers import SITE_MARKER, build_site, write_matrix

__all__ = ["EXIT_BAD_INPUT", "EXIT_OK", "committed_only", "main"]

EXIT_OK = 0
EXIT_BAD_INPUT = 2


@dataclass(frozen=True)
class _GitFiles:
    """A directory's git work tree: its repository and the files in it."""

    repository: Path  # the common git directory: one for all work trees of a repository
    tracked: set[Path]
    changed: set[Path]


def _repository(root: Path) -> Path | None:
    """The git repository (common git directory) ``root`` lies in, else None."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--path-format=absolute", "--git-common-dir"],
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 else None


def _git_files(root: Path) -> _GitFiles | None:
    """The files under ``root`` when it is inside a git work tree, else None."""
    git = ["git", "-C", str(root)]
    repository = _repository(root)
    try:
        top = subprocess.run([*git, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
        if top.returncode != 0 or repository is None:
            return None
        base = Path(top.stdout.strip())
        tracked = subprocess.run([*git, "ls-files", "-z", "--full-name", "."],
                                 capture_output=True, text=True, check=True)  # fmt: skip
        changed = subprocess.run([*git, "diff", "--name-only", "-z", "HEAD", "--", "."],
                                 capture_output=True, text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None

    def paths(out: str) -> set[Path]:
        return {(base / p).resolve() for p in out.split("\0") if p}

    return _GitFiles(repository, paths(tracked.stdout), paths(changed.stdout))


@dataclass(frozen=True)
class _Harness:
    """The harness's own repository: a work tree of it and its common git directory."""

    root: Path
    repository: Path


def _not_committed(
    path: Path, report: Report, files: _GitFiles | None, harness: _Harness | None
) -> str | None:
    """Why the report is not provably a committed run of this harness's repository, or None."""
    v = report.versions
    commits = (("plugin", v.plugin_commit), ("harness", v.harness_commit))
    dirty = [name for name, value in commits if value.endswith("+dirty")]
    unrecorded = [name for name, value in commits if value.strip() in ("", "unknown")]
    if files is None:
        return "not committed as far as can be told: not in a git work tree"
    if harness is None:
        return (
            "not committed as far as can be told: no git repository of the harness here (an "
            "installed harness run outside its repository)"
        )
    if files.repository != harness.repository:
        # Anyone can commit a forged report to a repository of their own.
        return f"committed in another git repository ({files.repository}), not the harness's"
    if path.resolve() not in files.tracked:
        return "not committed to git"
    if path.resolve() in files.changed:
        return "modified since its commit"
    if dirty:
        return f"a run of a modified checkout ({', '.join(dirty)} commit +dirty)"
    if unrecorded:
        return (
            f"the run recorded no {' and no '.join(unrecorded)} commit, so nothing shows it ran "
            "committed code"
        )
    foreign = [
        f"{name} commit {value!r}"
        for name, value in commits
        if committed.commit_state(value, harness.root) != "history"
    ]
    if foreign:
        return f"its {' and '.join(foreign)} is not a commit of the harness's history"
    return None


def committed_only(
    found: list[tuple[Path, Report]],
) -> tuple[list[tuple[Path, Report]], list[tuple[Path, str]]]:
    """The reports a published matrix may show: provably committed runs, i.e. report files
    tracked and unmodified in a work tree of the harness's own repository, of runs that
    recorded their plugin and harness commits as commits of its history, not of a ``+dirty``
    checkout; the rest, with why. A file outside any git work tree, one committed in another
    repository, or a run that recorded no commit, proves nothing: it is left out too."""
    kept: list[tuple[Path, Report]] = []
    left: list[tuple[Path, str]] = []
    root = committed.harness_repository()
    repository = _repository(root) if root is not None else None
    harness = _Harness(root, repository) if root is not None and repository is not None else None
    git: dict[Path, _GitFiles | None] = {}
    for path, report in found:
        where = path.resolve().parent
        if where not in git:
            git[where] = _git_files(where)
        why = _not_committed(path, report, git[where], harness)
        if why is None:
            kept.append((path, report))
        else:
            left.append((path, f"{why} (pass --include-uncommitted)"))
    return kept, left


def _site_guard(site: Path) -> None:
    """--site writes only into a new or empty directory, or one this command built."""
    if site.exists() and not site.is_dir():
        raise MatrixError(f"--site {site}: exists and is not a directory")
    if site.is_dir() and any(site.iterdir()) and not (site / SITE_MARKER).is_file():
        raise MatrixError(
            f"--site {site}: the directory holds files this command did not write (no "
            f"{SITE_MARKER}); choose another directory, or pass --replace to write into it"
        )


@keeps_verdict
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
        help="write even when the new matrix drops rows (model, device) the existing one has, "
        "or into a --site directory this command did not build",
    )
    parser.add_argument(
        "--include-uncommitted",
        action="store_true",
        help="also publish reports not committed to git (untracked or modified files, runs "
        "of a +dirty checkout); by default only committed runs are published",
    )
    parser.add_argument(
        "--mutation",
        type=Path,
        default=None,
        help="the plugin's last mutation campaign to show (default "
        "REPORT_DIR/mutation/plugin.json; none recorded when absent)",
    )
    args = parser.parse_args(argv)
    out_md = args.out_md or args.report_dir / "MATRIX.md"
    out_html = args.out_html or args.report_dir / "matrix.html"
    published = [out_md, out_html]
    if args.site is not None:
        published += [args.site / "MATRIX.md", args.site / "index.html"]
    try:
        if out_md.resolve() == out_html.resolve():
            raise MatrixError(f"--out-md and --out-html are the same file: {out_md}")
        if args.site is not None and not args.replace:
            _site_guard(args.site)
        found = find_reports(args.report_dir, args.include_baselines)
        if not args.include_uncommitted:
            found, left_out = committed_only(found)
            for path, why in left_out:
                print(f"tt-conformance-matrix: left out {path}: {why}", file=sys.stderr)
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
    mutation = published_score(
        args.mutation or args.report_dir / "mutation" / "plugin.json",
        committed_only=not args.include_uncommitted,
    )
    if mutation.refused:
        # The pages are still written (they say no campaign is recorded, with why), but the
        # command fails: a publish job must not go green over a record it could not vouch for.
        print(
            f"tt-conformance-matrix: error: mutation score refused: {mutation.refused} "
            f"(pages written without it; exit {EXIT_BAD_INPUT})",
            file=sys.stderr,
        )
    if mutation.second_oracle_refused:
        print(
            f"tt-conformance-matrix: error: second oracle record refused: "
            f"{mutation.second_oracle_refused} (the pages say so; exit {EXIT_BAD_INPUT})",
            file=sys.stderr,
        )
    write_matrix(found, generated, out_md, out_html, mutation)
    failing = sum(1 for c in cells if c.status in (STATUS_FAIL, STATUS_ABORTED))
    print(f"matrix: {len(cells)} model x device entries ({failing} failing)")
    print(f"markdown: {out_md}\nhtml: {out_html}")
    if args.site is not None:
        pages = build_site(found, args.site, generated, mutation)
        print(
            f"site: {args.site / 'index.html'} ({len(pages['history']) // 2} history pages, "
            f"{(len(pages['compare']) - 1) // 2} comparisons)"
        )
    refused = mutation.refused or mutation.second_oracle_refused
    return EXIT_BAD_INPUT if refused else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
