"""A run's identity: which model, device, configuration and versions a report describes.

Two reports are comparable on one *axis* only when every other axis is equal. The gate
(gate.py) compares identities before any check: a difference outside the axes under test
(tt-metal and ttnn by default, the point of a tt-metal bump) is bad input naming every
difference, unless the caller allows it by name, and the gate's output says what was allowed.

Axes (the report fields behind them):
    model, weights                       what is served (server.weights: repository@revision or
                                         a digest, utils/weights_identity.py in the plugin)
    device, mesh_shape, parallelism      where, and TT's TP x DP on it (devices per instance x
                                         instances)
    max_num_seqs, max_model_len, lanes,  the configuration profile: vLLM's switches the plugin
    async_scheduling, chunked_prefill,   publishes in tt_plugin_info, and every TT option
    prefix_caching, tt_options.<name>    (``tt_options`` names them all)
    vllm, vllm.commit, plugin, ttnn,     versions (plugin: version and git commit; vllm.commit:
    tt_metal                             the commit vLLM's build recorded, under ``vllm``;
                                         tt_metal: git describe --tags --dirty)

`NEWER_AXES` are recorded since issue 44: a baseline written before lacks them, and the gate
says so instead of calling the runs unlike.

The harness's own version is recorded but is not an axis: it is the instrument, and what it
changes shows up check by check (a new check is a note, a missing one a regression).

"Same setup" has one definition (`setup_options`, `profile_key`), shared by the gate, the
matrix rows and the history series: every axis but the versions, the TT options compared after
dropping those at their default value (`TT_OPTION_DEFAULTS`: a release that adds an option at
its default, or a report that spells a default out, is the same setup) and those that cannot
change a result (`RESULT_NEUTRAL_OPTIONS`: watchdog timeouts). Any other difference splits: runs
of one model on one device with another max_num_seqs, mesh, weights or TT option are different
rows and series, never one, and the difference is named (`differences`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tt_conformance.report import Report

__all__ = [
    "AXES",
    "DEFAULT_AXES",
    "NEWER_AXES",
    "RESULT_NEUTRAL_OPTIONS",
    "SETUP_AXES",
    "TT_OPTION_DEFAULTS",
    "Difference",
    "differences",
    "field_of",
    "identity_rows",
    "ignored_options",
    "profile_key",
    "profile_label",
    "setup_options",
    "unknown_axes",
    "unlike",
]

VERSION_AXES = ("vllm", "plugin", "ttnn", "tt_metal")
PROFILE_AXES = (
    "max_num_seqs",
    "max_model_len",
    "lanes",
    "async_scheduling",
    "chunked_prefill",
    "prefix_caching",
)
AXES: tuple[str, ...] = (
    "model",
    "weights",
    "device",
    "mesh_shape",
    "parallelism",
    *PROFILE_AXES,
    "tt_options",
    *VERSION_AXES,
)
# The plugin's TT options at their defaults (vllm_tt_plugin.config.TTOptions; the harness does
# not import the plugin: tests/conformance/test_red_team.py keeps this in step). An option at its
# default, or absent, or null where the default is null, is not part of the setup.
TT_OPTION_DEFAULTS: dict[str, Any] = {
    "sample_on_device_mode": None,
    "trace_mode": "all",
    "enable_model_warmup": True,
    "trace_region_size": None,
    "worker_l1_size": None,
    "l1_small_size": None,
    "fabric_config": None,
    "fabric_reliability_mode": None,
    "dispatch_core_axis": None,
    "always_compat_sampling": False,
    "decode_interleave_enabled": True,
    "decode_interleave_prefill_steps": 2,
    "decode_interleave_decode_steps": 1,
    "optimizations": None,
    "register_test_models": False,
    "device_timeout_s": 120.0,
    "warmup_timeout_s": 1800.0,
    "emulated_mesh": False,
}
# Options that cannot change what a run measures (how long the watchdog waits before declaring
# the device hung): ignored by every comparison, whatever their value.
RESULT_NEUTRAL_OPTIONS: frozenset[str] = frozenset(
    {"device_timeout_s", "warmup_timeout_s", "log_level"}
)
# What a tt-metal bump changes: the gate's default axes under test.
DEFAULT_AXES: frozenset[str] = frozenset({"tt_metal", "ttnn"})
# Identity words reports carry since issue 44 (older reports read them as not recorded).
NEWER_AXES: frozenset[str] = frozenset({"parallelism", "vllm.commit"})


class _Absent:
    """An option a run's tt_options do not name (an explicit ``null`` is a value, shown so)."""

    def __repr__(self) -> str:
        return "not recorded"


