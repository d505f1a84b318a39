"""What the report says about the server, discovered rather than typed: the plugin's
``tt_plugin_info`` metric and GET /v1/models win over flags, and a flag that disagrees with the
server is an error naming both values (a report must never describe another configuration than
the one measured). Without the info metric (a non-TT server, an older plugin, metrics off) the
flags and defaults are used, the report says which fields were discovered, and the server is not
certified as TT: the report's device is ``not-tt`` with no mesh shape (tiers.py caps it at
experimental). The report's device and mesh are decided here and nowhere else.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass
from typing import Any

from tt_conformance.names import EMULATED_DEVICE, NOT_TT_DEVICE, mesh_shape_for
from tt_conformance.report import RunInfo
from tt_conformance.server import ServedModel, ServerProbe
from tt_conformance.ttmetrics import TTProbe, device_disagreement, server_device

__all__ = [
    "DEFAULT_LANES",
    "DEFAULT_MAX_NUM_SEQS",
    "PROFILE_SWITCHES",
    "SECRET_OPTIONS",
    "Discovered",
    "Flags",
    "ProvenanceError",
    "discover",
    "redact",
    "run_info",
]

DEFAULT_MAX_NUM_SEQS = 32  # only when neither the server nor a flag says (vLLM's own default)
DEFAULT_LANES = 1
# vLLM switches in tt_plugin_info that are part of a run's configuration profile (identity.py).
PROFILE_SWITCHES = ("async_scheduling", "chunked_prefill", "prefix_caching")


class ProvenanceError(ValueError):
    """A flag contradicts what the server publishes."""


@dataclass(frozen=True)
class Flags:
    """What the caller typed (None = not given)."""

    max_num_seqs: int | None = None
    lanes: int | None = None
    mesh_shape: str | None = None
    plugin_version: str | None = None
    tt_metal_version: str | None = None


@dataclass(frozen=True)
class Discovered:
    device: str  # the report's device: --tt-device, else the server's; not-tt without the plugin
    tt: TTProbe  # what the checks' tt_path fixture knows about the TT plugin
    max_num_seqs: int
    lanes: int
    max_model_len: int | None
    mesh_shape: str | None
    mesh_device: str | None
    model_class: str | None
    tt_options: Any
    plugin_version: str
    ttnn_version: str
    tt_metal_version: str
    discovered: tuple[str, ...]
    # Identity besides the versions above (tt_plugin_info; None when the server does not say).
    plugin_commit: str = "unknown"
    vllm_commit: str = "unknown"
    tensor_parallel: int | None = None
    data_parallel: int | None = None
    weights: str | None = None
    async_scheduling: bool | None = None
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    warnings: tuple[str, ...] = ()


def _agree(name: str, flag: Any, server: Any, flag_name: str) -> None:
    if flag is not None and server is not None and flag != server:
        raise ProvenanceError(
            f"{flag_name} {flag} disagrees with the server, which reports {name} = {server} "
            f"(tt_plugin_info); drop the flag or point the harness at the intended server"
        )


def discover(
    probe: ServerProbe | None, model: ServedModel | None, flags: Flags, device: str
) -> Discovered:
    """Combine the probe with the flags; raises ProvenanceError on a contradiction."""
    info = probe or ServerProbe()
    tt = TTProbe.of(info.plugin_info, info.metrics_error)
    found: list[str] = []
    warnings: list[str] = []
    # A usable server (its model resolved) that shows no TT plugin is never labelled as TT.
    not_tt = model is not None and not tt.is_tt
    if tt.info is not None:
        problem = device_disagreement(device, tt.info)
        if problem:
            raise ProvenanceError(problem)
        if device in ("unknown", EMULATED_DEVICE):
            # "emulated" names no mesh: the report carries the one the server emulates.
            device = server_device(tt.info) or device

    def pick(name: str, server: Any, flag: Any, default: Any, flag_name: str) -> Any:
        _agree(name, flag, server, flag_name)
        if server is not None:
            found.append(name)
            return server
        return flag if flag is not None else default

    max_num_seqs = pick(
        "max_num_seqs",
        info.info_int("max_num_seqs"),
        flags.max_num_seqs,
        DEFAULT_MAX_NUM_SEQS,
        "--tt-max-num-seqs",
    )
    lanes = pick("lanes", info.info_int("lanes"), flags.lanes, DEFAULT_LANES, "--tt-lanes")
    served_len = model.max_model_len if model else None
    info_len = info.info_int("max_model_len")
    if served_len is not None and info_len is not None and served_len != info_len:
        warnings.append(
            f"max_model_len: /v1/models says {served_len}, tt_plugin_info says {info_len}"
        )
    max_model_len = served_len if served_len is not None else info_len
    if max_model_len is not None:
        found.append("max_model_len")
    mesh_shape = pick(
        "mesh_shape", info.info("mesh_shape"), flags.mesh_shape, None, "--tt-mesh-shape"
    )
    if mesh_shape is None and not not_tt:
        mesh_shape = mesh_shape_for(device)
    versions = {}
    for key, label, flag in (
        ("plugin_version", "plugin_version", flags.plugin_version),
        ("tt_metal_version", "tt_metal_commit", flags.tt_metal_version),
    ):
        server = info.info(label)
        if server is not None:
            found.append(key)
            if flag is not None and flag != server:
                warnings.append(f"{key}: the flag says {flag!r}, the server reports {server!r}")
        versions[key] = server or flag or "unknown"
    if not_tt and flags.tt_metal_version is not None:
        # No TT plugin answered: a typed tt-metal version would label a CPU or GPU run as TT.
        versions["tt_metal_version"] = "unknown"
        warnings.append(
            f"--tt-tt-metal-version {flags.tt_metal_version!r} ignored: not a TT server, so no "
            "tt-metal served this run"
        )
    ttnn = info.info("ttnn_version")
    if ttnn is not None:
        found.append("ttnn_version")
    for key in (
        "mesh_device", "model_class", "tt_options", "plugin_commit", "weights", "vllm_commit",
        "tensor_parallel", "data_parallel",
    ):  # fmt: skip
        if info.info(key) is not None:
            found.append(key)
    profile = {k: info.info_bool(k) for k in PROFILE_SWITCHES}
    found += [k for k, v in profile.items() if v is not None]
    options_text = info.info("tt_options")
    try:
        tt_options = json.loads(options_text) if options_text else None
    except json.JSONDecodeError:
        tt_options = options_text
    if not_tt:
        warnings.insert(
            0,
            f"not a TT server: {tt.absent_reason}; not certified: TT-path checks not "
            "applicable, the report is not labelled as TT hardware; the plugin version and "
            "max_num_seqs/lanes come from flags, tt-metal and ttnn are not recorded",
        )
    return Discovered(
        device=NOT_TT_DEVICE if not_tt else device,
        tt=tt,
        max_num_seqs=max_num_seqs,
        lanes=lanes,
        max_model_len=max_model_len,
        mesh_shape=None if not_tt else mesh_shape,
        mesh_device=info.info("mesh_device"),
        model_class=info.info("model_class"),
        tt_options=tt_options,
        plugin_version=versions["plugin_version"],
        ttnn_version=ttnn or "unknown",
        tt_metal_version=versions["tt_metal_version"],
        discovered=tuple(found),
        warnings=tuple(warnings),
        plugin_commit=info.info("plugin_commit") or "unknown",
        vllm_commit=info.info("vllm_commit") or "unknown",
        tensor_parallel=_positive(info.info_int("tensor_parallel")),
        data_parallel=_positive(info.info_int("data_parallel")),
        weights=info.info("weights"),
        **profile,
    )


def _positive(value: int | None) -> int | None:
    return value if value is not None and value >= 1 else None


def run_info(args: tuple[str, ...] | list[str], cwd: str) -> RunInfo:
    """The command that produced the report, as a user would retype it."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "pytest"
    if program in ("__main__.py", "pytest.py", ""):
        program = "pytest"
    return RunInfo(command=(program, *redact(args)), host=socket.gethostname(), cwd=cwd)


SECRET_OPTIONS = ("--tt-api-key",)


def redact(args: tuple[str, ...] | list[str]) -> list[str]:
    """The arguments with API keys replaced: reports are published, keys are not."""
    out: list[str] = []
    hide_next = False
    for arg in map(str, args):
        if hide_next:
            out.append("***")
            hide_next = False
        elif arg in SECRET_OPTIONS:
            out.append(arg)
            hide_next = True
        elif arg.startswith(tuple(f"{o}=" for o in SECRET_OPTIONS)):
            out.append(arg.split("=", 1)[0] + "=***")
        else:
            out.append(arg)
    return out
