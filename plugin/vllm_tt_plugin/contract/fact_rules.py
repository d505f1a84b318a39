"""The plugin's own rules, applied to the class facts the checker evaluated from source.

The checker never re-decides what the plugin accepts: a ``model_capabilities`` value goes through
``ModelCapabilities.from_model_class`` (launch/capabilities.py) and a
``decode_input_update_contract`` value through ``decode_contract_version``, each on a stand-in
class holding only that value. What they raise is the refusal the checker reports (``1`` or
``"True"`` for a flag, a ``MappingProxyType``, a version ``1.0`` or ``-1``); what they return is
what the plugin plans with (``True`` is version 1, as ``isinstance(True, int)`` says).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

from vllm_tt_plugin.contract.contract_version import decode_contract_version
from vllm_tt_plugin.launch.capabilities import CapabilityError, ModelCapabilities


def capability_refusal(owner: str, value: Any, unknown: object) -> str:
    """The plugin's ``CapabilityError`` for a class declaring ``model_capabilities = value``
    ("" when it accepts it). Entries the checker could not evaluate (``unknown``) are left out:
    they are checked as unknown, not refused."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if v is not unknown}
    elif isinstance(value, types.MappingProxyType):
        value = types.MappingProxyType({k: v for k, v in value.items() if v is not unknown})
    try:
        ModelCapabilities.from_model_class(type(owner, (), {"model_capabilities": value}))
    except CapabilityError as exc:
        return f"{exc} (CapabilityError)"
    return ""


def contract_version(owner: str, value: Any) -> tuple[int, str]:
    """(the version the plugin plans with, "") or (0, its ``TypeError`` when it refuses the
    value at load)."""
    stand_in = type(owner, (), {"decode_input_update_contract": value})()
    try:
        return int(decode_contract_version(stand_in)), ""
    except TypeError as exc:
        return 0, f"{exc} (TypeError)"


def device_penalties(capabilities: Mapping[str, Any]) -> bool:
    """``supports_device_penalties`` as the plugin reads it (default True)."""
    return capabilities.get("supports_device_penalties", True) is not False
