"""Calls a driven method hands to an object the adapter composes, when the checkout says what
that object is (rt45g R11, R12, V01, V08; rt45h CK07, CK08, CK18, CK19).

``self.generator.decode(tokens, ..., sampling_params, read_from_device, enable_trace, ...)``
(or ``getattr(self.generator, "decode")(...)``): the class of ``self.generator`` is read by
``composed_type`` (a store, the loader's ``cls(...)``, a classmethod factory, a checkout module
function, a property over another attribute). Then the method must exist (``missing`` where
``Cls``'s MRO is read whole: a rename, V08; ``unresolved`` past a base the checker cannot read
or a ``__getattr__``) and the arguments must bind to it by Python's rules, with no value of the
plugin's landing on another parameter of a signature that has one of its name (a positional
swap, ``broken``); its body is judged as a driven method's is (``composed_body``). Only calls
handing on something of the plugin's (a parameter of the method, ``kwargs.get("k")``; any call
of a warm-up) are read. A call only some paths make (under a branch, in a loop) is
``unresolved`` instead: whether it runs is not evaluated. An object built by checkout code the
checker cannot follow makes such a call ``unresolved``, never trusted.
A checkout module function the method calls (``_run_decode(self.generator, tokens, ...)``)
is checked for swaps (its other binding failures are the module rules' business). Anything
else (an object from outside the checkout, ``*x`` / ``**x`` arguments) is not judged here:
the ``**kwargs`` composition rules (``unresolved``) still apply.
"""

from __future__ import annotations

import ast
from typing import Any

from vllm_tt_plugin.contract.composed_body import callee_body
from vllm_tt_plugin.contract.composed_locals import resolved_call
from vllm_tt_plugin.contract.composed_type import composed_type
from vllm_tt_plugin.contract.parity_flow import swapped
from vllm_tt_plugin.contract.parity_raises import frame_nodes
from vllm_tt_plugin.contract.parity_reach import WalkLike
from vllm_tt_plugin.contract.signatures import (
    ContractMismatch,
    bind_signature,
    signature_from_ast,
)
from vllm_tt_plugin.contract.source import FoundMethod, class_label, find_method
from vllm_tt_plugin.contract.source_ast import kwargs_key
from vllm_tt_plugin.contract.source_flow import always_run
from vllm_tt_plugin.contract.warmup_flag import WARMUPS

Fn = ast.FunctionDef | ast.AsyncFunctionDef


def _texts(fn: Fn, call: ast.Call, bare: bool) -> tuple[list[str], dict[str, str]] | None:
    """The call's arguments named for what the plugin means by them (a parameter of ``fn``,
    ``kwargs.get("k")``), others as placeholders; None for ``*x`` / ``**x`` (and, unless
    ``bare``, for a call handing on nothing of the plugin's)."""
    a = fn.args
    params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    kwarg = a.kwarg.arg if a.kwarg is not None else ""

    def text(i: int, e: ast.expr) -> str:
        if isinstance(e, ast.Name) and e.id in params:
            return e.id
        return kwargs_key(e, kwarg) or f"<argument {i}>"

    values = [*call.args, *(k.value for k in call.keywords)]
    if (
        any(isinstance(x, ast.Starred) for x in call.args)
        or any(k.arg is None for k in call.keywords)
        or any(isinstance(x, ast.Constant) and x.value is Ellipsis for x in values)
    ):  # `*x` / `**x`, or a skeleton's elided arguments
        return None
    args = [text(i, x) for i, x in enumerate(call.args)]
    kwargs = {k.arg: text(-1, k.value) for k in call.keywords if k.arg}
    if not bare and not any(not t.startswith("<") for t in (*args, *kwargs.values())):
        return None  # nothing of the plugin's handed on
    return args, kwargs


def composed_errors(
    source: Any, target: str, family: str, methods: list[FoundMethod], out: WalkLike
) -> None:
    """``out.errors`` (broken) / ``missing`` / ``unresolved`` / ``dropped`` for the composed
    calls of ``methods`` (the driven method first, then the own methods its calls reach)."""
    if not hasattr(source, "resolve_class") or not methods:
        return
    driven = methods[0].name
    for method in {id(m): m for m in methods}.values():
        fn = method.node
        if fn is None or method.unresolved:
            continue
        at = method.where.rpartition(":")[0]
        run = always_run(fn)
        for node in (n for st in fn.body for n in frame_nodes(st)):
            if not isinstance(node, ast.Call):
                continue
            made = resolved_call(fn, node)  # through partials, local mappings, swaps (rt45h)
            texts = _texts(fn, made, driven in WARMUPS)
            callee = _callee(source, target, method, made)
            if callee is None or texts is None:
                continue
            sure = id(node) in run  # a call on some paths only: whether it runs is not known
            _judge(source, family, driven, method, made, texts, callee, sure, at, out)


