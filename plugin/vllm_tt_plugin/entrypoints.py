"""vLLM entry points (pyproject: ``vllm.general_plugins`` and ``vllm.platform_plugins``)."""

from __future__ import annotations

import importlib.util

from vllm_tt_plugin.utils.log import get_logger

logger = get_logger(__name__)

PLATFORM_QUALNAME = "vllm_tt_plugin.platform.TTPlatform"


def ttnn_importable() -> bool:
    """True when ``import ttnn`` succeeds (real tt-metal, or the host stub on PYTHONPATH)."""
    if importlib.util.find_spec("ttnn") is None:
        return False
    try:
        import ttnn  # noqa: F401
    except Exception:  # a broken tt-metal install must not take vLLM down with it
        logger.debug("ttnn is present but failed to import", exc_info=True)
        return False
    return True


def platform_plugin() -> str | None:
    """``vllm.platform_plugins: tt`` -- the TT platform only where ttnn is importable.

    This keeps ordinary vLLM environments from selecting the TT platform by accident.
    """
    return PLATFORM_QUALNAME if ttnn_importable() else None


def register() -> None:
    """``vllm.general_plugins: tt_model_registry`` -- runs in every vLLM process.

    Registers the TT architectures (overrides, EXTRA_MODELS_DIR bundles, built-in map) with
    vLLM's model registry, applies the process-level vLLM patches the TT platform needs
    (``vllm_patches``, which also registers the plugin's chat parsers) and installs the
    collector that brings the engine processes' TT metrics to ``/metrics``.
    Idempotent: vLLM may load general plugins more than once per process.
    """
    from vllm_tt_plugin.launch import vllm_patches
    from vllm_tt_plugin.model_registry import get_registry, register_with_vllm
    from vllm_tt_plugin.observability import tt_metrics

    if not ttnn_importable():
        return
    vllm_patches.apply()
    tt_metrics.install_collector()
    register_with_vllm(get_registry())
