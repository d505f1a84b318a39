"""Naming rules shared by the plugin, the report writer, the matrix and the gate."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "vllm-tt-plugin"

# Concern markers: the first one found on a check names its concern in the report. Kept in step
# with the marker list in pyproject.toml, and registered by the plugin so that the suite also
# runs from repositories that do not have that list.
CONCERN_MARKERS: dict[str, str] = {
    "isolation": "request isolation checks",
    "seeding": "seeding and variety checks",
    "sampling_fallback": "host-sampling fallback checks",
    "penalties": "penalty checks",
    "logprobs": "logprob checks",
    "structured_output": "structured output checks",
    "kv_capacity": "KV capacity checks",
    "lanes": "lane data-parallel checks",
    "decode_reload": "decode reload contract checks at the server",
    "errors": "malformed-request checks",
    "serving_perf": "serving performance snapshot",
}

OTHER_MARKERS: dict[str, str] = {
    "requires_lanes(n=2)": "needs a server with --tt-lanes >= n; skipped otherwise",
    "slow": "long-running check",
    "tt_path": "claims a TT behaviour; not applicable on a server without the TT plugin",
}

# Device name -> mesh shape (rows x cols) for the common TT systems, so reports carry a mesh
# shape without one more option; --tt-mesh-shape overrides it.
KNOWN_MESH_SHAPES: dict[str, str] = {
    "N150": "1x1",
    "N300": "1x2",
    "P100": "1x1",
    "P150": "1x1",
    "T3K": "1x8",
    "TG": "8x4",
    "GALAXY": "8x4",
}

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def path_component(name: str) -> str:
    """Turn a model or device name into one safe directory name.

    "meta-llama/Llama-3.1-8B-Instruct" -> "meta-llama--Llama-3.1-8B-Instruct": the org/name
    split stays readable, and no name can climb out of the reports tree ("..", "/").
    """
    text = name.strip().replace("/", "--").replace("\\", "--")
    text = _UNSAFE.sub("_", text).lstrip(".")
    return text or "unknown"


def default_report_dir(base: Path, model: str, device: str) -> Path:
    return base / "reports" / path_component(model) / path_component(device)


def default_expectations_path(baselines_dir: Path, model: str, device: str) -> Path:
    return baselines_dir / path_component(model) / path_component(device) / "expectations.json"


def installed_version(distribution: str = DISTRIBUTION) -> str:
    """The installed version of ``distribution`` (default: the one shipping this harness), which
    is the harness's version; it says nothing about the plugin build of a remote server."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def mesh_shape_for(device: str) -> str | None:
    return KNOWN_MESH_SHAPES.get(device.strip().upper())
