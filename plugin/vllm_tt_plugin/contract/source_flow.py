"""Where values go in a method body (``ast``, flow-light): which statements run on every call,
whether the body always raises, which ``self.m(...)`` a ``hasattr`` really guards, and whether
a value read from the plugin's arguments reaches anything that uses it."""

from __future__ import annotations

import ast
from collections.abc import Callable

from vllm_tt_plugin.contract.call_plan import DECODE_COMMANDS
from vllm_tt_plugin.contract.source_deadvalue import dict_key_dead, replaced_by_choice
from vllm_tt_plugin.contract.source_guards import proven
from vllm_tt_plugin.contract.source_live import live_nodes
from vllm_tt_plugin.contract.source_rebind import shadowed, value_fixed

Fn = ast.FunctionDef | ast.AsyncFunctionDef
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.Match, ast.With,
             ast.AsyncWith)  # fmt: skip
# Callees that take a value without using its content (a log line, a count, a type test).
_INERT = {"print", "len", "str", "repr", "format", "isinstance", "bool", "type", "id", "hash",
          "debug", "info", "warning", "warn", "error", "exception", "critical", "log"}  # fmt: skip
# The plugin's commands (bools): a branch on one acts on it, where a test of content does not.
DECISIONS = frozenset({*DECODE_COMMANDS, "reset_batch", "read_from_device", "async_read",
                       "is_tokens"})  # fmt: skip
# Past this many hops (nested expressions, local copies) a value counts as used; local copies
# are each followed once (``seen``), so the walk is linear in the body.
_MAX_HOPS = 200
# Expressions whose value carries an operand's (a use of theirs is a use of it).
_CARRIERS = (ast.BinOp, ast.IfExp, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Starred,
             ast.FormattedValue, ast.JoinedStr)  # fmt: skip


def _exits(stmt: ast.stmt) -> bool:
    """``stmt`` holds a ``return`` / ``raise`` (a later statement may not run)."""
    return any(isinstance(n, (ast.Return, ast.Raise)) for n in ast.walk(stmt))


def _sure(node: ast.AST, out: set[int]) -> None:
    """``node`` runs, and so does each sub-expression that is not deferred or short-circuited."""
    out.add(id(node))
    for field, value in ast.iter_fields(node):
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            _sure(node.generators[0].iter, out)  # the first iterable runs with the expression
            return
        children = value if isinstance(value, list) else [value]
        for i, child in enumerate(children):
            if not isinstance(child, ast.AST):
                continue
            if isinstance(node, ast.BoolOp) and i > 0:
                continue  # `a and self.m()`: only when a holds
            if isinstance(node, ast.IfExp) and field != "test":
                continue
            _sure(child, out)


def always_run(fn: Fn) -> set[int]:
    """Ids of the nodes every call of ``fn`` runs: the body's statements up to the first that
    may leave early or branch (``with`` bodies included)."""
    out: set[int] = set()

    def block(stmts: list[ast.stmt]) -> bool:
        for st in stmts:
            if isinstance(st, (ast.With, ast.AsyncWith)):
                for item in st.items:
                    _sure(item.context_expr, out)
                if not block(st.body):
                    return False
                continue
            if isinstance(st, _COMPOUND):
                if isinstance(st, ast.If):  # the test runs, whatever the branches do (X1)
                    _sure(st.test, out)
                if _exits(st):
                    return False
                continue
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            _sure(st, out)
            if isinstance(st, (ast.Return, ast.Raise)):
                return False
        return True

    block(fn.body)
    return out


def always_raises(fn: Fn) -> str:
    """``raise X`` that every call of ``fn`` reaches (as text with its line), else ""."""
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(fn)):
        return ""  # a generator: the call itself returns
    run = always_run(fn)
    for node in ast.walk(fn):
        if isinstance(node, ast.Raise) and id(node) in run:
            text = ast.unparse(node.exc) if node.exc is not None else "(re-raise)"
            return f"raise {text} (line {node.lineno})"
        if (
            isinstance(node, ast.Assert)
            and id(node) in run
            and isinstance(node.test, ast.Constant)
            and not node.test.value
        ):
            return f"raise AssertionError (line {node.lineno})"  # `assert False`
    return ""


