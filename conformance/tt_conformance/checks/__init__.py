"""The conformance checks (pytest modules, one per concern; ``_support`` is their helpers)."""

__all__: list[str] = []
