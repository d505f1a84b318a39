"""The published site in a real browser: built from the committed reports, served over HTTP on
127.0.0.1 and opened in headless Chromium (Debian's package, driven over CDP).

Skips, saying why, where no Chromium exists; TT_REQUIRE_BROWSER=1 (set by .ci/run) turns the
skip into a failure. The matrix screenshot is kept at $TT_ARTIFACTS_DIR (default
reports/artifacts/, not committed).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tt_conformance import history, writers
from tt_conformance.gate import compare
from tt_conformance.identity import AXES, differences, unlike
from tt_conformance.matrix import CONCERN_STATES, all_concerns, column_of, find_reports, fold
from tt_conformance.names import is_emulated

REPO = Path(__file__).resolve().parents[2]

websocket = pytest.importorskip("websocket", reason="websocket-client not installed")

from tests.conformance.cdp import Browser, Page, find_chromium  # noqa: E402
from tests.conformance.conftest import published_reports  # noqa: E402


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


WIDTH = 1400


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    out = tmp_path_factory.mktemp("site")
    clone = published_reports(tmp_path_factory.mktemp("clone"))
    found = find_reports(clone, include_baselines=True)
    writers.build_site(found, out, "2026-01-01T00:00:00Z")
    return out, found


@pytest.fixture(scope="module")
def base_url(built_site: tuple[Path, list]) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(built_site[0]))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    exe = find_chromium()
    if exe is None:
        message = "no Chromium on this host (apt-get install chromium, or set TT_CHROMIUM)"
        if os.environ.get("TT_REQUIRE_BROWSER") == "1":
            pytest.fail(f"TT_REQUIRE_BROWSER=1 but {message}")
        pytest.skip(message)
    browser = Browser(exe)
    tab = browser.new_page()
    # The width a TT engineer's laptop shows the site at (issue 32: the grid was cut there).
    tab.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=1000,
             deviceScaleFactor=1, mobile=False)  # fmt: skip
    try:
        yield tab
    finally:
        tab.close()
        browser.close()


def _artifacts() -> Path:
    return Path(os.environ.get("TT_ARTIFACTS_DIR") or REPO / "reports" / "artifacts")


def test_the_console_check_catches_errors(page: Page) -> None:
    """The error collection the other tests rely on does see errors and uncaught exceptions."""
    page.errors.clear()
    page.goto("data:text/html,<script>console.error('boom');</script><script>nope()</script>")
    assert any("boom" in e for e in page.errors), page.errors
    assert any(e.startswith("exception:") for e in page.errors), page.errors


def test_matrix_page_lists_every_model_and_concern(page: Page, base_url: str, built_site) -> None:
    _, found = built_site
    page.errors.clear()
    page.goto(f"{base_url}/index.html")
    assert page.errors == []
    rows = page.evaluate(
        "[...document.querySelectorAll('#matrix tr.model-row')].map(r => [r.dataset.model,"
        " r.dataset.device, [...r.querySelectorAll('td[data-concern]')].map(td =>"
        " [td.dataset.concern, td.textContent.trim()])])"
    )
    headers = page.evaluate(
        "[...document.querySelectorAll('#matrix th.concern')].map(t => t.textContent.trim())"
    )
    reports = [r for _, r in found]
    assert headers == list(all_concerns(reports))
    columns = {(r.model, column_of(r)) for r in reports}  # a lane-DP server: its own column
    assert {(m, d) for m, d, _ in rows} == columns
    # One row per setup (identity.profile_key): an older setup of a column (the llama runs of
    # the checkpoint before its retraining) is marked superseded, the newest leads.
    cells = fold(found)
    assert sorted((m, d) for m, d, _ in rows) == sorted((c.model, c.device) for c in cells)
    superseded = page.evaluate(
        "[...document.querySelectorAll('#matrix tr.model-row')].filter(r =>"
        " r.querySelector('.superseded')).length"
    )
    assert superseded == sum(1 for c in cells if c.superseded_by)
    for _, _, cells in rows:
        assert [c for c, _ in cells] == headers
        assert {s for _, s in cells} <= set(CONCERN_STATES)
    legend = page.evaluate(
        "[...document.querySelectorAll('#legend span')].map(s => s.textContent.trim())"
    )
    assert legend == list(CONCERN_STATES)
    assert {"pass", "pass with expected failures", "fail", "not run"} <= set(legend)
    # The emulated runs report no tt-metal commit: the page flags it, visibly.
    assert page.evaluate("document.querySelectorAll('#matrix .unknown').length") > 0
    shot = page.screenshot(_artifacts() / "site-matrix.png")
    assert shot.stat().st_size > 10_000


def test_compare_page_shows_the_differences_of_two_committed_runs(
    page: Page, base_url: str, built_site
) -> None:
    _, found = built_site
    runs = [
        r for r in history.distinct_runs(found) if r.key == ("tt-reference-llama", "emulated-T3K")
    ]
    assert len(runs) >= 2, "the committed series of tt-reference-llama/emulated has two runs"
    older, newer = runs[-2], runs[-1]
    expected = compare(older.report, newer.report, axes=frozenset(AXES), floors=False)
    alike = not unlike(differences(older.report, newer.report))
    page.errors.clear()
    # Reached the way a reader would: matrix -> history -> "vs previous".
    page.goto(f"{base_url}/history/tt-reference-llama--emulated-T3K.html")
    assert page.errors == []
    newest = newer.report.run_id  # the newest run's "vs previous" link
    href = page.evaluate("[...document.querySelectorAll('a')].find(a => a.textContent === "
                         f"'vs previous' && a.href.includes('{newest}')).href")  # fmt: skip
    page.goto(href)
    assert page.errors == []
    perf = page.evaluate(
        "[...document.querySelectorAll('#perf tr.perf-row')].map(r =>"
        " [...r.children].map(td => td.textContent.trim()))"
    )
    assert [row[0] for row in perf] == [p.name for p in expected.perf]
    identity = page.evaluate("[...document.querySelectorAll('#identity li')].map(li =>"
                             " li.textContent)")  # fmt: skip
    assert identity == expected.identity  # every way the two runs differ, named
    by_name = {row[0]: row[3] for row in perf}
    if alike:
        changed = [p for p in expected.perf if p.worse_by]
        assert changed, "the two committed runs differ in perf"
        for p in changed:
            word = "worse" if p.worse_by > 0 else "better"
            assert by_name[p.name] == f"{abs(p.worse_by) * 100:.1f}% {word}"
    else:  # unlike runs (another mesh, profile, weights): no percentage between them
        assert set(by_name.values()) <= {"unlike runs", "missing", "not gated"}
        assert "unlike runs" in by_name.values()
    title = page.evaluate("document.querySelector('h1').textContent")
    assert older.report.run_id in title and newer.report.run_id in title
    page.screenshot(_artifacts() / "site-compare.png")


def test_every_page_loads_without_console_errors(page: Page, base_url: str, built_site) -> None:
    out, _ = built_site
    pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html"))
    assert len(pages) >= 5
    for rel in pages:
        page.errors.clear()
        page.goto(f"{base_url}/{rel}")
        assert page.errors == [], rel
        assert page.evaluate("document.querySelectorAll('nav a').length") == 2, rel


def test_at_1400_px_the_pivot_and_grid_fit_and_each_cell_leads_to_its_run(
    page: Page, base_url: str, built_site
) -> None:
    _, found = built_site
    page.errors.clear()
    page.goto(f"{base_url}/index.html")
    assert page.errors == []
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    for table in ("#pivot", "#matrix"):
        right = page.evaluate(f"document.querySelector('{table}').getBoundingClientRect().right")
        assert right <= WIDTH, f"{table} is cut at {WIDTH} px (right edge {right:.0f})"
    cells = page.evaluate(
        "[...document.querySelectorAll('#pivot div.pivot-profile')].map(div =>"
        " [div.closest('tr').dataset.model, div.closest('td').dataset.device,"
        " div.dataset.profile, div.dataset.status, div.closest('td').classList.contains('apart'),"
        " div.querySelector('a') && div.querySelector('a').href, div.textContent])"
    )
    cells_by_key = {(m, d, p): (s, apart, href, text) for m, d, p, s, apart, href, text in cells}
    folded = {(c.model, c.device, c.profile): c for c in fold(found)}
    assert set(cells_by_key) == set(folded)
    for key, (status, apart, href, text) in cells_by_key.items():
        cell = folded[key]
        assert status == cell.status
        assert apart == is_emulated(cell.report.device)  # emulated columns stand apart
        if cell.report.coverage is not None and cell.report.coverage.full:
            assert "since tt-metal" in text and "last good" in text
        page.goto(href)  # the cell's run page
        assert page.errors == []
        shown = page.evaluate(
            "[...document.querySelectorAll('#identity-table tr')].map(tr =>"
            " tr.querySelector('th').textContent)"
        )
        assert {"model", "weights", "device", "mesh_shape", "max_num_seqs", "plugin"} <= set(shown)
        assert cell.report.run_id in page.evaluate("document.body.textContent")
        assert page.evaluate("document.querySelectorAll('#checks tr.check-row').length") == len(
            cell.report.checks
        )
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
        page.goto(f"{base_url}/index.html")
    # The details table scrolls in its own box; its cells keep a readable width (no check id
    # wrapped a letter per line) and the configuration of each row is shown.
    headers = page.evaluate(
        "[...document.querySelectorAll('#details th')].map(th => th.textContent.trim())"
    )
    assert headers[:4] == ["model", "device", "configuration", "tier"]
    narrowest = page.evaluate(
        "Math.min(...[...document.querySelectorAll('#details td')].map(td =>"
        " td.getBoundingClientRect().width))"
    )
    assert narrowest >= 64, f"a details cell is {narrowest:.0f} px wide"
    page.screenshot(_artifacts() / "site-matrix-1400.png")
