"""Content flow of what the plugin sends (the parity checker's rules beside ``parity_reach``):
every input that carries content or a command must reach the code that acts on it unchanged.

- ``CARRIED``: the keywords whose value changes what the model computes: the content
  (``CONTENT_KEYWORDS``), the read-back and slot commands and the reload commands (version 1's
  four, version 0's ``reset_batch``).
  Not ``enable_trace`` (a model that runs untraced computes the same values; the real Qwen3-VL
  prefill turns it off) nor ``slot_remap`` (the plugin reloads inputs and resets sampling state
  on every layout change, so a class may ignore it).
- ``replaced``: keys of the plugin's ``**kwargs`` a method sets again, with a value not taken
  from that key, before handing the mapping on (``{**kwargs, "k": v}``, ``kwargs["k"] = v``,
  ``kwargs.update(k=v)``, ``dict(kwargs, k=v)``): the next method gets the model's value.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllm_tt_plugin.contract.call_plan import CONTENT_KEYWORDS, DECODE_COMMANDS
from vllm_tt_plugin.contract.source_deadvalue import own_value
from vllm_tt_plugin.contract.source_flow import always_run
from vllm_tt_plugin.contract.source_loadable import skeleton_format
from vllm_tt_plugin.contract.source_rebind import mentions, rebinds

Fn = ast.FunctionDef | ast.AsyncFunctionDef

CARRIED = frozenset(
    {*CONTENT_KEYWORDS, "read_from_device", "empty_slots", "async_read", "is_tokens",
     *DECODE_COMMANDS, "reset_batch"}
)  # fmt: skip


def carried(key: str, value: object, commands: bool = True) -> bool:
    """``key`` (bound to ``value``, the name of what the plugin means by it) carries the
    plugin's content, or (``commands``) a command."""
    return key in CONTENT_KEYWORDS or (commands and isinstance(value, str) and value in CARRIED)


# Written into the header of a skeleton whose tool keeps the use of every ``CARRIED``
# parameter (older skeletons, the shipped trees among them, kept the content keywords' only).
COMMANDS_KEPT = "# skeleton format 3: uses of the plugin's commands kept"


def commands_kept(root: Path | None, where: str) -> bool:
    """The file ``where`` ("path:line" under ``root``) shows whether a command parameter is
    used: a checkout's file, or a skeleton that records it keeps those uses."""
    if root is None:
        return False
    path = Path(root) / where.rpartition(":")[0]
    if skeleton_format(path) == 0:
        return True
    try:
        return COMMANDS_KEPT in path.read_text(encoding="utf-8", errors="replace")[:2000]
    except OSError:
        return False


def _key(expr: ast.expr | None) -> str | None:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


def _spread_of(value: ast.expr, names: set[str]) -> bool:
    """``value`` builds a mapping from one of ``names``: ``{**m, ...}``, ``dict(m, ...)``,
    ``dict(**m, ...)``, ``m.copy()``."""
    if isinstance(value, ast.Dict):
        return any(
            k is None and isinstance(v, ast.Name) and v.id in names
            for k, v in zip(value.keys, value.values, strict=True)
        )
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict":
        sources = [*value.args, *(k.value for k in value.keywords if k.arg is None)]
        return any(isinstance(s, ast.Name) and s.id in names for s in sources)
    return (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
        and value.func.attr == "copy" and isinstance(value.func.value, ast.Name)
        and value.func.value.id in names
    )  # fmt: skip


def _mappings(fn: Fn, kwarg: str) -> set[str]:
    """``kwarg`` and the names bound to a mapping built from it."""
    names = {kwarg}
    for _ in range(4):
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and _spread_of(node.value, names):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def set_keys(value: ast.expr, names: set[str]) -> list[tuple[str, ast.expr]]:
    """(key, value) a mapping built from ``names`` sets after (over) what it copies."""
    out: list[tuple[str, ast.expr]] = []
    if isinstance(value, ast.Dict):
        spread = False
        for k, v in zip(value.keys, value.values, strict=True):
            if k is None:
                spread = spread or (isinstance(v, ast.Name) and v.id in names)
            elif spread and _key(k):
                out.append((str(_key(k)), v))
    elif isinstance(value, ast.Call) and _spread_of(value, names):
        out += [(k.arg, k.value) for k in value.keywords if k.arg is not None]
    return out


