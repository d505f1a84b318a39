"""``with``, ``try: ... finally:`` and ``match`` in ``parity_raises``' abstract run (rt45g R01,
R02, R04): their bodies run as Python runs them, so a guard or a ``return`` inside is reached
like any other statement.

- ``with``: the body runs. A context manager that may swallow the exception
  (``contextlib.suppress``, an ``ExitStack``, whose callbacks may) leaves the body undecided;
  any other is taken not to (``torch.no_grad()``, ``torch.inference_mode()``, a lock, a device
  context: their ``__exit__`` returns a false value). A documented limit: a project context
  manager whose ``__exit__`` returns True is read as one that does not.
- ``try`` without handlers: the body, then ``else``, then ``finally`` (whose own ``return`` /
  ``raise`` wins). With handlers a handler may catch what the body raises: undecided, except
  where the body's first statements (names, constants, ``not`` / ``and`` / ``or`` / ``is`` /
  ``==``: nothing that can raise) lead to an ``assert`` that fails or a ``raise`` of a builtin
  exception (constant arguments) no handler catches (rt45h GD02: ``assert not
  reload_page_table`` under ``except ImportError``): it leaves the ``try`` after ``finally``.
- A loop (``for`` / ``while``) is not entered. One whose body returns only under a condition
  (no ``return`` at the top of its body; rt45h RT04: a retry loop) may also end normally: the
  run goes on after it (the names it binds unknown) and falling off the end (or ``return
  None``) there is ``loop``, undecided (``unresolved``: the loop may have returned), never a
  pass; a ``raise`` after it is undecided (a retry loop's closing error).
- ``match``: the subject and each case's pattern are compared where both are decided (a literal,
  ``True`` / ``False`` / ``None``, ``_``, a capture, ``|``) and the guard is evaluated; the first
  case that matches runs, none: nothing runs. A pattern or guard not decided leaves the whole
  statement undecided.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Sequence
from typing import Any, Protocol

from vllm_tt_plugin.contract.plugin_values import Some, Unknown


class _Frame(Protocol):
    """What this module uses of parity_raises' frame (typed here: parity_raises imports this
    module, so importing it back, even for types, would be a cycle). Outcomes are parity_raises'
    ``Outcome`` (or None), passed through untouched."""

    env: dict[str, Any]
    loop_line: int

    def value(self, expr: ast.expr) -> Any: ...
    def truth(self, expr: ast.expr) -> bool | None: ...
    def block(self, body: Sequence[ast.stmt]) -> Any: ...
    def _undecided(self, stmt: ast.stmt) -> Any: ...
    def _forget(self, stmt: ast.stmt) -> None: ...
    def _bind(self, target: ast.expr, value: Any) -> None: ...


Outcome = Any  # parity_raises.Outcome

_PLAIN = (bool, int, float, str, type(None))
LOOPS = (ast.For, ast.AsyncFor, ast.While)
# What a statement before the raise may hold: nothing here raises.
_INERT = (ast.Name, ast.Constant, ast.Tuple, ast.expr_context, ast.Assign, ast.Pass, ast.Assert,
          ast.UnaryOp, ast.Not, ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.Is, ast.IsNot, ast.Eq,
          ast.NotEq,
          ast.JoinedStr, ast.FormattedValue)  # fmt: skip


def swallows(expr: ast.expr) -> bool:
    """A context manager that may swallow its body's exception (``parity_compound``)."""
    func = expr.func if isinstance(expr, ast.Call) else expr
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in ("suppress", "ExitStack", "AsyncExitStack")


def compound_step(frame: _Frame, stmt: ast.stmt) -> Outcome | None:
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return _with(frame, stmt)
    if isinstance(stmt, ast.Try):
        return _try(frame, stmt)
    if isinstance(stmt, ast.Match):
        return _match(frame, stmt)
    if isinstance(stmt, LOOPS):
        return _loop(frame, stmt)
    return frame._undecided(stmt)


def _own_nodes(stmt: ast.AST) -> list[ast.AST]:
    out, stack = [], [stmt]
    while stack:
        node = stack.pop()
        out.append(node)
        nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
        stack += [c for c in ast.iter_child_nodes(node) if not isinstance(c, nested)]
    return out


def loop_may_fall(stmt: ast.stmt, forever: bool | None = None) -> bool:
    """A loop whose body returns only under a condition and that may end normally (``forever``:
    its ``while`` test is true; None: the test as written is a true constant)."""
    if not isinstance(stmt, LOOPS):
        return False
    nodes = _own_nodes(stmt)
    returns = any(isinstance(n, ast.Return) for n in nodes)
    yields = any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in nodes)
    breaks = any(isinstance(n, ast.Break) for n in nodes)
    if forever is None:
        test = stmt.test if isinstance(stmt, ast.While) else None
        forever = isinstance(test, ast.Constant) and bool(test.value)
    endless = isinstance(stmt, ast.While) and forever and not breaks
    first = any(isinstance(s, (ast.Return, ast.Raise)) for s in stmt.body)  # every pass ends
    return returns and not (yields or endless or first)


