"""Does a driven method raise, or return nothing, for the values the plugin sends?

The method the plugin calls is run abstractly once per ``plugin_values.Scenario``: its
parameters hold the plugin's values where the plugin decides them (``None`` / not None, the
reload commands, ``enable_trace``, ``read_from_device``, which keys ``**kwargs`` holds) and
unknown otherwise. Statements run in order; an ``assert`` whose test is False, a ``raise``
reached, or a call of an own method (``self.m`` / ``super().m``) or a checkout module function
(``from models.common.decode_contract import require_full_input_reload``) that raises, is a
failure of that call. Only what is decided counts: an ``if`` whose test is unknown is not
entered (its assignments make names unknown; a ``return`` in it stops the run), nor a loop or a
``try`` with handlers; ``with`` / ``try: ... finally:`` / ``match`` bodies run as Python runs
them (``parity_compound``), a test on anything else (``self.x``, a tensor's truth, a value
the plugin does not decide) is unknown. So a guard the checker cannot evaluate is ignored, never
reported (a documented limit). The same run finds a method whose result the plugin uses falling
off the end of its body, or reaching a ``return None``, for some values (a return on the traced
branch only; ``if slot_remap is not None: return None``).
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_tt_plugin.contract.parity_compound import LOOPS, compound_step
from vllm_tt_plugin.contract.plugin_values import SOME, UNKNOWN, Scenario, Some, Unknown

# Calls that read their object (a skeleton keeps `if ...: kwargs.get("k")` as a read): an
# undecided branch making them does not change what the object holds.
_READ_ONLY_METHODS = frozenset({"get", "keys", "values", "items", "copy", "count", "index"})

Fn = ast.FunctionDef | ast.AsyncFunctionDef
# (how, method name, the module-level name) -> (def, the callee resolver of its body, first
# parameters the instance / class takes, (its label, its file)) | None
Callee = Callable[[str, str, ast.expr | None], "tuple[Fn, Any, int, tuple[str, str]] | None"]
_MAX_DEPTH = 6


@dataclass
class Kw:
    """A ``**kwargs`` mapping: exactly these keys."""

    items: dict[str, Any]


@dataclass
class Seq:
    """A list built in the body whose length is known (``rejected = []`` then appends)."""

    length: int


@dataclass
class Outcome:
    kind: str  # "raise", "return", "none" (`return None` / bare), "fall" (off the end), "unknown"
    detail: str = ""
    line: int = 0
    chain: list[tuple[str, str]] = field(default_factory=list)  # (callee, its file) outermost first


def _truth(value: Any) -> bool | None:
    if isinstance(value, (Unknown, Some)):
        return None
    if isinstance(value, Kw):
        return bool(value.items)
    if isinstance(value, Seq):
        return value.length > 0
    if isinstance(value, tuple) and all(not isinstance(v, Unknown) for v in value):
        return bool(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return bool(value)
    return None


class _Frame:
    def __init__(self, env: dict[str, Any], callee: Callee | None, depth: int) -> None:
        self.env = env
        self.callee = callee
        self.depth = depth
        self.loop_line = 0  # a loop passed whose body returns only under a condition

    # --- expressions -----------------------------------------------------------------------
    def value(self, expr: ast.expr) -> Any:
        if isinstance(expr, ast.Constant):
            return UNKNOWN if expr.value is Ellipsis else expr.value
        if isinstance(expr, ast.Name):
            return self.env.get(expr.id, UNKNOWN)
        if isinstance(expr, (ast.UnaryOp, ast.BoolOp, ast.Compare)):
            truth = self.truth(expr)
            return UNKNOWN if truth is None else truth
        if isinstance(expr, ast.List) and not expr.elts:
            return Seq(0)
        if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant):
            mapping = self.value(expr.value)
            if isinstance(mapping, Kw) and isinstance(expr.slice.value, str):
                return mapping.items.get(expr.slice.value, UNKNOWN)
            return UNKNOWN
        if isinstance(expr, ast.Call):
            return self._call_value(expr)
        return UNKNOWN

    def _call_value(self, call: ast.Call) -> Any:
        func = call.func
        if isinstance(func, ast.Name) and func.id == "bool" and len(call.args) == 1:
            truth = self.truth(call.args[0])
            return UNKNOWN if truth is None else truth
        if (
            isinstance(func, ast.Attribute) and func.attr in ("get", "pop")
            and call.args and isinstance(call.args[0], ast.Constant)
            and not call.keywords
        ):  # fmt: skip
            mapping = self.value(func.value)
            key = call.args[0].value
            if isinstance(mapping, Kw) and isinstance(key, str):
                default = self.value(call.args[1]) if len(call.args) > 1 else None
                if func.attr == "pop":
                    if key not in mapping.items and len(call.args) == 1:
                        return UNKNOWN  # a KeyError: the kwargs rules report it
                    return mapping.items.pop(key, default)
                return mapping.items.get(key, default)
        return UNKNOWN

    def truth(self, expr: ast.expr) -> bool | None:
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            inner = self.truth(expr.operand)
            return None if inner is None else not inner
        if isinstance(expr, ast.BoolOp):
            parts = [self.truth(v) for v in expr.values]
            decisive = isinstance(expr.op, ast.Or)  # `or`: any True; `and`: any False
            if decisive in parts:
                return decisive
            return None if None in parts else not decisive
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
            return self._compare(expr.left, expr.ops[0], expr.comparators[0])
        return _truth(self.value(expr))

    def _compare(self, left: ast.expr, op: ast.cmpop, right: ast.expr) -> bool | None:
        a, b = self.value(left), self.value(right)
        if isinstance(op, (ast.Is, ast.IsNot)):
            if b is None or a is None:
                other = a if b is None else b
                if isinstance(other, Unknown):
                    return None
                same = other is None
                return same if isinstance(op, ast.Is) else not same
            return None
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(b, Kw) and isinstance(a, str):
            return (a in b.items) is isinstance(op, ast.In)
        plain = (bool, int, str, type(None))
        if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(a, plain) and isinstance(b, plain):
            return (a == b) is isinstance(op, ast.Eq)
        return None

    # --- statements ------------------------------------------------------------------------
    def run(self, body: Sequence[ast.stmt]) -> Outcome:
        out = self.block(body) or Outcome("fall")
        if self.loop_line and out.kind == "raise":  # only where the loop did not return
            return Outcome("unknown")  # (a retry loop's closing `raise` is no failure)
        if self.loop_line and out.kind in ("fall", "none"):  # the loop may have returned
            return Outcome("loop", line=self.loop_line)
        return out

    def block(self, body: Sequence[ast.stmt]) -> Outcome | None:
        """How ``body`` ends, None when it runs to its end."""
        for stmt in body:
            out = self.step(stmt)
            if out is not None:
                return out
        return None

    def step(self, stmt: ast.stmt) -> Outcome | None:
        if isinstance(stmt, ast.Assert):
            if self.truth(stmt.test) is False:
                text = ast.unparse(stmt.test)[:120]
                return Outcome("raise", f"`assert {text}` fails (AssertionError)", stmt.lineno)
            return None
        if isinstance(stmt, ast.Raise):
            exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
            text = ast.unparse(exc)[:80] if exc is not None else "(re-raise)"
            return Outcome("raise", f"raises {text}", stmt.lineno)
        if isinstance(stmt, ast.Return):
            if stmt.value is not None:
                out = self._calls_in(stmt.value)
                if out is not None:
                    return out
            # `return None` / bare `return` as written (a parameter the plugin leaves None is
            # the author's value: a host step's `return sampling_params`)
            none = stmt.value is None or (
                isinstance(stmt.value, ast.Constant) and stmt.value.value is None
            )
            bare = "bare" if stmt.value is None else ""
            return Outcome("none" if none else "return", bare, line=stmt.lineno)
        if isinstance(stmt, ast.If):
            test = self.truth(stmt.test)
            if test is not None:
                return self.block(stmt.body if test else stmt.orelse)
            return self._undecided(stmt)
        if isinstance(stmt, (ast.With, ast.AsyncWith, ast.Try, ast.Match, *LOOPS)):
            return compound_step(self, stmt)
        if isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Call) and self._appends(stmt.value):
                return None
            return self._calls_in(stmt.value)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            value = stmt.value
            out = self._calls_in(value) if value is not None else None
            if out is not None:
                return out
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            known = self.value(value) if value is not None else UNKNOWN
            for t in targets:
                self._bind(t, known if isinstance(t, ast.Name) else UNKNOWN)
            return None
        if isinstance(stmt, (ast.Pass, ast.Global, ast.Nonlocal)):
            return None
        return self._undecided(stmt)

    def _undecided(self, stmt: ast.stmt) -> Outcome | None:
        """A statement whose inside may or may not run: what it binds or changes becomes
        unknown; a ``return`` / ``yield`` / ``break`` in it may end the body here."""
        nodes = frame_nodes(stmt)
        ends = (ast.Return, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom)
        if any(isinstance(node, ends) for node in nodes):
            return Outcome("unknown")
        self._forget(stmt)
        return None

    def _forget(self, stmt: ast.stmt) -> None:
        """What ``stmt`` binds or changes becomes unknown."""
        nodes = frame_nodes(stmt)
        called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
        for node in nodes:
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                self.env[node.id] = UNKNOWN
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and (
                    not isinstance(node.ctx, ast.Load)
                    or (id(node) in called and node.attr not in _READ_ONLY_METHODS)
                )
            ):
                self.env[node.value.id] = UNKNOWN  # `x.append(...)`, `kw.update(...)`, `x.a = v`
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                self.env[node.value.id] = UNKNOWN

    def _bind(self, target: ast.expr, value: Any) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.env[node.id] = value if node is target else UNKNOWN
            elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(
                node.value, ast.Name
            ):
                self.env[node.value.id] = UNKNOWN

    def _appends(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            held = self.env.get(func.value.id)
            if isinstance(held, Seq):
                self.env[func.value.id] = Seq(held.length + 1) if func.attr == "append" else UNKNOWN
                return True
            if isinstance(held, Kw) and func.attr not in ("get", "pop"):
                self.env[func.value.id] = UNKNOWN  # update / setdefault / clear
        return False

    def _calls_in(self, expr: ast.expr) -> Outcome | None:
        """The first call in ``expr`` (outermost only) that raises for these values."""
        if not isinstance(expr, ast.Call):
            if isinstance(expr, ast.Await) and isinstance(expr.value, ast.Call):
                expr = expr.value
            else:
                return None
        if self.callee is None or self.depth >= _MAX_DEPTH:
            return None
        self.value(expr)  # a `kwargs.pop(...)` changes the mapping
        found = self._resolve(expr.func)
        if found is None:
            return None
        fn, resolver, skip, where = found
        bound = self._bind_call(fn, expr, skip)
        if bound is None:
            return None
        inner = _Frame(bound, resolver, self.depth + 1).run(fn.body)
        if inner.kind == "raise":
            inner.chain.insert(0, where)
            return inner
        return None

    def _resolve(self, func: ast.expr) -> tuple[Fn, Any, int, tuple[str, str]] | None:
        assert self.callee is not None
        if isinstance(func, ast.Attribute):
            holder = func.value
            if isinstance(holder, ast.Name) and holder.id == "self":
                return self.callee("self", func.attr, None)
            if (
                isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name)
                and holder.func.id == "super" and not holder.args
            ):  # fmt: skip
                return self.callee("super", func.attr, None)
            return None
        if isinstance(func, ast.Name):
            return self.callee("function", func.id, func)
        return None

    def _bind_call(self, fn: Fn, call: ast.Call, skip: int) -> dict[str, Any] | None:
        args: list[Any] = [UNKNOWN] * skip
        kwargs: dict[str, Any] = {}
        for a in call.args:
            if isinstance(a, ast.Starred):
                held = self.value(a.value)
                if not isinstance(held, tuple):
                    return None
                args.extend(held)
            else:
                args.append(self.value(a))
        for k in call.keywords:
            if k.arg is None:
                held = self.value(k.value)
                if not isinstance(held, Kw):
                    return None
                kwargs.update(held.items)
            else:
                kwargs[k.arg] = self.value(k.value)
        return bind(fn, args, kwargs)


def frame_nodes(stmt: ast.AST) -> list[ast.AST]:
    """``stmt`` and the nodes under it in its own frame (not in nested defs, lambdas, classes)."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        out.append(node)
        stack += [
            c for c in ast.iter_child_nodes(node)
            if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
        ]  # fmt: skip
    return out


