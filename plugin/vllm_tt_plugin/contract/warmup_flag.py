"""A warm-up that the plugin's second call cannot reach (rt45g R13). ``ModelAdapter.warm_up``
calls each warm-up method twice, untraced then traced, and before the traced round sets
``already_warmed_up_prefill = False`` (where the model has it): tt-metal's ``Generator`` guards
its prefill warm-up on that flag, so the traced round runs again and captures. A warm-up that
returns early on a flag of its own that its first call sets (``if self._prefill_warmed: return``
then ``self._prefill_warmed = True``, both statements of the body itself) turns the traced call
into a no-op: the generator never sees ``enable_trace=True`` and no trace is captured there.
The flag may live anywhere the plugin's reset does not reach (rt45h WU02 / WU03): on the class
(``if type(self)._warmed: return`` / ``type(self)._warmed = True``), in a module-level set
(``if id(self) in _WARMED: return`` / ``_WARMED.add(id(self))``) or a ``global`` name; only
``self.already_warmed_up_prefill`` itself is reset. A flag set only on some paths (under a test
of ``enable_trace``) is not reported."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from vllm_tt_plugin.contract.source_rebind import completes

Fn = ast.FunctionDef | ast.AsyncFunctionDef
WARMUPS = ("warmup_model_prefill", "warmup_model_decode")
RESET_BY_PLUGIN = "already_warmed_up_prefill"


def _self_attr(node: ast.AST, me: str) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr if node.value.id == me else None
    if (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id == "getattr" and len(node.args) >= 2
        and isinstance(node.args[0], ast.Name) and node.args[0].id == me
        and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
    ):  # fmt: skip
        return node.args[1].value
    return None


def _flag(node: ast.AST, me: str, shared: frozenset[str]) -> str | None:
    """The state ``node`` reads or stores, spelled one way: ``self.x`` (also
    ``getattr(self, "x", d)``), or a place outside the instance that outlives the call (rt45h
    WU02/WU03): an attribute of the class (``type(self).x``, ``self.__class__.x``,
    ``Cls.x``), an item of a module-level object (``_DONE[key]``), or a name the body declares
    ``global`` / ``nonlocal`` (``shared``). A plain local is not a flag: it dies with the call."""
    attr = _self_attr(node, me)
    if attr is not None:
        return f"{me}.{attr}"
    if (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id == "getattr" and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
    ):  # fmt: skip
        node = ast.Attribute(node.args[0], node.args[1].value, ast.Load())
    if isinstance(node, ast.Name):
        return node.id if node.id in shared else None
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        base = node.value
        while isinstance(base, (ast.Attribute, ast.Subscript, ast.Call)):
            base = base.func if isinstance(base, ast.Call) else base.value
        if isinstance(base, ast.Name):  # self.__class__.x, type(self).x, Cls.x, _DONE[k]
            return ast.unparse(node)
    return None


def _member(test: ast.expr, me: str, shared: frozenset[str]) -> str | None:
    """``key in container`` (a container that outlives the call): its flag."""
    if (
        isinstance(test, ast.Compare) and len(test.ops) == 1
        and isinstance(test.ops[0], ast.In)
    ):  # fmt: skip
        box = test.comparators[0]
        if isinstance(box, ast.Name) or _flag(box, me, shared) is not None:
            return f"{ast.unparse(test.left)} in {ast.unparse(box)}"
    return None


def _tested(test: ast.expr, me: str, shared: frozenset[str] = frozenset()) -> set[str]:
    """The flags ``test`` holds on when true: ``self.x``, ``self.x is True``, ``self.x == True``,
    ``bool(self.x)``, ``getattr(self, "x", False)``, ``key in _DONE``, either side of ``or``."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return set().union(*(_tested(v, me, shared) for v in test.values))
    member = _member(test, me, shared)
    if member is not None:
        return {member}
    # `_DONE.get(key)`: what `_DONE[key] = True` sets
    if (
        isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute)
        and test.func.attr == "get" and test.args
    ):  # fmt: skip
        box = test.func.value
        if isinstance(box, ast.Name) or _flag(box, me, shared) is not None:
            return {f"{ast.unparse(test.args[0])} in {ast.unparse(box)}"}
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        right = test.comparators[0]
        if (
            isinstance(test.ops[0], (ast.Is, ast.Eq))
            and isinstance(right, ast.Constant)
            and (right.value is True)
        ):
            return _tested(test.left, me, shared)
        return set()
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "bool":
        return _tested(test.args[0], me, shared) if len(test.args) == 1 else set()
    flag = _flag(test, me, shared)
    return {flag} if flag else set()


def _true(value: ast.expr | None) -> bool:
    # A skeleton's `...` is not known true.
    return isinstance(value, ast.Constant) and bool(value.value) and value.value is not Ellipsis


