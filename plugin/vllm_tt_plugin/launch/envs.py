"""Every environment variable the plugin reads: name, type, default and one line of doc.

Read a variable through its accessor, ``VAR.get(env=None)``: ``env`` is the mapping to read
(``os.environ`` when None; tests pass their own). Unset or blank -> the default; a value that
does not parse is an ``EnvError`` naming the variable and the value. Values whose meaning
another module owns (a mesh name, an override list, a family version) come back as text and
are parsed there, so each rule stays in one place. Variables the plugin sets for the processes
it starts are written with ``VAR.export(value)``.

README.md's environment table is generated from ``REGISTRY`` by ``tools/gen_docs.py``; a unit
test fails when it drifts. Standard library only (``tox -e contract-parity`` imports this).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class EnvError(ValueError):
    """An environment variable holds a value that does not parse."""


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    name: str
    type_name: str  # as the README shows it
    default: T
    doc: str
    parse: Callable[[str, str], T]  # (name, stripped raw value) -> value
    default_doc: str | None = None  # when the effective default is decided elsewhere

    def raw(self, env: Mapping[str, str] | None = None) -> str | None:
        value = (os.environ if env is None else env).get(self.name)
        if value is None or not value.strip():
            return None
        return value.strip()

    def get(self, env: Mapping[str, str] | None = None) -> T:
        raw = self.raw(env)
        return self.default if raw is None else self.parse(self.name, raw)

    def export(self, value: str, env: MutableMapping[str, str] | None = None) -> None:
        """Set it for this process and every process it starts afterwards."""
        (os.environ if env is None else env)[self.name] = value

    @property
    def shown_default(self) -> str | None:
        """The default as the docs show it; None when the variable is simply unset."""
        if self.default_doc is not None:
            return self.default_doc
        if self.default is None or self.default == "":
            return None
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        return str(self.default)


# --- parsers: (name, raw) -> value; errors name the variable and the value --------------------


def _text(name: str, raw: str) -> str:
    return raw


def _path(name: str, raw: str) -> Path:
    return Path(raw).expanduser()


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _flag(name: str, raw: str) -> bool:
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise EnvError(f"{name}={raw!r} must be 0 or 1 (or true/false)")


def _positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError as exc:
        raise EnvError(f"{name}={raw!r} must be a positive integer") from exc
    if value < 1:
        raise EnvError(f"{name}={raw!r} must be a positive integer")
    return value


def _milliseconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError as exc:
        raise EnvError(f"{name}={raw!r} must be a number of milliseconds") from exc
    if value < 0:
        raise EnvError(f"{name}={raw!r} must be >= 0")
    return value


def _int_list(name: str, raw: str) -> list[int]:
    try:
        return [int(x) for x in raw.split(",") if x.strip()]
    except ValueError as exc:
        raise EnvError(f"{name}={raw!r} must be a comma-separated list of ints") from exc


# --- the registry -------------------------------------------------------------------------------

MESH_DEVICE: EnvVar[str] = EnvVar(
    "MESH_DEVICE",
    "str",
    "N150",
    "The TT system to open: a name (N150, N300, T3K, TG, BH-Galaxy, ...: `launch/mesh_spec.py`) "
    'or a mesh shape "(rows,cols)".',
    _text,
)
TT_VISIBLE_DEVICES: EnvVar[list[int] | None] = EnvVar(
    "TT_VISIBLE_DEVICES",
    "list[int]",
    None,
    "Device ids this process may open, comma-separated; set per standard-DP rank (by the "
    "plugin or the launcher). Unset: every device of the mesh.",
    _int_list,
)
TT_MODEL_CLASS_OVERRIDES: EnvVar[str] = EnvVar(
    "TT_MODEL_CLASS_OVERRIDES",
    "str",
    "",
    "`Arch=module.path:ClassName[,...]`: the class serving these architectures for this "
    "launch; outranks bundles and the built-in map.",
    _text,
)
EXTRA_MODELS_DIR: EnvVar[Path | None] = EnvVar(
    "EXTRA_MODELS_DIR",
    "path",
    None,
    "Folder of model bundles (`<bundle>/vllm_metadata.json`) registered at start-up.",
    _path,
)
TT_VLLM_BUILTIN_MODELS: EnvVar[bool] = EnvVar(
    "TT_VLLM_BUILTIN_MODELS",
    "bool",
    True,
    "0 disables the built-in map of tt-metal classes.",
    _flag,
)
TT_LLAMA_TEXT_VER: EnvVar[str | None] = EnvVar(
    "TT_LLAMA_TEXT_VER",
    "str",
    None,
    "Which tt-metal Llama text implementation serves `TTLlamaForCausalLM`.",
    _text,
)
TT_QWEN3_TEXT_VER: EnvVar[str | None] = EnvVar(
    "TT_QWEN3_TEXT_VER",
    "str",
    None,
    "Which tt-metal Qwen 3 text implementation serves `TTQwen3ForCausalLM`.",
    _text,
)
TT_QWEN35_TEXT_VER: EnvVar[str | None] = EnvVar(
    "TT_QWEN35_TEXT_VER",
    "str",
    None,
    "Which tt-metal Qwen 3.5 implementation serves `TTQwen3_5ForConditionalGeneration`.",
    _text,
)
VLLM_USE_V2_MODEL_RUNNER: EnvVar[bool | None] = EnvVar(
    "VLLM_USE_V2_MODEL_RUNNER",
    "bool",
    None,
    "vLLM's own; 1 is refused (the plugin implements the V1 model-runner contract), and the "
    "plugin sets it to 0 for every process.",
    _flag,
    default_doc="0",
)
TT_DP_DEVICE_GROUPS: EnvVar[str | None] = EnvVar(
    "TT_DP_DEVICE_GROUPS",
    "JSON",
    None,
    "Set by the plugin: the data-parallel device groups found at start-up, inherited by the "
    "engine's processes so discovery runs once.",
    _text,
)
TT_EMULATED_STEP_MS: EnvVar[float] = EnvVar(
    "TT_EMULATED_STEP_MS",
    "float",
    0.0,
    "Emulated mesh only: fixed device time per model call, in milliseconds (0: as fast as "
    "the host computes).",
    _milliseconds,
)
TT_EMULATED_STEP_FILE: EnvVar[Path | None] = EnvVar(
    "TT_EMULATED_STEP_FILE",
    "path",
    None,
    "Emulated mesh only: a file holding the device step time in milliseconds, re-read at most "
    "every 0.2 s and overriding `TT_EMULATED_STEP_MS` (benchmarks change it without a restart).",
    _path,
)
TT_EMULATED_TIMING_ONLY: EnvVar[bool] = EnvVar(
    "TT_EMULATED_TIMING_ONLY",
    "bool",
    False,
    "Emulated mesh only: a timing-only device, on which the reference models skip their "
    "decoder (no matmuls; outputs stay deterministic and contract-correct) so a model call costs "
    "`TT_EMULATED_STEP_MS` and almost no host CPU (for host-overhead benchmarks, never parity).",
    _flag,
)
TT_REFERENCE_MAX_TOKENS_ALL_USERS: EnvVar[int] = EnvVar(
    "TT_REFERENCE_MAX_TOKENS_ALL_USERS",
    "int",
    32768,
    "Reference test models only: the token budget their `get_max_tokens_all_users` returns "
    "(a smaller one shrinks the KV pool).",
    _positive_int,
)
TT_METAL_HOME: EnvVar[Path | None] = EnvVar(
    "TT_METAL_HOME",
    "path",
    None,
    "A tt-metal checkout for `tox -e contract-parity` to read adapter signatures from "
    "(unset: that check skips).",
    _path,
)

TT_VLLM_METRICS: EnvVar[bool] = EnvVar(
    "TT_VLLM_METRICS",
    "bool",
    True,
    "`0` turns the plugin's `tt_*` metrics on `/metrics` off (docs/METRICS.md).",
    _flag,
)
TT_VLLM_METRICS_DIR: EnvVar[str | None] = EnvVar(
    "TT_VLLM_METRICS_DIR",
    "path",
    None,
    "Set by the plugin: the directory the engine processes write their metrics files to, "
    "read by the API server (docs/METRICS.md).",
    _text,
)
PROMETHEUS_MULTIPROC_DIR: EnvVar[str | None] = EnvVar(
    "PROMETHEUS_MULTIPROC_DIR",
    "path",
    None,
    "prometheus_client's (and vLLM's) multiprocess directory; when set, the plugin's metrics "
    "files go there instead of `TT_VLLM_METRICS_DIR`.",
    _text,
)

REGISTRY: dict[str, EnvVar[Any]] = {
    var.name: var
    for var in (
        MESH_DEVICE,
        TT_VISIBLE_DEVICES,
        TT_MODEL_CLASS_OVERRIDES,
        EXTRA_MODELS_DIR,
        TT_VLLM_BUILTIN_MODELS,
        TT_LLAMA_TEXT_VER,
        TT_QWEN3_TEXT_VER,
        TT_QWEN35_TEXT_VER,
        VLLM_USE_V2_MODEL_RUNNER,
        TT_DP_DEVICE_GROUPS,
        TT_EMULATED_STEP_MS,
        TT_EMULATED_STEP_FILE,
        TT_EMULATED_TIMING_ONLY,
        TT_REFERENCE_MAX_TOKENS_ALL_USERS,
        TT_METAL_HOME,
        TT_VLLM_METRICS,
        TT_VLLM_METRICS_DIR,
        PROMETHEUS_MULTIPROC_DIR,
    )
}