def bind(fn: Fn, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """``fn``'s parameters bound as Python binds them (defaults: literals, else unknown;
    ``*args`` a tuple, ``**kwargs`` a ``Kw``), None where they do not bind."""
    a = fn.args
    kinds = inspect.Parameter
    params: list[inspect.Parameter] = []
    positional = [*a.posonlyargs, *a.args]
    pos_defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, p in enumerate(positional):
        kind = kinds.POSITIONAL_ONLY if i < len(a.posonlyargs) else kinds.POSITIONAL_OR_KEYWORD
        params.append(inspect.Parameter(p.arg, kind, default=_default(pos_defaults[i])))
    if a.vararg is not None:
        params.append(inspect.Parameter(a.vararg.arg, kinds.VAR_POSITIONAL))
    for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        params.append(inspect.Parameter(p.arg, kinds.KEYWORD_ONLY, default=_default(d)))
    if a.kwarg is not None:
        params.append(inspect.Parameter(a.kwarg.arg, kinds.VAR_KEYWORD))
    try:
        bound = inspect.Signature(params).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None  # the binding rules report what does not bind
    bound.apply_defaults()
    env = dict(bound.arguments)
    if a.kwarg is not None:
        env[a.kwarg.arg] = Kw(dict(env.get(a.kwarg.arg, {})))
    if a.vararg is not None:
        env[a.vararg.arg] = tuple(env.get(a.vararg.arg, ()))
    return env


def _default(expr: ast.expr | None) -> Any:
    if expr is None:
        return inspect.Parameter.empty
    try:
        value = ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN
    return UNKNOWN if value is Ellipsis else value


def run_call(
    fn: Fn, skip: int, scenario: Scenario, positional: Sequence[str], callee: Callee
) -> Outcome:
    """``fn`` (the method the plugin calls) run with the scenario's values."""
    args = [UNKNOWN] * skip + [scenario.values.get(p, UNKNOWN) for p in positional]
    kwargs = {k: v for k, v in scenario.values.items() if k not in positional}
    env = bind(fn, args, kwargs)
    if env is None:
        return Outcome("unknown")
    return _Frame(env, callee, 0).run(fn.body)


__all__ = ["SOME", "Outcome", "bind", "frame_nodes", "run_call"]
