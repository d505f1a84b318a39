"""Publishing from CI (issue 32, item 7): the example workflow's later steps read the directory the
harness wrote. A mesh_device alias (TG) is filed under its canonical name (GALAXY); the summary,
history and JUnit steps must find the run there, not under the input's spelling.

The workflow's own shell steps run here (bash, the expressions they use substituted) after a real
harness run against the fake server, with `tox` a shim that runs the harness's commands.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.conftest import CONFORMANCE_SRC, tt_info_text
from tt_conformance.cli import conformance as cli
from tt_conformance.report import load_report

WORKFLOW = (
    Path(__file__).resolve().parents[2]
    / ".github"
    / "workflows"
    / "tt-hardware-conformance.example.yml"
)
MODEL = "fake/tiny-model"
CHECKS = """
import pytest

@pytest.mark.isolation
def test_ok(tt_server):
    pass
"""
# `tox exec [-qq] -e hw -- tt-conformance ARGS`: the harness's command in this interpreter.
TOX_SHIM = """#!{python}
import sys
args = sys.argv[1:]
assert args[0] == "exec" and "--" in args, args
command = args[args.index("--") + 1 :]
assert command[0] == "tt-conformance", command
from tt_conformance.cli.conformance import main
sys.exit(main(command[1:]))
"""
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def _substitute(text: str, inputs: dict[str, str], outputs: dict[str, dict[str, str]]) -> str:
    def value(match: re.Match[str]) -> str:
        parts = match.group(1).split(".")
        if parts[0] == "inputs":
            return inputs[parts[1]]
        if parts[0] == "steps" and parts[2] == "outputs":
            return outputs.get(parts[1], {}).get(parts[3], "")  # GitHub: "" when unset
        if parts[0] == "github":
            return "1"
        raise AssertionError(f"expression the simulation does not know: {match.group(0)}")

    return EXPRESSION.sub(value, text)


def _run_after_steps(
    workdir: Path, inputs: dict[str, str], env: dict[str, str]
) -> tuple[dict[str, dict[str, str]], list[dict[str, Any]]]:
    """Run the steps that follow `tox -e hw` whatever it did (`if: always()`), as GitHub runs a
    `run:` (bash -eo pipefail), except stopping the server; returns step outputs and the
    remaining `uses:` steps with their `with:` substituted."""
    yaml = pytest.importorskip("yaml")
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["conformance"]["steps"]
    outputs: dict[str, dict[str, str]] = {}
    actions: list[dict[str, Any]] = []
    for step in steps:
        if step.get("if") != "always()":
            continue
        if "uses" in step:
            with_ = {k: _substitute(str(v), inputs, outputs) for k, v in step["with"].items()}
            actions.append({"uses": step["uses"], "with": with_})
            continue
        script = step["run"]
        if "server.pid" in script:
            continue
        out_file = workdir / f".output-{len(outputs)}"
        out_file.write_text("")
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
             _substitute(script, inputs, outputs)],
            cwd=workdir, env={**env, "GITHUB_OUTPUT": str(out_file)},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, (step["name"], done.stdout, done.stderr)
        pairs = [line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line]
        outputs[step.get("id", step["name"])] = dict(pairs)
    return outputs, actions


def test_a_tg_run_is_found_by_every_later_step_of_the_workflow(
    pytester: pytest.Pytester, fake_server: Any, harness_args: list[str]
) -> None:
    fake_server.state.tt_metrics = [tt_info_text("TG", "8x4")]
    pytester.makepyfile(test_pub=CHECKS)
    hw = pytester.runpytest(*harness_args, f"--tt-server-url={fake_server.url}", "--tt-device=TG")
    hw.assert_outcomes(passed=1)
    written = sorted(pytester.path.glob("reports/*/*/latest.json"))
    assert len(written) == 1
    run = load_report(written[0])
    assert written[0].parent.name == "GALAXY" != "TG"  # the alias is filed canonically

    shim_dir = pytester.path / "shim"
    shim_dir.mkdir()
    tox = shim_dir / "tox"
    tox.write_text(TOX_SHIM.format(python=sys.executable))
    tox.chmod(0o755)
    summary = pytester.path / "step-summary.md"
    env = {
        **os.environ,
        "PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(CONFORMANCE_SRC), os.environ.get("PYTHONPATH", "")]),
        "MESH_DEVICE": "TG",
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    inputs = {"model": MODEL, "mesh_device": "TG", "max_num_seqs": "8"}
    _, actions = _run_after_steps(pytester.path, inputs, env)

    text = summary.read_text()
    assert text.startswith("## ") and f" — tt-conformance: {MODEL} on GALAXY" in text
    assert run.run_id in text
    stored = pytester.path / "reports" / "history" / "fake--tiny-model" / "GALAXY"
    assert [p.name for p in stored.iterdir()] == [f"{run.run_id}.json"]
    assert load_report(stored / f"{run.run_id}.json") == run
    junit = next(a for a in actions if "junit" in a["uses"])
    matched = glob.glob(str(pytester.path / junit["with"]["report_paths"]))
    assert matched == [str(written[0].with_suffix(".xml"))]


@pytest.mark.parametrize(
    ("device", "expected"), [("TG", "GALAXY"), ("t3k", "T3K"), ("BH-Galaxy", "BLACKHOLE_GALAXY")]
)
def test_report_dir_names_the_directory_the_harness_writes(
    capsys: pytest.CaptureFixture[str], device: str, expected: str
) -> None:
    assert cli.main(["report-dir", "--model", "org/m", "--device", device]) == cli.EXIT_OK
    assert capsys.readouterr().out.strip() == str(Path("reports") / "org--m" / expected)


def test_report_dir_refuses_an_unknown_device(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report-dir", "--model", "org/m", "--device", "TGX"]) == cli.EXIT_BAD_INPUT
    assert "unknown device 'TGX'" in capsys.readouterr().err
