"""Write ``plugin/vllm_tt_plugin/contract/py310_absent.json``: the standard-library names
(modules, module attributes, builtins, keyword parameters) that Python 3.11+ has and the TT
host's Python 3.10 (docs/TT_HOST.md) lacks. The parity checker reads it to judge a module for
3.10 whatever interpreter runs the checker.

Derived, not hand-written: each interpreter (pyenv's 3.10 and every newer one found) lists
``dir()`` of the modules below and the keyword parameters of the callables below; a name is
absent when some newer interpreter has it and 3.10 does not. Private names are left out.

    python tools/gen_py310_absent.py [--check]   # --check: exit 1 when the file is stale
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "plugin" / "vllm_tt_plugin" / "contract" / "py310_absent.json"
HOST = "3.10"
NEWER = ("3.11", "3.12", "3.13")
# The modules model code plausibly uses at import time (class bodies, decorators, defaults).
MODULES = (
    "builtins", "typing", "enum", "datetime", "dataclasses", "asyncio", "contextlib",
    "functools", "itertools", "math", "hashlib", "operator", "types", "warnings", "copy",
    "inspect", "os", "sys", "re", "logging", "pathlib", "collections", "collections.abc",
    "string", "statistics", "time", "threading", "concurrent.futures", "json", "shutil",
    "subprocess", "tempfile", "random", "abc", "weakref", "traceback", "argparse", "importlib",
    "importlib.resources", "importlib.metadata", "unittest", "unittest.mock", "socket",
    "struct", "array", "queue", "fractions", "decimal", "numbers", "io", "glob", "fnmatch",
    "platform", "signal", "multiprocessing", "uuid", "zipfile", "tarfile", "gzip", "csv",
    "pickle", "pprint", "textwrap", "heapq", "bisect", "secrets", "base64", "binascii", "zlib",
    "tomllib", "wsgiref.types", "sqlite3", "ctypes", "gc", "atexit",
)  # fmt: skip
# Callables whose keyword parameters grew after 3.10 (a class decorator / call run on import).
CALLABLES = (
    "dataclasses.dataclass", "dataclasses.field", "dataclasses.make_dataclass",
    "enum.Enum", "functools.lru_cache", "functools.cache", "logging.basicConfig",
    "collections.namedtuple", "typing.NamedTuple", "typing.TypeVar", "typing.TypedDict",
)  # fmt: skip

_PROBE = """
import importlib, inspect, json, sys
mods, calls = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {"modules": {}, "params": {}}
for name in mods:
    try:
        m = importlib.import_module(name)
    except ImportError:
        out["modules"][name] = None
        continue
    out["modules"][name] = sorted(n for n in dir(m) if not n.startswith("_"))
for name in calls:
    mod, _, attr = name.rpartition(".")
    try:
        sig = inspect.signature(getattr(importlib.import_module(mod), attr))
    except (ImportError, AttributeError, TypeError, ValueError):
        continue
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    out["params"][name] = sorted(p.name for p in sig.parameters.values() if p.kind in kinds)
print(json.dumps(out))
"""


def interpreter(version: str) -> Path | None:
    """pyenv's newest ``version.x`` interpreter, or None."""
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    found = sorted(Path(root.stdout.strip(), "versions").glob(f"{version}.*/bin/python"))
    return found[-1] if found else None


def probe(python: Path) -> dict[str, dict[str, list[str] | None]]:
    args = [str(python), "-I", "-c", _PROBE, json.dumps(MODULES), json.dumps(CALLABLES)]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    result: dict[str, dict[str, list[str] | None]] = json.loads(done.stdout)
    return result


def absent(
    host: dict[str, dict[str, list[str] | None]],
    newer: list[dict[str, dict[str, list[str] | None]]],
) -> dict[str, object]:
    """What the newer interpreters have that ``host`` lacks."""
    new_modules: set[str] = set()
    names: dict[str, set[str]] = {}
    params: dict[str, set[str]] = {}
    for other in newer:
        for mod, listed in other["modules"].items():
            if listed is None:
                continue
            had = host["modules"].get(mod)
            if had is None:
                new_modules.add(mod)
                continue
            extra = set(listed) - set(had)
            if extra:
                names.setdefault(mod, set()).update(extra)
        for call, listed in other["params"].items():
            extra = set(listed or []) - set(host["params"].get(call) or [])
            if extra and call in host["params"]:
                params.setdefault(call, set()).update(extra)
    return {
        "host": HOST,
        "compared": list(NEWER),
        "modules": sorted(new_modules),
        "names": {m: sorted(v) for m, v in sorted(names.items())},
        "params": {c: sorted(v) for c, v in sorted(params.items())},
    }


def generate() -> str | None:
    """The file's text, or None when pyenv lacks 3.10 or every newer interpreter."""
    host = interpreter(HOST)
    newer = [p for p in map(interpreter, NEWER) if p is not None]
    if host is None or len(newer) < len(NEWER):
        return None
    data = absent(probe(host), [probe(p) for p in newer])
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args()
    text = generate()
    if text is None:
        print(f"pyenv lacks Python {HOST} or one of {', '.join(NEWER)}", file=sys.stderr)
        return 2
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.is_file() else ""
        return 0 if current == text else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