def _hasattr_names(test: ast.expr, me: str | None, positive: bool) -> set[str]:
    """Names ``test`` proves present (``positive``) or, when false, proves present."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _hasattr_names(test.operand, me, not positive)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and positive:
        return set().union(*(_hasattr_names(v, me, True) for v in test.values))
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and not positive:
        return set().union(*(_hasattr_names(v, me, False) for v in test.values))
    if (
        positive
        and isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "hasattr"
        and len(test.args) == 2
        and isinstance(test.args[0], ast.Name)
        and test.args[0].id == me
        and isinstance(test.args[1], ast.Constant)
        and isinstance(test.args[1].value, str)
    ):
        return {test.args[1].value}
    return set()


def guarded_calls(fn: Fn, me: str | None) -> dict[int, set[str]]:
    """For each node, the names a ``hasattr(self, name)`` proves present where it runs: the
    branch the test holds in, the statements after ``if not hasattr(...): return``, the right
    of ``hasattr(...) and ...`` (an inverted or unrelated test guards nothing)."""
    return proven(fn, lambda test, holds: _hasattr_names(test, me, holds), catching=False)


def parents_of(fn: Fn) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}


Helper = Callable[[ast.Call, ast.AST, int, bool], "bool | None"]  # source_helpers.value_reaches


def _name_used(
    fn: Fn, name: str, after: int, parents: dict[int, ast.AST], hops: int,
    seen: set[tuple[str, int]] | None = None, helper: Helper | None = None,
    decides: bool = False,
) -> bool:  # fmt: skip
    """A local bound at line ``after`` is used: a later load of it that no other binding
    shadows (``source_rebind``: any binding form, on every path) whose value is used; an
    augmented assignment hands it to its new value (``x |= True`` does not: a constant decides
    it). ``decides``: the value is a command, and a decision on it (a branch) is a use."""
    seen = set() if seen is None else seen
    if (name, after) in seen:
        return False  # this binding is being (or was) followed already
    seen.add((name, after))
    live = live_nodes(fn)  # a use in code that cannot run is no use
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Name) and id(node) in live and node.id == name):
            continue
        if not (node.lineno > after or isinstance(parents.get(id(node)), ast.comprehension)):
            continue
        if isinstance(node.ctx, ast.Load):
            if not shadowed(node, name, after, parents) and value_used(
                fn, node, parents, hops + 1, seen, helper, decides
            ):
                return True
            continue
        aug = parents.get(id(node))
        if (
            isinstance(aug, ast.AugAssign) and aug.target is node
            and not shadowed(aug, name, after, parents)
            and not value_fixed(aug, node, decides)
            and _name_used(fn, name, aug.lineno, parents, hops + 1, seen, helper, decides)
        ):  # fmt: skip
            return True
    return elided(fn)  # a skeleton's `(...)` arguments may use it


def elided(fn: Fn) -> bool:
    """The body elides arguments (``...``: an interface skeleton): any local may be used."""
    return any(
        isinstance(n, ast.Constant) and n.value is Ellipsis for st in fn.body for n in ast.walk(st)
    )


def _is_mapping(fn: Fn, node: ast.AST) -> bool:
    """``node`` names the method's ``**kwargs`` mapping itself (iterating it gives keys)."""
    kwarg = fn.args.kwarg
    return isinstance(node, ast.Name) and kwarg is not None and node.id == kwarg.arg


