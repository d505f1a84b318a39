"""The harness's layers (docs/ARCHITECTURE.md): an acyclic import graph, each module importing
only its own layer or the ones below, one declared public API (``__all__``) that tests and
tools keep to, and no underscore module used from outside the harness.

The graphs are built from the source with ast: every import statement, including those inside
functions. The layering is judged on the imports that can run (``if TYPE_CHECKING:`` blocks are
left out); cycles on every import, type-only ones too: a cycle through an annotation still ties
the modules together (neither can be read, moved or split without the other).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "conformance" / "tt_conformance"
PACKAGE = "tt_conformance"

FOUNDATION, MODEL, FORMATS, WRITERS, ENTRY = range(5)
# Every module's layer. A module missing here fails the test: place it when you add it.
LAYERS: dict[str, int] = {
    **dict.fromkeys(("names", "envs", "datafile", "numfmt", "committed"), FOUNDATION),
    **dict.fromkeys(
        (
            "report", "expectations", "tiers", "perfshapes", "perfstats", "benchimport",
            "accuracy", "provenance", "ttmetrics", "server", "rawhttp", "history", "matrix", "gate",
            "longtasks", "chisquare", "identity", "selection", "fisher", "rederive", "mcnemar",
            "paired", "independence", "suiteids", "restated", "bars", "mutation", "forward",
            "situations", "situation_matrix", "second_oracle", "situation_record",
        ),
        MODEL,
    ),
    **dict.fromkeys(
        (
            "formats", "formats.cells", "formats.templates", "formats.views", "formats.json",
            "formats.markdown", "formats.junit", "formats.html", "formats.text", "formats.escape",
        ),
        FORMATS,
    ),
    **dict.fromkeys(("writers", "baseline"), WRITERS),
}  # fmt: skip
# The two kinds of entry point: neither imports the other.
PYTEST_SIDE = (
    "state",
    "collector",
    "fixtures",
    "reporting",
    "serverlock",
    "pytest_plugin",
    "abort",
    "ttpath",
)
COMMANDS = ("cli", "cli.conformance", "cli.matrix", "cli.gate", "cli.pipes", "schema")
FORMAT_LIBRARIES = ("tabulate", "jinja2", "xml")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(HARNESS.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def harness_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(HARNESS.rglob("*.py"))}


def runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run (not under ``if TYPE_CHECKING:``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in runtime_imports_of(child))
            continue
        yield from runtime_imports_of(node)


def runtime_imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from runtime_imports(node)


def every_import(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth, ``if TYPE_CHECKING:`` blocks included."""
    return (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def imported_names(node: ast.Import | ast.ImportFrom, here: str, known: set[str]) -> list[str]:
    """The module names an import statement loads (``from pkg import sub`` loads pkg.sub)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        anchor = here.split(".")[: -node.level] if node.level else []
        base = ".".join([*anchor, *([base] if base else [])])
    out = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        out.append(candidate if candidate in known else base)
    return out


def import_graph(
    modules: Mapping[str, Path],
    statements: Callable[[ast.AST], Iterator[ast.Import | ast.ImportFrom]] = runtime_imports,
) -> dict[str, set[str]]:
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets = {
            target for node in statements(tree) for target in imported_names(node, name, known)
        }
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None when the graph is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def short(name: str) -> str:
    return name.removeprefix(f"{PACKAGE}.").removeprefix(PACKAGE) or "(package)"


def layer_of(name: str) -> int | None:
    key = short(name)
    if key in LAYERS:
        return LAYERS[key]
    if key in PYTEST_SIDE or key in COMMANDS or key.startswith("checks"):
        return ENTRY
    return None


GRAPH = import_graph(harness_modules())
# With the type-only imports: what the cycle check reads.
FULL_GRAPH = import_graph(harness_modules(), every_import)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    # A lazy import inside a function is an edge too; a TYPE_CHECKING one is not.
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tt_conformance import gate\n"
        "def f():\n    from tt_conformance import report\n"
    )
    known = {"tt_conformance.gate", "tt_conformance.report"}
    found = [t for n in runtime_imports(tree) for t in imported_names(n, "x", known)]
    assert found == ["typing", "tt_conformance.report"]
    # The cycle check's graph has both.
    found = [t for n in every_import(tree) for t in imported_names(n, "x", known)]
    assert sorted(found) == ["tt_conformance.gate", "tt_conformance.report", "typing"]


def test_a_type_only_import_closes_a_cycle(tmp_path: Path) -> None:
    # The shape this graph once had: rawhttp -> server at run time, server -> ttpath, and
    # ttpath -> rawhttp for an annotation only.
    sources = {
        "rawhttp": "def f():\n    from tt_conformance.server import bearer\n",
        "server": "from tt_conformance.ttpath import parse_metrics\n",
        "ttpath": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tt_conformance.rawhttp import RawHttp\n",
    }
    modules = {}
    for name, text in sources.items():
        (tmp_path / f"{name}.py").write_text(text)
        modules[f"{PACKAGE}.{name}"] = tmp_path / f"{name}.py"
    assert find_cycle(import_graph(modules)) is None
    cycle = find_cycle(import_graph(modules, every_import))
    assert [short(m) for m in cycle or []] == ["rawhttp", "server", "ttpath", "rawhttp"]


def test_the_harness_import_graph_is_acyclic_counting_type_only_imports() -> None:
    assert GRAPH["tt_conformance.writers"] >= {"tt_conformance.formats.markdown"}
    # fixtures imports report for an annotation only: the edge is in this graph.
    assert (
        "tt_conformance.report"
        in FULL_GRAPH["tt_conformance.fixtures"] - GRAPH["tt_conformance.fixtures"]
    )
    cycle = find_cycle(FULL_GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(short(m) for m in cycle or [])


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_layers() -> None:
    unplaced = sorted(short(m) for m in GRAPH if m != PACKAGE and layer_of(m) is None)
    assert unplaced == [], f"place these modules in a layer (LAYERS in this file): {unplaced}"
    upward = sorted(
        f"{short(m)} -> {short(t)}"
        for m, targets in GRAPH.items()
        if m != PACKAGE
        for t in targets
        if t != PACKAGE and (layer_of(t) or 0) > (layer_of(m) or 0)
    )
    assert upward == [], f"imports against the layering: {upward}"


def test_the_pytest_side_and_the_commands_do_not_import_each_other() -> None:
    def group(name: str) -> str | None:
        key = short(name)
        if key in PYTEST_SIDE or key.startswith("checks"):
            return "pytest"
        return "commands" if key in COMMANDS else None

    crossing = sorted(
        f"{short(m)} -> {short(t)}"
        for m, targets in GRAPH.items()
        for t in targets
        if group(m) and group(t) and group(m) != group(t)
    )
    assert crossing == []


def test_the_data_model_imports_no_format_module_or_library() -> None:
    model = [m for m in GRAPH if layer_of(m) in (FOUNDATION, MODEL)]
    assert "tt_conformance.report" in model and "tt_conformance.gate" in model
    for name in model:
        tree = ast.parse(harness_modules()[name].read_text())
        loaded = {
            t for node in runtime_imports(tree) for t in imported_names(node, name, set(GRAPH))
        }
        formats = sorted(
            t
            for t in loaded
            if t.startswith("tt_conformance.formats") or t.split(".")[0] in FORMAT_LIBRARIES
        )
        assert formats == [], f"{short(name)} imports {formats}"


def declared(module: str) -> list[str] | None:
    names = getattr(importlib.import_module(module), "__all__", None)
    return None if names is None else list(names)


@pytest.mark.parametrize(
    "module",
    sorted(m for m in GRAPH if not short(m).startswith(("checks.test_", "checks._"))),
)
def test_every_module_declares_its_public_api(module: str) -> None:
    names = declared(module)
    assert names is not None, f"{module} has no __all__"
    loaded = importlib.import_module(module)
    missing = [n for n in names if not hasattr(loaded, n)]
    assert missing == [], f"{module}.__all__ names what it does not define: {missing}"


def _outside_files() -> list[Path]:
    roots = ("tests", "tools", "benchmarks", "examples")
    return [p for r in roots for p in sorted((REPO / r).rglob("*.py"))]


def _uses_of_the_harness(tree: ast.AST) -> Iterator[tuple[int, str, str | None]]:
    """(line, module, name) for every harness import and attribute use of an imported module."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub.removeprefix(f"{PACKAGE}.") in LAYERS or _is_module(sub):
                    aliases[alias.asname or alias.name] = sub
                    yield node.lineno, sub, None
                else:
                    yield node.lineno, str(node.module), alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield node.lineno, alias.name, None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            yield node.lineno, aliases[node.value.id], node.attr


def _is_module(name: str) -> bool:
    return name in GRAPH


def test_tests_and_tools_use_only_declared_names_of_public_modules() -> None:
    problems = []
    for path in _outside_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, module, name in _uses_of_the_harness(tree):
            where = f"{path.relative_to(REPO)}:{line}"
            if any(part.startswith("_") and part != "__init__" for part in module.split(".")):
                problems.append(f"{where}: underscore module {module}")
            elif (
                name is not None
                and module in GRAPH
                and name not in (declared(module) or ())
                and f"{module}.{name}" not in GRAPH
            ):
                problems.append(f"{where}: {module}.{name} is not in its __all__")
    assert problems == []
