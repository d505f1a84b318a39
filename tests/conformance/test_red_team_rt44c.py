"""Third outside red team (rt44c, /work/notes/rt44c.md): what got through, refused here.

A (#14): a server-identity excuse ("needs a server serving >= 2 lane-DP lanes", "not
applicable: no TT plugin") holds only for the checks whose modules declare it (the
requires_lanes marker, the tt_path marker or fixture); the words copied onto another
concern's checks are a plain skip. B (#12): emulated evidence in any spelling.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tt_conformance
from tests.conformance import test_red_team as red
from tests.conformance.harnessgit import commit_all, git
from tests.conformance.test_red_team import honest  # noqa: F401
from tests.conformance.test_red_team_gate import EMU_BASELINE
from tests.conformance.test_red_team_rt44b import _as_hardware, _edited
from tt_conformance import committed, selection
from tt_conformance.cli import gate as gate_cli
from tt_conformance.matrix import tier_of
from tt_conformance.names import NOT_TT_DEVICE
from tt_conformance.rederive import inconsistencies
from tt_conformance.report import CheckResult, load_report
from tt_conformance.ttmetrics import NOT_APPLICABLE

LANES = f"{selection.NEEDS_LANES} >= 2 lane-DP lanes (this server: 1; read from tt_plugin_info)"
PKG = selection.CHECKS_PACKAGE


def _skipped(module: str, concern: str, reason: str) -> tuple[CheckResult, ...]:
    return tuple(
        CheckResult(
            id=f"{PKG}.{module}::test_{concern}_{i}",
            nodeid=f"{module}.py::test_{concern}_{i}",
            concern=concern,
            outcome="skip",
            reason=reason,
        )
        for i in range(2)
    )


# The rt44c attack's concerns: none of these modules asks for lanes.
FOREIGN = [
    ("test_logprobs", "logprobs"),
    ("test_device_sampling", "device_sampling"),
    ("test_long_context", "long_context"),
    ("test_draw_frequencies", "device_sampling"),
]


@pytest.mark.parametrize(("module", "concern"), FOREIGN)
def test_a_lanes_excuse_on_a_check_that_needs_no_lanes_is_a_plain_skip(
    honest: Any,  # noqa: F811
    module: str,
    concern: str,
) -> None:
    """A: the "needs lanes" reason on a one-lane server, copied onto checks of a concern that
    declares no lanes need: the concern did not run; coverage partial, never complete."""
    run = honest(checks=(*honest().checks, *_skipped(module, concern, LANES)))
    assert run.coverage is not None and run.coverage.not_applicable == 0
    if concern not in red.CONCERNS:  # the honest run's own logprobs checks ran
        assert not run.coverage.full and concern in run.coverage.concerns_not_run
    assert tier_of(run).tier != "complete"
    for c in run.checks[-2:]:
        assert selection.skip_kind(c, run.device, 1) == "other"


def test_a_stored_full_coverage_over_a_copied_excuse_is_inconsistent(honest: Any) -> None:  # noqa: F811
    """A: the report storing the old verdict (coverage full, not_applicable 2) over the
    copied excuse is contradicted by its own checks."""
    run = honest(checks=(*honest().checks, *_skipped("test_logprobs", "logprobs", LANES)))
    assert run.coverage is not None
    forged = run.replace(
        coverage=run.coverage.model_copy(
            update={
                "full": True,
                "not_applicable": 2,
                "skipped_other": 0,
                "partial_because": (),
                "concerns_not_run": (),
            }
        )
    )
    assert inconsistencies(forged)


def test_a_no_tt_excuse_on_a_generic_module_is_a_plain_skip(honest: Any) -> None:  # noqa: F811
    """A, generalised: "not applicable: no TT plugin" on a module with no tt_path (accuracy)
    is not the harness's excuse, even on a server without the plugin."""
    reason = f"{NOT_APPLICABLE}: the server exposes no TT plugin metrics"
    for c in _skipped("test_accuracy", "accuracy", reason):
        assert selection.skip_kind(c, NOT_TT_DEVICE, 1) == "other"
    for c in _skipped("test_logprobs", "logprobs", reason):
        assert selection.skip_kind(c, NOT_TT_DEVICE, 1) == "not_applicable"


def test_control_the_lanes_module_is_excused_on_a_one_lane_server(honest: Any) -> None:  # noqa: F811
    """Control: the lanes module's own skip on a one-lane server is not applicable."""
    run = honest(checks=(*honest().checks, *red._lanes_checks(LANES)))
    assert run.coverage is not None and run.coverage.full
    assert run.coverage.not_applicable == 2
    assert tier_of(run).tier == "complete"
    assert not inconsistencies(run)