def _loop(frame: _Frame, stmt: ast.For | ast.AsyncFor | ast.While) -> Outcome | None:
    forever = isinstance(stmt, ast.While) and frame.truth(stmt.test) is True
    if not loop_may_fall(stmt, forever):
        return frame._undecided(stmt)
    frame._forget(stmt)
    frame.loop_line = frame.loop_line or stmt.lineno
    breaks = any(isinstance(n, ast.Break) for n in _own_nodes(stmt))
    return None if breaks else frame.block(stmt.orelse)


def _with(frame: _Frame, stmt: ast.With | ast.AsyncWith) -> Outcome | None:
    if any(swallows(item.context_expr) for item in stmt.items):
        return frame._undecided(stmt)
    for item in stmt.items:
        if item.optional_vars is not None:
            frame._bind(item.optional_vars, Unknown())
    return frame.block(stmt.body)


def _raised(stmt: ast.stmt) -> type[BaseException] | None:
    """The builtin exception class ``stmt`` raises when it does (an ``assert``, a ``raise``)."""
    if isinstance(stmt, ast.Assert):
        return AssertionError
    exc = stmt.exc if isinstance(stmt, ast.Raise) else None
    if isinstance(exc, ast.Call) and all(isinstance(a, ast.Constant) for a in exc.args):
        exc = exc.func
    found = getattr(builtins, exc.id, None) if isinstance(exc, ast.Name) else None
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def _may_catch(handlers: list[ast.ExceptHandler], raised: type[BaseException]) -> bool:
    for handler in handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        for kind in kinds:
            named = getattr(builtins, kind.id, None) if isinstance(kind, ast.Name) else None
            if not (isinstance(named, type) and issubclass(named, BaseException)):
                return True  # bare `except:`, a project class: may catch anything
            if issubclass(raised, named):
                return True
    return False


def _only_uncaught(st: ast.stmt, handlers: list[ast.ExceptHandler]) -> bool:
    """Nothing in ``st`` can raise but an ``assert`` / a ``raise`` of a builtin exception
    (constant arguments) that no handler may catch; ``if`` / ``pass`` / names / constants."""
    stack: list[ast.AST] = [st]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Assert, ast.Raise)):
            raised = _raised(node)
            if raised is None or _may_catch(handlers, raised):
                return False
            if isinstance(node, ast.Raise):
                continue  # the exception's constant arguments: _raised checked them
        elif not isinstance(node, (*_INERT, ast.If)):
            return False
        stack.extend(ast.iter_child_nodes(node))
    return True


def uncaught_prefix(stmt: ast.Try) -> list[ast.stmt]:
    """The ``try`` body's first statements in which nothing can raise but what no handler may
    catch (``_only_uncaught``): what the abstract run runs of a ``try`` with handlers."""
    out: list[ast.stmt] = []
    for st in stmt.body:
        if not _only_uncaught(st, stmt.handlers):
            break
        out.append(st)
    return out


def _uncaught(frame: _Frame, stmt: ast.Try) -> Outcome | None:
    """The failure the body's first statements surely raise past every handler, or None (the
    frame as before)."""
    saved = dict(frame.env)
    out = frame.block(uncaught_prefix(stmt))
    if out is not None and out.kind == "raise":
        return out
    frame.env.clear()
    frame.env.update(saved)
    return None


def _try(frame: _Frame, stmt: ast.Try) -> Outcome | None:
    if stmt.handlers:
        out = _uncaught(frame, stmt)
        if out is None:
            return frame._undecided(stmt)
        final = frame.block(stmt.finalbody)
        return final if final is not None else out
    out = frame.block(stmt.body)
    if out is None:
        out = frame.block(stmt.orelse)
    if out is not None and out.kind == "unknown":
        return out
    final = frame.block(stmt.finalbody)
    return final if final is not None else out


def _match(frame: _Frame, stmt: ast.Match) -> Outcome | None:
    subject = frame.value(stmt.subject)
    for case in stmt.cases:
        hit = _matches(frame, case.pattern, subject)
        if hit is None:
            return frame._undecided(stmt)
        if not hit:
            continue
        _capture(frame, case.pattern, subject)
        if case.guard is not None:
            guard = frame.truth(case.guard)
            if guard is None:
                return frame._undecided(stmt)
            if not guard:
                continue
        return frame.block(case.body)
    return None


def _matches(frame: _Frame, pattern: ast.pattern, subject: Any) -> bool | None:
    if isinstance(pattern, ast.MatchAs):
        return True if pattern.pattern is None else _matches(frame, pattern.pattern, subject)
    if isinstance(pattern, ast.MatchOr):
        hits = [_matches(frame, p, subject) for p in pattern.patterns]
        return True if True in hits else (None if None in hits else False)
    if isinstance(pattern, ast.MatchSingleton):
        if isinstance(subject, Some):
            return False if pattern.value is None else None
        return subject is pattern.value if isinstance(subject, _PLAIN) else None
    if isinstance(pattern, ast.MatchValue):
        value = frame.value(pattern.value)
        if isinstance(subject, _PLAIN) and isinstance(value, _PLAIN):
            return bool(subject == value)
        return None
    return None


def _capture(frame: _Frame, pattern: ast.pattern, subject: Any) -> None:
    if isinstance(pattern, ast.MatchAs) and pattern.name:
        frame.env[pattern.name] = subject
    elif isinstance(pattern, ast.MatchOr):
        for name in {n.name for n in ast.walk(pattern) if isinstance(n, ast.MatchAs) and n.name}:
            frame.env[name] = Unknown()