_ABSENT: Any = _Absent()


def _unrecorded(axis: str, value: Any) -> bool:
    if value is _ABSENT:
        return True
    if axis.startswith("tt_options."):
        return False  # the option is named: null is its value
    return value is None or (isinstance(value, str) and value in ("unknown", ""))


@dataclass(frozen=True)
class Difference:
    axis: str  # an AXES name, or "tt_options.<option>"
    baseline: Any
    candidate: Any

    def matches(self, names: Iterable[str]) -> bool:
        """Named by one of ``names``: exactly, or by its group (``tt_options``)."""
        return any(self.axis == n or self.axis.startswith(f"{n}.") for n in names)

    def __str__(self) -> str:
        def shown(value: Any) -> str:
            if _unrecorded(self.axis, value):
                return "not recorded"
            return "null" if value is None else repr(value)

        return f"{self.axis}: {shown(self.baseline)} -> {shown(self.candidate)}"

    @property
    def baseline_recorded(self) -> bool:
        """The baseline recorded a value (an explicit null TT option is a value)."""
        return not _unrecorded(self.axis, self.baseline)

    @property
    def candidate_recorded(self) -> bool:
        return not _unrecorded(self.axis, self.candidate)

    @property
    def recorded(self) -> bool:
        """Both runs recorded a value."""
        return self.baseline_recorded and self.candidate_recorded


def _fields(report: Report) -> dict[str, Any]:
    server = report.server
    plugin = report.versions.plugin
    if not _unrecorded("plugin", report.versions.plugin_commit):
        plugin = f"{plugin} ({report.versions.plugin_commit})"
    return {
        "model": report.model,
        "weights": server.weights,
        "device": report.device,
        "mesh_shape": report.mesh_shape,
        "parallelism": _parallelism(report),
        "max_num_seqs": server.max_num_seqs,
        "max_model_len": server.max_model_len,
        "lanes": server.lanes,
        "async_scheduling": server.async_scheduling,
        "chunked_prefill": server.chunked_prefill,
        "prefix_caching": server.prefix_caching,
        "vllm": report.versions.vllm,
        "vllm.commit": report.versions.vllm_commit,
        "plugin": plugin,
        "ttnn": report.versions.ttnn,
        "tt_metal": report.versions.tt_metal,
    }


def _parallelism(report: Report) -> str | None:
    tp, dp = report.server.tensor_parallel, report.server.data_parallel
    return None if tp is None or dp is None else f"TP {tp} x DP {dp}"


def field_of(report: Report, axis: str) -> Any:
    """The value a report records on an axis (None for a name that is no axis)."""
    return _fields(report).get(axis)


def identity_rows(report: Report) -> list[tuple[str, Any]]:
    """Every axis with its value, then what is recorded but not compared (a run's page)."""
    fields = _fields(report)
    rows: list[tuple[str, Any]] = [(axis, fields[axis]) for axis in AXES if axis in fields]
    rows.insert(rows.index(("vllm", fields["vllm"])) + 1, ("vllm.commit", fields["vllm.commit"]))
    rows.insert(
        rows.index(("vllm", fields["vllm"])),
        ("tt_options", json.dumps(report.server.tt_options, sort_keys=True, default=str)),
    )
    v = report.versions
    return [
        *rows,
        ("configuration profile", profile_label(report)),
        ("model class", report.server.model_class),
        ("harness", f"{v.harness} ({v.harness_commit})"),
    ]


