"""The TT model contract: how the plugin calls a tt-metal model class, as types and data.

The contract Protocols, the typed calls and results, the call planner (which arguments each
call passes), the sampling parameters and reload commands as sent, and the parity checker that
binds the planner's calls to real tt-metal signatures (``python -m
vllm_tt_plugin.contract.parity``; docs/TT_MODEL_CONTRACT.md, docs/CONTRACT_PARITY.md)."""
