"""Reference TT test models: torch decoders that implement the TT model contract exactly.

- ``llama``: the HF-equivalent Llama decoder (float32), attention supplied by the caller;
- ``paged_kv``: the per-lane, head-sharded paged KV cache and paged attention;
- ``sampling``: device sampling emulation (vLLM semantics, seeded by (seed, position));
- ``resident``: resident decode state and the reload contract (v1 flags, v0 reset_batch);
- ``inputs``: host-side validation and copies of prefill/decode arguments;
- ``core``: the contract surface (sizing, allocation, prefill, decode, warm-up); ``calls``: the
  call log records and the async decode handle;
- ``reference_llama``: the registered classes; ``variants``: capability variants;
- ``reference_vision``: the LLaVA-style vision model (images through ``**multimodal_kwargs``),
  with its vLLM prompt processing in ``llava_processing``;
- ``reference_qwen2vl``: the Qwen2-VL-style mRoPE vision model (``pixel_values`` +
  ``image_grid_thw``, ``(output, rope_deltas)`` from prefill, ``rope_deltas_all_users`` on
  decode), its position rule in ``mrope`` and its prompt processing in ``qwen2vl_processing``.

Nothing here is imported by the plugin unless a test model is actually served.
"""
