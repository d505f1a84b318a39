"""What the TT host's Python 3.10 (docs/TT_HOST.md) does on importing a module, judged the
same whichever interpreter (3.10-3.12) runs the checker.

- The standard-library names 3.11+ added (``py310_absent.json``, written by
  ``tools/gen_py310_absent.py`` from pyenv's interpreters, not by hand): a module-level use of
  one in any spelling the import evaluates (``enum.StrEnum`` as a base, ``datetime.UTC`` in a
  constant, ``-> typing.Self`` on a def without ``from __future__ import annotations``,
  ``@typing.override``, the ``ExceptionGroup`` builtin, ``StrEnum`` after ``from enum import
  *``, ``@dataclass(weakref_slot=True)``) fails there: ``broken``, naming the name.
- ``sys.version_info`` tests are evaluated for 3.10: a module that asserts or raises on
  ``< (3, 11)`` does not import (``broken``); the branch 3.10 does not run is not judged, nor
  the one a feature test of a listed name skips (``hasattr(enum, "StrEnum")``:
  ``source_hosttest``).
- Syntax 3.11 added that ``ast.parse(feature_version=(3, 10))`` still accepts (PEP 646
  ``x[*Ts]`` / ``*args: *Ts``), and the compiler's own errors ``ast.parse`` never raises
  (``break`` outside a loop, a duplicate parameter, ``global`` after use, ...).
"""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vllm_tt_plugin.contract.source_hosttest import host_test
from vllm_tt_plugin.contract.source_pyversion import version_gate
from vllm_tt_plugin.contract.source_stdlib import (
    absent,
    dotted,
    getattr_name,
    lacking,
)

# A skeleton keeps def headers and simple values, not every statement the import runs: it
# records each failure found in the source as such a line, which the checker reads back.
HOST_FAILS = "# fails on Python 3.10:"
_BRANCH = " where that branch runs"


@dataclass(frozen=True)
class HostFailure:
    """A statement the import runs that fails on Python 3.10 (``unresolved``: only where a
    branch the checker does not evaluate runs)."""

    line: int
    status: str
    why: str


# --- what the import evaluates -----------------------------------------------------------------


def _future_annotations(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.ImportFrom) and n.module == "__future__"
        and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    )  # fmt: skip


def evaluated(
    module: Any, stmts: list[ast.stmt], lazy: bool, sure: bool
) -> Iterator[tuple[ast.AST, bool]]:
    """(expression, unconditional) for what running ``stmts`` evaluates on 3.10 (function
    bodies and lambda bodies are not run; annotations only without ``lazy``)."""
    for st in stmts:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = st.args
            yield from ((d, sure) for d in (*st.decorator_list, *a.defaults, *a.kw_defaults) if d)
            if not lazy:
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                notes = [p.annotation for p in params if p is not None and p.annotation]
                yield from ((n, sure) for n in [*notes, st.returns] if n is not None)
        elif isinstance(st, ast.ClassDef):
            yield from ((d, sure) for d in (*st.decorator_list, *st.bases))
            yield from ((k.value, sure) for k in st.keywords)
            yield from evaluated(module, st.body, lazy, sure)
        elif isinstance(st, ast.If):  # a version / feature test, a constant: one branch
            truth = host_test(module, st.test)
            if truth is None:
                yield st.test, sure
                yield from evaluated(module, [*st.body, *st.orelse], lazy, False)
            else:
                yield from evaluated(module, st.body if truth else st.orelse, lazy, sure)
        elif isinstance(st, ast.Try):  # the body's failure may be what a handler catches
            for handler in st.handlers:
                yield from evaluated(module, handler.body, lazy, False)
            yield from evaluated(module, st.finalbody, lazy, sure)
        elif isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
            yield (st.iter if isinstance(st, (ast.For, ast.AsyncFor)) else st.test), sure
            yield from evaluated(module, [*st.body, *st.orelse], lazy, False)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            yield from ((item.context_expr, sure) for item in st.items)
            yield from evaluated(module, st.body, lazy, sure)
        elif isinstance(st, ast.AnnAssign):
            if st.value is not None:
                yield st.value, sure
            if not lazy and isinstance(st.target, ast.Name):
                yield st.annotation, sure
        elif isinstance(st, (ast.Assign, ast.AugAssign, ast.Expr, ast.Assert, ast.Raise)):
            yield st, sure


