"""A run's identity: which model, device, configuration and versions a report describes.

Two reports are comparable on one *axis* only when every other axis is equal. The gate
(gate.py) compares identities before any check: a difference outside the axes under test
(tt-metal and ttnn by default, the point of a tt-metal bump) is bad input naming every
difference, unless the caller allows it by name, and the gate's output says what was allowed.

Axes (the report fields behind them):
    model, weights, model_class          what is served (server.weights: repository@revision or
                                         a digest, utils/weights_identity.py in the plugin; the
                                         model class the server loaded under that name)
    device, mesh_shape, parallelism      where, and TT's TP x DP on it (devices per instance x
                                         instances)
    max_num_seqs, max_model_len, lanes,  the configuration profile: vLLM's switches the plugin
    async_scheduling, chunked_prefill,   publishes in tt_plugin_info, and every TT option
    prefix_caching, tt_options.<name>    (``tt_options`` names them all)
    vllm, vllm.commit, plugin, ttnn,     versions (plugin: version and git commit; vllm.commit:
    tt_metal                             the commit vLLM's build recorded, under ``vllm``;
                                         tt_metal: git describe --tags --dirty)
    vllm_args.<--option>, env.<VAR>,     how the server was launched (the report's
    server_options.<key>                 server_options: `launch_options`): every vLLM option
                                         and environment variable is part of the setup (dtype,
                                         quantization, kv-cache dtype, block size, speculative
                                         config...) except those listed in LAUNCH_NEUTRAL with
                                         the reason they cannot change a result (port, host,
                                         log levels)

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
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tt_conformance.report import Report

__all__ = [
    "AXES",
    "DEFAULT_AXES",
    "LAUNCH_GROUPS",
    "LAUNCH_NEUTRAL",
    "NEWER_AXES",
    "RESULT_NEUTRAL_OPTIONS",
    "SETUP_AXES",
    "TT_OPTION_DEFAULTS",
    "Difference",
    "differences",
    "field_of",
    "identity_rows",
    "ignored_options",
    "launch_options",
    "profile_key",
    "profile_label",
    "setup_options",
    "unknown_axes",
    "unlike",
    "weights_pinned",
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
# The launch record's groups (`launch_options`): vLLM's command-line options, the server's
# environment, and any other key of a server_options object.
LAUNCH_GROUPS = ("vllm_args", "env", "server_options")
AXES: tuple[str, ...] = (
    "model",
    "weights",
    "model_class",
    "device",
    "mesh_shape",
    "parallelism",
    *PROFILE_AXES,
    "tt_options",
    *LAUNCH_GROUPS,
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
# Launch options and environment variables that cannot change what a run measures, each with
# why; every other one is part of the setup (a new vLLM option splits until listed here).
LAUNCH_NEUTRAL: dict[str, str] = {
    "vllm_args.--port": "where the server listens",
    "vllm_args.--host": "where the server listens",
    "vllm_args.--uvicorn-log-level": "logging only",
    "vllm_args.--disable-log-requests": "logging only",
    "vllm_args.--enable-log-requests": "logging only",
    "vllm_args.--disable-log-stats": "logging only",
    "vllm_args.--disable-uvicorn-access-log": "logging only",
    "env.VLLM_LOGGING_LEVEL": "logging only",
    "env.TT_LOGGER_LEVEL": "logging only",
    "env.LOGURU_LEVEL": "logging only",
    "env.PYTHONUNBUFFERED": "logging only",
}
# What the neutral options that take a value accept; another value is not that option.
_NEUTRAL_VALUES: dict[str, re.Pattern[str]] = {
    "--port": re.compile(r"\d{1,5}"),
    "--host": re.compile(r"[A-Za-z0-9._:%\[\]-]+"),
    "--uvicorn-log-level": re.compile(r"(?i)critical|error|warning|info|debug|trace"),
}
# The neutral options that take no value: a word after one is not theirs (vLLM's positional).
_NEUTRAL_FLAGS: frozenset[str] = frozenset(
    {
        "--disable-log-requests",
        "--enable-log-requests",
        "--disable-log-stats",
        "--disable-uvicorn-access-log",
    }
)
# A weights record naming one checkpoint's content (plugin utils/weights_identity.py): a
# repository at a commit, or a digest of every file's bytes. A branch or tag, "unresolved" (the
# hub's head at load time) or files-sha256 (config, names and sizes only: a retrained checkpoint
# of the same shapes reads alike) names no content: equal on both runs, it proves no same weights.
_PINNED_WEIGHTS = re.compile(r"[^@\s]+@[0-9a-f]{40}|sha256:[0-9a-f]{16,64}")
# What a tt-metal bump changes: the gate's default axes under test.
DEFAULT_AXES: frozenset[str] = frozenset({"tt_metal", "ttnn"})
# Identity words reports carry since issue 44 (older reports read them as not recorded).
NEWER_AXES: frozenset[str] = frozenset({"parallelism", "vllm.commit"})


class _Absent:
    """An option a run's tt_options do not name (an explicit ``null`` is a value, shown so)."""

    def __repr__(self) -> str:
        return "not recorded"


_ABSENT: Any = _Absent()


