"""Stand-in for ``tt_transformers.models.phi4.vllm_generator`` (tenstorrent/tt-transformers
@ 4fc26a3e033cc75f1df029fdb3719bdabe770763): contract version 1, declares
``supports_device_penalties: False`` and builds its adapter with no ``request_state_fields``
(its ``fabric_config``, a ttnn enum, is left out)."""

from __future__ import annotations

from typing import Any

from tt_transformers.models._facade import GeneratorFacade, build
from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM


class Phi4Generator(GeneratorFacade):
    decode_input_update_contract = 1

    model_capabilities = {
        "supports_prefix_caching": True,
        "supports_async_decode": True,
        "supports_sample_on_device": True,
        "supports_device_penalties": False,
        "accepts_trace_mode": True,
    }
    requires_prefill_trace_warmup = True

    @classmethod
    def initialize_vllm_model(
        cls,
        hf_config: Any,
        mesh_device: Any,
        max_batch_size: int,
        max_seq_len: int,
        n_layers: int | None = None,
        tt_data_parallel: int = 1,
        optimizations: Any = "performance",
        trace_mode: str = "all",
        hf_revision: str | None = None,
        device_sampling_enabled: bool = True,
    ) -> Phi4Generator:
        return build(
            cls, ReferenceLlamaForCausalLM, (), hf_config, mesh_device, max_batch_size,
            max_seq_len, tt_data_parallel, optimizations,
        )  # fmt: skip
