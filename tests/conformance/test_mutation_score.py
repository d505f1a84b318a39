"""The plugin's published mutation score: read and checked before the matrix and site show it."""

from __future__ import annotations

import copy
import itertools
import json
import subprocess
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.test_matrix import _tree
from tt_conformance.cli import matrix as matrix_cli
from tt_conformance.formats.html import render_matrix_html, render_run_html
from tt_conformance.formats.markdown import render_matrix_markdown
from tt_conformance.history import Run
from tt_conformance.mutation import (
    MUTATION_CONCERNS,
    MUTATION_TARGETS,
    MutationRecordError,
    PublishedScore,
    load_mutation_record,
    parse_mutation_record,
    published_score,
)

REPO = Path(__file__).resolve().parents[2]
TODAY = date(2026, 12, 7)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


# A commit of the repository's history: the pages publish no record of another.
COMMIT = _git("rev-parse", "HEAD")
COMMITTED = REPO / "reports" / "mutation" / "plugin.json"
ROUTE = "sampling route"


def _counts(killed: int, survived: int = 0, equivalent: int = 0) -> dict[str, Any]:
    total = killed + survived + equivalent
    judged = total - equivalent
    return {
        "total": total,
        "killed": killed,
        "survived": survived,
        "equivalent": equivalent,
        "timeout": 0,
        "unjudged": 0,
        "score": round(killed / judged, 4) if judged else None,
    }


def record() -> dict[str, Any]:
    """A valid full campaign: every target; the sampling route's two modules with a survivor and
    two equivalents, every other module 4 of 4 killed."""
    modules = {module: _counts(4) for module, _, _ in MUTATION_TARGETS}
    modules["policy/sampling_route.py"] = _counts(6, 1)
    modules["policy/device_logprobs.py"] = _counts(3, 0, 2)
    return {
        "schema": 1,
        "campaign": "full",
        "tool": "mutmut 3.8.1",
        "oracle": "unit tests",
        "date": "2026-12-06",
        "plugin_commit": COMMIT,
        "tree_clean": True,
        "concerns": [
            {
                "concern": concern,
                **_sum([modules[m] for m, c, _ in MUTATION_TARGETS if c == concern]),
            }
            for concern in MUTATION_CONCERNS
        ],
        "modules": [
            {"module": module, "concern": concern, "tests": list(tests), **modules[module]}
            for module, concern, tests in MUTATION_TARGETS
        ],
        "not_killed": [
            _not_killed("policy/sampling_route.py", None),
            _not_killed("policy/device_logprobs.py", "no caller reads the label it changes"),
            _not_killed("policy/device_logprobs.py", "the bound is checked again by the caller"),
        ],
    }