def test_the_declared_excuses_are_the_modules_markers() -> None:
    """The modules the excuses hold for are read from the check modules themselves: the lanes
    module alone declares requires_lanes; a generic module declares no tt_path."""
    lanes = selection.modules_declaring(b"pytest.mark.requires_lanes")
    assert lanes == frozenset({f"{PKG}.test_lanes"})
    tt_path = selection.modules_declaring(b"tt_path")
    assert f"{PKG}.test_logprobs" in tt_path and f"{PKG}.test_accuracy" not in tt_path


# ------------------------------------------- B (#12): emulated evidence in any spelling

SPELLINGS = [
    {"emulated_mesh": 1},
    {"emulated_mesh": 1.0},
    {"emulated_mesh": "true"},
    {"emulated_mesh": "yes"},
    {"emulated_mesh": "YES"},
    {"EMULATED_MESH": True},
    {"Emulated-Mesh": "on"},
]


@pytest.mark.parametrize("options", SPELLINGS)
def test_b_emulated_in_any_spelling_is_evidence_and_malformed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: dict[str, Any]
) -> None:
    """B: the committed emulated baseline relabelled T3K with emulated_mesh spelled 1, "yes",
    in capitals...: the hardware label is contradicted, and the spelling itself is refused,
    naming the field (ttnn set to a hardware version so only the flag speaks)."""
    forged = _as_hardware(tmp_path, tt_options=options, mesh_device=None)
    forged = _edited(forged, lambda d: d["versions"].update({"ttnn": "1.2.0"}), forged)
    found = inconsistencies(load_report(forged))
    key = next(iter(options))
    assert any(f"field 'server.tt_options.{key}'" in f and "malformed" in f for f in found)
    assert any("field 'device': 'T3K' is TT hardware" in f for f in found)
    assert gate_cli.main(["--baseline", str(forged), "--candidate", str(forged)]) == 2
    assert f"server.tt_options.{key}" in capsys.readouterr().err


@pytest.mark.parametrize("ttnn", ["0.0.0+HOST.STUB", "0.0.0+Host.Stub"])
def test_b_the_host_stub_ttnn_in_any_case_is_evidence(tmp_path: Path, ttnn: str) -> None:
    forged = _as_hardware(tmp_path, tt_options={"emulated_mesh": False}, mesh_device=None)
    forged = _edited(forged, lambda d: d["versions"].update({"ttnn": ttnn}), forged)
    found = inconsistencies(load_report(forged))
    assert any("'versions.ttnn' is the host stub's" in f for f in found)


def test_b_control_a_boolean_false_on_hardware_is_consistent(tmp_path: Path) -> None:
    """Control: emulated_mesh false (a boolean, its own key), a hardware ttnn and no emulated
    mesh name: a hardware record nothing contradicts."""
    run = _as_hardware(tmp_path, tt_options={"emulated_mesh": False}, mesh_device=None)
    run = _edited(run, lambda d: d["versions"].update({"ttnn": "1.2.0"}), run)
    assert inconsistencies(load_report(run)) == []
    emulated = load_report(EMU_BASELINE / "baseline.json")
    assert inconsistencies(emulated) == []


# --------------------------------------- F (#7b): the verdict survives a closed output pipe

HARNESS = str(Path(tt_conformance.__file__).resolve().parents[1])
HISTORY_RUN = (
    red.EMU_RUN.parents[2]
    / "history/tt-reference-llama/emulated-T3K/20261207T181728Z-4c2060ad.json"
)


def _exit_with_closed(stream: str, *args: str) -> tuple[int, bytes]:
    """The gate run as a subprocess whose ``stream`` pipe is closed before it writes (a reader
    like ``| head -c 100`` gone): its exit code and what it wrote to the other stream."""
    other = "stdout" if stream == "stderr" else "stderr"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tt_conformance.cli.gate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=red.EMU_RUN.parents[3],
        # The harness this test imports, whether installed or from the source tree.
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([HARNESS, os.environ.get("PYTHONPATH", "")]),
        },
    )
    getattr(proc, stream).close()
    written = getattr(proc, other).read()
    return proc.wait(timeout=120), written


def test_f_a_refusal_exits_2_when_stderr_is_closed() -> None:
    """F: a bad input whose refusal (a 100 kB path, more than a pipe holds) cannot be written
    still exits 2, never 1 (a regression) from the BrokenPipeError."""
    long = "/nonexistent/" + "a/" * 50_000 + "x.json"
    code, out = _exit_with_closed("stderr", "--baseline", long, "--candidate", long)
    assert code == 2
    assert b"Traceback" not in out


def test_f_an_ok_exits_0_when_stdout_is_closed() -> None:
    """F: an OK verdict whose table cannot be written still exits 0, with no traceback."""
    base = red.EMU_RUN / "baseline.json"
    args = (
        "--baseline",
        str(base),
        "--candidate",
        str(HISTORY_RUN),
        "--allow-difference",
        "plugin",
    )
    code, err = _exit_with_closed("stdout", *args)
    assert (code, err) == (0, b"")


