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


@dataclass(frozen=True)
class Forward:
    """A call in a method's body that passes the method's ``*args`` or ``**kwargs`` on."""

    how: Literal["super", "self"]  # super().m / super(C, self).m, or self.m
    method: str
    after: str | None  # super(C, self): the class ("module:Class") the lookup starts after
    args: tuple[Passed, ...]
    keywords: tuple[tuple[str | None, Passed], ...]  # None: a ``**mapping``
    line: int
    dropped: tuple[str, ...] = ()  # keys the body pops or deletes from its **kwargs
    added: tuple[str, ...] = ()  # keys the body sets in its **kwargs

    def describe(self) -> str:
        head = "self" if self.how == "self" else "super()"
        if self.after is not None:
            head = f"super({self.after.rpartition(':')[2]}, self)"
        return f"{head}.{self.method}(...)"


@dataclass(frozen=True)
class SelfCall:
    """A call of another method of the instance (or class) in a method's body:
    ``self.m(...)`` / ``cls.m(...)`` (lookup on the served class's MRO) or ``super().m(...)``
    / ``super(C, self).m(...)`` (lookup after the defining class, or after ``C``)."""

    how: Literal["super", "self"]
    method: str
    after: str | None
    line: int

    def describe(self) -> str:
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


def _callee(
    func: ast.expr, me: str | None = "self"
) -> tuple[Literal["super", "self"], str, ast.expr | None] | None:
    """``super().m`` / ``super(C, self).m`` / ``self.m`` -> (how, m, C or None). ``me`` is the
    name the instance (or, in a classmethod, the class) has in the body."""
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


def _handed_on(
    node: ast.Call,
) -> tuple[int, tuple[Literal["super", "self"], str, ast.expr | None]] | None:
    """``helper(..., self.m, ...)`` / ``helper(..., super().m, ...)``: (position, callee)."""
    for i, arg in enumerate(node.args):
        handed = _callee(arg)
        if handed is not None:
            return i, handed
    return None


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


def forwards_of(fn: ast.FunctionDef | ast.AsyncFunctionDef, resolve: Any) -> tuple[Forward, ...]:
    """The calls in ``fn`` that pass its ``*args`` / ``**kwargs`` on to another method of the
    instance: ``super()``, ``super(C, self)``, ``self.m(...)``, or a bound method handed to a
    helper with them (``helper(self.m, *args, **kwargs)``, ``helper(self, super().m, *args,
    **kwargs)``: the helper calls the bound method with ``*args`` / ``**kwargs``; its own other
    arguments are the helper's, not the method's). ``resolve(expr)`` names the class of a
    ``super(C, self)`` (None when it cannot)."""
    a = fn.args
    vararg = a.vararg.arg if a.vararg else None
    kwarg = a.kwarg.arg if a.kwarg else None
    if vararg is None and kwarg is None:
        return ()
    params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    dropped, added = _kwargs_edits(fn, kwarg)
    found: list[Forward] = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or not _passes_on(node, vararg, kwarg):
            continue
        target = _callee(node.func)
        rest: list[ast.expr] = list(node.args)
        keywords: list[ast.keyword] = list(node.keywords)
        handed = _handed_on(node)
        if handed is not None:  # a bound method handed on wins over the helper
            target = handed[1]
            # Only the pass-through *args / **kwargs reach the bound method.
            rest = [x for x in node.args if isinstance(x, ast.Starred)]
            keywords = [k for k in node.keywords if k.arg is None]
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
            found.append(Forward(how, method, after, args, kw, node.lineno, (*dropped,), (*added,)))
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
    calls: list[SelfCall] = []
    constructs: list[Construct] = []
    reads: list[str] = []
    required: list[str] = []
    guarded: list[str] = []
    forward_nodes = {
        id(n)
        for n in nodes
        if isinstance(n, ast.Call)
        and _passes_on(n, vararg, kwarg)
        and (_callee(n.func) is not None or _handed_on(n) is not None)
    }
    handled: set[int] = set()  # Name nodes of kwarg whose use is a read by name
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
                starred = any(isinstance(x, ast.Starred) for x in node.args) or any(
                    k.arg is None for k in node.keywords
                )
                constructs.append(
                    Construct(
                        len(node.args),
                        tuple(k.arg for k in node.keywords if k.arg is not None),
                        starred,
                        node.lineno,
                    )
                )
            # self.m(...) / cls.m(...) / super().m(...), and bound methods handed to a helper
            handed_args = node.args if id(node) in forward_nodes else []
            for expr in (func, *handed_args):
                target = _callee(expr, me)
                if target is None or (expr is not func and not isinstance(expr, ast.Attribute)):
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
            # kwargs.get("x") / kwargs.pop("x") / kwargs.setdefault("x")
            if (
                kwarg is not None
                and isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == kwarg
            ):
                key = node.args[0] if node.args else None
                if func.attr in ("get", "pop", "setdefault") and isinstance(key, ast.Constant):
                    reads.append(str(key.value))
                    handled.add(id(func.value))
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
                reads.append(name)
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
    )


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
