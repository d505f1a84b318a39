"""Model capability declarations (``model_capabilities`` on a TT model class), parsed once.

Features are gated on what a model class declares, never on model names. A missing key means
"not supported" unless the contract gives a default (``supports_device_penalties`` is True).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

# Keys a model class may declare, with the type each must have.
_BOOL_KEYS = (
    "supports_sample_on_device",
    "supports_async_decode",
    "supports_prefix_caching",
    "supports_chunked_prefill",
    "supports_device_penalties",
    "supports_lane_data_parallel",
)


class CapabilityError(TypeError):
    """A model class declares a malformed ``model_capabilities`` entry."""


@dataclass(frozen=True)
class ModelCapabilities:
    supports_sample_on_device: bool = False
    supports_async_decode: bool = False
    supports_prefix_caching: bool = False
    supports_chunked_prefill: bool = False
    supports_device_penalties: bool = True
    # Our extension: the class serves --data_parallel_size as in-process lanes (Galaxy style).
    supports_lane_data_parallel: bool = False
    # Largest top_k the device sampler handles; None = unlimited.
    max_device_top_k: int | None = None
    # Block-output models emit this many tokens per step (DiffusionGemma); 1 for everyone else.
    output_tokens_per_step: int = 1
    # kwargs for ttnn.set_fabric_config, kept by reference (never copied into vLLM's config).
    fabric_config: dict[str, Any] | None = None

    @classmethod
    def from_model_class(cls, model_cls: type) -> ModelCapabilities:
        declared = getattr(model_cls, "model_capabilities", None) or {}
        name = getattr(model_cls, "__qualname__", repr(model_cls))
        if not isinstance(declared, dict):
            raise CapabilityError(
                f"{name}.model_capabilities must be a dict, got {type(declared).__name__}"
            )
        values: dict[str, Any] = {}
        for key in _BOOL_KEYS:
            if key in declared:
                if not isinstance(declared[key], bool):
                    raise CapabilityError(
                        f"{name}.model_capabilities[{key!r}] must be a bool, got {declared[key]!r}"
                    )
                values[key] = declared[key]
        for key in ("max_device_top_k", "output_tokens_per_step"):
            if key in declared and declared[key] is not None:
                value = declared[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise CapabilityError(
                        f"{name}.model_capabilities[{key!r}] must be a positive integer, "
                        f"got {value!r}"
                    )
                values[key] = value
        fabric = declared.get("fabric_config")
        if fabric is not None:
            if not isinstance(fabric, dict):
                raise CapabilityError(
                    f"{name}.model_capabilities['fabric_config'] must be a dict of "
                    f"ttnn.set_fabric_config kwargs, got {type(fabric).__name__}"
                )
            values["fabric_config"] = fabric
        return cls(**values)

    def with_fabric_config_of(self, model_cls: type) -> ModelCapabilities:
        """These capabilities with the class's ``fabric_config`` (ttnn arguments kept by
        reference; a launch plan leaves them out, and the platform validated them when it
        parsed the declaration)."""
        declared = getattr(model_cls, "model_capabilities", None) or {}
        return replace(self, fabric_config=declared.get("fabric_config"))

    def narrowed_by(self, instance: ModelCapabilities) -> ModelCapabilities:
        """The per-request limits of these (the registered class's, planned at launch) under a
        loaded instance's own declaration: the smaller device top-k, device penalties only where
        both allow them. An instance never widens what the launch planned. One rule for the
        runner (adapter/served_model.per_request_capabilities) and the parity checker."""
        limit, own = self.max_device_top_k, instance.max_device_top_k
        if own is not None and (limit is None or own < limit):
            limit = own
        penalties = self.supports_device_penalties and instance.supports_device_penalties
        return replace(self, max_device_top_k=limit, supports_device_penalties=penalties)


# Capabilities whose "yes" the launch acted on from the registered class (the sampling mode, the
# scheduler, vLLM's cache switches): an instance that says "no" would be sent what it cannot take.
_PLANNED_YES = (
    "supports_sample_on_device",
    "supports_async_decode",
    "supports_prefix_caching",
    "supports_chunked_prefill",
)


def capability_conflicts(planned: ModelCapabilities, instance: ModelCapabilities) -> list[str]:
    """Where the loaded instance's own ``model_capabilities`` are narrower than the class's
    the launch planned from, in what the launch already acted on (tt_transformers.vllm_registry's
    classes return another class's instance: its generator's). The per-request limits are not
    conflicts: adapter/served_model.py ``per_request_capabilities`` narrows them. Standard
    library only: the worker refuses such an instance at load, the parity checker reports it."""
    out = [
        f"{key}: class True, instance False"
        for key in _PLANNED_YES
        if getattr(planned, key) and not getattr(instance, key)
    ]
    if planned.output_tokens_per_step != instance.output_tokens_per_step:
        out.append(
            f"output_tokens_per_step: class {planned.output_tokens_per_step}, "
            f"instance {instance.output_tokens_per_step}"
        )
    return out
