"""Why a TT mesh did not open, in one line: what was asked for, what ttnn found, what to do.

Real ttnn reports a missing or unusable device as a ``RuntimeError`` whose text is a TT_FATAL
header, the reason and a C++ backtrace (``TT_FATAL @ file:line: cond\\ninfo:\\n<reason>\\n
backtrace:\\n --- ...``), tens of lines that end up in the middle of vLLM's start-up log. The
device layer turns it into a ``MeshOpenError`` whose message is one line; ttnn's full text is
logged at DEBUG. Pure: no ttnn import (the caller passes what ttnn said).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.launch.mesh_spec import MeshSpec

# Words real ttnn (UMD) uses when a chip is present but another process holds it.
_BUSY_WORDS = ("busy", "in use", "another process", "already open", "locked by")


class MeshOpenError(RuntimeError):
    """The mesh could not be opened; the message is the one line an operator needs."""


class Finding(enum.Enum):
    NO_CHIPS = "no chips"
    TOO_FEW_CHIPS = "fewer chips than the mesh needs"
    BUSY = "device busy"
    OTHER = "ttnn refused"


@dataclass(frozen=True)
class MeshRequest:
    """What the launch asked ttnn for."""

    mesh_device: str  # MESH_DEVICE as set, or "N150 (default)"
    shape: tuple[int, int]
    chips: int
    device_ids: tuple[int, ...] | None

    @classmethod
    def of(cls, spec: MeshSpec, device_ids: list[int] | None) -> MeshRequest:
        raw = envs.MESH_DEVICE.raw()
        mesh_device = raw.strip() if raw else f"{spec.name} (default)"
        ids = tuple(device_ids) if device_ids is not None else None
        return cls(mesh_device, spec.shape, spec.num_devices, ids)


@dataclass(frozen=True)
class ClusterFinding:
    """What ttnn reported about the chips."""

    kind: Finding
    chips_found: int | None = None  # None: ttnn could not count them
    cluster: str | None = None  # ttnn.cluster.ClusterType name, when ttnn answered
    ttnn_said: str = ""  # ttnn's reason without its backtrace


def ttnn_reason(exc: BaseException) -> str:
    """ttnn's reason from an exception's text: a TT_FATAL's ``info:`` block without the
    backtrace, else the first non-empty line."""
    lines = [line.strip() for line in str(exc).splitlines()]
    if "info:" in lines:
        start = lines.index("info:") + 1
        end = lines.index("backtrace:") if "backtrace:" in lines[start:] else len(lines)
        reason = " ".join(line for line in lines[start:end] if line)
        if reason:
            return reason
    first = next((line for line in lines if line), type(exc).__name__)
    return first


def classify(exc: BaseException) -> ClusterFinding:
    """A ttnn failure as a finding: no chips, a busy device, or anything else."""
    said = ttnn_reason(exc)
    lowered = str(exc).lower()
    if "no chips detected" in lowered:
        return ClusterFinding(Finding.NO_CHIPS, chips_found=0, ttnn_said=said)
    if any(word in lowered for word in _BUSY_WORDS):
        return ClusterFinding(Finding.BUSY, ttnn_said=said)
    return ClusterFinding(Finding.OTHER, ttnn_said=said)


def too_few_chips(request: MeshRequest, found: int, cluster: str | None) -> ClusterFinding | None:
    """A finding when the chips ttnn counted cannot hold the mesh (or its device ids)."""
    highest = max(request.device_ids) if request.device_ids else -1
    if found >= request.chips and highest < found:
        return None
    return ClusterFinding(Finding.TOO_FEW_CHIPS, chips_found=found, cluster=cluster)


def _chips(n: int) -> str:
    return f"{n} chip{'' if n == 1 else 's'}"


def describe(request: MeshRequest, finding: ClusterFinding) -> str:
    """The one line: the request, ttnn's finding, the remedies."""
    ids = f" on devices {list(request.device_ids)}" if request.device_ids is not None else ""
    asked = (
        f"TT: cannot open the mesh: MESH_DEVICE={request.mesh_device} asks for a "
        f"{request.shape[0]}x{request.shape[1]} mesh ({_chips(request.chips)}){ids}"
    )
    said = f" (ttnn: {finding.ttnn_said})" if finding.ttnn_said else ""
    emulate = (
        'to run without TT hardware, add "emulated_mesh": true to --additional-config\'s '
        '"tt" options (docs/EMULATED_MESH.md)'
    )
    driver = "check that the TT driver is loaded and `tt-smi` lists the chips"
    if finding.kind is Finding.NO_CHIPS:
        found = f"ttnn found no chips{said}"
        remedies = f"{driver}; if another process holds the device, stop it; {emulate}"
    elif finding.kind is Finding.TOO_FEW_CHIPS:
        on = f" ({finding.cluster})" if finding.cluster else ""
        found = f"ttnn found {_chips(finding.chips_found or 0)}{on}"
        remedies = (
            f'set MESH_DEVICE to a system or "(rows,cols)" shape of at most '
            f"{_chips(finding.chips_found or 0)}; {driver}; {emulate}"
        )
    elif finding.kind is Finding.BUSY:
        found = f"the device is busy{said}"
        remedies = f"another process holds the device: stop it (`tt-smi` shows it); {emulate}"
    else:
        found = f"ttnn refused{said}"
        remedies = f"{driver}; if another process holds the device, stop it; {emulate}"
    return f"{asked}, but {found}. Remedies: {remedies}."