def value_used(
    fn: Fn, node: ast.AST, parents: dict[int, ast.AST], hops: int = 0,
    seen: set[tuple[str, int]] | None = None, helper: Helper | None = None,
    decides: bool = False,
) -> bool:  # fmt: skip
    """The value ``node`` evaluates to reaches something that uses it: a call argument (not a
    log line, ``len``, a type test), a return, a local that is used, an attribute of the
    instance (``stored_attribute`` says which), an operand of an expression that is used.
    Dropped: a bare statement, a test (``if x``, ``x is None``, ``"k" in x``), a loop over
    keys, an unused local. Unknown uses count as used (no false alarm); ``helper`` says what a
    helper the checker can read does with an argument (None: it cannot tell). ``decides``: the
    value is a command (a bool), so a branch on it (``if``, ``while``, ``x if c else y``, a
    comparison or ``bool()`` that flows on) acts on it; an ``assert`` still does not."""
    if hops > _MAX_HOPS:
        return True

    def up(x: ast.AST) -> bool:
        return value_used(fn, x, parents, hops + 1, seen, helper, decides)

    parent = parents.get(id(node))
    if parent is None or isinstance(parent, ast.Expr):
        return False
    if dict_key_dead(node, parents) or replaced_by_choice(node, parents):
        return False  # replaced before anything reads it (source_deadvalue)
    if isinstance(parent, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
        return True
    if isinstance(parent, (ast.If, ast.While)) and node is parent.test:
        return decides
    if isinstance(parent, ast.Assert) and node is parent.test:
        return False
    if isinstance(parent, (ast.Compare, ast.UnaryOp)) or (
        isinstance(parent, ast.IfExp) and node is parent.test
    ):
        return decides and up(parent)
    if isinstance(parent, (ast.For, ast.AsyncFor)) and node is parent.iter:
        # Iterating the mapping itself yields its keys; a value taken from it
        # (kwargs.get("pixel_values")) hands its items to the loop.
        return not _is_mapping(fn, node)
    if isinstance(parent, ast.Call):
        if node is parent.func:
            return True
        collected = _collected(fn, parent, parents, hops, seen, helper)
        if collected is not None:  # `pending.append(x)`: used when `pending` is (rt45f H03)
            return collected
        func = parent.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if decides and name == "bool":
            return up(parent)  # `force=bool(reset_batch)`: the command flows on
        reaches = helper(parent, node, hops, decides) if helper is not None else None
        return reaches if reaches is not None else name not in _INERT
    if isinstance(parent, ast.keyword):
        grand = parents.get(id(parent))
        if helper is not None and isinstance(grand, ast.Call):
            reaches = helper(grand, node, hops, decides)
            if reaches is not None:
                return reaches
        return up(parent)
    if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
        if isinstance(parent, ast.AugAssign) and value_fixed(parent, node, decides):
            return False
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return any(_target_used(fn, t, parent.lineno, parents, hops, seen, helper, decides)
                   for t in targets)  # fmt: skip
    if isinstance(parent, (ast.Attribute, ast.Subscript)) and node is parent.value:
        return up(parent)
    if isinstance(parent, (ast.BoolOp, ast.BinOp)) and value_fixed(parent, node, decides):
        return False  # `x | True`, a command's `x or True`: a constant decides the value
    if isinstance(parent, ast.BoolOp):  # `a or b` is a when a is truthy: any operand flows
        return up(parent)
    if isinstance(parent, (ast.Tuple, ast.List)):
        unpacked = _unpacked(parent, node, parents)
        if unpacked is not None:  # `a, b = x, None`: each element to its own target
            return any(_target_used(fn, t, unpacked[0], parents, hops, seen, helper, decides)
                       for t in unpacked[1])  # fmt: skip
    if isinstance(parent, _CARRIERS):
        return up(parent)
    if isinstance(parent, ast.comprehension) and node is parent.iter:
        if _is_mapping(fn, node):
            return False  # over the mapping: its keys (values are read by name elsewhere)
        # A value taken from it: its items reach the comprehension's result.
        comp = parents.get(id(parent))
        return comp is None or value_used(fn, comp, parents, hops + 1, seen)
    return True


def _target_used(
    fn: Fn, target: ast.AST, line: int, parents: dict[int, ast.AST], hops: int,
    seen: set[tuple[str, int]] | None, helper: Helper | None, decides: bool,
) -> bool:  # fmt: skip
    """The value stored in ``target`` (bound at ``line``) is used: a local that is, or an
    attribute / item (stored: see ``stored_attribute``)."""
    if isinstance(target, ast.Name):
        return _name_used(fn, target.id, line, parents, hops, seen, helper, decides)
    return True


def _unpacked(
    seq: ast.Tuple | ast.List, element: ast.AST, parents: dict[int, ast.AST]
) -> tuple[int, list[ast.AST]] | None:
    """``element`` of the display ``seq`` that an assignment unpacks into same-length target
    displays: (line, the target each element lands on). None: not unpacked element-wise."""
    stmt = parents.get(id(seq))
    if not isinstance(stmt, ast.Assign) or stmt.value is not seq:
        return None
    if any(isinstance(e, ast.Starred) for e in seq.elts):
        return None
    at = next(i for i, e in enumerate(seq.elts) if e is element)
    out: list[ast.AST] = []
    for t in stmt.targets:
        if not isinstance(t, (ast.Tuple, ast.List)) or len(t.elts) != len(seq.elts):
            return None
        if any(isinstance(e, ast.Starred) for e in t.elts):
            return None
        out.append(t.elts[at])
    return stmt.lineno, out


_MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "appendleft"})


def _collected(
    fn: Fn, call: ast.Call, parents: dict[int, ast.AST], hops: int,
    seen: set[tuple[str, int]] | None, helper: Helper | None,
) -> bool | None:  # fmt: skip
    """``local.append(value)`` on a container the body builds: the value is used when the
    container is (a load of it other than as the receiver of such a call). None: another call."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in _MUTATORS
            and isinstance(func.value, ast.Name)):  # fmt: skip
        return None
    name = func.value.id
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    stored = any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                 for n in ast.walk(fn))  # fmt: skip
    if name in params or not stored:
        return None  # a caller's container, or one the checker does not see built
    for n in ast.walk(fn):
        if not (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)):
            continue
        up = parents.get(id(n))
        if isinstance(up, ast.Attribute) and up.attr in _MUTATORS:
            continue  # another `local.append(...)`
        if value_used(fn, n, parents, hops + 1, seen, helper):
            return True
    return False


def stored_attribute(node: ast.AST, parents: dict[int, ast.AST], me: str | None) -> str | None:
    """``self.<attr> = node``: the attribute the value is only stored in."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.value is node:
        t = parent.targets[0]
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me:
            return t.attr
    return None


def unused_params(fn: Fn, names: set[str], helper: Helper | None = None) -> tuple[str, ...]:
    """Of the named parameters ``names``, those whose value the body never uses. A body with an
    elision (``...`` as an argument: an interface skeleton) may use any of them."""
    if elided(fn):
        return ()
    parents = parents_of(fn)
    # As a local bound at the def: a use no rebinding shadows (`sp = None`) counts; a command's
    # use may be a decision on it (`if reload_inputs:`).
    first = fn.body[0].lineno - 1 if fn.body else fn.lineno
    return tuple(sorted(
        n for n in names
        if not _name_used(fn, n, first, parents, 0, helper=helper, decides=n in DECISIONS)
    ))  # fmt: skip
