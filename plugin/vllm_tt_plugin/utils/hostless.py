"""Running the plugin where no tt-metal is installed: the host stub and hardware detection."""

from __future__ import annotations

import importlib.util
import os
import sys

from vllm_tt_plugin.utils.checkout import CheckoutFileError, checkout_path

# What to do instead, for a CheckoutFileError naming host_stubs/ (the wheel does not ship it).
NO_TTNN_REMEDY = (
    "no ttnn is importable here; install tt-metal's ttnn, or put a checkout's host_stubs/ on "
    "PYTHONPATH for the host-emulated mesh"
)


def ensure_ttnn_importable() -> bool:
    """Put the repository's host stub on the path if no ttnn is installed.

    Returns True when the stub is in use. The stub is import-only, so this is only useful with
    the host-emulated mesh; it also exports PYTHONPATH so vLLM's engine processes see it.
    Without ttnn, outside a checkout (or with its host_stubs/ gone) it raises CheckoutFileError.
    """
    if importlib.util.find_spec("ttnn") is not None:
        return _is_stub()
    stubs = checkout_path("host_stubs", what="the host ttnn stub", instead=NO_TTNN_REMEDY)
    if not stubs.is_dir():
        raise CheckoutFileError(f"{stubs} is missing: {NO_TTNN_REMEDY}")
    sys.path.insert(0, str(stubs))
    parts = [str(stubs), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    return True


def _is_stub() -> bool:
    import ttnn

    return str(getattr(ttnn, "__version__", "")).endswith("host.stub")


def tt_hardware_available() -> bool:
    """True when ttnn can see at least one TT chip (the stub and chipless hosts raise)."""
    try:
        import ttnn

        return int(ttnn.GetNumAvailableDevices()) > 0
    except Exception:
        return False