def test_f_control_the_verdict_with_open_pipes(capsys: pytest.CaptureFixture[str]) -> None:
    """Control: with its streams open the same refusal is written and exits 2."""
    assert gate_cli.main(["--baseline", "/nonexistent/x.json", "--candidate", "/x.json"]) == 2
    assert "bad input, failing closed" in capsys.readouterr().err


# ------------------------------- E (#13): a yardstick is a commit of HEAD's line, true to itself


def _checks_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A harness checkout holding today's check modules and manifest at HEAD: (repo, HEAD)."""
    repo = tmp_path / "harness"
    folder = repo / selection.MANIFEST_PATH.rpartition("/")[0]
    folder.mkdir(parents=True)
    for name, data in selection.installed_files().items():
        (folder / f"{name.removeprefix(selection.CHECKS_PACKAGE + '.')}.py").write_bytes(data)
    (repo / selection.MANIFEST_PATH).write_text(selection.manifest_text())
    git(repo, "init", "-q")
    commit_all(repo, "harness")
    monkeypatch.setattr(committed, "checkout_root", lambda: repo)
    return repo, git(repo, "rev-parse", "HEAD")


def _dropping_two(repo: Path) -> tuple[str, ...]:
    """The manifest rewritten (and left uncommitted) without two unparametrised check ids of
    two modules whose files are unchanged: the ids dropped."""
    data = json.loads((repo / selection.MANIFEST_PATH).read_text())
    dropped = []
    for module, ids in data["checks"].items():
        plain = [i for i in ids if "[" not in i]
        if plain and len(dropped) < 2:
            ids.remove(plain[0])
            dropped.append(f"{module}::{plain[0]}")
    (repo / selection.MANIFEST_PATH).write_text(json.dumps(data, indent=2))
    return tuple(dropped)


def _run_without(dropped: tuple[str, ...], commit: str) -> Any:
    """The emulated baseline without the dropped checks, recorded at ``commit`` and sealed as
    that commit's manifest would judge it (full)."""
    run = load_report(EMU_BASELINE / "baseline.json")
    checks = tuple(c for c in run.checks if c.id not in dropped)
    assert len(checks) == len(run.checks) - 2
    versions = run.versions.model_copy(update={"harness_commit": commit})
    return run.replace(checks=checks, versions=versions)


def test_e_a_manifest_on_a_side_branch_is_no_yardstick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E: the two-ids-short manifest committed on a branch beside HEAD (`git branch x`): a
    branch vouches for nothing; today's manifest judges the run, partial, saying why."""
    repo, head = _checks_repo(tmp_path, monkeypatch)
    git(repo, "checkout", "-q", "-b", "x")
    dropped = _dropping_two(repo)
    commit_all(repo, "two checks fewer")
    side = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", head)
    assert committed.commit_state(side) == "foreign"
    yardstick = selection.yardstick_for(_run_without(dropped, side))
    assert yardstick.label is not None and "not in this harness's history" in yardstick.label
    assert all(d.partition("::")[2] in yardstick.checks[d.partition("::")[0]] for d in dropped)


def test_e_a_manifest_untrue_to_its_modules_is_no_yardstick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E: the same manifest committed on HEAD's own line: its check lists drop two test
    functions its modules (unchanged, their digests as recorded) still define; today's
    manifest judges, and the label says the commit's manifest disagrees with its modules."""
    repo, _ = _checks_repo(tmp_path, monkeypatch)
    dropped = _dropping_two(repo)
    commit_all(repo, "two checks fewer")
    short = git(repo, "rev-parse", "HEAD")
    assert committed.commit_state(short) == "history"
    run = _run_without(dropped, short)
    yardstick = selection.yardstick_for(run)
    assert yardstick.label is not None and "disagrees with the check modules" in yardstick.label
    derived = selection.derive_coverage(run)
    assert derived is not None and not derived.full
    assert any("did not run" in why for why in derived.partial_because)


def test_e_control_head_line_manifest_true_to_its_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: HEAD's manifest, true to the modules committed beside it, is the yardstick
    (unlabelled), and the whole emulated run is full by it."""
    _, head = _checks_repo(tmp_path, monkeypatch)
    run = load_report(EMU_BASELINE / "baseline.json")
    run = run.replace(versions=run.versions.model_copy(update={"harness_commit": head}))
    assert selection.yardstick_for(run).label is None
    derived = selection.derive_coverage(run)
    assert derived is not None and derived.full


@pytest.mark.parametrize(
    "command",
    [("tt_conformance.cli.matrix",), ("tt_conformance.cli.conformance", "history", "add")],
)
def test_f_other_commands_refuse_with_2_when_stderr_is_closed(command: tuple[str, ...]) -> None:
    """F, every command: the matrix and `history add` refusing a 100 kB path (a name too long
    for the file system) exit 2 with their stderr closed."""
    long = "/nonexistent/" + "a/" * 50_000 + "x.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", *command, long],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([HARNESS, os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert proc.stderr is not None
    proc.stderr.close()
    assert proc.wait(timeout=120) == 2
