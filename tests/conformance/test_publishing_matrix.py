"""Publishing from CI (issue 32, item 7): `tt-conformance-matrix` never replaces the published
matrix with a subset. Rows (model, device) the existing MATRIX.md (or the site's) has and the new
inputs lack are named and nothing is written, unless --replace; run bare over the committed
reports (baselines left out) it refuses, and tox -e matrix's own arguments keep working."""

from __future__ import annotations

import configparser
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.conftest import published_reports
from tests.conformance.harnessgit import commit_all
from tt_conformance import committed, matrix
from tt_conformance.cli import matrix as matrix_cli
from tt_conformance.writers import write_report

REPO = Path(__file__).resolve().parents[2]


def _tox_matrix_args() -> list[str]:
    """What `tox -e matrix` (no arguments) passes: tox.ini's [testenv:matrix] posargs default."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPO / "tox.ini")
    command = ini["testenv:matrix"]["commands"].strip()
    match = re.fullmatch(r"tt-conformance-matrix \{posargs:(.*)\}", command)
    assert match, command
    return shlex.split(match.group(1))


def _tree(root: Path, make_report: Any, *cells: tuple[str, str, int], seqs: int = 32) -> Path:
    for model, device, lanes in cells:
        report = make_report({"m::a": "pass"}, model=model, device=device)
        server = report.server.model_copy(update={"lanes": lanes, "max_num_seqs": seqs})
        report = report.replace(server=server)
        write_report(report, root / model.replace("/", "--") / f"{device}-{lanes}-{seqs}")
    return root


def _columns(path: Path) -> list[tuple[str, str]]:
    return [(model, device) for model, device, _ in matrix.published_rows(path)]


def test_a_subset_does_not_replace_the_published_matrix(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    full = _tree(tmp_path / "full", make_report, ("org/a", "N150", 1), ("org/a|x", "T3K", 1),
                 ("org/b", "emulated", 4))  # fmt: skip
    out = tmp_path / "pub"
    # Fixture runs (no git work tree, no recorded commits) are published on request.
    args = ["--out-md", str(out / "MATRIX.md"), "--out-html", str(out / "matrix.html"),
            "--site", str(out / "site"), "--include-uncommitted"]  # fmt: skip
    assert matrix_cli.main([str(full), *args]) == matrix_cli.EXIT_OK
    published = {p: p.read_bytes() for p in (out / "MATRIX.md", out / "matrix.html",
                                             out / "site" / "MATRIX.md")}  # fmt: skip
    assert _columns(out / "MATRIX.md") == [
        ("org/a", "N150"), ("org/a|x", "T3K"), ("org/b", "emulated (4 lanes)")
    ]  # fmt: skip
    # Each row names its configuration profile (identity.profile_label), as the cells do.
    profiles = {(c.model, c.device): c.profile for c in matrix.fold(matrix.find_reports(full))}
    assert [r[2] for r in matrix.published_rows(out / "MATRIX.md")] == list(profiles.values())
    assert profiles[("org/b", "emulated (4 lanes)")].startswith("32 seqs x 4 lanes, len 2048")
    assert matrix.published_rows(out / "site" / "MATRIX.md") == matrix.published_rows(
        out / "MATRIX.md"
    )  # the site's links to the history pages read back as the same rows
    capsys.readouterr()

    subset = _tree(tmp_path / "subset", make_report, ("org/a", "N150", 1))
    assert matrix_cli.main([str(subset), *args]) == matrix_cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    for path in (out / "MATRIX.md", out / "site" / "MATRIX.md"):
        assert f"{path} has 2 row(s) that no input report" in err
    assert f"org/a|x / T3K / {profiles[('org/a|x', 'T3K')]}; org/b / emulated (4 lanes)" in err
    assert "--replace" in err
    assert {p: p.read_bytes() for p in published} == published  # nothing written

    # More rows, or the same ones, are fine; --replace drops rows on purpose.
    assert matrix_cli.main([str(full), *args]) == matrix_cli.EXIT_OK
    assert matrix_cli.main([str(subset), *args, "--replace"]) == matrix_cli.EXIT_OK
    assert _columns(out / "MATRIX.md") == [("org/a", "N150")]


def test_a_configuration_is_its_own_row_and_dropping_one_is_refused(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs of one model on one device with another max_num_seqs are two rows, never one cell;
    publishing without one of them drops a row like any other."""
    both = _tree(tmp_path / "both", make_report, ("org/a", "N150", 1))
    _tree(both, make_report, ("org/a", "N150", 1), seqs=64)
    out = tmp_path / "pub"
    args = ["--out-md", str(out / "MATRIX.md"), "--out-html", str(out / "matrix.html"),
            "--include-uncommitted"]  # fmt: skip
    assert matrix_cli.main([str(both), *args]) == matrix_cli.EXIT_OK
    rows = matrix.published_rows(out / "MATRIX.md")
    assert [r[:2] for r in rows] == [("org/a", "N150")] * 2
    assert sorted(r[2].split(",")[0] for r in rows) == ["32 seqs", "64 seqs"]
    capsys.readouterr()
    one = _tree(tmp_path / "one", make_report, ("org/a", "N150", 1))
    assert matrix_cli.main([str(one), *args]) == matrix_cli.EXIT_BAD_INPUT
    assert "org/a / N150 / 64 seqs, len 2048" in capsys.readouterr().err


