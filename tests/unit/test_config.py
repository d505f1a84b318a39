"""TT options: defaults, valid values, every kind of invalid value, unknown keys."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_tt_plugin.config import (
    TTConfigError,
    TTOptions,
    fabric_config_names,
    get_tt_config,
    get_tt_options,
    parse_tt_options,
)

SPEC_DEFAULTS: dict[str, Any] = {
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
    "emulated_mesh": False,
    "device_timeout_s": 120.0,
    "warmup_timeout_s": 1800.0,
}

VALID: list[tuple[str, Any, Any]] = [
    ("sample_on_device_mode", "all", "all"),
    ("sample_on_device_mode", "decode_only", "decode_only"),
    ("trace_mode", "decode_only", "decode_only"),
    ("trace_mode", "none", "none"),
    ("enable_model_warmup", False, False),
    ("trace_region_size", 216580672, 216580672),
    ("worker_l1_size", 1344544, 1344544),
    ("l1_small_size", 768, 768),
    ("fabric_config", "FABRIC_1D_RING", "FABRIC_1D_RING"),
    ("fabric_config", "CUSTOM", "CUSTOM"),
    ("fabric_reliability_mode", "RELAXED_INIT", "RELAXED_INIT"),
    ("dispatch_core_axis", "col", "col"),
    ("dispatch_core_axis", "ROW", "row"),
    ("always_compat_sampling", True, True),
    ("decode_interleave_enabled", False, False),
    ("decode_interleave_prefill_steps", 5, 5),
    ("decode_interleave_decode_steps", 3, 3),
    ("optimizations", "accuracy", "accuracy"),
    ("optimizations", "performance", "performance"),
    ("register_test_models", True, True),
    ("emulated_mesh", True, True),
    ("device_timeout_s", 3, 3.0),
    ("device_timeout_s", 0.5, 0.5),
    ("warmup_timeout_s", 600, 600.0),
]

# (key, bad value, fragment the message must contain besides the key and the value)
INVALID: list[tuple[str, Any, str]] = [
    ("sample_on_device_mode", "prefill_only", "accepted values: all, decode_only"),
    ("trace_mode", "sometimes", "accepted values: all, decode_only, none"),
    ("trace_mode", None, "must not be null"),
    ("enable_model_warmup", "yes", "true or false"),
    ("enable_model_warmup", 1, "true or false"),
    ("trace_region_size", "big", "integer"),
    ("trace_region_size", 1.5, "integer"),
    ("trace_region_size", True, "integer"),
    ("worker_l1_size", -1, ">= 0"),
    ("l1_small_size", [768], "integer"),
    ("fabric_config", "FABRIC_3D", "FABRIC_1D_RING"),
    ("fabric_config", 2, "string"),
    ("fabric_reliability_mode", "LOOSE", "STRICT_INIT"),
    ("dispatch_core_axis", "diagonal", "row, col"),
    ("always_compat_sampling", "false", "true or false"),
    ("decode_interleave_prefill_steps", 0, ">= 1"),
    ("decode_interleave_decode_steps", 0, ">= 1"),
    ("decode_interleave_decode_steps", "2", "integer"),
    ("optimizations", "speed", "accuracy, performance"),
    ("register_test_models", None, "must not be null"),
    ("decode_interleave_enabled", 0, "true or false"),
    ("emulated_mesh", "on", "true or false"),
    ("device_timeout_s", 0, "> 0"),
    ("device_timeout_s", -3, "> 0"),
    ("device_timeout_s", "30", "number of seconds"),
    ("device_timeout_s", True, "number of seconds"),
    ("warmup_timeout_s", float("inf"), "finite"),
    ("warmup_timeout_s", None, "must not be null"),
]


def test_defaults_are_the_spec_defaults() -> None:
    assert parse_tt_options(None).as_dict() == SPEC_DEFAULTS
    assert parse_tt_options({}).as_dict() == SPEC_DEFAULTS


def test_every_option_has_a_test() -> None:
    assert set(SPEC_DEFAULTS) == set(TTOptions().as_dict())
    assert {key for key, _, _ in VALID} == set(SPEC_DEFAULTS)
    assert {key for key, _, _ in INVALID} == set(SPEC_DEFAULTS)


@pytest.mark.parametrize(("key", "value", "expected"), VALID)
def test_valid_values(key: str, value: Any, expected: Any) -> None:
    assert getattr(parse_tt_options({key: value}), key) == expected


@pytest.mark.parametrize(("key", "value", "fragment"), INVALID)
def test_invalid_values_name_key_value_and_accepted(key: str, value: Any, fragment: str) -> None:
    with pytest.raises(TTConfigError) as info:
        parse_tt_options({key: value})
    message = str(info.value)
    assert repr(key) in message
    assert fragment in message
    if value is not None:
        assert repr(value) in message


def test_unknown_key_is_named_with_the_known_options() -> None:
    with pytest.raises(TTConfigError) as info:
        parse_tt_options({"trace_mode": "all", "sample_on_devcie_mode": "all"})
    assert "'sample_on_devcie_mode'" in str(info.value)
    assert "sample_on_device_mode" in str(info.value)


def test_tt_namespace_must_be_an_object() -> None:
    with pytest.raises(TTConfigError, match='additional_config\\["tt"\\] must be a JSON object'):
        parse_tt_options(["all"])


def test_every_fabric_config_name_is_accepted() -> None:
    for name in fabric_config_names():
        assert parse_tt_options({"fabric_config": name}).fabric_config == name


def test_get_tt_config_returns_the_raw_namespace(make_config: Any) -> None:
    config = make_config(tt={"trace_mode": "none", "emulated_mesh": True})
    assert get_tt_config(config)["trace_mode"] == "none"
    assert get_tt_options(config).trace_mode == "none"


def test_bad_option_fails_vllm_config_creation(make_config: Any) -> None:
    with pytest.raises(Exception, match="trace_mode"):
        make_config(tt={"trace_mode": "sometimes"})
