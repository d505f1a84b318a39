"""TT plugin configuration: the ``additional_config["tt"]`` namespace, parsed and validated.

vLLM passes TT options through its generic ``--additional-config '{"tt": {...}}'``. Everything
the plugin reads from there goes through :func:`get_tt_config` (the raw mapping, as the spec
names it) and :func:`get_tt_options`, which validates every key (unknown keys and bad values are
errors that name the key, the value and what is accepted) and returns a frozen, typed
:class:`TTOptions`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm.config import VllmConfig

TT_CONFIG_KEY = "tt"

SAMPLE_ON_DEVICE_MODES = ("all", "decode_only")
TRACE_MODES = ("all", "decode_only", "none")
DISPATCH_CORE_AXES = ("row", "col")
OPTIMIZATIONS = ("accuracy", "performance")

# Names of ttnn.FabricConfig / ttnn.FabricReliabilityMode. The real library may grow new
# members; when ttnn is importable its own member list is authoritative (see _enum_names).
_KNOWN_FABRIC_CONFIGS = (
    "DISABLED",
    "FABRIC_1D_NEIGHBOR_EXCHANGE",
    "FABRIC_1D",
    "FABRIC_1D_RING",
    "FABRIC_2D",
    "FABRIC_2D_TORUS_X",
    "FABRIC_2D_TORUS_Y",
    "FABRIC_2D_TORUS_XY",
    "CUSTOM",
)
_KNOWN_RELIABILITY_MODES = ("STRICT_INIT", "RELAXED_INIT", "DYNAMIC_RECONFIG")


# A serving step (prefill or decode) that has not returned after this long is a hung device: a
# decode step takes 5-40 ms on hardware, a long prefill seconds (docs/RELIABILITY.md).
DEFAULT_DEVICE_TIMEOUT_S = 120.0
# Start-up device work (mesh open, KV allocation, compile and trace capture) takes minutes.
DEFAULT_WARMUP_TIMEOUT_S = 1800.0


class TTConfigError(ValueError):
    """A TT option is unknown or has a bad value."""


def _enum_names(enum_name: str, fallback: tuple[str, ...]) -> tuple[str, ...]:
    try:
        import ttnn
    except ImportError:
        return fallback
    enum = getattr(ttnn, enum_name, None)
    members = getattr(enum, "__members__", None)
    return tuple(members) if members else fallback


def fabric_config_names() -> tuple[str, ...]:
    return _enum_names("FabricConfig", _KNOWN_FABRIC_CONFIGS)


def fabric_reliability_mode_names() -> tuple[str, ...]:
    return _enum_names("FabricReliabilityMode", _KNOWN_RELIABILITY_MODES)


@dataclass(frozen=True)
class TTOptions:
    """Typed view of ``additional_config["tt"]``. Defaults are the product spec's."""

    sample_on_device_mode: str | None = None
    trace_mode: str = "all"
    enable_model_warmup: bool = True
    trace_region_size: int | None = None
    worker_l1_size: int | None = None
    l1_small_size: int | None = None
    fabric_config: str | None = None
    fabric_reliability_mode: str | None = None
    dispatch_core_axis: str | None = None
    always_compat_sampling: bool = False
    decode_interleave_enabled: bool = True
    decode_interleave_prefill_steps: int = 2
    decode_interleave_decode_steps: int = 1
    optimizations: str | None = None
    register_test_models: bool = False
    # Watchdog bounds in seconds (docs/RELIABILITY.md explains the defaults).
    device_timeout_s: float = DEFAULT_DEVICE_TIMEOUT_S
    warmup_timeout_s: float = DEFAULT_WARMUP_TIMEOUT_S
    # Not a hardware option: run on a host-emulated mesh (docs/EMULATED_MESH.md).
    emulated_mesh: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class OptionSpec:
    """How one TT option is validated and documented. README.md's TT options table is
    generated from these (``tools/gen_docs.py``); the default is `TTOptions`'s."""

    kind: type
    doc: str
    choices: tuple[str, ...] | None = None
    nullable: bool = False
    min_value: int | None = None
    case_insensitive: bool = False
    # The accepted values as the docs show them, when `choices` depends on the installed ttnn.
    choices_doc: str | None = None

    @property
    def type_name(self) -> str:
        return {str: "string", int: "integer", bool: "boolean", float: "number"}[self.kind]

    @property
    def allowed_doc(self) -> str:
        """The accepted values in words (the README's "Allowed" column)."""
        if self.choices_doc is not None:
            text = self.choices_doc
        elif self.choices is not None:
            text = ", ".join(f"`{c}`" for c in self.choices)
        elif self.kind is bool:
            text = "`true`, `false`"
        elif self.kind is float:
            text = "seconds > 0"
        elif self.min_value is not None:
            text = f"integer >= {self.min_value}"
        else:
            text = "any integer"
        return f"{text}, `null`" if self.nullable else text


