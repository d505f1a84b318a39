"""Running the plugin where no tt-metal is installed: the host stub and hardware detection."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
HOST_STUBS = REPO_ROOT / "host_stubs"


def ensure_ttnn_importable() -> bool:
    """Put the repository's host stub on the path if no ttnn is installed.

    Returns True when the stub is in use. The stub is import-only, so this is only useful with
    the host-emulated mesh; it also exports PYTHONPATH so vLLM's engine processes see it.
    """
    if importlib.util.find_spec("ttnn") is not None:
        return _is_stub()
    if not HOST_STUBS.is_dir():
        return False
    sys.path.insert(0, str(HOST_STUBS))
    parts = [str(HOST_STUBS), os.environ.get("PYTHONPATH", "")]
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
