"""Where the values of one bound call land (the parity checker's value rules, beside the
name rules of ``bind_signature``): a value the plugin means for one parameter bound to another
(a positional swap), a positional read of an ``*args`` the call leaves short, and a control
keyword a link consumes while the method it forwards to falls back to its own default."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from vllm_tt_plugin.contract.call_plan import DECODE_COMMANDS
from vllm_tt_plugin.contract.source import Forward, FoundMethod

# Keywords that steer what the model does (not content): a link that takes one and hands the
# call on without it leaves the next method at its own default, whatever the plugin asked.
CONTROL_KEYWORDS = frozenset({"enable_trace", "read_from_device", "reset_batch", *DECODE_COMMANDS})
_VAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def swapped(sig: inspect.Signature, bound: inspect.BoundArguments) -> list[str]:
    """Values (named for what the plugin means by them) bound to another parameter of a
    signature that has a parameter of their own name: Python binds by position, silently."""
    out = []
    for name, value in bound.arguments.items():
        param = sig.parameters.get(name)
        if param is None or param.kind in _VAR or not isinstance(value, str) or value == name:
            continue
        own = sig.parameters.get(value)
        if own is not None and own.kind not in _VAR:
            out.append(f"the plugin's {value!r} lands on {name!r} (by position)")
    return out


def short_varargs(link: FoundMethod, bound: inspect.BoundArguments) -> list[tuple[str, bool]]:
    """``args[i]`` / unpacking reads of the link's ``*args`` that this call leaves too short:
    (what, every call runs it)."""
    body = link.body
    var_pos = next(
        (p.name for p in link.signature.parameters.values() if p.kind is p.VAR_POSITIONAL), ""
    )
    if body is None or not var_pos:
        return []
    given = len(bound.arguments.get(var_pos, ()))
    return [
        (
            f"reads `{r.text}` (line {r.line}), but the call gives *{var_pos} {given} "
            f"positional argument(s) (an IndexError / ValueError)",
            r.certain,
        )
        for r in body.vararg_reads
        if given < r.needs
    ]


def consumed_controls(
    link: FoundMethod,
    bound: inspect.BoundArguments,
    fwd: Forward,
    nxt: FoundMethod,
    passed: Mapping[str, Any],
    sent: Mapping[str, Any],
) -> list[str]:
    """Control keywords the plugin sent that ``link`` binds to a named parameter and does not
    hand to ``nxt`` (``passed``: the keywords the forward gives), while ``nxt`` takes a parameter
    of that name with a default: ``nxt`` then runs with its default, not the plugin's value."""
    out = []
    handed = {p.name for p in (*fwd.args, *(v for _, v in fwd.keywords)) if p.kind == "param"}
    for key in sorted(CONTROL_KEYWORDS & set(sent)):
        param = link.signature.parameters.get(key)
        target = nxt.signature.parameters.get(key)
        if (
            param is None or param.kind in _VAR or key not in bound.arguments
            or target is None or target.default is inspect.Parameter.empty
            or key in passed or key in handed
        ):  # fmt: skip
            continue
        out.append(
            f"takes {key!r} and calls {fwd.describe()} without it: {nxt.name} runs with "
            f"its own default {key}, whatever the plugin sent"
        )
    return out