def _set_true(st: ast.stmt, me: str, shared: frozenset[str] = frozenset()) -> set[str]:
    """Flags the statement sets to a true constant (``self.x = True``, ``setattr(self, "x",
    True)``, ``type(self).x = True``, ``_DONE.add(key)``, ``_DONE[key] = True``)."""
    value = getattr(st, "value", None)
    if isinstance(st, ast.Assign) and _true(value):
        found: set[str] = set()
        for target in st.targets:
            for n in ast.walk(target):
                flag = _flag(n, me, shared)
                if flag is not None:
                    found.add(flag)
                if isinstance(n, ast.Subscript):  # _DONE[key] = True: `key in _DONE` too
                    found.add(f"{ast.unparse(n.slice)} in {ast.unparse(n.value)}")
        return found
    call = value if isinstance(st, ast.Expr) and isinstance(value, ast.Call) else None
    if call is None:
        return set()
    func = call.func
    if isinstance(func, ast.Name) and func.id == "setattr" and len(call.args) == 3:
        if _true(call.args[2]):
            flag = _flag(ast.Call(ast.Name("getattr", ast.Load()), call.args[:2], []), me, shared)
            return {flag} if flag else set()
        return set()
    if isinstance(func, ast.Attribute) and func.attr == "add" and len(call.args) == 1:
        box = func.value
        if isinstance(box, ast.Name) or _flag(box, me, shared) is not None:
            return {f"{ast.unparse(call.args[0])} in {ast.unparse(box)}"}
    return set()


def _names(expr: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


@dataclass(frozen=True)
class FlagGuard:
    """A warm-up's early return on a flag, which a later statement of it sets."""

    flag: str
    guard_line: int
    set_line: int
    guard: str = ""  # the test and the store as written (what a skeleton keeps)
    store: str = ""
    shared: tuple[str, ...] = ()

    def why(self) -> str:
        return (
            f"returns early on {self.flag} (line {self.guard_line}), which its first call "
            f"sets (line {self.set_line}) and the plugin never resets (it resets "
            f"{RESET_BY_PLUGIN} only, on the instance): the plugin's traced warm-up "
            "(enable_trace=True, after the untraced one) never reaches the model"
        )


def flag_guard(fn: Fn | None, method: str) -> FlagGuard | None:
    """The guard that makes the plugin's traced call of warm-up ``fn`` a no-op, if any."""
    if method not in WARMUPS:
        return None
    return own_guard(fn, RESET_BY_PLUGIN)


def own_guard(fn: Fn | None, reset: str | None) -> FlagGuard | None:
    """An early return of ``fn`` on a flag of its own its first call sets (``reset``: the flag
    the plugin resets between the two calls, which does not block; None: none reaches ``fn``,
    as in an object the adapter composes: the plugin resets the flag on the adapter)."""
    if fn is None:
        return None
    params = [*fn.args.posonlyargs, *fn.args.args]
    if not params:
        return None
    me = params[0].arg
    shared = frozenset(
        n for st in ast.walk(fn) if isinstance(st, (ast.Global, ast.Nonlocal)) for n in st.names
    )
    reset = f"{me}.{reset}" if reset else None  # the instance's flag: the plugin sets it False
    # A flag keyed on what a call passes (`(id(self), enable_trace) in _DONE`) differs per call.
    passed = {p.arg for p in (*params, *fn.args.kwonlyargs, fn.args.vararg, fn.args.kwarg)
              if p is not None} - {me}  # fmt: skip
    guards: dict[str, ast.If] = {}
    for st in fn.body:
        if isinstance(st, ast.If) and not all(completes(s) for s in st.body):
            for flag in _tested(st.test, me, shared):
                guards.setdefault(flag, st)
        for flag in _set_true(st, me, shared):
            guard = guards.get(flag)
            if guard is not None and flag != reset and not passed & _names(guard.test):
                used = tuple(sorted(shared & _names(guard.test)))
                return FlagGuard(
                    flag, guard.lineno, st.lineno, ast.unparse(guard.test), ast.unparse(st), used
                )
    return None


def own_flag_guard(fn: Fn | None, method: str) -> str:
    """Why the plugin's traced call of warm-up ``fn`` is a no-op ("" when it is not)."""
    found = flag_guard(fn, method)
    return found.why() if found is not None else ""


def skeleton_lines(fn: Fn) -> list[tuple[int, str]]:
    """What a skeleton of ``fn`` keeps so that its checker finds the same guard."""
    found = flag_guard(fn, fn.name) or own_guard(fn, None)  # a composed warm-up's too (WU01)
    if found is None:
        return []
    kept = [(found.guard_line, f"global {', '.join(found.shared)}")] if found.shared else []
    return [*kept, (found.guard_line, f"if {found.guard}: return"), (found.set_line, found.store)]
