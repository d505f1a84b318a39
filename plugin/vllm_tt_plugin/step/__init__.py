"""The runner's step inputs and outputs: the worker-side pieces ``model_runner`` composes.

Persistent decode inputs, multimodal prefill inputs, vLLM's host sampler for the compat route,
sampled tokens and logprobs into vLLM's output format, and block-output steps
(docs/ARCHITECTURE.md)."""