def test_an_older_matrix_without_configurations_is_read_by_model_and_device(
    tmp_path: Path, make_report: Any
) -> None:
    older = tmp_path / "MATRIX.md"
    older.write_text(
        "# Model support matrix\n\n| model | device | tier | accuracy |\n|---|---|---|---|\n"
        "| org/a | N150 | functional | pass |\n"
    )
    assert matrix.published_rows(older) == [("org/a", "N150", "")]
    reports = _tree(tmp_path / "r", make_report, ("org/a", "N150", 1))
    cells = matrix.fold(matrix.find_reports(reports))
    assert matrix.dropped_rows(cells, [older]) == {}  # the same model and device: kept


def test_a_file_that_is_not_a_matrix_is_not_overwritten(
    tmp_path: Path, make_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = _tree(tmp_path / "reports", make_report, ("org/a", "N150", 1))
    notes = tmp_path / "NOTES.md"
    notes.write_text("# Release notes\n")
    args = [str(reports), "--out-md", str(notes), "--out-html", str(tmp_path / "m.html")]
    assert matrix_cli.main(args) == matrix_cli.EXIT_BAD_INPUT
    assert f"{notes}: not a support matrix" in capsys.readouterr().err
    assert notes.read_text() == "# Release notes\n"
    assert matrix_cli.main([*args, "--replace"]) == matrix_cli.EXIT_OK


def test_bare_over_the_committed_reports_keeps_the_published_matrix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A fresh clone of the harness's repository (its history: the reports' commits), the
    # harness running from it, the published matrix, the baselines and the history store
    # committed in it.
    work = tmp_path / "clone"
    root = committed.checkout_root()
    assert root is not None
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(root), str(work)],
                   check=True)  # fmt: skip
    published_reports(work)
    commit_all(work, "clone")
    monkeypatch.setattr(committed, "checkout_root", lambda: work)
    monkeypatch.chdir(work)
    published = Path("reports/MATRIX.md").read_bytes()
    rows = matrix.published_rows(Path("reports/MATRIX.md"))
    assert len(rows) > 1  # the committed matrix: rows from the baselines

    assert matrix_cli.main([]) == matrix_cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "reports/MATRIX.md has" in err and "--include-baselines" in err
    assert Path("reports/MATRIX.md").read_bytes() == published

    assert matrix_cli.main(_tox_matrix_args()) == matrix_cli.EXIT_OK
    assert matrix.published_rows(Path("reports/MATRIX.md")) == rows
    assert matrix.published_rows(Path("reports/site/MATRIX.md")) == rows
