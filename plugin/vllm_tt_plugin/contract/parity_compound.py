"""``with``, ``try: ... finally:`` and ``match`` in ``parity_raises``' abstract run (rt45g R01,
R02, R04): their bodies run as Python runs them, so a guard or a ``return`` inside is reached
like any other statement.

- ``with``: the body runs. A context manager that may swallow the exception
  (``contextlib.suppress``, an ``ExitStack``, whose callbacks may) leaves the body undecided;
  any other is taken not to (``torch.no_grad()``, ``torch.inference_mode()``, a lock, a device
  context: their ``__exit__`` returns a false value). A documented limit: a project context
  manager whose ``__exit__`` returns True is read as one that does not.
- ``try`` without handlers: the body, then ``else``, then ``finally`` (whose own ``return`` /
  ``raise`` wins). With handlers a handler may catch what the body raises: undecided, as before.
- ``match``: the subject and each case's pattern are compared where both are decided (a literal,
  ``True`` / ``False`` / ``None``, ``_``, a capture, ``|``) and the guard is evaluated; the first
  case that matches runs, none: nothing runs. A pattern or guard not decided leaves the whole
  statement undecided.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any, Protocol

from vllm_tt_plugin.contract.plugin_values import Some, Unknown


class _Frame(Protocol):
    """What this module uses of parity_raises' frame (typed here: parity_raises imports this
    module, so importing it back, even for types, would be a cycle). Outcomes are parity_raises'
    ``Outcome`` (or None), passed through untouched."""

    env: dict[str, Any]

    def value(self, expr: ast.expr) -> Any: ...
    def truth(self, expr: ast.expr) -> bool | None: ...
    def block(self, body: Sequence[ast.stmt]) -> Any: ...
    def _undecided(self, stmt: ast.stmt) -> Any: ...
    def _bind(self, target: ast.expr, value: Any) -> None: ...


Outcome = Any  # parity_raises.Outcome

_PLAIN = (bool, int, float, str, type(None))


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
    return frame._undecided(stmt)


def _with(frame: _Frame, stmt: ast.With | ast.AsyncWith) -> Outcome | None:
    if any(swallows(item.context_expr) for item in stmt.items):
        return frame._undecided(stmt)
    for item in stmt.items:
        if item.optional_vars is not None:
            frame._bind(item.optional_vars, Unknown())
    return frame.block(stmt.body)


def _try(frame: _Frame, stmt: ast.Try) -> Outcome | None:
    if stmt.handlers:
        return frame._undecided(stmt)
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
