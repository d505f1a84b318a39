"""The call surface the generators below share (not a real tt-transformers module).

Each real ``tt_transformers.models.<package>.vllm_generator`` class spells these methods out with
the same signatures: ``__init__(self, target, adapter)``; every call goes through
``self._adapter.normalize_*`` and then to ``self.target`` (here the plugin's reference Llama,
without the real ``execution=`` keyword); read-back, warm-ups and the legacy
``allocate_kv_cache`` delegate to the target (tenstorrent/tt-transformers
``src/tt_transformers/models/llama3_8b/vllm_generator.py`` @
4fc26a3e033cc75f1df029fdb3719bdabe770763, ``llama32_1b/vllm_generator.py`` @
1f5f52bfb207f1b0c60e244b247f9a1bc2bca0ff).
"""

from __future__ import annotations

from typing import Any

from tt_transformers.llm_runtime.vllm_adapter import VLLMAdapter, VLLMAdapterConfig


def build(
    cls: type,
    target_cls: type,
    request_state_fields: tuple[str, ...],
    hf_config: Any,
    mesh_device: Any,
    max_batch_size: int,
    max_seq_len: int,
    tt_data_parallel: int,
    optimizations: Any,
) -> Any:
    target = target_cls.initialize_vllm_model(
        hf_config,
        mesh_device,
        max_batch_size,
        max_seq_len=max_seq_len,
        tt_data_parallel=tt_data_parallel,
        optimizations=optimizations,
    )
    return cls(target, VLLMAdapter(VLLMAdapterConfig(request_state_fields)))


class GeneratorFacade:
    def __init__(self, target: Any, adapter: VLLMAdapter) -> None:
        self.target = target
        self._adapter = adapter

    @property
    def already_warmed_up_prefill(self) -> bool:
        return bool(self.target.already_warmed_up_prefill)

    @already_warmed_up_prefill.setter
    def already_warmed_up_prefill(self, value: bool) -> None:
        self.target.already_warmed_up_prefill = value

    @classmethod
    def get_max_tokens_all_users(
        cls,
        model_name: str = "",
        num_devices: int = 1,
        tt_data_parallel: int = 1,
        max_model_len: int = 0,
        max_num_seqs: int = 1,
    ) -> int:
        return int(max_model_len)

    def allocate_kv_cache(
        self, kv_cache_shape: Any = None, dtype: Any = None, num_layers: Any = None
    ) -> Any:
        return self.target.allocate_kv_cache(kv_cache_shape, dtype, num_layers)

    def prefill_forward(
        self,
        tokens: Any,
        page_table: Any,
        *,
        enable_trace: bool,
        prompt_lens: Any = None,
        start_pos: Any = None,
        empty_slots: Any = None,
        kv_cache: Any = None,
        sampling_params: Any = None,
        **compatibility_kwargs: Any,
    ) -> Any:
        normalized, trace = self._adapter.normalize_prefill(
            tokens,
            page_table,
            enable_trace=enable_trace,
            prompt_lens=prompt_lens,
            start_pos=start_pos,
            empty_slots=empty_slots,
            kv_cache=kv_cache,
            sampling_params=sampling_params,
            compatibility_kwargs=compatibility_kwargs,
        )
        return self.target.prefill_forward(enable_trace=trace, **normalized)

    def decode_forward(
        self,
        tokens: Any,
        start_pos: Any,
        page_table: Any,
        *,
        enable_trace: bool,
        kv_cache: Any = None,
        sampling_params: Any = None,
        reload_inputs: bool = True,
        reload_page_table: bool = False,
        reload_sampling_params: bool = False,
        reset_sampling_state: bool = False,
        read_from_device: bool = True,
        **compatibility_kwargs: Any,
    ) -> Any:
        normalized, trace = self._adapter.normalize_decode(
            tokens,
            start_pos,
            page_table,
            enable_trace=enable_trace,
            kv_cache=kv_cache,
            sampling_params=sampling_params,
            reload_inputs=reload_inputs,
            reload_page_table=reload_page_table,
            reload_sampling_params=reload_sampling_params,
            reset_sampling_state=reset_sampling_state,
            compatibility_kwargs=compatibility_kwargs,
        )
        return self.target.decode_forward(
            enable_trace=trace, read_from_device=read_from_device, **normalized
        )

    def read_decode_output(self, tt_out: Any, *, async_read: bool = False) -> Any:
        return self.target.read_decode_output(tt_out, async_read=async_read)

    def process_decode_output_host(self, tt_out: Any, *, is_tokens: bool = False) -> Any:
        return self.target.process_decode_output_host(tt_out, is_tokens=is_tokens)

    def warmup_model_prefill(
        self, *, kv_cache: Any, can_sample_on_device: bool, enable_trace: bool
    ) -> None:
        self.target.warmup_model_prefill(
            kv_cache=kv_cache, can_sample_on_device=can_sample_on_device, enable_trace=enable_trace
        )

    def warmup_model_decode(
        self,
        *,
        kv_cache: Any,
        max_batch_size: int,
        num_blocks: int,
        can_sample_on_device: bool,
        enable_trace: bool,
    ) -> None:
        self.target.warmup_model_decode(
            kv_cache=kv_cache,
            max_batch_size=max_batch_size,
            num_blocks=num_blocks,
            can_sample_on_device=can_sample_on_device,
            enable_trace=enable_trace,
        )


class LegacyDecodeFacade(GeneratorFacade):
    """The version-0 decode of the 1f5f52bf-era generators: ``reset_batch``, no reload commands."""

    def decode_forward(  # type: ignore[override]
        self,
        tokens: Any,
        start_pos: Any,
        page_table: Any,
        *,
        enable_trace: bool,
        kv_cache: Any = None,
        sampling_params: Any = None,
        reset_batch: bool = False,
        read_from_device: bool = True,
        **compatibility_kwargs: Any,
    ) -> Any:
        normalized, trace = self._adapter.normalize_decode(
            tokens,
            start_pos,
            page_table,
            enable_trace=enable_trace,
            kv_cache=kv_cache,
            sampling_params=sampling_params,
            reset_batch=reset_batch,
            compatibility_kwargs=compatibility_kwargs,
        )
        return self.target.decode_forward(
            enable_trace=trace, read_from_device=read_from_device, **normalized
        )
