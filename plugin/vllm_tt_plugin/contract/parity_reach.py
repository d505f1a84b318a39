"""The parity checker's reading of the calls a driven method makes on its own instance beyond
the plugin's arguments: each ``self.m(...)`` must bind its arguments (not only be found), a
helper every call reaches must not always raise, a ``hasattr`` must really guard, an attribute
called must be set where it surely is, and content must reach something that uses it."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from vllm_tt_plugin.contract.call_plan import CONTENT_KEYWORDS
from vllm_tt_plugin.contract.method_reach import reached
from vllm_tt_plugin.contract.mro_bases import known, opaque
from vllm_tt_plugin.contract.parity_content import (
    NO_OWN_VALUE,
    STORE_CHECKED,
    call_values,
    commands_kept,
    discarded_by_name,
    live_parts,
    lost_command,
    stored_only,
)
from vllm_tt_plugin.contract.source import (
    FoundMethod,
    SelfCall,
    describe_chain,
    find_method,
    lookup,
)
from vllm_tt_plugin.contract.warmup_flag import own_flag_guard


class WalkLike(Protocol):
    errors: list[str]
    missing: list[str]
    abstract: list[str]
    dropped: list[str]
    unresolved: list[str]


Walker = Callable[..., None]


def _where(method: FoundMethod, line: int) -> str:
    return f"[{method.where.rpartition(':')[0]}:{line}]"


def bind_call(
    walk: Walker,
    new_walk: Callable[[], WalkLike],
    method: FoundMethod,
    chain: list[FoundMethod],
    call: SelfCall,
    nxt: FoundMethod,
    out: WalkLike,
) -> None:
    """Bind ``call`` (made in ``method``) to ``nxt``, the method it reaches, and follow what
    ``nxt`` hands on. A call the checker cannot count is ``unresolved``; the method reached
    being a stub (or always raising) counts only where every call of ``method`` makes it."""
    at = _where(method, call.line)
    if call.shape == "starred":
        out.unresolved.append(
            f"{describe_chain(chain)} calls {call.describe()} with *x / **x arguments the "
            f"checker cannot count {at}"
        )
        return
    if call.shape != "counted":
        if call.certain and nxt.abstract:
            out.abstract.append(
                f"{describe_chain([*chain, nxt])} only raises NotImplementedError [{nxt.where}]"
            )
        return
    positional = call.positional
    callee_kind = nxt.body.kind if nxt.body is not None else "method"
    caller_kind = method.body.kind if method.body is not None else "method"
    if call.how == "class" and callee_kind != "method":
        positional += 1  # Base.m(self, ...) of a static/class method: self is an argument
    if call.how == "self" and caller_kind == "classmethod" and callee_kind == "method":
        positional -= 1  # cls.m(x, ...) of a plain function: x is its self
        if positional < 0:
            out.errors.append(
                f"{describe_chain(chain)} calls {call.describe()} on the class without an "
                f"instance for its self (a TypeError) {at}"
            )
            return
    inner = new_walk()
    args: tuple[str, ...] = tuple(f"arg{i}" for i in range(positional))
    kwargs = {k: k for k in call.keywords}
    values = call_values(method, call)  # the caller's parameters, named for the plugin's
    if values is not None and len(values[0]) == positional and set(values[1]) == set(kwargs):
        args, kwargs = values
    walk(nxt, args, kwargs, f"{call.describe()} {at}", inner, call.certain)
    out.errors += [f"{describe_chain(chain)} calls {e}" for e in inner.errors]
    out.missing += inner.missing
    out.unresolved += inner.unresolved
    if values is not None and call.certain:  # the plugin's content lost in the helper
        out.dropped += [f"{describe_chain(chain)} calls {d}" for d in inner.dropped]
    if call.certain:
        out.abstract += inner.abstract


def attribute_read(source: Any, target: str, name: str) -> bool:
    """``self.<name>`` is read somewhere along the MRO (not only assigned), in a method that
    may run while the plugin serves the class (``method_reach``: not a private ``_debug_state``
    nothing names, rt45f H01, nor a public method nothing reached calls, rt45g R10). Past a
    base the checker cannot read (which may call any method), outside a private method
    nothing names."""
    mro = source.mro(target)
    classes = [
        f[1]
        for c in mro
        if (f := source.resolve_class(c) if hasattr(source, "resolve_class") else None)
    ]
    if any(opaque(c) for c in mro):
        parts = [n for cls in classes for n in live_parts(cls, classes)]
    else:
        parts = [n for top in reached(classes) for n in ast.walk(top)]
    for node in parts:
        if (
            isinstance(node, ast.Attribute)
            and node.attr == name
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            return True
    return False


def unused_content(
    source: Any,
    target: str,
    link: FoundMethod,
    received: Mapping[str, Any],
    named: Mapping[str, Any],
) -> list[str]:
    """Content the plugin sends that ``link`` takes and never uses: a named parameter the body
    never uses, or a ``**kwargs`` value only stored in an attribute nothing reads."""
    body = link.body
    if body is None:
        return []
    kept = commands_kept(getattr(source, "root", None), link.where)
    lost = [
        k for k in body.unused if k in named
        and (k in CONTENT_KEYWORDS or (kept and lost_command(link.node, k, named[k])))
    ]  # fmt: skip
    held = [k for k in named if k in CONTENT_KEYWORDS or (kept and str(named[k]) in STORE_CHECKED)]
    for k in [k for k in held if k not in lost]:
        attrs = stored_only(link.node, k)  # `self._pending = sampling_params` (rt45f H01, HC04)
        if attrs and not any(attribute_read(source, target, a) for a in attrs):
            lost.append(f"{k} (stored in self.{attrs[0]}, which nothing that runs reads)")
    for key, attr in body.kwargs_stored:
        keys = [k for k in received if k in CONTENT_KEYWORDS and key in ("*", k)]
        if keys and not attribute_read(source, target, attr):
            lost += [f"{k} (stored in self.{attr}, which nothing reads)" for k in keys]
    return lost


def check_kwargs(
    source: Any,
    target: str,
    link: FoundMethod,
    bound: inspect.BoundArguments,
    variant: str,
    path: list[FoundMethod],
    out: WalkLike,
) -> None:
    """What reaches ``link``'s ``**kwargs``: a key it reads with ``kwargs["key"]`` must be
    there (a KeyError otherwise), and content the plugin sends (images, sampling parameters,
    histories, ...) must be read by name, passed on whole, or handed to the next method:
    otherwise it is silently dropped."""
    body = link.body
    var_kw = next(
        (p.name for p in link.signature.parameters.values() if p.kind is p.VAR_KEYWORD), None
    )
    if body is None:
        return
    received: Mapping[str, Any] = bound.arguments.get(var_kw, {}) if var_kw else {}
    blocked = own_flag_guard(link.node, link.name)  # the traced warm-up never runs (R13)
    if blocked:
        out.dropped.append(f"{variant} call: {describe_chain(path)} {blocked} [{link.where}]")
    lost = unused_content(source, target, link, received, bound.arguments)
    if lost:
        out.dropped.append(
            f"{variant} call: {describe_chain(path)} takes {', '.join(map(repr, lost))} and "
            f"never uses {'it' if len(lost) == 1 else 'them'} [{link.where}]"
        )
    if var_kw is None:
        return
    for key in body.kwargs_required:
        if key not in received:
            out.errors.append(
                f"{variant} call: {describe_chain(path)} reads {var_kw}[{key!r}], "
                f"which the plugin does not send (a KeyError) [{link.where}]"
            )
    for key in body.kwargs_maybe_required:
        if key not in received:  # never "ok": whether that path runs is not evaluated
            out.unresolved.append(
                f"{variant} call: {describe_chain(path)} reads {var_kw}[{key!r}] on a path "
                f"the checker does not evaluate, and the plugin does not send it (a KeyError "
                f"when that path runs) [{link.where}]"
            )
    carried = {  # keys of **kwargs a forward hands on (not removed nor filtered out)
        k for fwd in link.forwards for key, passed in fwd.keywords
        if key is None and passed.name == var_kw for k in received
        if k not in fwd.dropped and (fwd.keep is None or k in fwd.keep)
    }  # fmt: skip
    kept_commands = commands_kept(getattr(source, "root", None), link.where)
    thrown = [
        k for k in body.kwargs_discarded
        if k in received and k not in carried
        and (_content(k, received) or (kept_commands and received[k] in NO_OWN_VALUE))
    ]  # fmt: skip
    if thrown:  # removed from **kwargs without its value being used: nothing downstream sees it
        out.dropped.append(
            f"{variant} call: {describe_chain(path)} removes {', '.join(map(repr, thrown))} from "
            f"**{var_kw} (or reads it) without using its value [{link.where}]"
        )
    # Stored in an attribute something reads: used (later, elsewhere).
    kept = {k for k, attr in body.kwargs_stored if attribute_read(source, target, attr)}
    if body.kwargs_opaque or "*" in kept:
        return
    # What a forward carries, the next method decides (its own **kwargs, or named parameters).
    # The commands the model has no value of its own for (the reload commands of its version,
    # empty_slots) in a **kwargs its name discards are lost as content is (F05: `**_`; rt45g
    # C07: `**unused_kwargs`); in another **kwargs never read, the documented limit F05b.
    commands = kept_commands and discarded_by_name(var_kw)
    unread = [
        k for k in received
        if k not in (*body.kwargs_reads, *kept, *carried, *thrown)
        and (_content(k, received) or (commands and received[k] in NO_OWN_VALUE))
    ]  # fmt: skip
    if unread:
        other = [k for k in (*body.kwargs_reads, *body.kwargs_discarded) if k not in received]
        also = (
            f"; it reads {', '.join(map(repr, other))}, which the plugin does not send"
            if other
            else ""
        )
        if any(fwd.keep is not None for fwd in link.forwards):
            also += "; a key filter leaves it out of the **kwargs it hands on"
        unread = [_named(k, received) for k in unread]
        out.dropped.append(
            f"{variant} call: {describe_chain(path)} takes {', '.join(unread)} in "
            f"**{var_kw} and never reads {'it' if len(unread) == 1 else 'them'}{also} "
            f"[{link.where}]"
        )


def _content(key: str, received: Mapping[str, Any]) -> bool:
    """Content the plugin sends, under its own key or moved to another one."""
    value = received.get(key)
    return key in CONTENT_KEYWORDS or (isinstance(value, str) and value in CONTENT_KEYWORDS)


def _named(key: str, received: Mapping[str, Any]) -> str:
    value = received.get(key)
    moved = isinstance(value, str) and value != key and value in CONTENT_KEYWORDS
    return f"{key!r} (the plugin's {value!r})" if moved else repr(key)


_READ_BACK = ("read_decode_output", "process_decode_output_host")


def lone_read_back_hook(source: Any, target: str, method: str) -> str:
    """One read-back hook defined without the other: the plugin uses them only as a pair, so
    the missing one is reported (``absent``) rather than both left out."""
    if method not in _READ_BACK or not source.complete:
        return ""
    other = _READ_BACK[1 - _READ_BACK.index(method)]
    if find_method(source, target, method) is not None or not known(
        find_method(source, target, other)
    ):
        return ""
    return (
        f"not defined, but {other} is: the plugin uses the read-back hooks only as a pair, so "
        "it reads decode output itself"
    )


def host_failures_reached(
    source: Any, target: str, method: FoundMethod, chain: list[FoundMethod], out: WalkLike
) -> None:
    """What the body reaches that fails on Python 3.10 (``source_bodyhost``): ``broken`` where
    every call of the method the plugin makes runs it; reached through another method's call
    (which may be conditional), ``unresolved``. An instance the body builds runs the
    ``__init__`` chain its MRO finds: a failure every such ``__init__`` call runs is ``broken``."""
    found = [(fail, method, chain) for fail in method.scan.host]
    body = method.body
    for construct in [*(body.constructs if body else ()), *method.scan.builds]:
        if getattr(construct, "unresolved", ""):
            continue
        built = getattr(construct, "target", "") or target
        init = find_method(source, built, "__init__")
        for _ in range(8):
            if init is None or init.unresolved or init.body is None:
                break
            found += [(fail, init, [*chain, init]) for fail in init.scan.host]
            up = [c for c in init.body.calls if c.method == "__init__" and c.how != "self"]
            init = (
                lookup(source, built, up[0].how, "__init__", up[0].after, init.owner)
                if up
                else None
            )
    lines: dict[str, bool] = {}
    for fail, where, path in found:
        sure = fail.status == "broken" and (len(path) == 1 or where.name == "__init__")
        lines[
            f"{describe_chain(path)} {fail.why}: fails on Python 3.10 (tt-metal's host Python)"
            f"{'' if sure or fail.status != 'broken' else ' where the call reaching it runs'} "
            f"{_where(where, fail.line)}"
        ] = sure
    for line, sure in lines.items():
        (out.errors if sure else out.unresolved).append(line)
