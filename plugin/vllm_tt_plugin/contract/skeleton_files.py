"""Which files a skeleton tree holds and what each records: the modules the checker reads for
the targets, the tt-metal modules they import, and the commit a file (or a skeleton of it)
was read at. The skeleton tool (``skeleton``) writes them."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vllm_tt_plugin.contract.composed_type import composed_lines
from vllm_tt_plugin.contract.signatures import UPSTREAM, FixtureError, profiles_from_mapping
from vllm_tt_plugin.contract.source import CheckoutReader
from vllm_tt_plugin.contract.source_bodyhost import body_lines
from vllm_tt_plugin.contract.source_loadable import IMPORTS_KEPT, module_exists
from vllm_tt_plugin.contract.source_module import parse_module
from vllm_tt_plugin.contract.source_names import name_failures
from vllm_tt_plugin.contract.source_py310 import HOST_FAILS
from vllm_tt_plugin.utils.checkout import git_output


@dataclass(frozen=True)
class Written:
    path: str  # relative to the output root
    source: str  # repository path it describes
    commit: str


_RECORDED = re.compile(r"tenstorrent/tt-metal (\S+\.py) @ ([0-9a-f]{40})")


def recorded_provenance(source: str) -> tuple[str, str] | None:
    """(path, commit) a skeleton's header records (re-skeletoning keeps it)."""
    for line in source.splitlines()[:12]:
        m = _RECORDED.search(line)
        if m:
            return m.group(1), m.group(2)
    return None


def read_modules(root: Path, targets: Iterable[str]) -> list[Path]:
    """The module files the parity checker reads for ``targets`` (parsed by a run of it)."""
    from vllm_tt_plugin.contract.parity import check

    names = list(targets)
    profiles = profiles_from_mapping({"profiles": {t: {"family": t} for t in names}})
    reader = CheckoutReader(root)
    check(reader, profiles, {t: () for t in names})
    if reader.unreadable:
        # Never a tree that silently lacks a module the checker would report unreadable.
        raise FixtureError("; ".join(sorted(reader.unreadable.values())))
    files = {m.path for m in reader.parsed_modules()}
    return sorted(files)


def checkout_head(root: Path) -> str:
    """``git rev-parse HEAD`` when ``root`` is itself the top of a git checkout ("" otherwise:
    a tree inside another repository must not record that repository's commit)."""
    top = git_output(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return ""
    return git_output(root, "rev-parse", "HEAD") or ""


def imported_modules(rel: str, text: str) -> list[str]:
    """The tt-metal modules a kept module imports at module level (outside a try)."""
    parts = rel.removesuffix(".py").split("/")
    package = parts[-1] == "__init__"
    module = ".".join(parts[:-1] if package else parts)
    parsed = parse_module(module, Path(rel), package, ast.parse(text))
    return [n for _, n, beyond in parsed.module_imports if n.startswith("models.") and not beyond]


def placeholder(root: Path, out: Path, name: str, done: set[str], head: str) -> list[Written]:
    """A file marking that module ``name`` is in the checkout though the checker did not read
    it (an import of a module the skeleton lacks is then a ModuleNotFoundError, as in the
    checkout: source_loadable)."""
    if not module_exists(root, name):
        return []
    base = "/".join(name.split("."))
    found = next((p for p in (f"{base}/__init__.py", f"{base}.py") if (root / p).is_file()), None)
    if found is None:  # a namespace package: only the directory has to exist
        (out / base).mkdir(parents=True, exist_ok=True)
        (out / base / ".namespace-package").write_text(IMPORTS_KEPT + "\n", encoding="utf-8")
        return []
    if found in done:
        return []
    done.add(found)
    try:
        recorded = recorded_provenance((root / found).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        recorded = None
    source_path, commit = recorded or (found, head)
    text = "\n".join([
        "# Placeholder written by `python -m vllm_tt_plugin.contract.skeleton`: this module is",
        "# in the checkout (a kept module imports it); the parity checker does not read it. Of",
        f"# {UPSTREAM} {source_path} @ {commit}",
        f"# https://github.com/{UPSTREAM}/blob/{commit}/{source_path}",
        IMPORTS_KEPT,
    ]) + "\n"  # fmt: skip
    (out / found).parent.mkdir(parents=True, exist_ok=True)
    (out / found).write_text(text, encoding="utf-8")
    return [Written(found, source_path, commit)]


def record_checkout_failures(root: Path, out: Path, written: list[Written]) -> None:
    """Record in each kept module the names it takes from checkout modules that do not bind
    them (``source_names``): the module they come from may be a placeholder in the skeleton,
    which binds nothing, so the checker could not find the failure there again."""
    reader = CheckoutReader(root)
    for w in written:
        target = out / w.path
        text = target.read_text(encoding="utf-8")
        if text.startswith("# Placeholder written by"):
            continue
        parts = w.path.removesuffix(".py").split("/")
        module = reader.module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        failures = name_failures(reader, module) if module is not None else []
        found = [f"{HOST_FAILS} {f.status} line {f.line}: {f.why}" for f in failures]
        found += body_lines(reader, module) if module is not None else []
        found += composed_lines(reader, module) if module is not None else []
        new = [line for line in dict.fromkeys(found) if line not in text.splitlines()]
        if new:
            target.write_text(text + "\n" + "\n".join(new) + "\n", encoding="utf-8")