def _judge(
    source: Any,
    family: str,
    driven: str,
    method: FoundMethod,
    node: ast.Call,
    texts: tuple[list[str], dict[str, str]],
    callee: _Callee,
    sure: bool,
    at: str,
    out: WalkLike,
) -> None:
    errors, missing, unresolved = out.errors, out.missing, out.unresolved
    if not sure:
        errors = missing = unresolved
    label, found, cls, doubt = callee
    where = f"{class_label(method.owner)}.{method.name} calls {label}"
    if doubt:
        out.unresolved.append(
            f"{where}: {doubt}, so what it accepts is not known [{at}:{node.lineno}]"
        )
        return
    if found is None:
        if cls is None:
            return
        line = f"{where}, which {class_label(cls)} does not define [{at}:{node.lineno}]"
        opaque = source.unresolved_bases(cls) or source.foreign_bases(cls)
        if opaque or source.composes(cls):
            unresolved.append(f"{line}; a base the checker cannot read may define it")
        else:
            missing.append(line)
        return
    sig, owner, reached = found
    if cls is None:  # a module function: only where the plugin's values land
        swaps = swapped(sig, _bound(sig, texts))
        if swaps:
            errors.append(f"{where}: {'; '.join(swaps)} [{at}:{node.lineno}]")
        return
    try:
        name = ast.unparse(node.func).rpartition(".")[2]
        bound = bind_signature(sig, *texts, target=owner, family=family, method=name)
    except ContractMismatch as exc:
        errors.append(f"{where}: {exc} [{at}:{node.lineno}]")
        return
    swaps = swapped(sig, bound)
    if swaps:
        errors.append(f"{where}: {'; '.join(swaps)} [{at}:{node.lineno}]")
    elif reached is not None:
        callee_body(source, driven, reached, bound, f"{where} [{at}:{node.lineno}]", sure, out)


def _bound(sig: Any, texts: tuple[list[str], dict[str, str]]) -> Any:
    try:
        return sig.bind(*texts[0], **texts[1])
    except TypeError:
        return sig.bind_partial()


# (label, (signature, owner, the method read or None) or None when not defined, the composed
# class, why its class is not known)
_Callee = tuple[str, "tuple[Any, str, FoundMethod | None] | None", "str | None", str]


def _composed_attr(func: ast.expr) -> tuple[str, str] | None:
    """(attribute, method) of ``self.<attr>.<method>`` or ``getattr(self.<attr>, "method")``
    (rt45h CK08)."""
    if isinstance(func, ast.Attribute):
        value, name = func.value, func.attr
    elif (
        isinstance(func, ast.Call) and isinstance(func.func, ast.Name)
        and func.func.id == "getattr" and len(func.args) == 2 and not func.keywords
        and isinstance(func.args[1], ast.Constant) and isinstance(func.args[1].value, str)
    ):  # fmt: skip
        value, name = func.args[0], func.args[1].value
    else:
        return None
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        return (value.attr, name) if value.value.id == "self" else None
    return None


def _callee(source: Any, target: str, method: FoundMethod, call: ast.Call) -> _Callee | None:
    """What a call on ``self.<attr>`` or of a checkout module function reaches; None: not
    judged here."""
    func = call.func
    pair = _composed_attr(func)
    if pair is not None:
        attr, name = pair
        typed = composed_type(source, target, attr)
        if typed is None:
            return None
        label = f"self.{attr}.{name}(...)"
        if typed.cls is None:
            return label, None, None, typed.doubt
        label = f"{label} ({class_label(typed.cls)})"
        found = find_method(source, typed.cls, name)
        if found is None:
            return label, None, typed.cls, ""
        if found.unresolved or found.kind != "method" or found.node is None:
            return None
        sig = signature_from_ast(found.node, drop_first=True)
        return label, (sig, found.owner, found), typed.cls, ""
    if isinstance(func, ast.Name):
        located = source.resolve_class(method.owner)
        module = located[0] if located is not None else None
        fn = module.functions.get(func.id) if module is not None else None
        local = {
            n.id for n in ast.walk(method.node or ast.Pass())
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }  # fmt: skip
        if fn is None or func.id in local:
            return None
        return (
            f"{func.id}(...)",
            (signature_from_ast(fn, drop_first=False), func.id, None),
            None,
            "",
        )
    return None
