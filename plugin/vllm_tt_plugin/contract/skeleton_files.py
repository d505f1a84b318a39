"""Which files a skeleton tree holds and what each records: the modules the checker reads for
the targets, the tt-metal modules they import, and the commit a file (or a skeleton of it)
was read at. The skeleton tool (``skeleton``) writes them."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from vllm_tt_plugin.contract.signatures import FixtureError, profiles_from_mapping
from vllm_tt_plugin.contract.source import CheckoutReader
from vllm_tt_plugin.contract.source_module import parse_module
from vllm_tt_plugin.utils.checkout import git_output

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
