"""The KV-cache token budget ``get_max_tokens_all_users`` returns, as the launch takes it: one
check, which the adapter applies at launch (adapter/model_adapter.py) and the parity checker
applies to a budget the checkout's method returns as a literal (rt45h BG04: ``str(131072)``)."""

from __future__ import annotations


def checked_budget(class_name: str, value: object) -> int:
    """``value`` as the launch's token budget; ValueError for anything but a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"{class_name}.get_max_tokens_all_users returned {value!r}; "
            "it must be a positive integer token count"
        )
    return value
