"""The package layout shows the layers (docs/ARCHITECTURE.md, "Folders and layers").

The product spec's modules sit at the top of ``vllm_tt_plugin``; everything else lives in one
subpackage per layer, and each layer imports only what its role allows. Every import counts:
module level, inside a function, under ``if TYPE_CHECKING:`` (the walker of
test_import_boundaries.py). The emulation package has its own rule there (only where the
emulated mesh is selected), so it is left out of the tables below.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import vllm_tt_plugin
from tests.unit.test_import_boundaries import PLUGIN, PLUGIN_IMPORTS, Import, within

PACKAGE = Path(vllm_tt_plugin.__file__).parent
ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"

# The spec's top-level modules ("Repository layout" of the product README), utils/ aside.
SPEC_MODULES = frozenset(
    {
        "entrypoints",
        "platform",
        "model_registry",
        "worker",
        "model_runner",
        "scheduler",
        "lane_scheduler",
        "launcher",
        "loader",
        "input_batch",
        "async_decode",
        "config",
    }
)
# Of those, the ones that compose the layers (the engine-core and worker processes' entry
# classes and their helpers). config and model_registry are read below them: the parsed options
# and the class lookup are facts every layer may take.
COMPOSING = SPEC_MODULES - {"config", "model_registry"}
LAYERS = (
    "launch",
    "policy",
    "contract",
    "adapter",
    "step",
    "device",
    "observability",
    "emulation",
    "test_models",
    "parsers",
    "utils",
)
SERVING = frozenset({"launch", "policy", "contract", "adapter", "step", "device", "observability"})

# What each layer must not import (folders, or top-level modules), and why.
FORBIDDEN: dict[str, tuple[frozenset[str], str]] = {
    "launch": (
        COMPOSING | {"adapter", "step", "device", "observability", "test_models", "parsers"},
        "decided before any device opens, in every process",
    ),
    "policy": (
        COMPOSING
        | {"adapter", "step", "device", "contract", "observability", "test_models", "parsers"},
        "pure decisions the engine core and the worker share",
    ),
    "contract": (
        COMPOSING | {"adapter", "step", "device", "observability", "test_models", "parsers"},
        "the contract as types and data: nothing that executes it",
    ),
    "adapter": (
        COMPOSING - {"async_decode"} | {"step", "observability", "test_models", "parsers"},
        "the one caller of a model class knows no runner, scheduler or metrics",
    ),
    "step": (
        COMPOSING - {"input_batch"} | {"device", "test_models", "parsers"},
        "the runner's pieces see the runner only through protocols (block_runner.BlockHost)",
    ),
    "device": (
        COMPOSING
        | {"adapter", "step", "contract", "policy", "observability", "test_models", "parsers"},
        "the device boundary knows no model, step or decision",
    ),
    "observability": (
        COMPOSING | {"adapter", "step", "device", "test_models", "parsers"},
        "measurement reads the work's types, never the work",
    ),
    "test_models": (
        COMPOSING | {"step", "device", "observability", "policy", "parsers"},
        "a reference model sits where a tt-metal class sits: contract and KV specs only",
    ),
    "parsers": (
        SPEC_MODULES | SERVING | {"test_models"},
        "chat parsers run in the API server: only the loggers",
    ),
    "utils": (
        COMPOSING
        | {"policy", "contract", "adapter", "step", "device", "observability", "test_models"},
        "common helpers: the environment registry and the mesh spec at most",
    ),
}
# Single imports a rule allows, each with its reason (importer, imported).
ALLOWED = {
    ("launch.vllm_patches", "device.watchdog"): "the engine's death reason is the watchdog's",
    ("launch.vllm_patches", "device.startup_reason"): "the start-up reason reaches the exit",
    ("launch.vllm_patches", "parsers"): "the parser registration is a vLLM patch (P5)",
}


def layer_of(module: str) -> str | None:
    """The folder (or top-level module) of a plugin module, or None outside the plugin."""
    if not within(module, PLUGIN) or module == PLUGIN:
        return None
    return module.split(".")[1]


def violations(layer: str, edges: list[Import]) -> list[str]:
    forbidden, _ = FORBIDDEN[layer]
    found = []
    for edge in edges:
        if layer_of(edge.importer) != layer:
            continue
        target = layer_of(edge.imported)
        if target is None or target == layer or target not in forbidden:
            continue
        pair = (edge.importer[len(PLUGIN) + 1 :], edge.imported[len(PLUGIN) + 1 :])
        if any(pair[0] == a and within(pair[1], b) for a, b in ALLOWED):
            continue
        found.append(edge.where())
    return found


def test_the_top_level_holds_the_spec_modules_and_every_folder_is_a_layer() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert top == SPEC_MODULES, f"outside the spec's list: {sorted(top - SPEC_MODULES)}"
    assert folders == set(LAYERS), f"folders without a layer: {sorted(folders - set(LAYERS))}"


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_each_layer_imports_only_what_its_role_allows(layer: str) -> None:
    found = violations(layer, PLUGIN_IMPORTS)
    assert not found, f"{layer} ({FORBIDDEN[layer][1]}) must not: {found}"


def test_a_forbidden_import_is_reported_and_an_allowed_one_is_not() -> None:
    def edge(importer: str, imported: str) -> Import:
        return Import(f"{PLUGIN}.{importer}", f"{PLUGIN}.{imported}", 3, None, True)

    edges = [
        edge("policy.sampling_route", "device.mesh"),  # a decision reaching the device
        edge("policy.sampling_route", "launch.launch_plan"),  # allowed: the plan
        edge("launch.vllm_patches", "device.watchdog"),  # an allowed single import
        edge("launch.launch_plan", "device.watchdog"),  # the same target from elsewhere
        edge("utils.log", "policy.step_kind"),
    ]
    assert violations("policy", edges) == [
        f"{PLUGIN}.policy.sampling_route:3 imports {PLUGIN}.device.mesh"
    ]
    assert violations("launch", edges) == [
        f"{PLUGIN}.launch.launch_plan:3 imports {PLUGIN}.device.watchdog"
    ]
    assert len(violations("utils", edges)) == 1


def test_the_architecture_page_maps_every_folder() -> None:
    text = ARCHITECTURE.read_text()
    table = text[text.index("## Folders and layers") :]
    named = set(re.findall(r"^\| `([a-z_]+)/` \|", table, flags=re.M))
    assert named == set(LAYERS), f"ARCHITECTURE.md folders: {sorted(named ^ set(LAYERS))}"
