"""Typed fakes of tt-metal model classes: only the class-level surface the platform reads.

They never run: config-level tests stop before any device is opened. Engine tests use the
plugin's real reference models instead.
"""

from __future__ import annotations

from typing import Any, ClassVar


class _FakeModelBase:
    model_capabilities: ClassVar[dict[str, Any]] = {}

    @classmethod
    def initialize_vllm_model(cls, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("config-level fakes must never be constructed")


class CapableModel(_FakeModelBase):
    model_capabilities: ClassVar[dict[str, Any]] = {
        "supports_sample_on_device": True,
        "supports_async_decode": True,
        "supports_prefix_caching": True,
        "supports_chunked_prefill": True,
    }
    # Async overlap needs the reload commands (a version-0 class is launched synchronously).
    decode_input_update_contract: ClassVar[int] = 1


class BareModel(_FakeModelBase):
    """Declares nothing: every optional feature is unsupported."""


class LaneModel(CapableModel):
    model_capabilities: ClassVar[dict[str, Any]] = {
        **CapableModel.model_capabilities,
        "supports_lane_data_parallel": True,
    }


class FabricModel(CapableModel):
    model_capabilities: ClassVar[dict[str, Any]] = {
        **CapableModel.model_capabilities,
        "fabric_config": {"num_planes": 2},
    }


class MalformedCapabilities(_FakeModelBase):
    model_capabilities: ClassVar[dict[str, Any]] = {"supports_async_decode": "yes"}


class BlockOutputModel(CapableModel):
    model_capabilities: ClassVar[dict[str, Any]] = {
        **CapableModel.model_capabilities,
        "output_tokens_per_step": 256,
    }


class BlockTopKModel(_FakeModelBase):
    """A block-output model that also declares a device top-k limit (not servable)."""

    model_capabilities: ClassVar[dict[str, Any]] = {
        "output_tokens_per_step": 256,
        "supports_sample_on_device": True,
        "max_device_top_k": 32,
    }
