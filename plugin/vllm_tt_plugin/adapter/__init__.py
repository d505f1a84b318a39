"""The adapter: the one caller of a tt-metal model class and its instances.

``model_adapter`` executes the contract's typed calls; ``served_model`` is the launch plan plus
what only the loaded instance knows (``instance_capabilities``: its per-request limits);
``kv_cache`` sizes and allocates the instance's KV cache
(docs/ARCHITECTURE.md)."""
