"""vllm-tt-plugin: the Tenstorrent backend for vLLM."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vllm-tt-plugin")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"
