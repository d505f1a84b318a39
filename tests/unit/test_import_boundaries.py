"""Import boundaries between the layers (docs/ARCHITECTURE.md, "Folders and layers").

- Serving code never imports the reference test models (``vllm_tt_plugin.test_models``: vLLM
  reaches them only through the registry's string targets, with ``register_test_models``) nor
  the emulation package (``vllm_tt_plugin.emulation``) except at the point that selects the
  emulated mesh (``EMULATION_SELECTION_POINTS``).
- The scheduling policy (engine-core side) never imports the worker side.
- The harness (``tt_conformance``) never imports the plugin, vLLM or torch: it checks a server
  black-box and installs without them (``tox -e hw``).

Each rule is checked statically (every import statement, at any depth, read with ast) and
dynamically (a fresh interpreter imports the layer and reports what ``sys.modules`` holds).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tt_conformance
import vllm_tt_plugin

PLUGIN = "vllm_tt_plugin"
TEST_MODELS = f"{PLUGIN}.test_models"
EMULATION = f"{PLUGIN}.emulation"
# The functions that act on the emulated-mesh selection (options.emulated_mesh): the only
# places serving code may import the emulation package.
EMULATION_SELECTION_POINTS = {
    (f"{PLUGIN}.device.mesh", "open_mesh"),
    (f"{PLUGIN}.utils.device_discovery", "discover_in_process"),
}
SCHEDULING = (f"{PLUGIN}.scheduler", f"{PLUGIN}.lane_scheduler", f"{PLUGIN}.policy.step_policy")
WORKER_SIDE = (
    f"{PLUGIN}.worker",
    f"{PLUGIN}.model_runner",
    f"{PLUGIN}.step.block_runner",
    f"{PLUGIN}.device.mesh",
)
HARNESS_FORBIDDEN = (PLUGIN, "vllm", "torch")
# The one place the harness may load torch: the optional forward reference, inside the function
# that is called only when given a checkpoint (without torch + transformers the check skips,
# saying so, and the concern is an optional one not run: docs/CONFORMANCE.md).
HARNESS_OPTIONAL_TORCH = {("tt_conformance.forward", "load_reference")}
SUBPROCESS_TIMEOUT_S = 180


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # absolute dotted name (a submodule when ``from pkg import submodule``)
    line: int
    function: str | None  # innermost enclosing def, None at module level
    type_only: bool  # under ``if TYPE_CHECKING:``

    def where(self) -> str:
        scope = f" in {self.function}()" if self.function else ""
        return f"{self.importer}:{self.line}{scope} imports {self.imported}"


def package_modules(package: Any) -> dict[str, Path]:
    root = Path(package.__file__).parent
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str, source: str, is_package: bool, known: set[str]) -> list[Import]:
    """Every import statement of ``source``, at any depth, with its scope."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []

    def absolute(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(node: ast.AST, function: str | None, type_only: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(module, alias.name, node.lineno, function, type_only))
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                name = sub if sub in known else base
                found.append(Import(module, name, node.lineno, function, type_only))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, function, True)
            for child in node.orelse:
                visit(child, function, type_only)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        for child in ast.iter_child_nodes(node):
            visit(child, function, type_only)

    visit(ast.parse(source), None, False)
    return found


def package_imports(package: Any) -> list[Import]:
    modules = package_modules(package)
    known = set(modules)
    out: list[Import] = []
    for name, path in modules.items():
        out += imports_of(name, path.read_text(), path.name == "__init__.py", known)
    return out


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


PLUGIN_IMPORTS = package_imports(vllm_tt_plugin)
SERVING_IMPORTS = [
    i
    for i in PLUGIN_IMPORTS
    if not (within(i.importer, TEST_MODELS) or within(i.importer, EMULATION))
]


