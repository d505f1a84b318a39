"""What the skeleton tool keeps of a body for ``parity_raises`` (the guards on the plugin's
values, and a return only some values reach), so that a skeleton reads as its tree:

- a method's ``assert`` / ``if <test>: raise X`` statements of the body itself, whose test
  reads only its parameters and constants, before any statement that may return or that
  rebinds a parameter (after one, the tree's run may not reach them);
- a method's ``if <test>: return ...`` of the body itself (test on parameters) when nothing
  else in the body returns: written ``if <test>: return None  # a value (elided)`` with no
  return after it, so the other values fall off the end as in the tree;
- a call of a module function handed the method's parameters, a statement of the body itself
  before any return (other arguments as ``...``), and
- a property setter's ``self.x = value`` and its getter's ``return self.x``;
- a returned ``(a, b)`` pair (``return_forms``: an mRoPE prefill's form) as ``(None, None)``;
- a loop whose returns are conditional, the method's only returning statement, as
  ``for _ in (): if unevaluated(): return None`` (the run may fall off after it: rt45h RT04);
- a token budget the launch refuses, returned as written (``budget_value``: rt45h BG04);
- the first statements of a ``try`` no handler can catch (``parity_compound``: rt45h GD02);
- a module function made only of such guards (``rejected = []``, appends, ``if``s, raises,
  returns): tt-metal's ``require_full_input_reload`` / ``reject_legacy_reload_signal``,
  written whole (raised exceptions as ``X(...)``, returned values as ``None``).
"""

from __future__ import annotations

import ast
import builtins
from typing import Any

from vllm_tt_plugin.contract.budget_value import refused_return
from vllm_tt_plugin.contract.parity_compound import loop_may_fall, swallows, uncaught_prefix
from vllm_tt_plugin.contract.parity_raises import frame_nodes
from vllm_tt_plugin.contract.return_forms import returns_pair

Fn = ast.FunctionDef | ast.AsyncFunctionDef
_RETURNED = "return None  # a value (elided)"


def _params(fn: Fn) -> set[str]:
    a = fn.args
    names = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    return names | {p.arg for p in (a.vararg, a.kwarg) if p is not None}


def _returns(node: ast.AST) -> bool:
    return any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) for n in frame_nodes(node))


def _on_params(test: ast.expr, params: set[str]) -> bool:
    names = [n.id for n in ast.walk(test) if isinstance(n, ast.Name)]
    calls = [n for n in ast.walk(test) if isinstance(n, ast.Call)]
    plain_calls = all(
        (isinstance(c.func, ast.Attribute) and c.func.attr == "get") or
        (isinstance(c.func, ast.Name) and c.func.id == "bool")
        for c in calls
    )  # fmt: skip
    return bool(names) and plain_calls and all(n in params or n == "bool" for n in names)


def _stored(fn: Fn) -> set[str]:
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _helper_call(call: ast.Call, params: set[str], local: set[str]) -> str:
    """``check(reload_inputs=reload_inputs, ...)``: a module function handed the method's
    parameters (a guard helper the checker follows), its other arguments as ``...``."""
    func = call.func
    if not isinstance(func, ast.Name) or func.id in local or hasattr(builtins, func.id):
        return ""

    def arg(x: ast.expr) -> str:
        if isinstance(x, ast.Name) and x.id in params:
            return x.id
        return ast.unparse(x) if isinstance(x, ast.Constant) else "..."

    texts = [arg(a) for a in call.args if not isinstance(a, ast.Starred)]
    texts += [f"{k.arg}={arg(k.value)}" for k in call.keywords if k.arg is not None]
    if len(texts) != len(call.args) + len(call.keywords) or not any(
        isinstance(x, ast.Name) and x.id in params
        for x in (*call.args, *(k.value for k in call.keywords))
    ):
        return ""  # *x / **x (the forwarding rules keep those), or no parameter handed
    return f"{func.id}({', '.join(texts)})"


def _raise_text(stmt: ast.Raise) -> str:
    exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
    return f"raise {ast.unparse(exc)}(...)" if exc is not None else "raise"


