"""What the parity checker reads from a method body (``ast``, nothing imported): the calls
that pass its ``*args`` / ``**kwargs`` on (``forwards_of``), and the calls of the instance's
own methods, the ``cls(...)`` constructions and the reads of ``**kwargs`` (``body_of``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Passed:
    """One argument of a forwarding call, as far as where its value came from."""

    kind: Literal["star", "double_star", "param", "other"]
    name: str = ""  # the caller's parameter ("param"), or the mapping/sequence name


How = Literal["super", "self", "class"]


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

    def describe(self) -> str:
        if self.how == "class":
            return f"{(self.after or '?').rpartition(':')[2]}.{self.method}(self, ...)"
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


def _only_raises_not_implemented(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = [
        s
        for s in fn.body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))  # docstring
        and not isinstance(s, ast.Pass)
    ]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc
    if isinstance(exc, ast.Call):
        exc = exc.func
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


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


PLUGIN_PACKAGE = "vllm_tt_plugin"


def plugin_imports(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """The imports of the plugin's own package inside ``fn`` (a tt-metal adapter that imports
    ``vllm_tt_plugin.<module>`` binds to one plugin's internals)."""
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == PLUGIN_PACKAGE:
                found.append((node.lineno, node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PLUGIN_PACKAGE:
                    found.append((node.lineno, alias.name, ()))
    return tuple(found)


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


def _kwargs_edits(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, kwarg: str | None
) -> tuple[list[str], list[str]]:
    """Keys the body pops / deletes from its ``**kwargs``, and keys it sets (flow-insensitive)."""
    dropped: list[str] = []
    added: list[str] = []
    if kwarg is None:
        return dropped, added
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            key = node.args[0] if node.args else None
            if isinstance(owner, ast.Name) and owner.id == kwarg and isinstance(key, ast.Constant):
                if node.func.attr == "pop" and isinstance(key.value, str):
                    dropped.append(key.value)
                elif node.func.attr == "setdefault" and isinstance(key.value, str):
                    added.append(key.value)
        targets = node.targets if isinstance(node, (ast.Delete, ast.Assign)) else []
        for t in targets:
            if (
                isinstance(t, ast.Subscript)
                and isinstance(t.value, ast.Name)
                and t.value.id == kwarg
                and isinstance(t.slice, ast.Constant)
                and isinstance(t.slice.value, str)
            ):
                (dropped if isinstance(node, ast.Delete) else added).append(t.slice.value)
    return dropped, added


def forwards_of(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, resolve: Any, function: Any = None
) -> tuple[Forward, ...]:
    """The calls in ``fn`` that pass its ``*args`` / ``**kwargs`` on to another method of the
    instance: ``super()``, ``super(C, self)``, ``self.m(...)``, ``Base.m(self, ...)``,
    ``getattr(super(), "m")(...)``, a local bound to one of those, ``functools.partial(
    super().m, x)(...)``, or a bound method handed to a helper (``helper(self, super().m, *args,
    **kwargs)``: what the helper's body hands the method is read, its own other arguments are
    not the method's). Arguments a forward adds are kept, so a duplicate is seen.
    ``resolve(expr)`` names a class (``super(C, self)``, ``Base.m``), ``function(expr)`` the
    module function a name refers to (None when it cannot)."""
    a = fn.args
    vararg = a.vararg.arg if a.vararg else None
    kwarg = a.kwarg.arg if a.kwarg else None
    if vararg is None and kwarg is None:
        return ()
    firsts = [*a.posonlyargs, *a.args]
    me = firsts[0].arg if firsts else None
    aliases = _aliases(fn, me)
    params = {p.arg for p in (*firsts, *a.kwonlyargs)}
    dropped, added = _kwargs_edits(fn, kwarg)
    found: list[Forward] = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or not _passes_on(node, vararg, kwarg):
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
        if target is None:
            continue
        how, method, cls_expr = target
        after = None
        if cls_expr is not None:
            after = resolve(cls_expr)
            if after is None:
                continue  # super(<something unreadable>, self): cannot follow
        args = tuple(
            _passed(x.value, params, True)
            if isinstance(x, ast.Starred)
            else _passed(x, params, False)
            for x in rest
        )
        kw = tuple(
            (
                k.arg,
                Passed("double_star", k.value.id if isinstance(k.value, ast.Name) else "")
                if k.arg is None
                else _passed(k.value, params, False),
            )
            for k in keywords
        )
        same = (how, method, after, args, kw)
        if all((f.how, f.method, f.after, f.args, f.keywords) != same for f in found):
            found.append(
                Forward(how, method, after, args, kw, node.lineno, (*dropped,), (*added,),
                        (*defaults,), unresolved)
            )  # fmt: skip
    return tuple(found)


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


_WHOLE_DICT = {"keys", "items", "values", "copy", "update"}
# Builtins that take the instance without calling its methods by other names.
_SAFE_WITH_SELF = {"hasattr", "getattr", "setattr", "isinstance", "type", "super", "id", "repr",
                   "str", "print", "vars", "callable", "len", "format"}  # fmt: skip


def body_of(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, resolve: Any, *, kind: str = "method"
) -> Body:
    """The calls of the instance's own methods, the ``cls(...)`` constructions and the reads of
    ``**kwargs`` in ``fn`` (``kind``: "method", "classmethod" or "staticmethod")."""
    if _elided(fn):
        # An interface skeleton's `...` body: nothing is known of it, so its **kwargs count as
        # used whole (a skeleton records an empty body as `pass`).
        return Body(kwargs_opaque=True)
    a = fn.args
    firsts = [*a.posonlyargs, *a.args]
    me = firsts[0].arg if firsts and kind != "staticmethod" else None
    vararg = a.vararg.arg if a.vararg else None
    kwarg = a.kwarg.arg if a.kwarg else None
    nodes = _walk_body(fn, me)
    aliases = _aliases(fn, me)
    calls: list[SelfCall] = []
    unresolved: list[tuple[int, str]] = []
    constructs: list[Construct] = []
    reads: list[str] = []
    required: list[str] = []
    guarded: list[str] = []
    forward_nodes = {
        id(n)
        for n in nodes
        if isinstance(n, ast.Call)
        and _passes_on(n, vararg, kwarg)
        and (
            _callee(n.func, me, aliases) is not None
            or _handed_on(n, me, aliases) is not None
            or _partial(n.func) is not None
            or _explicit(n, me) is not None
        )
    }
    handled: set[int] = set()  # Name nodes of kwarg whose use is a read by name
    # `kwargs.pop("k")` as a statement and `del kwargs["k"]` remove a key without using it.
    discarded: list[str] = []
    discards = {
        id(n.value) for n in nodes
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Attribute) and n.value.func.attr == "pop"
    }  # fmt: skip
    # ... and unconditionally (a statement of the body itself): a KeyError when it is absent.
    top = {id(n) for st in fn.body for n in ast.walk(st) if isinstance(st, (ast.Delete, ast.Expr))}
    for node in nodes:
        if isinstance(node, ast.Call):
            func = node.func
            # hasattr(self, "name")
            if (
                isinstance(func, ast.Name)
                and func.id == "hasattr"
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == me
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                guarded.append(node.args[1].value)
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
            if explicit is not None and explicit_cls is not None:
                call = SelfCall("class", explicit[0], explicit_cls, node.lineno)
                if call not in calls:
                    calls.append(call)
            for expr in (func, *handed_args):
                target = _callee(expr, me, aliases)
                if target is None:
                    continue
                how, method, cls_expr = target
                after = None
                if cls_expr is not None:
                    after = resolve(cls_expr)
                    if after is None:
                        continue
                call = SelfCall(how, method, after, node.lineno)
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
            # The method's own arguments handed to an object it holds (executor-backed
            # generators: self.executor.prefill_forward(*args, **kwargs)): what that object's
            # method accepts is not in the class, so the call is never "ok".
            composed = _composed(node, me)
            if (
                composed is not None
                and id(node) not in forward_nodes
                and _hands_all(node, vararg, kwarg)
            ):
                unresolved.append(
                    (node.lineno, f"hands its arguments to {composed}(...) (composition), "
                     "which is not followed")
                )  # fmt: skip
            # kwargs.get("x") / kwargs.pop("x") / kwargs.setdefault("x")
            if (
                kwarg is not None
                and isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == kwarg
            ):
                key = node.args[0] if node.args else None
                if func.attr in ("get", "pop", "setdefault") and isinstance(key, ast.Constant):
                    (discarded if id(node) in discards else reads).append(str(key.value))
                    handled.add(id(func.value))
                    if func.attr == "pop" and len(node.args) == 1 and id(node) in top:
                        required.append(str(key.value))
                elif func.attr in _WHOLE_DICT and not _in_fstring(node, nodes):
                    pass  # used whole: opaque (below)
                elif func.attr in _WHOLE_DICT:
                    handled.add(id(func.value))  # kwargs.keys() in a log line reads nothing
        elif (
            kwarg is not None
            and isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == kwarg
            and isinstance(node.slice, ast.Constant)
        ):
            name = str(node.slice.value)
            handled.add(id(node.value))
            if isinstance(node.ctx, ast.Load):
                reads.append(name)
                required.append(name)
            elif isinstance(node.ctx, ast.Del):
                discarded.append(name)
                if id(node) in top:
                    required.append(name)
        elif (
            kwarg is not None
            and isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and isinstance(node.comparators[0], ast.Name)
            and node.comparators[0].id == kwarg
            and isinstance(node.left, ast.Constant)
        ):
            reads.append(str(node.left.value))
            handled.add(id(node.comparators[0]))
    opaque = False
    if kwarg is not None:
        passed_on = set()
        for node in nodes:
            if isinstance(node, ast.Call) and id(node) in forward_nodes:
                passed_on |= {id(k.value) for k in node.keywords if k.arg is None}
        for node in nodes:
            if (
                isinstance(node, ast.Name)
                and node.id == kwarg
                and isinstance(node.ctx, ast.Load)
                and id(node) not in handled
                and id(node) not in passed_on
            ):
                opaque = True
                break
    return Body(
        tuple(calls),
        tuple(constructs),
        tuple(dict.fromkeys(reads)),
        tuple(dict.fromkeys(required)),
        opaque,
        tuple(dict.fromkeys(guarded)),
        tuple(dict.fromkeys(unresolved)),
        tuple(k for k in dict.fromkeys(discarded) if k not in reads),
        plugin_imports(fn),
    )


def _literal_keys(fn: ast.FunctionDef | ast.AsyncFunctionDef, expr: ast.expr) -> list[str] | None:
    """The keys of a ``**mapping`` argument: a ``{...}`` / ``dict(k=...)`` literal, or a local
    bound once to one (None: cannot tell)."""
    if isinstance(expr, ast.Name):
        binds = [
            n for n in ast.walk(fn)
            if isinstance(n, ast.Name) and n.id == expr.id and not isinstance(n.ctx, ast.Load)
        ]  # fmt: skip
        value = next(
            (
                n.value for n in ast.walk(fn)
                if isinstance(n, ast.Assign) and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name) and n.targets[0].id == expr.id
            ),
            None,
        )  # fmt: skip
        mutated = any(
            (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == expr.id and n.attr != "get")
            or (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
            and n.value.id == expr.id and not isinstance(n.ctx, ast.Load))
            for n in ast.walk(fn)
        )  # fmt: skip
        if len(binds) != 1 or value is None or mutated:
            return None
        expr = value
    if isinstance(expr, ast.Dict) and all(
        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in expr.keys
    ):
        return [str(k.value) for k in expr.keys if isinstance(k, ast.Constant)]
    if (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict"
        and not expr.args and all(k.arg is not None for k in expr.keywords)
    ):  # fmt: skip
        return [k.arg for k in expr.keywords if k.arg is not None]
    return None


def _elided(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The body is only ``...`` (after a docstring): elided, as in an interface skeleton."""
    body = [
        st
        for st in fn.body
        if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)
                and isinstance(st.value.value, str))
    ]  # fmt: skip
    return (
        len(body) == 1
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and body[0].value.value is Ellipsis
    )


def _in_fstring(call: ast.Call, nodes: list[ast.AST]) -> bool:
    return any(
        isinstance(n, ast.JoinedStr) and any(sub is call for sub in ast.walk(n)) for n in nodes
    )