def run_python(code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (this one's environment); it prints one JSON line."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=os.environ.copy(),
    )
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


LOADED = """
import json, sys
def loaded(*prefixes):
    return sorted(m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in prefixes))
"""


# --- the scanner itself ------------------------------------------------------------------------
def test_the_scanner_sees_every_kind_of_import() -> None:
    source = textwrap.dedent(
        """
        import a.b
        from . import sibling
        from .sibling import name
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from c import d
        def f():
            from e import g
            class K:
                def m(self):
                    import h
        """
    )
    found = imports_of("pkg.mod", source, False, {"pkg.sibling"})
    assert {(i.imported, i.function, i.type_only) for i in found} == {
        ("a.b", None, False),
        ("pkg.sibling", None, False),
        ("typing", None, False),
        ("c", None, True),
        ("e", "f", False),
        ("h", "m", False),
    }


# --- serving code: no test models, emulation only where it is selected -------------------------
def test_serving_code_never_imports_the_reference_test_models() -> None:
    offending = [i.where() for i in SERVING_IMPORTS if within(i.imported, TEST_MODELS)]
    assert not offending, (
        "serving code must reach the reference test models only through the registry's string "
        f"targets (register_test_models): {offending}"
    )


def test_serving_code_imports_emulation_only_where_the_emulated_mesh_is_selected() -> None:
    emulation = [i for i in SERVING_IMPORTS if within(i.imported, EMULATION)]
    offending = [
        i.where()
        for i in emulation
        if i.type_only or (i.importer, i.function) not in EMULATION_SELECTION_POINTS
    ]
    assert not offending, (
        f"import {EMULATION} lazily, inside the function that acts on options.emulated_mesh "
        f"(EMULATION_SELECTION_POINTS): {offending}"
    )
    # The list names real selection points (a stale entry would allow an import nobody makes).
    assert {(i.importer, i.function) for i in emulation} == EMULATION_SELECTION_POINTS


@pytest.fixture(scope="module")
def serving_process() -> dict[str, Any]:
    """A fresh interpreter walks the serving start-up path with the emulated mesh not selected,
    then opens a hardware mesh (the host stub has no chips), then an emulated one."""
    return run_python(
        LOADED
        + f"""
from vllm_tt_plugin import entrypoints
entrypoints.register()
from vllm.platforms import current_platform
platform = type(current_platform).__qualname__
import vllm_tt_plugin.platform, vllm_tt_plugin.worker, vllm_tt_plugin.model_runner
import vllm_tt_plugin.scheduler, vllm_tt_plugin.lane_scheduler, vllm_tt_plugin.loader
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.config import parse_tt_options
from vllm_tt_plugin.device.mesh import close_mesh, open_mesh
from vllm_tt_plugin.launch.mesh_spec import mesh_spec_from_env
out = {{"platform": platform, "imported": loaded({TEST_MODELS!r}, {EMULATION!r})}}
try:
    open_mesh(mesh_spec_from_env(), parse_tt_options({{}}), ModelCapabilities())
    out["hardware_open"] = "opened"
except RuntimeError as exc:
    out["hardware_open"] = str(exc)
out["after_hardware_open"] = loaded({TEST_MODELS!r}, {EMULATION!r})
opened = open_mesh(
    mesh_spec_from_env(), parse_tt_options({{"emulated_mesh": True}}), ModelCapabilities()
)
close_mesh(opened)
out["after_emulated_open"] = loaded({TEST_MODELS!r}, {EMULATION!r})
print(json.dumps(out))
"""
    )


def test_serving_start_up_loads_neither_test_models_nor_emulation(
    serving_process: dict[str, Any],
) -> None:
    assert serving_process["platform"] == "TTPlatform"
    assert serving_process["imported"] == []


def test_a_hardware_mesh_open_does_not_load_emulation(serving_process: dict[str, Any]) -> None:
    assert "no" in serving_process["hardware_open"].lower()  # the stub: no chips on this host
    assert serving_process["after_hardware_open"] == []


def test_selecting_the_emulated_mesh_loads_emulation_only(serving_process: dict[str, Any]) -> None:
    # Also shows the sys.modules probe sees the package when it is there.
    assert f"{EMULATION}.mesh" in serving_process["after_emulated_open"]
    assert not [m for m in serving_process["after_emulated_open"] if within(m, TEST_MODELS)]


# --- the scheduling policy never imports the worker side ---------------------------------------
def closure(start: str, edges: list[Import]) -> dict[str, Import | None]:
    """Modules reachable from ``start`` through import statements, each with the import that
    first reached it."""
    by_importer: dict[str, list[Import]] = {}
    for edge in edges:
        by_importer.setdefault(edge.importer, []).append(edge)
    reached: dict[str, Import | None] = {start: None}
    todo = [start]
    while todo:
        for edge in by_importer.get(todo.pop(), []):
            if edge.imported not in reached:
                reached[edge.imported] = edge
                todo.append(edge.imported)
    return reached


def chain(name: str, reached: dict[str, Import | None]) -> Iterator[str]:
    edge = reached[name]
    while edge is not None:
        yield edge.where()
        edge = reached[edge.importer]


@pytest.mark.parametrize("module", SCHEDULING)
def test_the_scheduling_policy_never_imports_the_worker_side(module: str) -> None:
    reached = closure(module, PLUGIN_IMPORTS)
    offending = {m: list(chain(m, reached)) for m in WORKER_SIDE if m in reached}
    assert not offending, f"{module} reaches the worker side: {offending}"


def test_importing_the_schedulers_loads_no_worker_module() -> None:
    result = run_python(
        LOADED
        + f"""
import vllm_tt_plugin.scheduler, vllm_tt_plugin.lane_scheduler, vllm_tt_plugin.policy.step_policy
print(json.dumps({{"imported": loaded(*{WORKER_SIDE!r})}}))
"""
    )
    assert result["imported"] == []


def import_cycle(edges: Iterable[Import], prefix: str) -> list[str] | None:
    """One cycle among ``prefix``'s modules (as "importer:line imports imported" steps), or
    None. Every import counts: module level, in a function, under ``if TYPE_CHECKING:``."""
    graph: dict[str, list[Import]] = {}
    for edge in edges:
        if within(edge.imported, prefix) and edge.importer != edge.imported:
            graph.setdefault(edge.importer, []).append(edge)
    done: set[str] = set()
    path: list[Import] = []
    on_path: dict[str, int] = {}

    def visit(module: str) -> list[str] | None:
        on_path[module] = len(path)
        for edge in graph.get(module, ()):
            if edge.imported in on_path:
                return [e.where() for e in path[on_path[edge.imported] :]] + [edge.where()]
            if edge.imported not in done:
                path.append(edge)
                found = visit(edge.imported)
                path.pop()
                if found:
                    return found
        del on_path[module]
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done:
            found = visit(module)
            if found:
                return found
    return None


def test_the_plugin_has_no_import_cycle_even_at_type_level() -> None:
    """Modules depend one way (the metrics cycle is inverted: host_phases registers its series
    with tt_metrics; the device logprob forms are a leaf both the plan and the route import)."""
    assert import_cycle(PLUGIN_IMPORTS, PLUGIN) is None


def test_the_cycle_finder_names_each_step() -> None:
    edges = [
        Import("p.a", "p.b", 3, None, False),
        Import("p.b", "p.c", 5, "f", False),
        Import("p.c", "p.a", 7, None, True),
        Import("p.a", "q.x", 1, None, False),
    ]
    assert import_cycle(edges, "p") == [
        "p.a:3 imports p.b",
        "p.b:5 in f() imports p.c",
        "p.c:7 imports p.a",
    ]
    assert import_cycle(edges[:2], "p") is None


def test_the_block_stepper_sees_the_runner_only_through_its_host_protocol() -> None:
    """``BlockStepper`` is given a ``BlockHost`` (slots, adapter, planner, KV, two input
    builders), not the runner class: block_runner imports nothing of model_runner, not even for
    types (the two modules were a cycle at type level)."""
    found = [
        i.where()
        for i in PLUGIN_IMPORTS
        if i.importer == f"{PLUGIN}.step.block_runner" and i.imported == f"{PLUGIN}.model_runner"
    ]
    assert not found, found


# --- the harness never imports the plugin -----------------------------------------------------
def test_the_harness_never_imports_the_plugin_vllm_or_torch() -> None:
    imports = package_imports(tt_conformance)
    excused = [
        i
        for i in imports
        if (i.importer, i.function) in HARNESS_OPTIONAL_TORCH and within(i.imported, "torch")
    ]
    # Each excuse is still needed (a stale one would excuse a later import in its place).
    assert {(i.importer, i.function) for i in excused} == HARNESS_OPTIONAL_TORCH
    offending = [
        i.where()
        for i in imports
        if any(within(i.imported, name) for name in HARNESS_FORBIDDEN) and i not in excused
    ]
    assert not offending, (
        f"tt_conformance checks a server black-box and installs without {HARNESS_FORBIDDEN}: "
        f"{offending}"
    )


def test_importing_every_harness_module_loads_no_plugin_vllm_or_torch() -> None:
    modules = sorted(package_modules(tt_conformance))
    result = run_python(
        LOADED
        + f"""
import importlib
for name in {modules!r}:
    importlib.import_module(name)
print(json.dumps({{"count": len(sys.modules), "imported": loaded(*{HARNESS_FORBIDDEN!r})}}))
"""
    )
    assert result["imported"] == []