def _names_doc(names: tuple[str, ...], enum: str) -> str:
    return f"any `ttnn.{enum}` name: " + ", ".join(f"`{n}`" for n in names)


def option_specs() -> dict[str, OptionSpec]:
    """Every TT option, in the order the docs list them (the product spec's order)."""
    return {
        "sample_on_device_mode": OptionSpec(
            str,
            "On-device sampling, when the model supports it. Unset: host sampling.",
            SAMPLE_ON_DEVICE_MODES,
            nullable=True,
        ),
        "trace_mode": OptionSpec(
            str, "TT tracing: which step kinds run as captured traces.", TRACE_MODES
        ),
        "enable_model_warmup": OptionSpec(
            bool, "Warm up (compile, then capture traces) before the server reports healthy."
        ),
        "trace_region_size": OptionSpec(
            int, "Trace region size for TT runtime tracing.", nullable=True, min_value=0
        ),
        "worker_l1_size": OptionSpec(int, "Worker L1 size override.", nullable=True, min_value=0),
        "l1_small_size": OptionSpec(int, "Small L1 size override.", nullable=True, min_value=0),
        "fabric_config": OptionSpec(
            str,
            "Fabric config. Overrides model defaults; otherwise Wormhole Galaxy "
            "`FABRIC_1D_RING`, Blackhole Galaxy `FABRIC_2D_TORUS_XY`, other multi-device "
            "`FABRIC_1D`.",
            fabric_config_names(),
            nullable=True,
            choices_doc=_names_doc(_KNOWN_FABRIC_CONFIGS, "FabricConfig"),
        ),
        "fabric_reliability_mode": OptionSpec(
            str,
            "Fabric reliability mode.",
            fabric_reliability_mode_names(),
            nullable=True,
            choices_doc=_names_doc(_KNOWN_RELIABILITY_MODES, "FabricReliabilityMode"),
        ),
        "dispatch_core_axis": OptionSpec(
            str,
            "Dispatch core axis (case-insensitive).",
            DISPATCH_CORE_AXES,
            nullable=True,
            case_insensitive=True,
        ),
        "always_compat_sampling": OptionSpec(
            bool,
            "Always use vLLM's logits processors and sampler, even when the batch does not "
            "need them.",
        ),
        "decode_interleave_enabled": OptionSpec(
            bool,
            "Insert decode-only steps into runs of consecutive prefill steps, so a running "
            "request's inter-token latency does not scale with another request's prompt length.",
        ),
        "decode_interleave_prefill_steps": OptionSpec(
            int,
            "Consecutive prefill steps allowed before one insertion. Raise it to favor time to "
            "first token, lower it to favor inter-token latency.",
            min_value=1,
        ),
        "decode_interleave_decode_steps": OptionSpec(
            int,
            "How many decode-only steps one insertion runs. Reaching this count stops the "
            "policy choosing decode; it never forces a prefill step.",
            min_value=1,
        ),
        "optimizations": OptionSpec(
            str,
            "Model/runtime optimization profile, passed to the model.",
            OPTIMIZATIONS,
            nullable=True,
        ),
        "register_test_models": OptionSpec(
            bool, "Register the plugin's non-production reference test models."
        ),
        "emulated_mesh": OptionSpec(
            bool, "Run on the host-emulated mesh (no TT hardware; see docs/EMULATED_MESH.md)."
        ),
        "device_timeout_s": OptionSpec(
            float,
            "Watchdog bound on one serving device call: prefill, decode submit, decode "
            "read-back. Exceeded: the engine fails fatally (docs/RELIABILITY.md).",
        ),
        "warmup_timeout_s": OptionSpec(
            float,
            "Watchdog bound on one start-up device call: mesh open, KV allocation, each "
            "warm-up compile / trace-capture call.",
        ),
    }


