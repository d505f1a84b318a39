"""The report's situations: what the server's tt_situations_total counted between the run's probe
and its end, shown on the run page; never a number the server did not count."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.conftest import tt_info_text
from tt_conformance.formats.html import render_run_html
from tt_conformance.history import Run
from tt_conformance.report import Report, load_report

CHECK = """
def test_something():
    assert True
"""


def situations_text(**counts: float) -> str:
    lines = [
        "# HELP tt_situations_total situations",
        "# TYPE tt_situations_total counter",
        *(f'tt_situations_total{{situation="{k}"}} {v}' for k, v in counts.items()),
    ]
    return "\n".join(lines) + "\n"


def run(pytester: pytest.Pytester, fake_server, harness_args, bodies: list[str]) -> Report:
    fake_server.state.tt_metrics = bodies
    pytester.makepyfile(test_one=CHECK)
    result = pytester.runpytest(
        *harness_args,
        f"--tt-server-url={fake_server.url}",
        "--tt-report-dir=out",
        "--tt-device=N150",
    )
    result.assert_outcomes(passed=1)
    return load_report(Path(pytester.path / "out" / "latest.json"))


def test_the_report_counts_what_the_server_counted_during_the_run(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    info = tt_info_text("N150", "1x1")
    start = situations_text(
        decode_new_block=40, prefill_start_mid_block=3, device_decode_logprobs=0
    )
    end = situations_text(
        decode_new_block=52, prefill_start_mid_block=3, device_decode_logprobs=0, newer=2
    )
    report = run(pytester, fake_server, harness_args, [info + start, info + end])
    assert report.situations == {
        "decode_new_block": 12,
        "device_decode_logprobs": 0,
        "newer": 2,  # a situation a newer plugin counts: kept by name
        "prefill_start_mid_block": 0,
    }
    page = (pytester.path / "out" / "latest.md").read_text()
    section = page.split("## Situations the run created", 1)[1]
    assert "| decode_new_block" in section and "0: not created" in section
    assert "opens a new KV block" in section  # worded
    html = render_run_html(Run(Path("latest.json"), report), "now")
    table = html.split('<table id="situations">', 1)[1].split("</table>", 1)[0]
    assert "<code>decode_new_block</code>" in table and '<td class="">12</td>' in table
    assert table.count("0: not created") == 2


@pytest.mark.parametrize(
    ("bodies", "warning"),
    [
        # The counters went back: the server restarted under the run.
        (
            [situations_text(decode_new_block=40), situations_text(decode_new_block=2)],
            "counters went back",
        ),
        # No situations at the probe (another plugin build, not TT): nothing is claimed.
        (["", situations_text(decode_new_block=5)], None),
    ],
    ids=["restarted", "none-at-start"],
)
def test_no_count_is_claimed_that_the_server_did_not_make(
    pytester: pytest.Pytester, fake_server, harness_args, bodies: list[str], warning: str | None
) -> None:
    info = tt_info_text("N150", "1x1")
    report = run(pytester, fake_server, harness_args, [info + b for b in bodies])
    assert report.situations is None
    warned = [w for w in report.warnings if w.startswith("situations not counted")]
    assert (warning in warned[0]) if warning else not warned, report.warnings
    assert "Not counted" in (pytester.path / "out" / "latest.md").read_text()


CELL_CHECKS = """
import pytest


def test_one(tt_record_cell):
    tt_record_cell("penalties", "x=1")
    tt_record_cell("penalties", "x=1")  # recorded twice: listed once
    tt_record_cell("forward_reference", "arrival=together")


def test_two(tt_record_cell):
    tt_record_cell("penalties", "x=0")


def test_refused(tt_record_cell):
    with pytest.raises(ValueError, match="a concern and a cell label"):
        tt_record_cell("penalties", "")
"""


def test_the_report_lists_the_matrix_cells_that_ran(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    pytester.makepyfile(test_cells=CELL_CHECKS)
    result = pytester.runpytest(
        *harness_args, f"--tt-server-url={fake_server.url}", "--tt-report-dir=out"
    )
    result.assert_outcomes(passed=3)
    report = load_report(Path(pytester.path / "out" / "latest.json"))
    assert report.matrix_cells == {
        "forward_reference": ("arrival=together",),
        "penalties": ("x=0", "x=1"),
    }
    page = (pytester.path / "out" / "latest.md").read_text()
    section = page.split("## Situation-matrix cells that ran", 1)[1]
    assert "| penalties" in section and "x=0; x=1" in section
    html = render_run_html(Run(Path("latest.json"), report), "now")
    table = html.split('<table id="matrix-cells">', 1)[1].split("</table>", 1)[0]
    assert "<code>arrival=together</code>" in table


def test_a_run_without_matrix_cells_records_none(
    pytester: pytest.Pytester, fake_server, harness_args
) -> None:
    report = run(pytester, fake_server, harness_args, [""])
    assert report.matrix_cells is None
    assert "Situation-matrix cells" not in (pytester.path / "out" / "latest.md").read_text()
