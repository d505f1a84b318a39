"""tt-transformers' own table of text architectures (``tt_transformers.vllm_registry``).

Newer TT releases move the text families out of tt-metal into the separate tenstorrent/
tt-transformers package (docs/TT_MODEL_CONTRACT.md, "Loading"). Its
``tt_transformers.vllm_registry`` module (read at tenstorrent/tt-transformers
``src/tt_transformers/vllm_registry.py`` @ fb8071b3ece28fb6a79f906ddb1cd0cc02d4ff73 and
db0b69c315f3a931e518de6ca999bf3ed54f73c2, which differ only in where ``resolve_hf_id`` lives)
exports, in ``__all__``, one class per vLLM architecture: ``architecture`` names it,
``generators`` is the non-empty tuple of checkpoints it serves, and the classmethod
``initialize_vllm_model`` picks the generator by the checkpoint's Hugging Face id and returns that
generator's own model. Importing it imports neither ``ttnn`` nor ``vllm``, so the plugin reads the
table in any process.

The class's ``model_capabilities`` are only those all its generators declare True; the per-request
limits (``max_device_top_k``, ``supports_device_penalties``) are the returned model's, which the
worker reads after load (adapter/instance_capabilities.py, adapter/served_model.py).

When the package is importable its classes serve their architectures ahead of the plugin's
built-in table (which stays the fallback when it is not). A table that is installed but malformed
is refused, naming the module, its file and what is wrong, never silently replaced by the
plugin's table: that table names tt-metal modules a release shipping tt-transformers may have
moved, and serving them would pass here and fail on the TT host.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType

MODULE = "tt_transformers.vllm_registry"
PACKAGE = MODULE.partition(".")[0]
SOURCE = (
    "tenstorrent/tt-transformers src/tt_transformers/vllm_registry.py @ "
    "fb8071b3ece28fb6a79f906ddb1cd0cc02d4ff73, db0b69c315f3a931e518de6ca999bf3ed54f73c2"
)


class MalformedTextRegistry(ValueError):
    """``tt_transformers.vllm_registry`` is installed but cannot serve as a registry."""


@dataclass(frozen=True)
class TextRegistry:
    """The architectures ``tt_transformers.vllm_registry`` serves."""

    module_file: str
    targets: dict[str, str]  # TT-prefixed arch -> "tt_transformers.vllm_registry:Class"


def _where(module: ModuleType | None) -> str:
    path = getattr(module, "__file__", None) if module is not None else None
    return f"{MODULE} ({path})" if path else MODULE


def read_table(module: ModuleType) -> TextRegistry:
    """The table ``module`` exports, or :class:`MalformedTextRegistry` saying what is wrong."""
    where = _where(module)
    names = getattr(module, "__all__", None)
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise MalformedTextRegistry(f"{where}: __all__ must be a list of exported names")
    targets: dict[str, str] = {}
    for name in names:
        if not hasattr(module, name):
            raise MalformedTextRegistry(
                f"{where}: __all__ names {name!r}, which it does not define"
            )
        obj = getattr(module, name)
        # Helpers (GeneratorEntry, UnsupportedModelError, resolve_hf_id) declare no architecture.
        if not isinstance(obj, type) or "architecture" not in dir(obj):
            continue
        arch = getattr(obj, "architecture", None)
        if not isinstance(arch, str) or not arch.isidentifier():
            raise MalformedTextRegistry(
                f"{where}: {name}.architecture must be an architecture name, got {arch!r}"
            )
        generators = getattr(obj, "generators", None)
        if not isinstance(generators, tuple) or not generators:
            raise MalformedTextRegistry(
                f"{where}: {name}.generators must be a non-empty tuple (the checkpoints it serves)"
            )
        if not callable(getattr(obj, "initialize_vllm_model", None)):
            raise MalformedTextRegistry(f"{where}: {name} has no initialize_vllm_model")
        tt = arch if arch.startswith("TT") else f"TT{arch}"
        if tt in targets:
            raise MalformedTextRegistry(
                f"{where}: {arch} is served by both {targets[tt].partition(':')[2]} and {name}"
            )
        targets[tt] = f"{MODULE}:{name}"
    if not targets:
        raise MalformedTextRegistry(f"{where}: exports no architecture class")
    return TextRegistry(str(getattr(module, "__file__", "") or MODULE), targets)


def discover() -> TextRegistry | None:
    """The installed table, or None when tt-transformers (or its table) is not installed."""
    try:
        found = importlib.util.find_spec(PACKAGE) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return None
    try:
        module = importlib.import_module(MODULE)
    except ModuleNotFoundError as exc:
        if exc.name == MODULE:  # a tt-transformers without the table: the plugin's one serves
            return None
        raise MalformedTextRegistry(f"{MODULE} cannot be imported: {exc}") from exc
    except Exception as exc:  # whatever its import raises, the operator needs it named
        raise MalformedTextRegistry(
            f"{MODULE} cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc
    return read_table(module)