def _flat(body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` with the bodies of its ``with`` statements in their place (they run as the
    body does: ``parity_compound``), except a manager that may swallow (``suppress``); a
    ``try``'s first statements no handler can catch (rt45h GD02) before it."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, (ast.With, ast.AsyncWith)) and not any(
            swallows(item.context_expr) for item in stmt.items
        ):
            out += _flat(stmt.body)
        elif isinstance(stmt, ast.Try) and stmt.handlers:
            out += [*uncaught_prefix(stmt), stmt]
        else:
            out.append(stmt)
    return out


def _none_return(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Return) and (
        stmt.value is None or (isinstance(stmt.value, ast.Constant) and stmt.value.value is None)
    )


def _one_side_returns(stmt: ast.If) -> bool | None:
    """True: only the body returns a value, False: only the ``else``; None: neither or both."""
    body, orelse = (
        any(isinstance(n, ast.Return) and not _none_return(n) for s in side for n in frame_nodes(s))
        for side in (stmt.body, stmt.orelse)
    )
    return (
        None
        if body == orelse
        or _returns(ast.Module(body=stmt.orelse if body else stmt.body, type_ignores=[]))
        else body
    )


def method_lines(fn: Fn) -> tuple[list[tuple[int, str]], str | None]:
    """The guard and branch-return lines of a method, and the skeleton's closing ``return``
    where it differs from the usual one: "" (left out: a return only some values reach), or
    ``return unevaluated()`` beside a kept ``if <test>: return`` (bare); None: the usual one."""
    params = _params(fn)
    body = _flat(fn.body)
    lines: list[tuple[int, str]] = []
    if any(ast.unparse(d).endswith(".setter") for d in fn.decorator_list):
        # what a property setter keeps (parity_shapes.setter_doubt reads `self.x = value`)
        lines += [
            (st.lineno, ast.unparse(st)) for st in body
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Name)
            and st.value.id in params and isinstance(st.targets[0], ast.Attribute)
        ]  # fmt: skip
    for stmt in body:
        if isinstance(stmt, ast.Assert) and _on_params(stmt.test, params):
            lines.append((stmt.lineno, f"assert {ast.unparse(stmt.test)}"))
        elif (
            isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1
            and isinstance(stmt.body[0], ast.Raise) and _on_params(stmt.test, params)
        ):  # fmt: skip
            lines.append((stmt.lineno, f"if {ast.unparse(stmt.test)}: {_raise_text(stmt.body[0])}"))
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            text = _helper_call(stmt.value, params, _stored(fn))
            if text:
                lines.append((stmt.lineno, text))
        if _returns(stmt) or any(
            isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in params
            for n in frame_nodes(stmt)
        ):
            break
    tests = [s for s in body if isinstance(s, ast.If) and _on_params(s.test, params)]
    branch = [s for s in tests if _one_side_returns(s) is not None]
    cases = [s for s in body if isinstance(s, ast.Match) and _on_params(s.subject, params)]
    others = [s for s in body if s not in branch and s not in cases and _returns(s)]
    if len(branch) == 1 and not cases and not others:
        test = ast.unparse(branch[0].test)
        test = test if _one_side_returns(branch[0]) else f"not ({test})"
        lines.append((branch[0].lineno, f"if {test}: {_RETURNED}"))
        return lines, ""
    if len(cases) == 1 and not branch and not others:  # rt45g R02: a return on one case only
        lines.append((cases[0].lineno, _match_text(cases[0])))
        return lines, ""
    loops = [s for s in others if loop_may_fall(s)]
    if loops and not branch and not cases and _falls_after(body, loops[0], others):
        # rt45h RT04: a loop returning under a condition, then the end or `return None`
        loop = "while unevaluated()" if isinstance(loops[0], ast.While) else "for _ in ()"
        lines.append((loops[0].lineno, f"{loop}:\n    if unevaluated(): {_RETURNED}"))
        return lines, ""
    budget = refused_return(fn)
    if budget:  # rt45h BG04: a budget the launch refuses, kept as written
        return lines, budget
    nones = [s for s in tests if not s.orelse and _none_return(s.body[-1])]
    if len(nones) == 1 and any(_returns(s) for s in body if s is not nones[0]):
        # `if slot_remap is not None: return None` beside a returned value (rt45g R05)
        # bare: in a skeleton `return None` is a value (parity_values)
        lines.append((nones[0].lineno, f"if {ast.unparse(nones[0].test)}: return"))
        return lines, "return unevaluated()  # a value (elided)"
    return lines, None


def _falls_after(body: list[ast.stmt], loop: ast.stmt, others: list[ast.stmt]) -> bool:
    """Nothing but ``loop`` returns a value, and what follows it neither raises nor returns
    anything but None (``parity_raises`` reads the end as ``loop``: undecided)."""
    after = body[body.index(loop) + 1 :]
    raises = any(isinstance(n, (ast.Raise, ast.Assert)) for s in after for n in frame_nodes(s))
    rest = [s for s in others if s is not loop]
    return not raises and all(s in after and _none_return(s) for s in rest)


def _match_text(stmt: ast.Match) -> str:
    """A ``match`` on parameters, each case's body a returned value or ``pass``."""
    out = [f"match {ast.unparse(stmt.subject)}:"]
    for case in stmt.cases:
        guard = f" if {ast.unparse(case.guard)}" if case.guard is not None else ""
        out.append(f"    case {ast.unparse(case.pattern)}{guard}:")
        out.append(f"        {_RETURNED if _returns(case) else 'pass'}")
    return "\n".join(out)


def _guard_statement(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Expr):
        value = stmt.value
        return (isinstance(value, ast.Constant) and isinstance(value.value, str)) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
            and value.func.attr == "append" and isinstance(value.func.value, ast.Name)
        )  # fmt: skip
    if isinstance(stmt, ast.Assign):
        return (
            len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.List) and not stmt.value.elts
        )  # fmt: skip
    if isinstance(stmt, ast.If):
        return all(map(_guard_statement, [*stmt.body, *stmt.orelse]))
    return isinstance(stmt, (ast.Assert, ast.Raise, ast.Return, ast.Pass))


def _written(stmt: ast.stmt, indent: str) -> list[str]:
    if isinstance(stmt, ast.Raise):
        return [indent + _raise_text(stmt)]
    if isinstance(stmt, ast.Return):
        return [indent + "return None"]
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return [f"{indent}{ast.unparse(stmt.value.func)}(...)"]
    if isinstance(stmt, ast.If):
        out = [f"{indent}if {ast.unparse(stmt.test)}:"]
        out += [ln for s in stmt.body for ln in _written(s, indent + "    ")]
        if stmt.orelse:
            out.append(f"{indent}else:")
            out += [ln for s in stmt.orelse for ln in _written(s, indent + "    ")]
        return out
    if isinstance(stmt, ast.Expr):
        return []  # a docstring
    return [indent + ast.unparse(stmt)]


def guard_function(fn: Fn, header: str) -> list[str] | None:
    """A module function made only of guards, written whole (None: it is not one)."""
    if not all(map(_guard_statement, fn.body)):
        return None
    if not any(isinstance(n, (ast.Raise, ast.Assert)) for n in frame_nodes(fn)):
        return None
    body = [ln for s in fn.body for ln in _written(s, "    ")]
    return [header, *(body or ["    pass"])]


def pair_kept(fn: Fn, closing: str, function: Any) -> str:
    """The skeleton's closing return, ``(None, None)`` where ``fn`` returns a pair (directly,
    or the result of an own method of this class that does)."""
    if not closing.startswith("return"):
        return closing
    if "property" in [ast.unparse(d) for d in fn.decorator_list]:
        kept = [
            st for st in fn.body
            if isinstance(st, ast.Return) and isinstance(st.value, ast.Attribute)
            and isinstance(st.value.value, ast.Name)
        ]  # fmt: skip
        if kept:  # the attribute a getter returns (parity_shapes.setter_doubt)
            return ast.unparse(kept[-1])
        returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
        if not all(isinstance(r.value, ast.Constant) and not r.value.value for r in returns):
            return "return unevaluated()  # a value (elided)"  # not a constant False

    def follow(func: ast.expr) -> Fn | None:
        found = function(func) if function is not None else None
        return found[0] if found is not None else None

    return "return (None, None)  # a value (elided)" if returns_pair(fn, follow) else closing
