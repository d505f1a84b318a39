"""tt-conformance: black-box conformance harness for OpenAI-compatible vLLM servers.

Reports (`report`), expectations (`expectations`), the model support matrix (`matrix`) and the
release gate (`gate`); the pytest side lives in `pytest_plugin`. Nothing here imports vLLM or
vllm_tt_plugin.
"""

from tt_conformance.names import installed_version

__version__ = installed_version()