def replaced(fn: Fn, kwarg: str, call: ast.Call | None) -> dict[str, bool]:
    """Keys of ``**kwarg`` that ``fn`` sets again, before ``call`` hands the mapping on, to a
    value of the model's own (``own_value``): key -> whether every call of ``fn`` does it."""
    names = _mappings(fn, kwarg)
    line = call.lineno if call is not None else 0
    sure = always_run(fn)
    found: list[tuple[str, ast.expr, ast.AST]] = []
    for node in ast.walk(fn):
        if getattr(node, "lineno", line) > line:
            continue
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                        and t.value.id in names and _key(t.slice)):  # fmt: skip
                    found.append((str(_key(t.slice)), node.value, node))
            found += [(k, v, node) for k, v in set_keys(node.value, names)]
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "update" and isinstance(node.func.value, ast.Name)
            and node.func.value.id in names
        ):  # fmt: skip
            found += [(k.arg, k.value, node) for k in node.keywords if k.arg is not None]
            for arg in [a for a in node.args if isinstance(a, ast.Dict)]:
                pairs = zip(arg.keys, arg.values, strict=True)
                found += [(str(_key(k)), v, node) for k, v in pairs if _key(k)]
    if call is not None:  # f(**{**kwargs, "k": v})
        for kw in call.keywords:
            if kw.arg is None:
                found += [(k, v, call) for k, v in set_keys(kw.value, names)]
    out: dict[str, bool] = {}
    for key, value, node in found:
        if not own_value(value):
            continue
        out[key] = out.get(key, False) or id(node) in sure or node is call
    return out


def overwrites(link: Any, line: int, received: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The plugin's content or commands in ``link``'s ``**kwargs`` (``received``) that the
    forward at ``line`` hands on with another value: (on every call, on some calls)."""
    fn = link.node
    if fn is None or fn.args.kwarg is None or not received:
        return [], []
    call = next(
        (n for n in ast.walk(fn) if isinstance(n, ast.Call) and n.lineno == line
         and any(k.arg is None for k in n.keywords)),
        None,
    )  # fmt: skip
    keys = replaced(fn, fn.args.kwarg.arg, call)
    hit = {k: sure for k, sure in keys.items() if k in received and carried(k, received[k])}
    return [k for k, s in hit.items() if s], [k for k, s in hit.items() if not s]


def replaced_keys(link: Any, fwd: Any, bound: Any, head: str, out: Any) -> None:
    """Report what ``fwd`` hands on in place of the plugin's content or commands."""
    var_kw = next((p.name for p in link.signature.parameters.values()
                   if p.kind is p.VAR_KEYWORD), None)  # fmt: skip
    if var_kw is None or not any(k is None for k, _ in fwd.keywords):
        return
    sure, maybe = overwrites(link, fwd.line, bound.arguments.get(var_kw, {}))
    at = f"[{link.where.rpartition(':')[0]}:{fwd.line}]"
    if sure:
        out.dropped.append(
            f"{head} hands {fwd.describe()} its **{var_kw} with {', '.join(map(repr, sure))} "
            f"set to a value of its own: the plugin's is lost {at}"
        )
    if maybe:
        out.unresolved.append(
            f"{head} sets {', '.join(map(repr, maybe))} of its **{var_kw} to a value of its own "
            f"on a path the checker does not evaluate, before handing it to {fwd.describe()} {at}"
        )


# A command the model has no value of its own for: taking it and never using it loses it.
# The decode slot the plugin bound to each request (F27), and the reload commands of the
# version the class declares (the four version-1 commands, or version 0's sticky `reset_batch`):
# a model that declared the contract must act on each (hand it on, or decide on it), or it runs
# stale inputs / sampling state (rt45g C04-C07, T07). empty_slots and reset_batch count as lost
# whenever the body never uses them; a version-1 command only when the body mentions it without
# acting on it (`del`, a log line, an unread local) or sets it itself: one it never mentions is
# the documented limit F05b (docs/CONTRACT_PARITY.md, "Content flow"). The other commands count
# as lost when the body sets them itself (the plugin always sends async_read=True, and a model
# may know what its output holds, so ignoring async_read / is_tokens can be right).
NO_OWN_VALUE = frozenset({"empty_slots", *DECODE_COMMANDS, "reset_batch"})
# Held to the store rule: stored only in an attribute nothing that runs reads, they are lost.
STORE_CHECKED = frozenset({*CONTENT_KEYWORDS, *NO_OWN_VALUE})
_LOST_UNMENTIONED = frozenset({"empty_slots", "reset_batch"})
# A **kwargs whose name says it is thrown away (F05 `**_`, C07 `**unused_kwargs`).
_DISCARD_WORDS = ("unused", "ignored", "discard")


def discarded_by_name(var_kw: str) -> bool:
    return var_kw.startswith("_") or any(w in var_kw.lower() for w in _DISCARD_WORDS)


def rebound(fn: Fn | None, name: str) -> bool:
    """The body sets the parameter ``name`` itself, in any binding form (``source_rebind``)."""
    return fn is not None and rebinds(fn, name)


def lost_command(fn: Fn | None, key: str, value: object) -> bool:
    """``key``, a parameter the body never uses, held a command of the plugin's it loses."""
    if not (isinstance(value, str) and value in CARRIED):
        return False
    if value in _LOST_UNMENTIONED or rebound(fn, key):
        return True
    return value in NO_OWN_VALUE and fn is not None and mentions(fn, key)


def command_lines(fn: Fn, unused: set[str]) -> list[str]:
    """What a skeleton writes for the commands ``fn`` takes and never uses, so that its
    checker loses them as the tree's does: set by the body itself (``p = None``), or mentioned
    without being acted on (``del p``)."""
    return [
        f"{p} = None" if rebound(fn, p) else f"del {p}"
        for p in sorted(unused)
        if rebound(fn, p) or (p in NO_OWN_VALUE and mentions(fn, p))
    ]


def call_values(method: Any, call: Any) -> tuple[tuple[str, ...], dict[str, str]] | None:
    """What ``call`` (an own ``self.m(...)`` in ``method``) hands on, named for what the plugin
    means by it: an argument that is one of ``method``'s parameters carries that parameter's
    name (the plugin's keyword), any other ``argN`` / its keyword. None: not found as counted."""
    fn = method.node
    if fn is None:
        return None
    found = [
        n for n in ast.walk(fn)
        if isinstance(n, ast.Call) and getattr(n, "lineno", 0) == call.line
        and isinstance(n.func, ast.Attribute) and n.func.attr == call.method
    ]  # fmt: skip
    if len(found) != 1 or any(isinstance(a, ast.Starred) for a in found[0].args):
        return None
    a = fn.args
    params = {
        p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)
        if p.arg not in ("self", "cls") and not rebound(fn, p.arg)
    }  # fmt: skip

    def named(x: ast.expr, default: str) -> str:
        return x.id if isinstance(x, ast.Name) and x.id in params else default

    args = tuple(named(x, f"arg{i}") for i, x in enumerate(found[0].args))
    kwargs = {k.arg: named(k.value, k.arg) for k in found[0].keywords if k.arg is not None}
    return args, kwargs