def option_default(key: str) -> Any:
    """The default of a TT option: `TTOptions`'s field default."""
    return {f.name: f.default for f in dataclasses.fields(TTOptions)}[key]


def _check(key: str, value: Any, opt: OptionSpec) -> Any:
    if value is None:
        if opt.nullable:
            return None
        raise TTConfigError(f"TT option {key!r} must not be null")
    # bool is a subclass of int: reject True/False for integer options explicitly.
    if opt.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise TTConfigError(
            f"TT option {key!r} must be an integer, got {value!r} ({type(value).__name__})"
        )
    if opt.kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TTConfigError(
                f"TT option {key!r} must be a number of seconds, got {value!r} "
                f"({type(value).__name__})"
            )
        if not math.isfinite(value) or value <= 0:
            raise TTConfigError(
                f"TT option {key!r} must be a finite number of seconds > 0, got {value!r}"
            )
        return float(value)
    if opt.kind is bool and not isinstance(value, bool):
        raise TTConfigError(
            f"TT option {key!r} must be true or false, got {value!r} ({type(value).__name__})"
        )
    if opt.kind is str and not isinstance(value, str):
        raise TTConfigError(
            f"TT option {key!r} must be a string, got {value!r} ({type(value).__name__})"
        )
    if opt.min_value is not None and value < opt.min_value:
        raise TTConfigError(f"TT option {key!r} must be >= {opt.min_value}, got {value!r}")
    if opt.choices is not None:
        candidate = value.lower() if opt.case_insensitive else value
        if candidate not in opt.choices:
            accepted = ", ".join(opt.choices)
            raise TTConfigError(
                f"TT option {key!r} has invalid value {value!r}; accepted values: {accepted}"
            )
        return candidate
    return value


def parse_tt_options(raw: Any) -> TTOptions:
    """Validate a raw ``additional_config["tt"]`` mapping and return the typed view."""
    if raw is None:
        return TTOptions()
    if not isinstance(raw, dict):
        raise TTConfigError(
            f'additional_config["tt"] must be a JSON object, got {type(raw).__name__}: {raw!r}'
        )
    options = option_specs()
    unknown = sorted(set(raw) - set(options))
    if unknown:
        raise TTConfigError(
            f"Unknown TT option(s) {', '.join(map(repr, unknown))} in "
            f'additional_config["tt"]; known options: {", ".join(options)}'
        )
    values = {key: _check(key, value, options[key]) for key, value in raw.items()}
    return TTOptions(**values)


def get_tt_config(vllm_config: VllmConfig) -> dict[str, Any]:
    """``vllm_config.additional_config["tt"]`` as given (empty when absent)."""
    additional = vllm_config.additional_config or {}
    if not isinstance(additional, dict):
        raise TTConfigError(
            f"additional_config must be a JSON object, got {type(additional).__name__}"
        )
    raw = additional.get(TT_CONFIG_KEY)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise TTConfigError(
            f'additional_config["tt"] must be a JSON object, got {type(raw).__name__}: {raw!r}'
        )
    return raw


def get_tt_options(vllm_config: VllmConfig) -> TTOptions:
    """The validated, typed TT options of a VllmConfig."""
    return parse_tt_options(get_tt_config(vllm_config))
