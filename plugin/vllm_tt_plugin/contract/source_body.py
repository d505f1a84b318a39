"""What the parity checker reads from a method body (``ast``, nothing imported): the calls
that pass its ``*args`` / ``**kwargs`` on (``forwards_of``), and the calls of the instance's
own methods, the ``cls(...)`` constructions and the reads of ``**kwargs`` (``body_of``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Literal

from vllm_tt_plugin.contract.source_ast import PLUGIN_PACKAGE as PLUGIN_PACKAGE
from vllm_tt_plugin.contract.source_ast import _elided as _elided
from vllm_tt_plugin.contract.source_ast import _literal_keys as _literal_keys
from vllm_tt_plugin.contract.source_ast import (
    _only_raises_not_implemented as _only_raises_not_implemented,
)
from vllm_tt_plugin.contract.source_ast import plugin_imports as plugin_imports
from vllm_tt_plugin.contract.source_flow import (
    always_raises,
    always_run,
    guarded_calls,
    parents_of,
    stored_attribute,
    unused_params,
    value_used,
)
from vllm_tt_plugin.contract.source_guards import guarded_reads, is_guarded
from vllm_tt_plugin.contract.source_helpers import mapping_use, value_reaches
from vllm_tt_plugin.contract.source_kwargs import copies, mapping_of
from vllm_tt_plugin.contract.source_kwmap import Held, held, merged_holds
from vllm_tt_plugin.contract.source_live import live_nodes, own_frame_nodes
from vllm_tt_plugin.contract.source_varargs import VarargRead, vararg_reads


@dataclass(frozen=True)
class Passed:
    """One argument of a forwarding call, as far as where its value came from."""

    kind: Literal["star", "double_star", "param", "other"]
    name: str = ""  # the caller's parameter ("param"), or the mapping/sequence name


How = Literal["super", "self", "class", "function"]


@dataclass(frozen=True)
class Forward:
    """A call in a method's body that passes the method's ``*args`` or ``**kwargs`` on."""

    # super().m / super(C, self).m, self.m, or Base.m(self, ...) (lookup on Base's own MRO)
    how: How
    method: str
    after: str | None  # super(C, self): the class the lookup starts after; "class": Base
    args: tuple[Passed, ...]
    keywords: tuple[tuple[str | None, Passed], ...]  # None: a ``**mapping``
    line: int
    dropped: tuple[str, ...] = ()  # keys the body pops or deletes from its **kwargs
    added: tuple[str, ...] = ()  # keys the body sets in its **kwargs
    defaults: tuple[str, ...] = ()  # keys a functools.partial supplies unless the call does
    unresolved: str = ""  # why the checker cannot follow what reaches the method (a helper)
    certain: bool = True  # every call of the method makes it (not in a branch)
    keep: tuple[str, ...] | None = None  # a key filter on **kwargs: only these keys pass
    renamed: tuple[tuple[str, str], ...] = ()  # (key set, the key whose value it holds)
    link: Any = field(default=None, compare=False)  # "function": the FoundMethod it reaches

    def describe(self) -> str:
        if self.how == "class":
            return f"{(self.after or '?').rpartition(':')[2]}.{self.method}(self, ...)"
        if self.how == "function":
            return f"{self.method}(...)"
        head = "self" if self.how == "self" else "super()"
        if self.after is not None:
            head = f"super({self.after.rpartition(':')[2]}, self)"
        return f"{head}.{self.method}(...)"


@dataclass(frozen=True)
class SelfCall:
    """A call of another method of the instance (or class) in a method's body:
    ``self.m(...)`` / ``cls.m(...)`` (lookup on the served class's MRO) or ``super().m(...)``
    / ``super(C, self).m(...)`` (lookup after the defining class, or after ``C``)."""

    how: How
    method: str
    after: str | None
    line: int
    # "counted" (``positional`` / ``keywords`` bind), "elided" (a skeleton's ``(...)``),
    # "starred" (``*x`` / ``**x`` the checker cannot count), "forward" (the method's own
    # ``*args`` / ``**kwargs``: bound along the call path), "handed" (a bound method handed on)
    shape: str = "elided"
    positional: int = 0
    keywords: tuple[str, ...] = ()
    certain: bool = False  # every call of the method makes it
    guarded: bool = False  # a hasattr(self, name) test holds where it runs

    def describe(self) -> str:
        if self.how == "class":
            return f"{(self.after or '?').rpartition(':')[2]}.{self.method}(self, ...)"
        if self.how == "self":
            return f"self.{self.method}(...)"
        if self.after is not None:
            return f"super({self.after.rpartition(':')[2]}, self).{self.method}(...)"
        return f"super().{self.method}(...)"


@dataclass(frozen=True)
class Construct:
    """``cls(...)`` / ``type(self)(...)`` in a method body: an instance of the served class is
    built, so the arguments must bind to the ``__init__`` its MRO finds."""

    positional: int
    keywords: tuple[str, ...]
    starred: bool  # a *x or **x argument: the arguments cannot be counted
    line: int


@dataclass(frozen=True)
class Body:
    """What the checker reads from a method body besides its forwarding calls (flow-insensitive:
    every branch counts)."""

    calls: tuple[SelfCall, ...] = ()
    constructs: tuple[Construct, ...] = ()
    kwargs_reads: tuple[str, ...] = ()  # keys read from its **kwargs by name
    kwargs_required: tuple[str, ...] = ()  # ... with kwargs["key"] (a KeyError when absent)
    kwargs_opaque: bool = False  # its **kwargs is used whole (passed on, copied, iterated)
    guarded: tuple[str, ...] = ()  # hasattr(self, "name"): calls of these are not required
    # (line, why) of what the checker cannot follow: the instance handed to a function
    unresolved: tuple[tuple[int, str], ...] = ()
    kwargs_discarded: tuple[str, ...] = ()  # popped or deleted without the value being used
    # (line, module, names) of what the body imports from the plugin's own package
    # (``from vllm_tt_plugin.x import A``): the serving plugin must ship it
    plugin_imports: tuple[tuple[int, str, tuple[str, ...]], ...] = ()
    raises: str = ""  # the raise every call reaches (not a NotImplementedError stub)
    unused: tuple[str, ...] = ()  # named parameters whose value the body never uses
    # (key or "*", attribute): a **kwargs value only stored in self.<attribute>
    kwargs_stored: tuple[tuple[str, str], ...] = ()
    kind: str = "method"  # "classmethod" / "staticmethod": how a call binds its first argument
    # kwargs["key"] read only on some calls (under a branch, a loop, after an early return):
    # a KeyError only when that path runs, which the checker does not evaluate
    kwargs_maybe_required: tuple[str, ...] = ()
    vararg_reads: tuple[VarargRead, ...] = ()  # args[0] / a, b = args[:2]: raise when empty


# A zero-argument super() in a nested function, lambda or comprehension takes that frame's
# first argument (or none: RuntimeError), not the method's instance.
NESTED_SUPER = (
    "super() without arguments inside a nested function, lambda or comprehension, or in a "
    "staticmethod or a module-level def (at run time RuntimeError: super(): no arguments / "
    "__class__ cell not found, or it binds that function's first argument)"
)


def _passed(expr: ast.expr, params: set[str], star: bool) -> Passed:
    if isinstance(expr, ast.Name):
        if star:
            return Passed("star", expr.id)
        return Passed("param" if expr.id in params else "other", expr.id)
    return Passed("other")


Callee = tuple[How, str, "ast.expr | None"]


def _as_attribute(expr: ast.expr) -> ast.expr:
    """``getattr(obj, "name")`` with a literal name is ``obj.name``."""
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and expr.func.id == "getattr"
        and len(expr.args) == 2
        and not expr.keywords
        and isinstance(expr.args[1], ast.Constant)
        and isinstance(expr.args[1].value, str)
    ):
        return ast.Attribute(value=expr.args[0], attr=expr.args[1].value, ctx=ast.Load())
    return expr


def _callee(
    func: ast.expr, me: str | None = "self", aliases: dict[str, ast.expr] | None = None
) -> Callee | None:
    """``super().m`` / ``super(C, self).m`` / ``self.m`` (also as ``getattr(self, "m")``, or a
    local bound once to one of those: ``aliases``) -> (how, m, C or None). ``me`` is the name
    the instance (or, in a classmethod, the class) has in the body."""
    if isinstance(func, ast.Name) and aliases and func.id in aliases:
        func = aliases[func.id]
    func = _as_attribute(func)
    if not isinstance(func, ast.Attribute):
        return None
    value = func.value
    if isinstance(value, ast.Name) and value.id in {"self", me}:
        return "self", func.attr, None
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "super"
    ):
        return "super", func.attr, value.args[0] if value.args else None
    return None


def _explicit(node: ast.Call, me: str | None) -> tuple[str, ast.expr] | None:
    """``Base.m(self, ...)``: (m, the ``Base`` expression); the caller resolves it to a class."""
    func = _as_attribute(node.func)
    if (
        me is not None
        and isinstance(func, ast.Attribute)
        and isinstance(func.value, (ast.Name, ast.Attribute))
        and not (isinstance(func.value, ast.Name) and func.value.id in {me, "super"})
        and node.args
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == me
    ):
        return func.attr, func.value
    return None


def _aliases(fn: ast.FunctionDef | ast.AsyncFunctionDef, me: str | None) -> dict[str, ast.expr]:
    """Locals bound exactly once to a method of the instance (``f = self.m``)."""
    stores: dict[str, int] = {}
    found: dict[str, ast.expr] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and _callee(node.value, me) is not None
        ):
            found[node.targets[0].id] = node.value
    return {k: v for k, v in found.items() if stores.get(k) == 1}


def _partial(func: ast.expr) -> ast.Call | None:
    """``functools.partial(f, ...)`` / ``partial(f, ...)`` as the called expression."""
    if (
        isinstance(func, ast.Call)
        and func.args
        and (
            (isinstance(func.func, ast.Name) and func.func.id == "partial")
            or (isinstance(func.func, ast.Attribute) and func.func.attr == "partial")
        )
    ):
        return func
    return None


def _hands_all(node: ast.Call, vararg: str | None, kwarg: str | None) -> bool:
    """``node`` passes on every variadic of the method (``*args`` and ``**kwargs``): all the
    plugin sends goes there (a helper handed ``**kwargs`` alone beside the method's own path
    is not that)."""
    if vararg is None and kwarg is None:
        return False
    return all(_passes_on(node, v, k) for v, k in ((vararg, None), (None, kwarg)) if v or k)


def _composed(node: ast.Call, me: str | None) -> str | None:
    """``self.<attr>....m(...)``: a call of a method of an object the instance holds
    (composition), as text; None for anything else."""
    func = node.func
    if me is None or not isinstance(func, ast.Attribute):
        return None
    owner = func.value
    if not isinstance(owner, ast.Attribute):
        return None
    while isinstance(owner, ast.Attribute):
        owner = owner.value
    return ast.unparse(func) if isinstance(owner, ast.Name) and owner.id == me else None


def _handed_on(
    node: ast.Call, me: str | None = "self", aliases: dict[str, ast.expr] | None = None
) -> tuple[int, Callee] | None:
    """``helper(..., self.m, ...)`` / ``helper(..., super().m, ...)``: (position, callee)."""
    for i, arg in enumerate(node.args):
        handed = _callee(arg, me, aliases)
        if handed is not None:
            return i, handed
    return None


def _through_helper(
    helper: ast.FunctionDef | ast.AsyncFunctionDef, position: int
) -> tuple[ast.Call, str | None, str | None] | str:
    """How ``helper(..., method, *args, **kwargs)`` calls the method it is handed (at
    ``position``): (its call of it, the helper's *args and **kwargs names), or why the
    checker cannot tell."""
    a = helper.args
    positional = [*a.posonlyargs, *a.args]
    if position >= len(positional):
        return f"the helper {helper.name} takes the method in *{a.vararg.arg if a.vararg else ''}"
    name = positional[position].arg
    vararg = a.vararg.arg if a.vararg else None
    kwarg = a.kwarg.arg if a.kwarg else None
    calls = [
        n
        for n in ast.walk(helper)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]
    shapes = {ast.dump(c) for c in calls}
    if len(shapes) != 1 or not _passes_on(calls[0], vararg, kwarg):
        return f"the helper {helper.name} does not call {name}(*{vararg}, **{kwarg}) one way"
    return calls[0], vararg, kwarg


def _passes_on(node: ast.Call, vararg: str | None, kwarg: str | None) -> bool:
    return any(
        isinstance(x, ast.Starred) and isinstance(x.value, ast.Name) and x.value.id == vararg
        for x in node.args
    ) or any(
        k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwarg
        for k in node.keywords
    )


def forwards_of(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    resolve: Any,
    function: Any = None,
    context: Any = None,
) -> tuple[Forward, ...]:
    """The calls in ``fn`` that pass its ``*args`` / ``**kwargs`` on to another method of the
    instance: ``super()``, ``super(C, self)``, ``self.m(...)``, ``Base.m(self, ...)``,
    ``getattr(super(), "m")(...)``, a local bound to one of those, ``functools.partial(
    super().m, x)(...)``, or a bound method handed to a helper (``helper(self, super().m, *args,
    **kwargs)``: what the helper's body hands the method is read, its own other arguments are
    not the method's). Arguments a forward adds are kept, so a duplicate is seen.
    ``resolve(expr)`` names a class (``super(C, self)``, ``Base.m``), ``function(expr)`` the
    module function a name refers to (None when it cannot). ``context`` (``source_alias.
    ModuleContext``) gives a module constant's value (a key filter's allow-list) and a module
    function handed the arguments (``f(*args, **kwargs)``) as a link of its own."""
    a = fn.args
    vararg = a.vararg.arg if a.vararg else None
    kwarg = a.kwarg.arg if a.kwarg else None
    if vararg is None and kwarg is None:
        return ()
    firsts = [*a.posonlyargs, *a.args]
    me = firsts[0].arg if firsts else None
    aliases = _aliases(fn, me)
    params = {p.arg for p in (*firsts, *a.kwonlyargs)}
    kw_names = copies(fn, kwarg) if kwarg else set()
    run = always_run(fn)
    local_names = {
        n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    live = live_nodes(fn)  # a forward in code that cannot run hands nothing on
    nested = own_frame_nodes(fn)
    found: list[Forward] = []
    for node in ast.walk(fn):
        if id(node) not in live:
            continue
        if not isinstance(node, ast.Call) or not _carries(fn, node, vararg, kw_names):
            continue
        rest: list[ast.expr] = list(node.args)
        keywords: list[ast.keyword] = list(node.keywords)
        defaults: list[str] = []
        unresolved = ""
        handed = _handed_on(node, me, aliases)
        target: Callee | None = None if handed else _callee(node.func, me, aliases)
        explicit = _explicit(node, me) if target is None else None
        if explicit is not None and resolve(explicit[1]) is None:
            explicit = None  # not a class the checkout holds: a function (see body_of)
        partial = _partial(node.func) if target is None else None
        if explicit is not None and handed is None:
            target, rest = ("class", explicit[0], explicit[1]), rest[1:]
        elif handed is None and partial is not None and _callee(partial.args[0], me, aliases):
            target = _callee(partial.args[0], me, aliases)
            rest = [*partial.args[1:], *rest]
            keywords = [*(k for k in partial.keywords if k.arg is None), *keywords]
            defaults = [k.arg for k in partial.keywords if k.arg is not None]
        elif handed is not None:  # a bound method handed on wins over the helper
            target = handed[1]
            helper = function(node.func) if function is not None else None
            inner = _through_helper(helper[0], handed[0] + helper[1]) if helper else (
                f"the helper {ast.unparse(node.func)} is not read"
            )  # fmt: skip
            if isinstance(inner, str):
                unresolved = f"{inner}: what reaches {target[1]} is unknown"
                # Its *args / **kwargs are passed on (to what, unknown): nothing is "dropped".
                rest = [x for x in node.args if isinstance(x, ast.Starred)]
                keywords = [k for k in node.keywords if k.arg is None]
            else:
                call, h_var, h_kw = inner
                rest = [
                    ast.Starred(ast.Name(vararg or "", ast.Load()), ast.Load())
                    if isinstance(x, ast.Starred) and isinstance(x.value, ast.Name)
                    and x.value.id == h_var else ast.Constant(None)
                    for x in call.args
                ]  # fmt: skip
                keywords = [
                    ast.keyword(None, ast.Name(kwarg or "", ast.Load()))
                    if k.arg is None and isinstance(k.value, ast.Name) and k.value.id == h_kw
                    else ast.keyword(k.arg, ast.Constant(None))
                    for k in call.keywords
                ]
        link = None
        if (
            target is None
            and context is not None
            and isinstance(node.func, ast.Name)
            and node.func.id not in local_names
        ):  # a module function of the tree (followed), or one the checker cannot read
            link, why = context.function_link(node.func, _hands_all(node, vararg, kwarg))
            if link is not None or why:
                target, unresolved = ("function", node.func.id, None), unresolved or why
        if target is None:
            continue
        how, method, cls_expr = target
        if how == "super" and cls_expr is None and id(node) in nested:
            unresolved = unresolved or NESTED_SUPER
        after = None
        if cls_expr is not None:
            after = resolve(cls_expr)
            if after is None:
                continue  # super(<something unreadable>, self): cannot follow
        args: list[Passed] = []
        for x in rest:
            if isinstance(x, ast.Starred) and not (
                isinstance(x.value, ast.Name) and x.value.id == vararg
            ):
                unresolved = unresolved or f"it passes *{ast.unparse(x.value)}, which is not read"
            args.append(_passed(x.value, params, True) if isinstance(x, ast.Starred)
                        else _passed(x, params, False))  # fmt: skip
        kw: list[tuple[str | None, Passed]] = []
        merged: list[str] = []  # keys a {**kwargs, "k": v} mapping adds
        holds: list[Held] = []  # what each **mapping handed on carries of **kwargs
        for k in keywords:
            if k.arg is not None:
                kw.append((k.arg, _passed(k.value, params, False)))
                continue
            keys = _literal_keys(fn, k.value) if isinstance(k.value, ast.Name) else None
            mapping = mapping_of(fn, k.value, kw_names, keys)
            if mapping is None:
                unresolved = unresolved or f"it passes **{ast.unparse(k.value)}, which is not read"
                continue
            if mapping[0]:
                kw.append((None, Passed("double_star", kwarg or "")))
                merged += mapping[1]
                holds += [
                    held(fn, n.id, kw_names, context and context.value) for n in ast.walk(k.value)
                    if isinstance(n, ast.Name) and n.id in kw_names
                ]  # fmt: skip
            else:  # a literal mapping: its keys by name (a duplicate is Python's TypeError)
                kw += [(key, Passed("other", key)) for key in mapping[1]]
        one = merged_holds(holds)
        unresolved = unresolved or one.unknown
        same = (how, method, after, tuple(args), tuple(kw))
        if all((f.how, f.method, f.after, f.args, f.keywords) != same for f in found):
            found.append(
                Forward(how, method, after, tuple(args), tuple(kw), node.lineno, one.dropped,
                        (*one.added, *merged), (*defaults,), unresolved, id(node) in run,
                        one.keep, one.renamed, link)
            )  # fmt: skip
    return tuple(found)


def _carries(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    node: ast.Call,
    vararg: str | None,
    kw_names: set[str],
) -> bool:
    """``node`` passes on the method's ``*args``, or its ``**kwargs`` (or a copy of it, or a
    ``{**kwargs, ...}`` merge)."""
    if _passes_on(node, vararg, None):
        return True
    for k in node.keywords:
        if k.arg is None:
            mapping = mapping_of(fn, k.value, kw_names, None)
            if mapping is not None and mapping[0]:
                return True
    return False


def _walk_body(fn: ast.FunctionDef | ast.AsyncFunctionDef, me: str | None) -> list[ast.AST]:
    """Every node of ``fn``'s body, skipping nested classes and nested functions that bind
    their own ``me`` (``self`` / ``cls``): there the name is another object."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [*fn.body]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.ClassDef):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            names = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
            if me is not None and me in names:
                continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


# Builtins that take the instance without calling its methods by other names.
_SAFE_WITH_SELF = {"hasattr", "getattr", "setattr", "isinstance", "type", "super", "id", "repr",
                   "str", "print", "vars", "callable", "len", "format"}  # fmt: skip


def _shape(node: ast.Call, fn: ast.FunctionDef | ast.AsyncFunctionDef, skip: int) -> SelfCall:
    """How a direct call's arguments can be bound (``skip``: leading arguments that are the
    instance, as in ``Base.m(self, ...)``)."""
    args = node.args[skip:]
    if (
        len(args) == 1
        and not node.keywords
        and isinstance(args[0], ast.Constant)
        and (args[0].value is Ellipsis)
    ):
        return SelfCall("self", "", None, 0)  # a skeleton's elided arguments
    keywords = [k.arg for k in node.keywords if k.arg is not None]
    for k in node.keywords:
        keys = _literal_keys(fn, k.value) if k.arg is None else []
        if keys is None:
            return SelfCall("self", "", None, 0, "starred")
        keywords += keys
    if any(isinstance(x, ast.Starred) for x in args):
        return SelfCall("self", "", None, 0, "starred")
    return SelfCall("self", "", None, 0, "counted", len(args), tuple(keywords))


def body_of(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    resolve: Any,
    *,
    kind: str = "method",
    function: Any = None,
) -> Body:
    """The calls of the instance's own methods, the ``cls(...)`` constructions and the reads of
    ``**kwargs`` in ``fn`` (``kind``: "method", "classmethod" or "staticmethod"; ``function``:
    the helper a call reaches, to see what it does with a plugin value: ``source_helpers``)."""
    if _elided(fn):
        # An interface skeleton's `...` body: nothing is known of it, so its **kwargs count as
        # used whole (a skeleton records an empty body as `pass`).
        return Body(kwargs_opaque=True)
    a = fn.args
    firsts = [*a.posonlyargs, *a.args]
    me = firsts[0].arg if firsts and kind != "staticmethod" else None
    vararg = a.vararg.arg if a.vararg else None
    kwarg = a.kwarg.arg if a.kwarg else None
    kw_names = copies(fn, kwarg) if kwarg else set()
    live = live_nodes(fn)  # reads and calls in code that cannot run do not count
    nodes = [n for n in _walk_body(fn, me) if id(n) in live]
    nested = own_frame_nodes(fn)
    aliases = _aliases(fn, me)
    parents = parents_of(fn)
    run = always_run(fn)
    guards = guarded_calls(fn, me)
    calls: list[SelfCall] = []
    unresolved: list[tuple[int, str]] = []
    constructs: list[Construct] = []
    reads: list[str] = []
    required: list[str] = []
    maybe_required: list[str] = []
    stored: list[tuple[str, str]] = []
    local_names = {
        n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    } | {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)} - {me or ""}
    forward_nodes = {
        id(n)
        for n in nodes
        if isinstance(n, ast.Call)
        and _carries(fn, n, vararg, kw_names)
        and (
            _callee(n.func, me, aliases) is not None
            or _handed_on(n, me, aliases) is not None
            or _partial(n.func) is not None
            or _explicit(n, me) is not None
        )
    }
    handled: set[int] = set()  # Name nodes of kwarg whose use is a read by name
    discarded: list[str] = []  # keys read or removed without the value being used
    # ... a key removed by a statement of the body itself: a KeyError when it is absent.
    top = {id(n) for st in fn.body for n in ast.walk(st) if isinstance(st, (ast.Delete, ast.Expr))}
    present = guarded_reads(fn, kw_names)  # keys a test or a `try` proves cannot KeyError

    def helper(call: ast.Call, arg: ast.AST, hops: int, decides: bool = False) -> bool | None:
        return value_reaches(call, arg, function, hops, decides)

    def read(key: str, node: ast.AST) -> None:
        attr = stored_attribute(node, parents, me)
        if attr is not None:
            stored.append((key, attr))
        elif value_used(fn, node, parents, helper=helper):
            reads.append(key)
        else:
            discarded.append(key)

    for node in nodes:
        if isinstance(node, ast.Call):
            func = node.func
            # cls(...) / type(self)(...)
            if me is not None and (
                (isinstance(func, ast.Name) and func.id == me and kind == "classmethod")
                or (
                    isinstance(func, ast.Call)
                    and isinstance(func.func, ast.Name)
                    and func.func.id == "type"
                    and len(func.args) == 1
                    and isinstance(func.args[0], ast.Name)
                    and func.args[0].id == me
                )
            ):
                names = [k.arg for k in node.keywords if k.arg is not None]
                starred = any(isinstance(x, ast.Starred) for x in node.args)
                for k in node.keywords:
                    keys = _literal_keys(fn, k.value) if k.arg is None else []
                    starred = starred or keys is None
                    names += keys or []
                constructs.append(Construct(len(node.args), tuple(names), starred, node.lineno))
            # self.m(...) / cls.m(...) / super().m(...), and bound methods handed to a helper
            # (also Base.m(self, ...), getattr(self, "m")(...), f = self.m; f(...), partial)
            handed_args = node.args if id(node) in forward_nodes else []
            partial = _partial(func)
            if partial is not None:
                handed_args = [*handed_args, partial.args[0]]
            explicit = _explicit(node, me)
            explicit_cls = resolve(explicit[1]) if explicit is not None else None
            proven = guards.get(id(node), set())
            certain = id(node) in run
            if explicit is not None and explicit_cls is not None:
                shape = _shape(node, fn, 1)
                if id(node) in forward_nodes:
                    shape = SelfCall("self", "", None, 0, "forward")
                call = SelfCall("class", explicit[0], explicit_cls, node.lineno, shape.shape,
                                shape.positional, shape.keywords, certain)  # fmt: skip
                if call not in calls:
                    calls.append(call)
            for expr in (func, *handed_args):
                target = _callee(expr, me, aliases)
                if target is None:
                    continue
                how, method, cls_expr = target
                if how == "super" and cls_expr is None and id(node) in nested:
                    unresolved.append((node.lineno, f"calls super().{method}(...): {NESTED_SUPER}"))
                    continue
                after = None
                if cls_expr is not None:
                    after = resolve(cls_expr)
                    if after is None:
                        continue
                if (
                    id(node) not in forward_nodes
                    and partial is not None
                    and (expr is partial.args[0])
                ):  # partial(self.m, a, k=v)(b): m gets a, b, k
                    both = ast.Call(expr, [*partial.args[1:], *node.args],
                                    [*partial.keywords, *node.keywords])  # fmt: skip
                    shape = _shape(both, fn, 0)
                elif expr is not func:
                    shape = SelfCall("self", "", None, 0, "handed")
                elif id(node) in forward_nodes:
                    shape = SelfCall("self", "", None, 0, "forward")
                else:
                    shape = _shape(node, fn, 0)
                call = SelfCall(how, method, after, node.lineno, shape.shape, shape.positional,
                                shape.keywords, certain and shape.shape != "handed",
                                how == "self" and method in proven)  # fmt: skip
                if call not in calls:
                    calls.append(call)
            # The instance handed to a function the checker does not follow (its calls on it
            # are not seen): never "ok".
            gives_me = me is not None and any(
                isinstance(x, ast.Name) and x.id == me
                for x in (*node.args, *(k.value for k in node.keywords))
            )
            if (
                gives_me
                and explicit_cls is None
                and id(node) not in forward_nodes
                and not (isinstance(func, ast.Name) and func.id in _SAFE_WITH_SELF)
                and _callee(func, me, aliases) is None
            ):
                unresolved.append(
                    (node.lineno, f"hands {me} to {ast.unparse(func)}(...), which is not followed")
                )
            # The method's own arguments handed to anything the checker does not follow (an
            # object the instance holds: self.executor.prefill_forward(*args, **kwargs), a
            # local alias of it, a lambda, getattr with a computed name): never "ok".
            root = func
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            composed = _composed(node, me)
            computed = isinstance(root, ast.Call) or (
                isinstance(root, ast.Name) and root.id in local_names
            )  # not a module function or import: those are the tree's own helpers
            if (
                (composed is not None or computed)
                and id(node) not in forward_nodes
                and not gives_me
                and _hands_all(node, vararg, kwarg)
            ):
                what = f"{composed}(...) (composition)" if composed else f"{ast.unparse(func)}(...)"
                unresolved.append(
                    (node.lineno, f"hands its arguments to {what}, which is not followed")
                )
            # kwargs.get("x") / kwargs.pop("x") / kwargs.setdefault("x")
            if (
                kwarg is not None
                and isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == kwarg
            ):
                key = node.args[0] if node.args else None
                if func.attr in ("get", "pop", "setdefault") and isinstance(key, ast.Constant):
                    read(str(key.value), node)
                    handled.add(id(func.value))
                    if (
                        func.attr == "pop" and len(node.args) == 1 and not node.keywords
                        and not is_guarded(present, node, str(key.value))
                    ):  # fmt: skip
                        # kwargs.pop("k") without a default: a KeyError when "k" is absent,
                        # whether or not its value is used (exactly like kwargs["k"])
                        (required if id(node) in run or id(node) in top else maybe_required
                         ).append(str(key.value))  # fmt: skip
                elif func.attr in ("keys", "update", "__len__"):
                    handled.add(id(func.value))  # its keys, or keys the edits record
        elif (
            kwarg is not None
            and isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == kwarg
            and isinstance(node.slice, ast.Constant)
        ):
            key_name = str(node.slice.value)
            handled.add(id(node.value))
            if isinstance(node.ctx, ast.Load):
                read(key_name, node)
                if not is_guarded(present, node, key_name):
                    (required if id(node) in run else maybe_required).append(key_name)
            elif isinstance(node.ctx, ast.Del):
                discarded.append(key_name)
                if id(node) in top:
                    required.append(key_name)
            else:
                handled.add(id(node.value))
    opaque = False
    refilled = {
        id(n.value.generators[0].iter) for n in nodes
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.DictComp)
        and isinstance(n.targets[0], ast.Name) and n.targets[0].id in kw_names
    }  # fmt: skip
    if kwarg is not None:
        passed_on: set[int] = set()
        for node in nodes:
            if isinstance(node, ast.Call) and id(node) in forward_nodes:
                passed_on |= {
                    id(n) for k in node.keywords if k.arg is None for n in ast.walk(k.value)
                }
        for node in nodes:
            if (
                isinstance(node, ast.Name)
                and node.id in kw_names
                and isinstance(node.ctx, ast.Load)
                and id(node) not in handled
                and id(node) not in passed_on
            ):
                parent = parents.get(id(node))
                use: ast.AST = node
                if isinstance(parent, ast.Attribute):
                    if id(parents.get(id(parent))) in refilled:
                        continue  # a key filter rebinding a mapping: source_kwmap reads it
                    if parent.attr in ("items", "values"):
                        opaque = True  # its values, by key: used whole
                        break
                    use = parents.get(id(parent), parent)
                attr = stored_attribute(use, parents, me)
                site = parents.get(id(use))
                site = parents.get(id(site)) if isinstance(site, ast.keyword) else site
                handed = mapping_use(site, use, function) if isinstance(site, ast.Call) else None
                if attr is not None:
                    stored.append(("*", attr))
                elif handed is not None:  # a helper it can read: the keys it reads
                    reads += handed.keys
                    if handed.opaque:
                        opaque = True
                        break
                elif value_used(fn, use, parents):
                    opaque = True
                    break
    named = {p.arg for p in (*firsts[1 if me else 0 :], *a.kwonlyargs)}
    if any(isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("locals", "vars")
           for n in nodes):  # fmt: skip
        named = set()
    return Body(
        tuple(calls),
        tuple(constructs),
        tuple(dict.fromkeys(reads)),
        tuple(dict.fromkeys(required)),
        opaque,
        (),
        tuple(dict.fromkeys(unresolved)),
        tuple(k for k in dict.fromkeys(discarded) if k not in reads),
        plugin_imports(fn),
        "" if _only_raises_not_implemented(fn) else always_raises(fn),
        unused_params(fn, named, helper),
        tuple(dict.fromkeys(stored)),
        kind,
        tuple(k for k in dict.fromkeys(maybe_required) if k not in required),
        vararg_reads(fn, vararg, run),
    )