def live_parts(cls: ast.ClassDef, classes: list[ast.ClassDef]) -> list[ast.AST]:
    """The nodes of ``cls`` that may run: all but the private methods (``_name``, not a dunder)
    that nothing in ``classes`` names (no ``self._name``, no ``"_name"``, no bare name)."""
    named = {
        n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else n.value
        for c in classes for n in ast.walk(c)
        if isinstance(n, (ast.Attribute, ast.Name))
        or (isinstance(n, ast.Constant) and isinstance(n.value, str))
    }  # fmt: skip
    dead = {
        id(item) for item in cls.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
        and item.name.startswith("_") and not item.name.startswith("__")
        and item.name not in named
    }  # fmt: skip
    out: list[ast.AST] = []
    for item in cls.body:
        if id(item) not in dead:
            out += list(ast.walk(item))
    return out


def _stored_in(n: ast.AST, parents: dict[int, ast.AST]) -> list[str]:
    """The attributes of ``self`` the value of ``n`` is only stored in: the whole value of
    ``self.<attr> = n``, or an item of a display stored so (``self._pending = dict(k=n)``,
    ``{"k": n}``, ``(n, ...)``: rt45h HC04). [] when it goes anywhere else."""
    child, up = n, parents.get(id(n))
    while isinstance(up, (ast.Dict, ast.Tuple, ast.List, ast.Set, ast.keyword)) or (
        isinstance(up, ast.Call) and isinstance(up.func, ast.Name) and up.func.id == "dict"
        and any(k is child for k in up.keywords)
    ):  # fmt: skip
        if isinstance(up, ast.Dict) and child not in up.values:
            return []  # a key
        child, up = up, parents.get(id(up))
    if not (isinstance(up, ast.Assign) and up.value is child and all(
        isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
        for t in up.targets
    )):  # fmt: skip
        return []
    return [t.attr for t in up.targets if isinstance(t, ast.Attribute)]


def stored_only(fn: Fn | None, name: str) -> list[str]:
    """The attributes a parameter ``name`` is only stored in (each load of it is only stored,
    ``_stored_in``); [] when it is used otherwise, or not at all."""
    if fn is None:
        return []
    parents = {id(c): up for up in ast.walk(fn) for c in ast.iter_child_nodes(up)}
    attrs: list[str] = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
            found = _stored_in(n, parents)
            if not found:
                return []
            attrs += found
    return attrs


def stored_text(fn: Fn, value: ast.expr) -> str | None:
    """What a skeleton writes for ``self.<attr> = value`` when ``value`` holds parameters held
    to the store rule (``STORE_CHECKED``) that are only stored: a tuple of their names."""
    names = [
        n.id for n in ast.walk(value)
        if isinstance(n, ast.Name) and n.id in STORE_CHECKED and stored_only(fn, n.id)
    ]  # fmt: skip
    return f"({', '.join(dict.fromkeys(names))},)" if names else None
