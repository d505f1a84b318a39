"""Calls a driven method hands to an object the adapter composes, when the checkout says what
that object is (rt45g R11, R12, V01, V08).

``self.generator.decode(tokens, ..., sampling_params, read_from_device, enable_trace, ...)``:
the class of ``self.generator`` is followed where one ``__init__`` store sets it, either to
``Cls(...)`` or to a parameter that every ``cls(...)`` in ``initialize_vllm_model`` fills with
``Cls(...)`` (directly, or a local bound once to it), and ``Cls`` is a class of the checkout.
Then the method must exist (``missing`` where ``Cls``'s MRO is read whole: a rename, V08;
``unresolved`` past a base the checker cannot read or a ``__getattr__``) and the arguments must
bind to it by Python's rules, with no value of the plugin's landing on another parameter of a
signature that has one of its name (a positional swap, ``broken``); only calls handing on
something of the plugin's (a parameter of the method, ``kwargs.get("k")``) are read. A call
only some paths make (under a branch, in a loop) is ``unresolved`` instead: whether it runs is
not evaluated.
A checkout module function the method calls (``_run_decode(self.generator, tokens, ...)``)
is checked for swaps (its other binding failures are the module rules' business). Anything
else (a store the checker cannot type, ``*x`` / ``**x`` arguments) is not judged here: the
``**kwargs`` composition rules (``unresolved``) still apply.
"""

from __future__ import annotations

import ast
from typing import Any

from vllm_tt_plugin.contract.composed_locals import resolved_call
from vllm_tt_plugin.contract.parity_flow import swapped
from vllm_tt_plugin.contract.parity_raises import frame_nodes
from vllm_tt_plugin.contract.parity_reach import WalkLike
from vllm_tt_plugin.contract.signatures import (
    ContractMismatch,
    bind_signature,
    signature_from_ast,
)
from vllm_tt_plugin.contract.source import FoundMethod, class_label, find_method
from vllm_tt_plugin.contract.source_flow import always_run

Fn = ast.FunctionDef | ast.AsyncFunctionDef


def _self_stores(source: Any, target: str, attr: str) -> list[tuple[str, ast.expr]]:
    """(defining class, value) of every ``self.<attr> = value`` along the MRO."""
    out: list[tuple[str, ast.expr]] = []
    for cls in source.mro(target):
        found = source.resolve_class(cls)
        if found is None:
            continue
        for n in ast.walk(found[1]):
            if not isinstance(n, ast.Assign):
                continue
            for t in n.targets:
                if (
                    isinstance(t, ast.Attribute) and t.attr == attr
                    and isinstance(t.value, ast.Name) and t.value.id == "self"
                ):  # fmt: skip
                    out.append((cls, n.value))
    return out


def _class_of(source: Any, owner: str, expr: ast.expr) -> str | None:
    """The checkout class ``expr`` (``Cls(...)``) builds, read in ``owner``'s module."""
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)):
        return None
    found = source.resolve_class(owner)
    if found is None:
        return None
    ref = source._class_ref(found[0], ast.Name(expr.func.id, ast.Load()), before=found[1].lineno)
    canonical = source.canonical(ref) if ref else None
    return canonical if isinstance(canonical, str) and source.has_class(canonical) else None


def _loader_args(source: Any, target: str, init: Fn, param: str) -> list[tuple[str, ast.expr]]:
    """What every ``cls(...)`` of the loader hands ``__init__``'s ``param``."""
    load = find_method(source, target, "initialize_vllm_model")
    fn = load.node if load is not None and not load.unresolved else None
    if fn is None:
        return []
    names = [p.arg for p in (*init.args.posonlyargs, *init.args.args)][1:]
    bound: dict[str, list[ast.expr]] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    bound.setdefault(t.id, []).append(n.value)
    out: list[tuple[str, ast.expr]] = []
    for n in ast.walk(fn):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "cls"):
            continue
        given = {k.arg: k.value for k in n.keywords if k.arg}
        if param in names and names.index(param) < len(n.args):
            given[param] = n.args[names.index(param)]
        value = given.get(param)
        if isinstance(value, ast.Name) and len(bound.get(value.id, [])) == 1:
            value = bound[value.id][0]
        if value is None or any(isinstance(a, ast.Starred) for a in n.args):
            return []
        out.append((load.owner, value))  # type: ignore[union-attr]
    return out


def composed_class(source: Any, target: str, attr: str) -> str | None:
    """The checkout class of ``self.<attr>``, where the checkout says it (None: not judged)."""
    stores = _self_stores(source, target, attr)
    if len(stores) != 1:
        return None
    owner, value = stores[0]
    init = find_method(source, target, "__init__")
    if isinstance(value, ast.Name) and init is not None and init.node is not None:
        given = _loader_args(source, target, init.node, value.id)
        classes = {_class_of(source, o, v) for o, v in given}
        return classes.pop() if len(classes) == 1 and given else None
    return _class_of(source, owner, value)


