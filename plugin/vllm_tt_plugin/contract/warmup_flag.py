"""A warm-up that the plugin's second call cannot reach (rt45g R13). ``ModelAdapter.warm_up``
calls each warm-up method twice, untraced then traced, and before the traced round sets
``already_warmed_up_prefill = False`` (where the model has it): tt-metal's ``Generator`` guards
its prefill warm-up on that flag, so the traced round runs again and captures. A warm-up that
returns early on a flag of its own that its first call sets (``if self._prefill_warmed: return``
then ``self._prefill_warmed = True``, both statements of the body itself) turns the traced call
into a no-op: the generator never sees ``enable_trace=True`` and no trace is captured there.
A flag set only on some paths (under a test of ``enable_trace``) is not reported."""

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


def _tested(test: ast.expr, me: str) -> set[str]:
    """The flags ``test`` holds on when true: ``self.x``, ``self.x is True``, ``self.x == True``,
    ``bool(self.x)``, ``getattr(self, "x", False)``, either side of ``or``."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return set().union(*(_tested(v, me) for v in test.values))
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        right = test.comparators[0]
        if (
            isinstance(test.ops[0], (ast.Is, ast.Eq))
            and isinstance(right, ast.Constant)
            and (right.value is True)
        ):
            return _tested(test.left, me)
        return set()
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "bool":
        return _tested(test.args[0], me) if len(test.args) == 1 else set()
    attr = _self_attr(test, me)
    return {attr} if attr else set()


def _set_true(st: ast.stmt, me: str) -> set[str]:
    """Flags the statement sets to a true constant (``self.x = True``, ``setattr(self, "x",
    True)``)."""
    value = getattr(st, "value", None)
    if (
        isinstance(st, ast.Assign)
        and isinstance(value, ast.Constant)
        and (
            value.value and value.value is not Ellipsis  # a skeleton's `...`: not known
        )
    ):
        return {a for t in st.targets for n in ast.walk(t) if (a := _self_attr(n, me))}
    if (
        isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
        and isinstance(st.value.func, ast.Name) and st.value.func.id == "setattr"
        and len(st.value.args) == 3 and isinstance(st.value.args[2], ast.Constant)
        and st.value.args[2].value
    ):  # fmt: skip
        call = ast.Call(func=ast.Name("getattr"), args=st.value.args[:2], keywords=[])
        attr = _self_attr(call, me)
        return {attr} if attr else set()
    return set()


@dataclass(frozen=True)
class FlagGuard:
    """A warm-up's early return on ``self.<flag>``, which a later statement sets."""

    flag: str
    guard_line: int
    set_line: int

    def why(self) -> str:
        return (
            f"returns early on self.{self.flag} (line {self.guard_line}), which its first call "
            f"sets (line {self.set_line}) and the plugin never resets (it resets "
            f"{RESET_BY_PLUGIN} only): the plugin's traced warm-up (enable_trace=True, after "
            "the untraced one) never reaches the model"
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
    guards: dict[str, int] = {}
    for st in fn.body:
        if isinstance(st, ast.If) and not all(completes(s) for s in st.body):
            for flag in _tested(st.test, me):
                guards.setdefault(flag, st.lineno)
        for flag in _set_true(st, me):
            line = guards.get(flag)
            if line is not None and flag != reset:
                return FlagGuard(flag, line, st.lineno)
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
    me = [*fn.args.posonlyargs, *fn.args.args][0].arg
    return [
        (found.guard_line, f"if {me}.{found.flag}: return"),
        (found.set_line, f"{me}.{found.flag} = True"),
    ]
