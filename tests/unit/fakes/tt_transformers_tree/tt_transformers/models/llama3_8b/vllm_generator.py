"""Stand-in for ``tt_transformers.models.llama3_8b.vllm_generator`` (tenstorrent/tt-transformers
@ 4fc26a3e033cc75f1df029fdb3719bdabe770763): contract version 1, its own ``max_device_top_k``
and device penalties, and an adapter that forwards the penalty histories (the Llama3Executor's
``request_state_fields``)."""

from __future__ import annotations

from typing import Any

from tt_transformers.models._facade import GeneratorFacade, build
from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM


class Llama3Generator(GeneratorFacade):
    decode_input_update_contract = 1

    model_capabilities = {
        "supports_prefix_caching": True,
        "supports_async_decode": True,
        "supports_sample_on_device": True,
        "supports_device_penalties": True,
        "max_device_top_k": 32,
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
        device_sampling_enabled: bool = True,
    ) -> Llama3Generator:
        fields = ("prompt_tokens", "output_tokens", "slot_remap")
        return build(
            cls, ReferenceLlamaForCausalLM, fields, hf_config, mesh_device, max_batch_size,
            max_seq_len, tt_data_parallel, optimizations,
        )  # fmt: skip
