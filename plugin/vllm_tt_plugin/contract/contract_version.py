"""The decode input-update contract version a model declares, as the plugin reads it.

Standard library only: the adapter (through ``protocols``) and the parity checker (on values it
evaluated from a checkout's source) apply this one rule.
"""

from __future__ import annotations

# Version of the decode input-update contract the plugin speaks (docs/DECODE_RELOAD_CONTRACT.md).
DECODE_RELOAD_CONTRACT_VERSION = 1


def decode_contract_version(model: object) -> int:
    """0 for legacy models (``reset_batch``), 1 for the resident-input reload contract."""
    version = getattr(model, "decode_input_update_contract", 0) or 0
    if not isinstance(version, int) or version < 0:
        raise TypeError(
            f"{type(model).__qualname__}.decode_input_update_contract must be a non-negative "
            f"integer, got {version!r}"
        )
    return version