def _texts(fn: Fn, call: ast.Call) -> tuple[list[str], dict[str, str]] | None:
    """The call's arguments named for what the plugin means by them (a parameter of ``fn``,
    ``kwargs.get("k")``), others as placeholders; None for ``*x`` / ``**x``."""
    a = fn.args
    params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    kwarg = a.kwarg.arg if a.kwarg is not None else ""

    def text(i: int, e: ast.expr) -> str:
        if isinstance(e, ast.Name) and e.id in params:
            return e.id
        if (
            isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute)
            and e.func.attr == "get" and isinstance(e.func.value, ast.Name)
            and e.func.value.id == kwarg and e.args and isinstance(e.args[0], ast.Constant)
            and isinstance(e.args[0].value, str)
        ):  # fmt: skip
            return e.args[0].value
        return f"<argument {i}>"

    values = [*call.args, *(k.value for k in call.keywords)]
    if (
        any(isinstance(x, ast.Starred) for x in call.args)
        or any(k.arg is None for k in call.keywords)
        or any(isinstance(x, ast.Constant) and x.value is Ellipsis for x in values)
    ):  # `*x` / `**x`, or a skeleton's elided arguments
        return None
    args = [text(i, x) for i, x in enumerate(call.args)]
    kwargs = {k.arg: text(-1, k.value) for k in call.keywords if k.arg}
    if not any(not t.startswith("<") for t in (*args, *kwargs.values())):
        return None  # nothing of the plugin's handed on
    return args, kwargs


def composed_errors(
    source: Any, target: str, family: str, methods: list[FoundMethod], out: WalkLike
) -> None:
    """``out.errors`` (broken) / ``missing`` / ``unresolved`` for the composed calls of
    ``methods`` (the driven method and the own methods its calls reach)."""
    if not hasattr(source, "resolve_class"):
        return
    for method in {id(m): m for m in methods}.values():
        errors, missing, unresolved = out.errors, out.missing, out.unresolved
        fn = method.node
        if fn is None or method.unresolved:
            continue
        at = method.where.rpartition(":")[0]
        run = always_run(fn)
        for node in (n for st in fn.body for n in frame_nodes(st)):
            if not isinstance(node, ast.Call):
                continue
            made = resolved_call(fn, node)  # through partials, local mappings, swaps (rt45h)
            texts = _texts(fn, made)
            callee = _callee(source, target, method, made)
            if callee is None or texts is None:
                continue
            if id(node) not in run:  # a call on some paths only: whether it runs is not known
                errors = missing = unresolved
            label, found, cls = callee
            where = f"{class_label(method.owner)}.{method.name} calls {label}"
            if found is None:
                if cls is None:
                    continue
                line = f"{where}, which {class_label(cls)} does not define [{at}:{node.lineno}]"
                opaque = source.unresolved_bases(cls) or source.foreign_bases(cls)
                if opaque or source.composes(cls):
                    unresolved.append(f"{line}; a base the checker cannot read may define it")
                else:
                    missing.append(line)
                continue
            sig = found[0]
            if cls is None:  # a module function: only where the plugin's values land
                swaps = swapped(sig, _bound(sig, texts))
                if swaps:
                    errors.append(f"{where}: {'; '.join(swaps)} [{at}:{node.lineno}]")
                continue
            try:
                name = ast.unparse(node.func).rpartition(".")[2]
                bound = bind_signature(sig, *texts, target=found[1], family=family, method=name)
            except ContractMismatch as exc:
                errors.append(f"{where}: {exc} [{at}:{node.lineno}]")
                continue
            swaps = swapped(sig, bound)
            if swaps:
                errors.append(f"{where}: {'; '.join(swaps)} [{at}:{node.lineno}]")


def _bound(sig: Any, texts: tuple[list[str], dict[str, str]]) -> Any:
    try:
        return sig.bind(*texts[0], **texts[1])
    except TypeError:
        return sig.bind_partial()


def _callee(
    source: Any, target: str, method: FoundMethod, call: ast.Call
) -> tuple[str, tuple[Any, str] | None, str | None] | None:
    """(label, (signature, owner) or None when not defined, the composed class) of a call on
    ``self.<attr>`` or of a checkout module function; None: not judged here."""
    func = call.func
    if (
        isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute)
        and isinstance(func.value.value, ast.Name) and func.value.value.id == "self"
    ):  # fmt: skip
        cls = composed_class(source, target, func.value.attr)
        if cls is None:
            return None
        label = f"self.{func.value.attr}.{func.attr}(...) ({class_label(cls)})"
        found = find_method(source, cls, func.attr)
        if found is None:
            return label, None, cls
        if found.unresolved or found.kind != "method" or found.node is None:
            return None
        return label, (signature_from_ast(found.node, drop_first=True), found.owner), cls
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
        return f"{func.id}(...)", (signature_from_ast(fn, drop_first=False), func.id), None
    return None