def setup_options(report: Report) -> dict[str, Any]:
    """The TT options that make the run's setup: without the result-neutral ones and those at
    their default (null counts as absent for an option whose default is null, and for one the
    harness does not know). Free text (not a JSON object) is kept whole under ""."""
    options = report.server.tt_options
    if options is None:
        return {}
    if not isinstance(options, dict):
        return {"": options}
    return {
        name: value
        for name, value in sorted(options.items())
        if name not in RESULT_NEUTRAL_OPTIONS and value != TT_OPTION_DEFAULTS.get(name)
    }


def ignored_options(baseline: Report, candidate: Report) -> list[Difference]:
    """Option differences the comparisons ignore (result-neutral options), for the record."""
    before, after = (
        r.server.tt_options if isinstance(r.server.tt_options, dict) else {}
        for r in (baseline, candidate)
    )
    return [
        Difference(f"tt_options.{name}", before.get(name), after.get(name))
        for name in sorted(RESULT_NEUTRAL_OPTIONS)
        if before.get(name) != after.get(name)
    ]


def differences(baseline: Report, candidate: Report) -> list[Difference]:
    """Every axis on which the two reports differ (a value one side did not record differs);
    TT options as `setup_options` keeps them (defaults and result-neutral options do not
    differ)."""
    a, b = _fields(baseline), _fields(candidate)
    named = [*AXES, "vllm.commit"]
    out = [Difference(axis, a[axis], b[axis]) for axis in named if axis in a and a[axis] != b[axis]]
    before, after = setup_options(baseline), setup_options(candidate)
    for name in sorted(set(before) | set(after)):
        if before.get(name, _ABSENT) != after.get(name, _ABSENT):
            axis = f"tt_options.{name}" if name else "tt_options"
            # A dropped option is at its default; one the harness does not know is not recorded.
            default = TT_OPTION_DEFAULTS.get(name, _ABSENT)
            out.append(Difference(axis, before.get(name, default), after.get(name, default)))
    order = {axis: i for i, axis in enumerate(AXES)}
    return sorted(out, key=lambda d: order[d.axis.partition(".")[0]])


def unlike(found: Iterable[Difference]) -> list[Difference]:
    """The differences that make two runs measure different things (anything but versions):
    their figures are not set side by side as a percentage change (the site's compare pages)."""
    return [d for d in found if not d.matches(VERSION_AXES)]


def unknown_axes(names: Iterable[str]) -> list[str]:
    """Names given for --axis / --allow-difference that are no axis."""
    return [n for n in names if n.partition(".")[0] not in AXES or n == "tt_options."]


SETUP_AXES: tuple[str, ...] = ("model", "weights", "device", "mesh_shape", *PROFILE_AXES)


def _profile(report: Report) -> dict[str, Any]:
    fields = _fields(report)
    return {**{k: fields[k] for k in SETUP_AXES}, "tt_options": setup_options(report)}


def profile_key(report: Report) -> str:
    """A short stable key of the run's setup: every axis but the versions, the TT options as
    `setup_options` keeps them. Two reports with one key are the same setup for the matrix
    (one row), the history (one series) and the gate (no difference outside the versions)."""
    text = json.dumps(_profile(report), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def profile_label(report: Report) -> str:
    """The profile as a reader wants it in a matrix row: the serving shape, then the key."""
    s = report.server
    parts = [f"{s.max_num_seqs} seqs" + (f" x {s.lanes} lanes" if s.lanes > 1 else "")]
    if s.max_model_len is not None:
        parts.append(f"len {s.max_model_len}")
    for name in ("async_scheduling", "chunked_prefill", "prefix_caching"):
        value = getattr(s, name)
        if value is not None:
            parts.append(name.replace("_", " ") + (" on" if value else " off"))
    return ", ".join(parts) + f" [{profile_key(report)}]"
