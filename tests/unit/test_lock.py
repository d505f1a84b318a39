"""The dependency locks: current with their inputs, used by every tox env that installs, hashed.

tools/lock.py makes the locks (`tox -e lock`); tools/shared_env.py builds the one environment the
README's commands share. These tests run the real check on the committed tree and on copies of it
with an input changed.
"""

from __future__ import annotations

import configparser
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.tool_modules import load_tool

lock = load_tool("lock")
shared_env = load_tool("shared_env")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the locks are made from and of the locks themselves."""
    shutil.copytree(REPO / "requirements", tmp_path / "requirements")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_committed_locks_are_current() -> None:
    assert lock.stale() == [], "\n".join(lock.stale())


def test_a_changed_input_without_a_relock_is_stale_and_names_the_command(tree: Path) -> None:
    harness = tree / "requirements" / "harness.txt"
    harness.write_text(harness.read_text() + "hypothesis>=6\n")
    problems = lock.stale(tree)
    assert len(problems) == 1
    assert problems[0].startswith("requirements/lock/harness.txt is stale")
    assert "`tox -e lock`" in problems[0] and "requirements/harness.txt" in problems[0]


def test_a_changed_dependency_range_in_pyproject_is_stale(tree: Path) -> None:
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"jinja2>=3.1"', '"jinja2>=3.2"'))
    stale = {problem.split(" ", 1)[0] for problem in lock.stale(tree)}
    # The locks that read pyproject's dependencies, and no other.
    assert stale == {
        "requirements/lock/vllm-cpu.txt",
        "requirements/lock/harness.txt",
        "requirements/lock/tt-host.txt",
    }


def test_comments_and_tool_settings_do_not_need_a_relock(tree: Path) -> None:
    lint = tree / "requirements" / "lint.txt"
    lint.write_text("# a new note\n" + lint.read_text() + "\n# another\n")
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("line-length = 100", "line-length = 99"))
    assert lock.stale(tree) == []


def test_a_missing_lock_is_reported(tree: Path) -> None:
    (tree / "requirements" / "lock" / "lint.txt").unlink()
    assert lock.stale(tree) == [
        "requirements/lock/lint.txt is missing or has no inputs digest: run `tox -e lock`"
    ]


def test_the_check_command_exits_1_while_stale(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lock.main(["--check"], root=tree) == 0
    (tree / "requirements" / "test.txt").write_text("pytest>=9\n")
    assert lock.main(["--check"], root=tree) == 1
    assert "requirements/lock/vllm-cpu.txt is stale" in capsys.readouterr().err


def _requirements(path: Path) -> list[str]:
    """A lock's requirement entries, each with its continuation lines joined."""
    entries: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("    --hash") and entries:
            entries[-1] += " " + line.strip()
        elif line and not line.startswith((" ", "#")):
            entries.append(line.rstrip(" \\"))
    return entries


@pytest.mark.parametrize("name", [entry.name for entry in lock.LOCKS])
def test_every_locked_requirement_is_pinned_and_hashed(name: str) -> None:
    spec = next(entry for entry in lock.LOCKS if entry.name == name)
    entries = _requirements(REPO / spec.path)
    assert entries, f"{spec.path} locks nothing"
    for entry in entries:
        assert "==" in entry.split(";")[0], f"{spec.path}: not pinned: {entry}"
        assert ("--hash=sha256:" in entry) == spec.hashes, f"{spec.path}: {entry}"
    # torch is the platform's package: in no lock (tools/lock.py's docstring).
    assert not any(entry.startswith("torch==") for entry in entries)


def _tox_sections() -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO / "tox.ini")
    return {name: dict(parser[name]) for name in parser.sections()}


def test_every_tox_env_that_installs_installs_from_a_lock() -> None:
    lock_files = {str(entry.path) for entry in lock.LOCKS}
    drift_check = "testenv:deps-latest"  # unlocked on purpose
    checked = []
    for name, section in _tox_sections().items():
        deps = [line.strip() for line in section.get("deps", "").splitlines() if line.strip()]
        if not name.startswith("testenv:") or name == drift_check or not deps:
            continue
        checked.append(name)
        for dep in deps:
            assert dep.startswith("-r ") and dep[3:] in lock_files, f"[{name}] deps: {dep}"
    expected = {"lint", "hw", "stub-parity", "lock", "tt-host"}
    assert {f"testenv:{env}" for env in expected} <= set(checked)


def test_the_shared_env_commands_run_in_one_environment() -> None:
    sections = _tox_sections()
    shared = sections["shared_env"]
    for env in ("unit", "demo", "emu", "emu-smoke", "engine"):
        section = sections[f"testenv:{env}"]
        # No install of their own (tox would recreate a shared directory per env name) ...
        assert section.get("skip_install") == "true" and not section.get("deps"), env
        assert "env_dir" not in section, env
        # ... the shared env is made current first, and their commands run with its python.
        assert section["commands_pre"] == "{[shared_env]commands_pre}", env
        assert "{[shared_env]python}" in section["commands"], env
    assert shared["commands_pre"].startswith("python tools/shared_env.py")


def test_a_current_shared_env_is_reused_without_installing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    (env / shared_env.STAMP).write_text(shared_env.stamp_of() + "\n")

    def no_install(cmd: object) -> None:
        raise AssertionError(f"installed into a current env: {cmd}")

    monkeypatch.setattr(shared_env, "_run", no_install)
    assert shared_env.ensure(env) is False


def test_the_shared_env_stamp_follows_its_inputs(tree: Path) -> None:
    before = shared_env.stamp_of(tree)
    assert shared_env.stamp_of(tree) == before
    vllm_lock = tree / "requirements" / "lock" / "vllm.txt"
    vllm_lock.write_text(vllm_lock.read_text() + "\n")
    assert shared_env.stamp_of(tree) != before