def expr_nodes(expr: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``expr`` evaluated with it (not a lambda's body)."""
    stack = [expr]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, ast.Lambda):
            stack += [d for d in (*n.args.defaults, *n.args.kw_defaults) if d]
            continue
        stack.extend(ast.iter_child_nodes(n))


def _stars(module: Any) -> list[str]:
    return [m for m in getattr(module, "stars", []) if m in absent().names]


def host_failure(module: Any, node: ast.AST) -> str:
    """Why evaluating ``node`` fails on 3.10 ("" when it does not)."""
    table = absent()
    reached = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
    if reached or getattr_name(module, node):  # type: ignore[arg-type]
        missing = lacking(dotted(module, node))  # type: ignore[arg-type]
        if missing:
            return f"uses {missing}, which Python 3.10 does not have (AttributeError)"
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        if node.id in module.bound or node.id in module.imports:
            return ""
        if node.id in table.names.get("builtins", ()) and not module.stars:
            return f"uses the builtin {node.id}, which Python 3.10 does not have (NameError)"
        for star in _stars(module):
            if node.id in table.names[star]:
                return (
                    f"uses {node.id} from `from {star} import *`, which Python 3.10's {star} "
                    "does not have (NameError)"
                )
    if isinstance(node, ast.Call):
        callee = dotted(module, node.func)
        lacking_params = table.params.get(callee, frozenset())
        newer = [k.arg for k in node.keywords if k.arg in lacking_params]
        if newer:
            return (
                f"calls {callee}({newer[0]}=...), a keyword Python 3.10's {callee} does not take "
                "(TypeError)"
            )
    return ""


def host_failures(module: Any) -> list[HostFailure]:
    """The statements importing ``module`` runs that fail on Python 3.10, in order."""
    tree: ast.Module | None = getattr(module, "tree", None)
    if tree is None:
        return []
    out: list[HostFailure] = []
    for st in tree.body:
        status, why = version_gate(module, st)
        if status:
            out.append(HostFailure(st.lineno, status, why))
    for expr, sure in evaluated(module, tree.body, _future_annotations(tree), True):
        for node in expr_nodes(expr):
            why = host_failure(module, node)
            if why:
                line = getattr(node, "lineno", 0)
                out.append(HostFailure(line, "broken" if sure else "unresolved",
                                       why if sure else why + _BRANCH))  # fmt: skip
                break
    return out


def recorded_failures(text: str) -> tuple[str, ...]:
    """The ``HOST_FAILS`` lines of a skeleton ("<status> line <n>: <why>")."""
    return tuple(
        line[len(HOST_FAILS) :].strip() for line in text.splitlines() if line.startswith(HOST_FAILS)
    )


def failure_lines(module: Any, text: str) -> list[str]:
    """What a skeleton of ``module`` (whose source is ``text``) records."""
    found = [f"{f.status} line {f.line}: {f.why}" for f in host_failures(module)]
    return [f"{HOST_FAILS} {r}" for r in dict.fromkeys([*recorded_failures(text), *found])]


def parse_recorded(entry: str) -> HostFailure | None:
    """A ``recorded_failures`` entry read back."""
    status, _, rest = entry.partition(" line ")
    number, _, why = rest.partition(": ")
    if status not in ("broken", "unresolved") or not number.isdigit() or not why:
        return None
    return HostFailure(int(number), status, why)


# --- syntax --------------------------------------------------------------------------------------


def pep646_star(tree: ast.AST) -> int:
    """The line of a PEP 646 star (``x[*Ts]``, ``*args: *Ts``: Python 3.11 syntax that
    ``ast.parse(feature_version=(3, 10))`` accepts), or 0."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Subscript):
            items = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            if any(isinstance(i, ast.Starred) for i in items):
                return n.lineno
        if isinstance(n, ast.arguments) and n.vararg is not None:  # noqa: SIM102
            if isinstance(n.vararg.annotation, ast.Starred):
                return n.vararg.lineno
    return 0


def _delimiter(token: str) -> str:
    body = token.lstrip("rRbBfFuU")
    return body[:3] if body[:3] in ('"""', "'''") else body[:1]


def pep701_fstring(text: str) -> int:
    """The line of an f-string whose replacement field reuses the enclosing quote (PEP 701,
    Python 3.12 syntax ``ast.parse(feature_version=(3, 10))`` accepts on 3.12), or 0. Only a
    3.12+ tokenizer splits f-strings (``FSTRING_START``); older ones reject the form already."""
    start = getattr(tokenize, "FSTRING_START", None)
    end = getattr(tokenize, "FSTRING_END", None)
    if start is None:
        return 0
    enclosing: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == end and enclosing:
                enclosing.pop()
                continue
            if tok.type not in (start, tokenize.STRING):
                continue
            inner = _delimiter(tok.string)
            for outer in enclosing:
                if inner[:1] == outer[:1] and (len(outer) == 1 or inner == outer):
                    return tok.start[0]
            if tok.type == start:
                enclosing.append(inner)
    except (tokenize.TokenError, SyntaxError):
        return 0
    return 0


def compile_error(text: str, filename: str) -> SyntaxError | None:
    """The SyntaxError the compiler raises after parsing (its symbol table and code
    generator reject what ``ast.parse`` accepts), or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc
    except (ValueError, MemoryError, RecursionError):
        return None  # not a compile-time error of the source: the parse reports what it can
    return None
