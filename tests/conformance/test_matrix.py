"""Matrix folding: newest report per model x device, statuses, Markdown and escaped HTML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tt_conformance import matrix
from tt_conformance.cli import matrix as matrix_cli
from tt_conformance.formats.html import render_matrix_html
from tt_conformance.formats.markdown import render_matrix_markdown
from tt_conformance.report import CollectionError
from tt_conformance.writers import write_report


def _tree(tmp_path: Path, make_report, accuracy=()) -> Path:
    root = tmp_path / "reports"
    perf = {
        "ttft_median@i128o128c1": (40.0, "ms", "lower"),
        "tpot_mean@i128o128c1": (12.0, "ms", "lower"),
        "tt_tps@i128o128c32": (900.0, "tok/s", "higher"),
        "other_figure": (1.0, "", "higher"),
    }
    # model a on N150: an old failing run, then a newer clean one (the newer wins)
    old = make_report({"m::x": "fail"}, model="org/a", finished_at="2025-01-01T00:00:00Z")
    new = make_report(
        {"m::x": "pass"},
        model="org/a",
        finished_at="2025-02-01T00:00:00Z",
        perf=perf,
        accuracy=accuracy,
    )
    write_report(old, root / "org--a" / "N150")
    write_report(new, root / "org--a" / "N150")
    # model a on T3K: expected failures only
    write_report(make_report({"m::x": "pass", "m::y": "xfail"}, model="org/a", device="T3K"),
                 root / "org--a" / "T3K")  # fmt: skip
    # model b on N150: a failure, a flaky and a collection error; name needs escaping
    bad = make_report(
        {"m::x": "fail", "m::<script>alert(1)</script>": "error", "m::f": "flaky"},
        model="org/b<i>",
        collection_errors=(
            CollectionError(nodeid="checks/test_broken.py", message="ImportError: nope"),
        ),
    )
    write_report(bad, root / "org--b" / "N150")
    # a baseline copy and an expectations file must not be picked up
    write_report(make_report({"m::x": "fail"}, model="org/a", finished_at="2025-06-01T00:00:00Z"),
                 root / "baselines" / "org--a" / "N150")  # fmt: skip
    (root / "baselines" / "org--a" / "N150" / "expectations.json").write_text(
        json.dumps({"schema_version": 1})
    )
    return root


def test_fold_picks_newest_per_cell_and_sets_status(
    tmp_path: Path, make_report, passing_accuracy
) -> None:
    root = _tree(tmp_path, make_report, (passing_accuracy,))
    cells = {(c.model, c.device): c for c in matrix.fold(matrix.find_reports(root))}
    assert set(cells) == {("org/a", "N150"), ("org/a", "T3K"), ("org/b<i>", "N150")}
    # Tiers: accuracy passes but no perf targets: no hardware performance evidence, so
    # experimental (TT's functional needs perf on hardware); no accuracy -> experimental too.
    assert cells[("org/a", "N150")].status == "experimental"
    assert "no perf targets" in cells[("org/a", "N150")].tier.reason
    assert cells[("org/a", "N150")].report.finished_at == "2025-02-01T00:00:00Z"
    assert cells[("org/a", "T3K")].status == "experimental"
    assert "accuracy entry" in (cells[("org/a", "T3K")].tier.next_blocker or "")
    assert cells[("org/a", "T3K")].expected == ("m::y",)
    b = cells[("org/b<i>", "N150")]
    assert b.status == "fail"
    assert b.failing == (
        "collection: checks/test_broken.py", "m::<script>alert(1)</script>", "m::x"
    )  # fmt: skip
    assert b.flaky == ("m::f",)
    key = cells[("org/a", "N150")].key_perf
    assert [f.name for f in key["TTFT (ms)"]] == ["ttft_median@i128o128c1"]
    assert [f.name for f in key["T/S"]] == ["tt_tps@i128o128c32"]


def test_baselines_can_be_included(tmp_path: Path, make_report) -> None:
    root = _tree(tmp_path, make_report)
    cells = {(c.model, c.device): c for c in matrix.fold(matrix.find_reports(root, True))}
    assert cells[("org/a", "N150")].report.finished_at == "2025-06-01T00:00:00Z"


def test_empty_report_fails(make_report) -> None:
    assert matrix.status_of(make_report({})) == "fail"


def test_cli_writes_markdown_and_escaped_html(
    tmp_path: Path, make_report, capsys, passing_accuracy
) -> None:
    root = _tree(tmp_path, make_report, (passing_accuracy,))
    assert matrix_cli.main([str(root), "--include-uncommitted"]) == matrix_cli.EXIT_OK
    md = (root / "MATRIX.md").read_text()
    page = (root / "matrix.html").read_text()
    assert "| org/a" in md and "fail" in md and "experimental" in md
    assert "tt-patterns 0.900 [0.83, 0.94] pass" in md
    assert "i128o128c1: 40" in md and "i128o128c32: 900" in md
    assert "other_figure" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>" not in page
    assert "org/b&lt;i&gt;" in page and "<i>" not in page
    # Self-contained: inline CSS, nothing fetched from elsewhere.
    assert "<style>" in page and "http://" not in page and "https://" not in page
    assert 'class="status s-fail"' in page and 'class="status s-experimental"' in page
    assert "3 model x device entries (1 failing)" in capsys.readouterr().out


def test_cli_output_paths(tmp_path: Path, make_report) -> None:
    root = _tree(tmp_path, make_report)
    out_md, out_html = tmp_path / "o" / "m.md", tmp_path / "o" / "m.html"
    assert matrix_cli.main([str(root), "--out-md", str(out_md), "--out-html", str(out_html)]) == 0
    assert out_md.is_file() and out_html.is_file()
    assert not (root / "MATRIX.md").exists()


def test_cli_bad_input(tmp_path: Path, make_report, capsys) -> None:
    assert matrix_cli.main([str(tmp_path / "absent")]) == matrix_cli.EXIT_BAD_INPUT
    assert "report directory does not exist" in capsys.readouterr().err
    root = _tree(tmp_path, make_report)
    broken = root / "org--a" / "N150" / "latest.json"
    data = json.loads(broken.read_text())
    data["checks"][0]["outcome"] = "sort-of"
    broken.write_text(json.dumps(data))
    assert matrix_cli.main([str(root)]) == matrix_cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(broken) in err and "checks[0].outcome" in err


@pytest.mark.parametrize("with_reports", [False, True])
def test_html_without_and_with_rows_is_well_formed(tmp_path: Path, make_report, with_reports):
    cells = matrix.fold(matrix.find_reports(_tree(tmp_path, make_report))) if with_reports else []
    page = render_matrix_html(cells, "now")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<table") == page.count("</table>")


def test_a_concern_whose_checks_all_skipped_is_not_shown_as_a_pass(make_report) -> None:
    ran = make_report({"m::a": "pass", "m::lane1": "skip", "m::lane2": "skip"})
    report = ran.model_copy(
        update={
            "checks": tuple(
                c.model_copy(update={"concern": "lanes"}) if "lane" in c.id else c
                for c in ran.checks
            )
        }
    )
    assert matrix.not_run_concerns(report) == ("lanes",)
    cell = matrix.fold([(Path("r.json"), report)])[0]
    assert "not run: lanes" in render_matrix_markdown([cell], "now")
    # One check of a concern skipped while another ran: the concern ran.
    assert matrix.not_run_concerns(make_report({"m::a": "pass", "m::b": "skip"})) == ()


def test_a_lane_server_is_its_own_column(make_report) -> None:
    one = make_report({"m::x": "pass"}, device="emulated", finished_at="2025-01-01T00:00:00Z")
    lanes = make_report({"m::l": "pass"}, device="emulated", finished_at="2025-02-01T00:00:00Z")
    server = lanes.server.model_copy(update={"lanes": 4})
    lanes = lanes.model_copy(update={"server": server})
    cells = matrix.fold([(Path("a.json"), one), (Path("b.json"), lanes)])
    assert [c.device for c in cells] == ["emulated", "emulated (4 lanes)"]
    tier_table = render_matrix_markdown(cells, "now").split("## Tier by device")[1]
    assert "| model       | emulated " in tier_table and " emulated (4 lanes) " in tier_table


def test_tt_figures_show_with_batch_target_and_fraction(make_report, passing_accuracy) -> None:
    from tt_conformance.expectations import Expectations, PerfTarget
    from tt_conformance.tiers import evaluate_targets

    report = make_report(
        {"m::a": "pass"},
        accuracy=(passing_accuracy,),
        perf={
            "ttft_median@i128o128c1": (55.0, "ms", "lower"),
            "tps_user_median@i128o128c32": (20.0, "tok/s/user", "higher"),
            "tt_tps@i128o128c32": (640.0, "tok/s", "higher"),
        },
    )
    targets = Expectations(
        perf_targets={"tps_user_median@i128o128c32": PerfTarget(reference=25.0, source="t")}
    )
    report = report.replace(perf_targets=evaluate_targets(report, targets))
    (cell,) = matrix.fold([(Path("r.json"), report)])
    assert (cell.target_text, cell.fraction_text) == ("i128o128c32: 25", "i128o128c32: 80%")
    md = render_matrix_markdown([cell], "now")
    assert "target T/S/U" in md and "fraction of target" in md
    assert "i128o128c32: 640" in md and "i128o128c32: 80%" in md
    assert "T/S = T/S/U x batch" in md  # the definitions, said once in the legend
    page = render_matrix_html([cell], "now")
    assert "<td>i128o128c32: 25</td><td>i128o128c32: 80%</td>" in page