class _NotGiven:
    """A launch option one run did not pass (vLLM's default: a value, unlike "not recorded")."""

    def __repr__(self) -> str:
        return "not given"


_NOT_GIVEN: Any = _NotGiven()


def _unrecorded(axis: str, value: Any) -> bool:
    if value is _ABSENT:
        return True
    if value is _NOT_GIVEN or axis.partition(".")[0] in ("tt_options", *LAUNCH_GROUPS[:2]):
        return False  # the option is named (null is its value) or left at vLLM's default
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
        "model_class": server.model_class,
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
    out += _launch_differences(baseline, candidate)
    order = {axis: i for i, axis in enumerate(AXES)}
    return sorted(out, key=lambda d: order[d.axis.partition(".")[0]])


def launch_options(report: Report) -> dict[str, Any]:
    """How the server was launched, one entry per option: ``vllm_args.--name`` (``--a=b``,
    ``--a b`` or a bare ``--flag``), ``env.NAME``, ``server_options.key`` for any other key;
    without the LAUNCH_NEUTRAL ones (a vLLM option only when exactly that: `_parse_args`).
    Free text (not an object) is kept whole under ``server_options``; an unrecorded launch is
    empty."""
    options = report.server_options
    if options is None:
        return {}
    if not isinstance(options, dict):
        return {"server_options": options}
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key == "vllm_args" and isinstance(value, list):
            out.update(_parse_args(value))
        elif key == "env" and isinstance(value, dict):
            env = {f"env.{name}": v for name, v in value.items()}
            out.update({k: v for k, v in env.items() if k not in LAUNCH_NEUTRAL})
        else:
            out[f"server_options.{key}"] = value
    return dict(sorted(out.items()))


def _parse_args(args: list[Any]) -> dict[str, Any]:
    """vLLM's options one by one, a LAUNCH_NEUTRAL one dropped only when its element (and its
    value element) is exactly one shell word and its value one the option takes (a port, a
    host, a log level; none for a flag): ``"--port=8000 --kv-cache-dtype=fp8"`` in one element
    is not a port, it is kept whole as the option's value and so differs."""
    out: dict[str, Any] = {}
    positional: list[str] = []
    words = [str(a) for a in args]
    i = 0
    while i < len(words):
        taken = [words[i]]
        name, eq, value = words[i].partition("=")
        i += 1
        if not name.startswith("-"):
            positional.append(taken[0])  # the model vLLM serves
            continue
        takes_value = name not in _NEUTRAL_FLAGS
        if takes_value and not eq and i < len(words) and not words[i].startswith("-"):
            value, i = words[i], i + 1
            taken.append(value)
        key = f"vllm_args.{name}"
        accepted = _NEUTRAL_VALUES.get(name)
        exact = all(_one_shell_word(w) for w in taken) and (
            not eq if not takes_value else accepted is not None and accepted.fullmatch(value)
        )
        if key in LAUNCH_NEUTRAL and exact:
            continue
        out[key] = value
    if positional:
        out["vllm_args"] = positional
    return out


def _one_shell_word(word: str) -> bool:
    """A shell would pass ``word`` as itself, one argument (no blank, quote or escape in it)."""
    try:
        return shlex.split(word) == [word]
    except ValueError:  # an unbalanced quote
        return False


def _launch_differences(baseline: Report, candidate: Report) -> list[Difference]:
    """Launch options and environment that differ (`launch_options`); one run that recorded
    no launch at all is one difference, "server_options: not recorded"."""
    if (baseline.server_options is None) != (candidate.server_options is None):
        return [Difference("server_options", baseline.server_options, candidate.server_options)]
    before, after = launch_options(baseline), launch_options(candidate)
    return [
        Difference(name, before.get(name, _NOT_GIVEN), after.get(name, _NOT_GIVEN))
        for name in sorted(set(before) | set(after))
        if before.get(name, _NOT_GIVEN) != after.get(name, _NOT_GIVEN)
    ]


def weights_pinned(value: object) -> bool:
    """``value`` (a report's server.weights) names one checkpoint's content."""
    if not isinstance(value, str) or _PINNED_WEIGHTS.fullmatch(value) is None:
        return False
    # All zeros is git's null object name (no commit, a placeholder: ``repo@000...0``) and no
    # digest of anything: it names no content.
    return re.split(r"[@:]", value)[-1].strip("0") != ""


def unlike(found: Iterable[Difference]) -> list[Difference]:
    """The differences that make two runs measure different things (anything but versions):
    their figures are not set side by side as a percentage change (the site's compare pages)."""
    return [d for d in found if not d.matches(VERSION_AXES)]


def unknown_axes(names: Iterable[str]) -> list[str]:
    """Names given for --axis / --allow-difference that are no axis."""
    return [n for n in names if n.partition(".")[0] not in AXES or n == "tt_options."]


SETUP_AXES: tuple[str, ...] = (
    "model",
    "weights",
    "model_class",
    "device",
    "mesh_shape",
    *PROFILE_AXES,
)


def _profile(report: Report) -> dict[str, Any]:
    fields = _fields(report)
    return {
        **{k: fields[k] for k in SETUP_AXES},
        "tt_options": setup_options(report),
        "launch": launch_options(report),
    }


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
