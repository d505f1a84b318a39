"""Naming rules shared by the plugin, the report writer, the matrix and the gate."""

from __future__ import annotations

import json
import re
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = [
    "CONCERN_MARKERS",
    "DEVICE_ALIASES",
    "DISTRIBUTION",
    "EMULATED_DEVICE",
    "KNOWN_MESH_SHAPES",
    "NOT_TT_DEVICE",
    "OTHER_DEVICES",
    "OTHER_MARKERS",
    "default_expectations_path",
    "default_report_dir",
    "emulated_device",
    "harness_commit",
    "installed_version",
    "is_emulated",
    "mesh_shape_for",
    "normalize_device",
    "path_component",
]

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
    "device_sampling": "device-sampled tokens and logprobs against the host path's logprobs",
    "long_context": "device decode deep in the context against the host path",
    "forward_reference": "served top logprobs against transformers' forward on the same tokens",
    "structured_output": "structured output checks",
    "kv_capacity": "KV capacity checks",
    "lanes": "lane data-parallel checks",
    "block_output": "block-output (256-token canvas) serving checks",
    "decode_reload": "decode reload contract checks at the server",
    "errors": "malformed-request checks",
    "serving_perf": "serving performance snapshot",
    "accuracy": "task accuracy against the expectations' reference",
}

OTHER_MARKERS: dict[str, str] = {
    "requires_lanes(n=2)": "needs a server serving >= n lane-DP lanes; skipped otherwise",
    "slow": "long-running check",
    "tt_path": "claims a TT behaviour; not applicable on a server without the TT plugin",
}

# TT systems by the names tt-inference-server uses (DeviceTypes), with their mesh shapes
# (rows x cols), plus the MESH_DEVICE spellings tt-metal and the plugin accept as aliases. Names
# are matched case-insensitively and reports carry the canonical (upper-case) name, so T3K and
# t3k are one matrix column. tests/conformance/test_devices.py keeps this in step with the
# plugin's own list (plugin/vllm_tt_plugin/launch/mesh_spec.py) without the harness importing it.
KNOWN_MESH_SHAPES: dict[str, str] = {
    "N150": "1x1",
    "N150X4": "1x4",
    "N300": "1x2",
    "T3K": "1x8",
    "GALAXY": "8x4",
    "GALAXY_T3K": "1x8",
    "P100": "1x1",
    "P150": "1x1",
    "P150X2": "1x2",
    "P150X4": "1x4",
    "P150X8": "1x8",
    "P300": "1x2",
    "P300X2": "2x2",
    "BLACKHOLE_GALAXY": "8x4",
}
DEVICE_ALIASES: dict[str, str] = {
    "TG": "GALAXY",
    "WH-GALAXY": "GALAXY",
    "BH-GALAXY": "BLACKHOLE_GALAXY",
    "BHGLX": "BLACKHOLE_GALAXY",
}
# Not TT systems, kept lower-case as before: the host-emulated mesh and "not said". A server on
# an emulated mesh is filed as "emulated-<its mesh device>" (emulated-T3K, emulated-GALAXY): one
# name per emulated mesh; bare "emulated" is what a caller may type (--tt-device emulated) and
# what reports before that rule carry.
EMULATED_DEVICE = "emulated"
OTHER_DEVICES: tuple[str, ...] = (EMULATED_DEVICE, "cpu", "gpu", "unknown")
# The report's device for a server that shows no TT plugin (no tt_plugin_info on /metrics),
# whatever --tt-device said: such a report is never labelled as TT hardware (provenance.py).
NOT_TT_DEVICE = "not-tt"


def emulated_device(mesh_device: str) -> str:
    """The device name of a host-emulated ``mesh_device`` mesh: ``emulated-T3K``."""
    return f"{EMULATED_DEVICE}-{normalize_device(mesh_device)}"


def is_emulated(device: str) -> bool:
    """A host-emulated mesh: ``emulated`` or ``emulated-<mesh device>``."""
    return device == EMULATED_DEVICE or device.startswith(f"{EMULATED_DEVICE}-")


def normalize_device(name: str) -> str:
    """Canonical device name; ValueError naming the value and the accepted names otherwise."""
    text = name.strip()
    prefix = f"{EMULATED_DEVICE}-"
    if text.lower().startswith(prefix):
        mesh = normalize_device(text[len(prefix) :])
        if mesh not in KNOWN_MESH_SHAPES:
            raise ValueError(f"unknown device {name!r}: emulated-<a TT mesh device> expected")
        return prefix + mesh
    upper = text.upper().replace(" ", "")
    if upper in KNOWN_MESH_SHAPES:
        return upper
    if upper in DEVICE_ALIASES:
        return DEVICE_ALIASES[upper]
    if text.lower() in OTHER_DEVICES:
        return text.lower()
    known = ", ".join([*KNOWN_MESH_SHAPES, *DEVICE_ALIASES, *OTHER_DEVICES])
    raise ValueError(f"unknown device {name!r} (case-insensitive; known: {known})")


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


def harness_commit(distribution: str = DISTRIBUTION) -> str:
    """The commit this harness runs from, for the report's versions: HEAD of its checkout
    (``+dirty`` when tracked files changed), else the VCS commit pip recorded when it was
    installed from git (PEP 610), else ``unknown``. The version number alone names hundreds of
    commits."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / ".git").exists() and (checkout / "conformance").is_dir():
        git = ["git", "-C", str(checkout)]
        try:
            head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
            changed = subprocess.run(
                [*git, "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
            )
        except OSError:
            return "unknown"
        if head.returncode == 0:
            return head.stdout.strip() + ("+dirty" if changed.stdout.strip() else "")
    try:
        recorded = json.loads(
            metadata.distribution(distribution).read_text("direct_url.json") or "{}"
        )
    except (metadata.PackageNotFoundError, ValueError):
        return "unknown"
    return str(recorded.get("vcs_info", {}).get("commit_id") or "unknown")


def mesh_shape_for(device: str) -> str | None:
    try:
        return KNOWN_MESH_SHAPES.get(normalize_device(device).removeprefix(f"{EMULATED_DEVICE}-"))
    except ValueError:
        return None