def _sum(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return _counts(*(sum(p[key] for p in parts) for key in ("killed", "survived", "equivalent")))


_NAMES = itertools.count(1)


def _not_killed(module: str, because: str | None, status: str = "survived") -> dict[str, Any]:
    """A not-killed entry with a mutant name of its module (mutmut's form), never repeated."""
    dotted = module.removesuffix(".py").replace("/", ".")
    mutant = f"vllm_tt_plugin.{dotted}.x_decide__mutmut_{next(_NAMES)}"
    return {"module": module, "mutant": mutant, "status": status, "equivalent_because": because}


def test_a_consistent_record_is_read_per_concern() -> None:
    parsed = parse_mutation_record(record(), TODAY)
    assert (parsed.date, parsed.plugin_commit) == ("2026-12-06", COMMIT)
    route = parsed.concerns[0]
    assert (route.concern, route.killed, route.judged, route.score) == (ROUTE, 9, 10, 0.9)


def _module(index: int) -> dict[str, Any]:
    module: dict[str, Any] = record()["modules"][index]
    return module


def _set(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(record())
    *parents, last = path.split(".")
    target: Any = data
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[int(last) if last.isdigit() else last] = value
    return data


@pytest.mark.parametrize(
    ("forged", "named"),
    [
        (_set("concerns.1.killed", 5), "'killed' (5) exceeds 'total' (4)"),
        (_set("concerns.0.score", 1.0), "'score' (1.0) is not killed / (total - equivalent)"),
        # rt46 #42: NaN compares false to every bound
        (_set("concerns.0.score", float("nan")), "'score' (nan) is not killed / (total"),
        (_set("concerns.0.survived", 0), "'total' (12) is not the sum"),
        (_set("concerns.1.concern", "vibes"), "'concern' 'vibes' is unknown"),
        (_set("date", "2026-12-08"), "'date' (2026-12-08) is in the future"),
        (_set("date", "yesterday"), "'date' is not an ISO date"),
        (_set("plugin_commit", "HEAD"), "'plugin_commit' is not a 40-digit git commit"),
        (_set("campaign", "ci-sample"), "'campaign' must be 'full'"),
        (_set("concerns.1.killed", -1), "'killed' is negative"),
        (_set("concerns.1.total", True), "'total' must be a int"),
        (_set("modules.2.killed", 3), "modules[2].'total' (4) is not the sum"),
        # rt46 #22-#24: tree_clean a bool, and true
        (_set("tree_clean", False), "'tree_clean' is false"),
        (_set("tree_clean", "yes"), "'tree_clean' must be a bool"),
        (_set("tree_clean", None), "'tree_clean' must be a bool"),
        (_set("concerns", []), "'concerns' lacks sampling route, step policy"),
        # rt46 #7/#9/#38/#10/#39: the modules must be exactly the driver's targets, each once,
        # each with its oracle
        (_set("modules.2.module", "policy/other.py"), "'policy/other.py' is not a target of"),
        (_set("modules.2.concern", ROUTE), "modules[2].'module' 'policy/step_policy.py' is not"),
        (_set("modules.3", _module(2)), "'policy/step_policy.py' appears twice"),
        (_set("modules.2.tests", []), "modules[2].'tests' must list the oracle's test files"),
        (_set("modules.2.tests", None), "modules[2].'tests' must list the oracle's test files"),
        # rt46 #2: a survivor's entry given a reason while the counts still say it survived
        (
            _set("not_killed.0.equivalent_because", "relabelled"),
            "module 'policy/sampling_route.py': 'survived' (1) is not the number",
        ),
        # rt46 #34/#35: the list emptied or dropped while the counts stay
        (_set("not_killed", []), "'survived' (1) is not the number of not_killed entries"),
        (_set("not_killed", None), "'not_killed' must be a list"),
        # rt46 #35: a survivor listed while the module says none survived
        (
            _set("not_killed.1.equivalent_because", None),
            "module 'policy/device_logprobs.py': 'survived' (0) is not the number",
        ),
        # rt46 #36: an equivalent without a reason
        (_set("not_killed.1.equivalent_because", " "), "'equivalent_because' must be a non-empty"),
        (_set("not_killed.1.status", "killed"), "'status' 'killed' cannot be equivalent"),
        (_set("not_killed.0.module", "x.py"), "not_killed[0].'module' 'x.py' has no modules"),
    ],
)
def test_a_forged_or_malformed_record_is_refused_naming_the_field(
    forged: dict[str, Any], named: str
) -> None:
    with pytest.raises(MutationRecordError) as refused:
        parse_mutation_record(forged, TODAY)
    assert named in str(refused.value)


def test_a_record_missing_a_target_is_refused_even_with_its_sums_reduced() -> None:
    """rt46 #7/#9: a target module (and its whole concern) dropped, every sum adjusted."""
    forged = record()
    forged["modules"] = [m for m in forged["modules"] if m["concern"] != "step policy"]
    forged["concerns"] = [c for c in forged["concerns"] if c["concern"] != "step policy"]
    with pytest.raises(MutationRecordError, match="'concerns' lacks step policy"):
        parse_mutation_record(forged, TODAY)
    forged = record()
    del forged["modules"][1]
    forged["concerns"][0] = {"concern": ROUTE, **_counts(6, 1)}
    forged["not_killed"] = forged["not_killed"][:1]
    with pytest.raises(MutationRecordError, match="lacks the targets policy/device_logprobs.py"):
        parse_mutation_record(forged, TODAY)


def test_a_survivor_counted_as_equivalent_without_its_entry_is_refused() -> None:
    """rt46 #2: the counts of a module and its concern moved from survived to equivalent, each
    sum still right, the survivor's not_killed entry unchanged."""
    forged = record()
    forged["concerns"][0].update(survived=0, equivalent=3, score=1.0)
    forged["modules"][0].update(survived=0, equivalent=1, score=1.0)
    with pytest.raises(MutationRecordError, match="'survived' \\(0\\) is not the number"):
        parse_mutation_record(forged, TODAY)


def test_a_concern_total_must_be_the_sum_of_its_modules() -> None:
    forged = record()
    forged["concerns"][1] = {"concern": "step policy", **_counts(40)}  # consistent, but invented
    with pytest.raises(MutationRecordError, match="'total' \\(40\\) is not the sum of its modules"):
        parse_mutation_record(forged, TODAY)


def test_no_file_is_no_campaign_and_a_refused_file_is_shown_as_none(tmp_path: Path) -> None:
    path = tmp_path / "plugin.json"
    assert load_mutation_record(path) is None
    assert published_score(path).record is None and published_score(path).refused is None
    path.write_text(json.dumps(_set("concerns.1.killed", 5)))
    shown = published_score(path, TODAY)
    assert shown.record is None and shown.refused and str(path) in shown.refused
    md = render_matrix_markdown([], "now", mutation=shown)
    assert "No plugin mutation campaign recorded (refused:" in md and "| step policy |" not in md


def test_the_matrix_shows_the_score_per_concern_with_date_and_commit(tmp_path: Path) -> None:
    shown = published_score(_write(tmp_path / "plugin.json", record()), TODAY)
    md = render_matrix_markdown([], "now", mutation=shown)
    assert f"Last campaign: 2026-12-06, plugin commit `{COMMIT[:12]}`" in md
    assert "| sampling route | 9 | 12 | 2 | 1 | 0 | 0 | 90.0 % |" in md
    page = render_matrix_html([], "now", mutation=shown)
    assert '<tr data-concern="step policy"><th>step policy</th><td>4</td>' in page
    assert '<b class="mutation-date">2026-12-06</b>' in page


def test_the_cli_publishes_the_record_and_refuses_a_forged_one(
    tmp_path: Path, make_report, capsys
) -> None:
    root = _tree(tmp_path, make_report)
    _write(root / "mutation" / "plugin.json", record())
    site = ["--site", str(tmp_path / "site"), "--include-uncommitted"]
    assert matrix_cli.main([str(root), *site]) == matrix_cli.EXIT_OK
    for page in (root / "MATRIX.md", tmp_path / "site" / "MATRIX.md"):
        assert "| step policy | 4 | 4 |" in page.read_text()
    _write(root / "mutation" / "plugin.json", _set("concerns.0.unjudged", 3))
    # The pages are written (saying why no campaign is shown) but the command fails.
    code = matrix_cli.main([str(root), "--replace", "--include-uncommitted"])
    assert code == matrix_cli.EXIT_BAD_INPUT
    assert "mutation score refused" in capsys.readouterr().err
    assert "No plugin mutation campaign recorded (refused:" in (root / "MATRIX.md").read_text()


def test_the_committed_campaign_record_is_valid() -> None:
    """reports/mutation/plugin.json, as tools/run_plugin_mutation.py wrote it, passes the checks
    the pages apply (a hand edit that breaks its arithmetic fails here first)."""
    parsed = load_mutation_record(REPO / "reports" / "mutation" / "plugin.json")
    assert parsed is not None and parsed.concerns


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("plugin_commit", "says"),
    [
        (COMMIT, "This run's plugin is that commit."),
        (COMMIT[:12], "This run's plugin is that commit."),
        ("89abcdef" * 5, "This run's plugin is another commit"),
        (COMMIT[:12] + "+dirty", "This run's plugin is another commit"),
        (None, "did not report its plugin commit"),
    ],
)
def test_a_run_page_says_whether_the_score_describes_its_plugin(
    tmp_path: Path, make_report, plugin_commit: str | None, says: str
) -> None:
    """A run's page shows the campaign's overall kill rate and whether the run's plugin is the
    commit the campaign measured: a score of other code says so."""
    shown = published_score(_write(tmp_path / "plugin.json", record()), TODAY)
    report = make_report({"m::t": "pass"})
    report = report.replace(
        versions=report.versions.model_copy(update={"plugin_commit": plugin_commit})
    )
    page = render_run_html(Run(tmp_path / "r.json", report), "now", shown)
    text = page.split('id="mutation-run">', 1)[1].split("</p>", 1)[0]
    # 33 killed of 34 judged over every concern (an independent sum of the record above), 97.06
    # rounded down.
    assert "killed 33 of 34 judged mutants" in text and "(97.0%)" in text
    assert says in text, text
    none = render_run_html(Run(tmp_path / "r.json", report), "now")
    assert "No plugin mutation campaign recorded" in none


@pytest.mark.parametrize("commit", ["0" * 40, "deadbeef" * 5])
def test_a_record_of_a_commit_outside_the_history_is_refused(tmp_path: Path, commit: str) -> None:
    """rt46 #16/#17: a made-up commit measured nothing here."""
    shown = published_score(_write(tmp_path / "p.json", _set("plugin_commit", commit)), TODAY)
    assert shown.record is None and shown.refused
    assert "is not a commit of the harness repository's history" in shown.refused


def test_only_the_record_committed_at_head_is_published_by_default(tmp_path: Path) -> None:
    """rt46 #45: as for the reports, a record file not committed unchanged at HEAD is published
    only with --include-uncommitted."""
    path = _write(tmp_path / "p.json", record())
    refused = published_score(path, TODAY, committed_only=True)
    assert refused.record is None and "(pass --include-uncommitted)" in (refused.refused or "")
    assert published_score(path, TODAY).record is not None
    assert published_score(COMMITTED, committed_only=True).record is not None


def test_the_pages_name_what_changed_since_the_campaigns_commit(
    tmp_path: Path, make_report
) -> None:
    """rt46 #20: an old commit's score, with a target or oracle file changed since, is stale."""
    oracle = "tests/unit/test_step_policy.py"
    changed_at = _git("log", "--format=%H", "-1", "--", oracle)
    parent = _set("plugin_commit", _git("rev-parse", changed_at + "^"))
    shown = published_score(_write(tmp_path / "p.json", parent), TODAY)
    assert shown.record is not None and oracle in shown.stale
    md = render_matrix_markdown([], "now", mutation=shown)
    assert "**Stale:** changed since the campaign's commit" in md
    assert "`tests/unit/test_step_policy.py`" in md
    page = render_matrix_html([], "now", mutation=shown)
    assert '<p id="mutation-stale">' in page and "tests/unit/test_step_policy.py" in page
    run_page = render_run_html(Run(tmp_path / "r.json", make_report({"m::t": "pass"})), "x", shown)
    assert "<b>Stale: " in run_page and oracle in run_page
    fresh = render_matrix_markdown([], "now", mutation=PublishedScore(shown.record))
    assert "Stale" not in fresh


def test_a_score_with_a_survivor_never_shows_as_100_percent() -> None:
    """rt46 #43: 1999 killed of 2000 judged is 99.9 %, not 100.0 % beside a survivor."""
    forged = record()
    forged["concerns"][1] = {"concern": "step policy", **_counts(1999, 1)}
    forged["modules"][2] |= _counts(1999, 1)
    forged["not_killed"].append(_not_killed("policy/step_policy.py", None))
    parsed = parse_mutation_record(forged, TODAY)
    assert parsed.concerns[1].percent == "99.9 %"
    md = render_matrix_markdown([], "now", mutation=PublishedScore(parsed))
    assert "| step policy | 1999 | 2000 | 0 | 1 | 0 | 0 | 99.9 % |" in md
    assert "99.9 %" in render_matrix_html([], "now", mutation=PublishedScore(parsed))
    assert parse_mutation_record(record(), TODAY).concerns[1].percent == "100.0 %"


def test_the_records_strings_are_escaped_in_markdown() -> None:
    """rt46 #32: a link in the record's oracle or tool is shown as text, never as a link."""
    forged = record() | {"oracle": "[click](javascript:alert(1))", "tool": "*x* <b>"}
    md = render_matrix_markdown([], "now", mutation=PublishedScore(parse_mutation_record(forged)))
    assert "oracle: \\[click\\](javascript:alert(1))" in md and "[click](" not in md
    assert "\\*x\\* &lt;b&gt;" in md
