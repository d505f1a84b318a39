"""Launch: what the platform decides before any device opens, once, in every vLLM process.

The environment variables (``envs``), the MESH_DEVICE spec, the model's capability declaration,
the data-parallel layout, the frozen launch plan they resolve into, and the runtime patches of
vLLM the platform installs. Imports nothing of the worker side (docs/ARCHITECTURE.md)."""
