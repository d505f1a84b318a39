"""What the server says about its TT path: the plugin's metrics on /metrics (docs/METRICS.md).

The data model of TT detection: parsing a /metrics body, the plugin's info labels, counter
deltas, and the claims a check makes over them. No pytest: the ``tt_path`` fixture that reads the
counters around a check and turns these outcomes into pass, fail or skip is ttpath.py.

A server without ``tt_plugin_info`` is not a TT server as far as the harness can tell: TT-path
checks are not applicable there and the report is not labelled as TT hardware. On a TT server,
a check that claims a TT behaviour reads the counters before and after its requests and asserts
that the path it claims was exercised; when the launch makes that path impossible (device
sampling off, no async overlap, one lane) a claim raises :class:`NotExercised` with the reason
(reported as a skip: the matrix shows it as not run, never as pass).

Checks of one run share the server (pytest-xdist), so a counter can move because of a
neighbouring check; the claims are "at least one", which another check can satisfy but never
hide. Checks that must see only their own traffic run in the exclusive group.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tt_conformance.names import (
    EMULATED_DEVICE,
    KNOWN_MESH_SHAPES,
    emulated_device,
    is_emulated,
    mesh_shape_for,
    normalize_device,
)

__all__ = [
    "DECODE_COMMANDS",
    "HOST_FALLBACK",
    "INFO_METRIC",
    "LANE_STEPS",
    "MODEL_LIMITS",
    "NOT_APPLICABLE",
    "NOT_EXERCISED",
    "NO_TT_REASON",
    "OVERLAPS",
    "RESUMED",
    "SITUATION_WORDS",
    "STEPS",
    "Claim",
    "NotExercised",
    "TTCounters",
    "TTPluginInfo",
    "TTProbe",
    "async_overlap",
    "device_decode",
    "device_disagreement",
    "host_fallback",
    "lanes_carry_rows",
    "multi_row_prefill",
    "parse_metrics",
    "preemptions_resumed",
    "resident_decode",
    "server_device",
    "stays_on_device",
]

INFO_METRIC = "tt_plugin_info"
NOT_EXERCISED = "not exercised"
NOT_APPLICABLE = "not applicable"
NO_TT_REASON = (
    "the server exposes no TT plugin metrics (no tt_plugin_info on /metrics): it is not a "
    "vllm-tt-plugin server, or its metrics are off (TT_VLLM_METRICS=0)"
)

# The counter samples the checks read (docs/METRICS.md).
STEPS = "tt_steps_total"
HOST_FALLBACK = "tt_host_fallback_steps_total"
DECODE_COMMANDS = "tt_decode_commands_total"
OVERLAPS = "tt_async_overlapped_decodes_total"
LANE_STEPS = "tt_lane_steps_total"
RESUMED = "tt_preemptions_resumed_total"
MULTI_ROW_PREFILLS = "tt_multi_row_prefills_total"
SITUATIONS = "tt_situations_total"
# How the report words each situation the plugin counts today (a newer plugin's other
# situations are shown by name).
SITUATION_WORDS = {
    "prefill_start_mid_block": "prefill rows starting inside a KV block (chunk continuations, "
    "unaligned prefix hits)",
    "prefill_start_on_block": "prefill rows starting on a later block boundary (aligned prefix "
    "hits and chunks)",
    "decode_new_block": "decode rows whose token opens a new KV block",
    "device_decode_penalties": "device-sampled decode steps with a penalised row",
    "device_decode_logprobs": "device-sampled decode steps returning logprobs",
}


@dataclass(frozen=True)
class TTPluginInfo:
    """The labels of ``tt_plugin_info``."""

    labels: Mapping[str, str]

    def get(self, name: str) -> str:
        return str(self.labels.get(name, "unknown"))

    @property
    def mesh_device(self) -> str:
        return self.get("mesh_device")

    @property
    def mesh_shape(self) -> str:
        return self.get("mesh_shape")

    @property
    def lanes(self) -> int:
        text = self.get("lanes")
        return int(text) if text.isdigit() else 1

    @property
    def tt_options(self) -> dict[str, Any]:
        try:
            parsed = json.loads(self.get("tt_options"))
        except json.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    @property
    def emulated(self) -> bool:
        return bool(self.tt_options.get("emulated_mesh"))

    def device_sampling_off(self) -> str | None:
        """Why no batch can be sampled on the device, or None when it can."""
        options = self.tt_options
        if options.get("always_compat_sampling"):
            return "the server forces host sampling (tt_options always_compat_sampling=true)"
        if options.get("sample_on_device_mode") is None:
            return "device sampling is off (tt_options sample_on_device_mode is not set)"
        return None

    def to_json(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass(frozen=True)
class TTCounters:
    """The ``tt_*`` samples of one scrape: (name, labels) -> value."""

    samples: Mapping[tuple[str, frozenset[tuple[str, str]]], float] = field(default_factory=dict)

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples called ``name`` whose labels include ``labels`` (0 if none)."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)

    def label_values(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for (n, ls), v in self.samples.items():
            if n == name:
                key = dict(ls).get(label, "")
                out[key] = out.get(key, 0.0) + v
        return out

    def situations(self) -> dict[str, float]:
        """``tt_situations_total`` by situation (the plugin starts every series at zero)."""
        return self.label_values(SITUATIONS, "situation")

    def __sub__(self, before: TTCounters) -> TTCounters:
        keys = set(self.samples) | set(before.samples)
        return TTCounters({k: self.samples.get(k, 0.0) - before.samples.get(k, 0.0) for k in keys})


def parse_metrics(text: str) -> tuple[TTPluginInfo | None, TTCounters]:
    """The TT info and counters of a /metrics body (prometheus_client's parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    info: TTPluginInfo | None = None
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith("tt_") or math.isnan(sample.value):
                continue
            if sample.name == INFO_METRIC:
                info = TTPluginInfo(dict(sample.labels))
                continue
            key = (sample.name, frozenset(sample.labels.items()))
            samples[key] = samples.get(key, 0.0) + sample.value
    return info, TTCounters(samples)


@dataclass(frozen=True)
class TTProbe:
    """The TT view of the run's one server probe (server.py reads GET /metrics once, with
    :func:`parse_metrics`): the plugin's info, or why there is none."""

    info: TTPluginInfo | None = None
    error: str | None = None

    @classmethod
    def of(cls, plugin_info: Mapping[str, str], metrics_error: str | None = None) -> TTProbe:
        """From a probe's ``plugin_info`` labels and ``metrics_error`` (server.ServerProbe),
        passed as plain values so that this module does not depend on server.py."""
        return cls(TTPluginInfo(dict(plugin_info)) if plugin_info else None, metrics_error)

    @property
    def is_tt(self) -> bool:
        return self.info is not None

    @property
    def absent_reason(self) -> str:
        if self.error:
            return f"{NO_TT_REASON} ({self.error})"
        return NO_TT_REASON


def device_disagreement(device: str, info: TTPluginInfo) -> str | None:
    """Why ``--tt-device`` (canonical, see names.normalize_device) contradicts the server's
    mesh: emulated vs hardware, another device name, or another mesh shape."""
    if device == "unknown":
        return None
    served = f"MESH_DEVICE={info.mesh_device}, mesh {info.mesh_shape}"
    if is_emulated(device):
        if not info.emulated:
            return f"--tt-device {device}, but the server runs a hardware mesh ({served})"
        served_device = server_device(info)
        if device != EMULATED_DEVICE and served_device not in (None, device):
            return f"--tt-device {device}, but the server emulates {served} ({served_device})"
        return None
    if info.emulated:
        return (
            f"--tt-device {device}, but the server runs a host-emulated mesh ({served}); use "
            "--tt-device emulated"
        )
    shape = mesh_shape_for(device)
    if shape and info.mesh_shape not in ("", "unknown") and shape != info.mesh_shape:
        return f"--tt-device {device} means mesh {shape}, but the server reports {served}"
    served_device = server_device(info)
    if served_device not in (None, device) and mesh_shape_for(served_device) != shape:
        return f"--tt-device {device}, but the server runs {served}"
    return None


def server_device(info: TTPluginInfo) -> str | None:
    """The canonical device name the server's mesh stands for (None when it does not say)."""
    try:
        name = normalize_device(info.mesh_device)
    except ValueError:
        name = "unknown"
    if info.emulated:
        # One name per emulated mesh; a mesh the harness does not know stays plain "emulated".
        return emulated_device(name) if name in KNOWN_MESH_SHAPES else EMULATED_DEVICE
    return None if name == "unknown" else name


# --------------------------------------------------------------------------- claims


@dataclass(frozen=True)
class Claim:
    """One TT behaviour a check claims: ``check(delta, totals)`` returns None when it was
    exercised, or raises :class:`NotExercised` / AssertionError."""

    what: str
    check: Callable[[TTCounters, TTCounters, TTPluginInfo], None]


class NotExercised(Exception):
    """The launch makes the claimed path impossible; the message says why."""


def _needs_device_sampling(info: TTPluginInfo) -> None:
    reason = info.device_sampling_off()
    if reason:
        raise NotExercised(reason)


# Fallback reasons that come from the model's declared device-sampler limits
# (max_device_top_k, max_device_logprobs, supports_device_penalties), not from the launch.
MODEL_LIMITS = ("top_k", "logprobs", "penalties")


def _only_model_limits(delta: TTCounters, kind: str | None = None) -> dict[str, float]:
    """The host fallbacks while the check ran when every one is a model limit (MODEL_LIMITS),
    else {}: such a model's router sent the batch to the host before the claimed path."""
    reasons = delta.label_values(HOST_FALLBACK, "reason")
    if kind is not None:
        reasons = {r: delta.value(HOST_FALLBACK, kind=kind, reason=r) for r in reasons}
    seen = {r: v for r, v in reasons.items() if v}
    return seen if seen and set(seen) <= set(MODEL_LIMITS) else {}


def _needs_device_decode(delta: TTCounters) -> None:
    """NotExercised when no decode step ran on the device only because of model limits."""
    limited = _only_model_limits(delta, "decode")
    if limited and delta.value(STEPS, kind="decode", route="device") == 0:
        raise NotExercised(
            f"the batches fell back to the host for {', '.join(limited)} (beyond this model's "
            "device sampler)"
        )


def device_decode(model_limits: Iterable[str] = MODEL_LIMITS) -> Claim:
    """At least one device-sampled decode step. ``model_limits``: fallback reasons that mean the
    model's device sampler cannot take these requests (e.g. "logprobs" above its
    max_device_logprobs); a batch that fell back only for them is not exercised, not failed."""
    limits = tuple(model_limits)

    def check(delta: TTCounters, totals: TTCounters, info: TTPluginInfo) -> None:
        _needs_device_sampling(info)
        if delta.value(STEPS, kind="decode", route="device") > 0:
            return
        hit = [r for r in limits if delta.value(HOST_FALLBACK, kind="decode", reason=r) > 0]
        if hit:
            raise NotExercised(
                f"the batches fell back to the host for {', '.join(hit)} (beyond this model's "
                "device sampler)"
            )
        raise AssertionError("no decode step was sampled on the device while the check ran")

    return Claim("device-sampled decode steps", check)


def stays_on_device() -> Claim:
    """Device-sampled decode and no host fallback at all (exclusive checks only)."""

    def check(delta: TTCounters, totals: TTCounters, info: TTPluginInfo) -> None:
        device_decode().check(delta, totals, info)
        fallbacks = {r: v for r, v in delta.label_values(HOST_FALLBACK, "reason").items() if v}
        if fallbacks and set(fallbacks) <= set(MODEL_LIMITS):
            raise NotExercised(
                f"this model's device sampler does not take every request ({fallbacks})"
            )
        assert not fallbacks, f"the batch left the device path: host-sampled steps {fallbacks}"

    return Claim("the batch stays on the device path", check)


def host_fallback(reasons: Iterable[str]) -> Claim:
    wanted = tuple(reasons)

    def check(delta: TTCounters, totals: TTCounters, info: TTPluginInfo) -> None:
        _needs_device_sampling(info)
        seen = {r: v for r, v in delta.label_values(HOST_FALLBACK, "reason").items() if v}
        limited = _only_model_limits(delta)
        if limited and not any(seen.get(r) for r in wanted) and set(wanted).isdisjoint(limited):
            raise NotExercised(
                f"the batches fell back to the host for {', '.join(limited)} first (beyond "
                "this model's device sampler)"
            )
        assert any(seen.get(r) for r in wanted), (
            f"no step fell back to the host sampler for {' or '.join(wanted)} "
            f"(host fallbacks seen: {seen or 'none'})"
        )

    return Claim(f"host fallback for {'/'.join(wanted)}", check)


def multi_row_prefill() -> Claim:
    """At least one prefill call sampled several rows' first tokens on the device at once."""

    def check(delta: TTCounters, totals: TTCounters, info: TTPluginInfo) -> None:
        _needs_device_sampling(info)
        if delta.value(MULTI_ROW_PREFILLS, route="device") > 0:
            return
        if delta.value(MULTI_ROW_PREFILLS, route="host") > 0:
            # Batched, but every such call was sampled on the host: this model's prefill does
            # not sample on the device (its adapter returns logits), so there is no device
            # sampling of batched rows to certify.
            raise NotExercised(
                "the multi-row prefill calls were all sampled on the host (the model's prefill "
                "returns logits)"
            )
        raise AssertionError(
            "no prefill call carried more than one row (the requests were prefilled one by one)"
        )

    return Claim("device-sampled multi-row prefill calls", check)


def resident_decode() -> Claim:
    """Steady resident decode steps (nothing reloaded) between full reloads."""

    def check(delta: TTCounters, totals: TTCounters, info: TTPluginInfo) -> None:
        _needs_device_sampling(info)
        _needs_device_decode(delta)
        resident = delta.value(DECODE_COMMANDS, command="resident")
        full = delta.value(DECODE_COMMANDS, command="full_reload")
        assert full > 0 and resident > 0, (
            f"expected full reloads around steady resident decode steps, got {full:g} full "
            f"reload(s) and {resident:g} resident step(s)"
        )

    return Claim("resident decode between reloads", check)


def async_overlap() -> Claim:
    def check(delta: TTCounters, totals: TTCounters, info: TTPluginInfo) -> None:
        _needs_device_sampling(info)
        if totals.value(OVERLAPS) == 0:
            raise NotExercised(
                "async decode overlap is off (no decode step was ever submitted with "
                "read_from_device=False: the server runs without --async-scheduling)"
            )
        _needs_device_decode(delta)
        assert delta.value(OVERLAPS) > 0, "no decode step overlapped (async) while the check ran"

    return Claim("async decode overlap", check)


def lanes_carry_rows(minimum: int = 2) -> Claim:
    def check(delta: TTCounters, totals: TTCounters, info: TTPluginInfo) -> None:
        if info.lanes < minimum:
            raise NotExercised(f"the server runs {info.lanes} lane(s)")
        busy = sorted(k for k, v in delta.label_values(LANE_STEPS, "lane").items() if v)
        assert len(busy) >= minimum, (
            f"only lane(s) {busy or 'none'} of {info.lanes} carried rows while the check ran"
        )

    return Claim("several lanes carry rows", check)


def preemptions_resumed() -> Claim:
    def check(delta: TTCounters, totals: TTCounters, info: TTPluginInfo) -> None:
        assert delta.value(RESUMED) > 0, "the plugin resumed no preempted request"

    return Claim("preempted requests resumed", check)
