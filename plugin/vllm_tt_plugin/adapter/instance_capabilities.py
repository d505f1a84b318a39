"""What a loaded instance takes per request, which may be less than its registered class says.

tt_transformers.vllm_registry's classes (launch/text_registry.py) declare only the capabilities
every generator of their architecture shares and return the selected generator's own model. The
per-request limits are the generator's: its ``max_device_top_k`` (Llama 3.1 8B, Llama 3.3 70B and
Qwen3 32B declare 32) and its ``supports_device_penalties`` (Phi-4 and Qwen2 7B declare False), at
tenstorrent/tt-transformers 4fc26a3e033cc75f1df029fdb3719bdabe770763 and
1f5f52bfb207f1b0c60e244b247f9a1bc2bca0ff. The registry module says the plugin reads these from the
instance (``src/tt_transformers/vllm_registry.py`` @ db0b69c315f3a931e518de6ca999bf3ed54f73c2).

Some generators also drop the penalty histories while declaring nothing about penalties (so the
default, True, holds). Each generator hands every call to tt-transformers' ``VLLMAdapter``
(``src/tt_transformers/llm_runtime/vllm_adapter.py`` @ 02290fbb8dacb2173c8fa03a5493ecc3a60a09bc
and 4fc26a3e), which accepts ``prompt_tokens`` / ``output_tokens`` but forwards only the fields
its ``config.request_state_fields`` lists. The Llama 3.2 1B / 3B and Qwen2.5 7B generators
(@ 1f5f52bf) and the Mistral 7B and DeepSeek-R1-Distill-Qwen-14B ones
(@ 550908df6b5fd248802d808c1d53101594254b64) build it with none: their penalties would be
silently dropped on the device.

Both narrow only per-request routing (``sampling_route``, decided in the runner after load):
nothing the launch already acted on depends on them. ``served_model.ServedModel`` applies them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_tt_plugin.launch.capabilities import ModelCapabilities

# The decode keywords a penalised device-sampled step sends (contract/call_plan.decode_keywords).
PENALTY_HISTORIES = ("prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class InstanceCapabilities:
    """The loaded instance's own declaration and what its call path is seen to drop."""

    declared: ModelCapabilities  # its class's model_capabilities
    # Why penalty histories sent to this instance would never reach its sampler (None: no sign).
    drops_penalty_histories: str | None = None


def forwarded_request_state(model: object) -> tuple[str, ...] | None:
    """The request-state fields tt-transformers' ``VLLMAdapter`` on ``model`` forwards (its
    ``_adapter.config.request_state_fields``), or None when ``model`` has no such adapter."""
    config = getattr(getattr(model, "_adapter", None), "config", None)
    fields: Any = getattr(config, "request_state_fields", None)
    if isinstance(fields, tuple) and all(isinstance(name, str) for name in fields):
        return fields
    return None


def instance_declared(
    model: object, registered: type, planned: ModelCapabilities
) -> ModelCapabilities:
    """What the loaded instance declares: the registered class's (already parsed by the launch)
    when the instance is of that very class, else its own class's ``model_capabilities``, parsed
    here. A subclass counts as its own class: it may narrow what it inherits, and the plan made
    from the registered class must then be checked against it (``capability_conflicts``)."""
    if type(model) is registered:
        return planned
    return ModelCapabilities.from_model_class(type(model))


def read_instance(model: object, declared: ModelCapabilities) -> InstanceCapabilities:
    """``model``'s per-request capabilities: ``declared`` (its class's), plus the histories its
    adapter drops when it would be sent them."""
    fields = forwarded_request_state(model)
    dropped = [name for name in PENALTY_HISTORIES if fields is not None and name not in fields]
    reason = None
    if declared.supports_device_penalties and dropped:
        reason = (
            f"{type(model).__qualname__}'s VLLMAdapter forwards request_state_fields="
            f"{fields!r}, so it would drop {', '.join(dropped)}"
        )
    return InstanceCapabilities(declared, reason)
