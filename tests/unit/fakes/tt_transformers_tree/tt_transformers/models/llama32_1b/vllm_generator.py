"""Stand-in for ``tt_transformers.models.llama32_1b.vllm_generator`` (tenstorrent/tt-transformers
@ 1f5f52bfb207f1b0c60e244b247f9a1bc2bca0ff): contract version 0 (``reset_batch``), only the
capabilities its architecture class shares (so device penalties default to on), and an adapter
built with no ``request_state_fields``: ``prompt_tokens`` / ``output_tokens`` are accepted and
dropped."""

from __future__ import annotations

from typing import Any

from tt_transformers.models._facade import LegacyDecodeFacade, build
from vllm_tt_plugin.test_models.variants import LegacyDecodeContract


class Llama32_1BGenerator(LegacyDecodeFacade):
    model_capabilities = {
        "supports_prefix_caching": True,
        "supports_async_decode": True,
        "supports_sample_on_device": True,
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
    ) -> Llama32_1BGenerator:
        return build(
            cls, LegacyDecodeContract, (), hf_config, mesh_device, max_batch_size,
            max_seq_len, tt_data_parallel, optimizations,
        )  # fmt: skip
