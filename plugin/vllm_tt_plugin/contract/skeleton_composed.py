"""What a skeleton keeps of a call into an object the adapter composes (rt45g R11, R12, V01,
V08; rt45h CK01-CK20), so that the checker binds it as it binds the tree's (``composed``).

``self.generator.decode(tokens, x.y, sampling_params, kwargs.get("slot_remap"))`` is written
with the method's parameters and ``**kwargs`` reads kept by name and any other argument as
``None`` (not ``...``, which reads as elided): ``self.generator.decode(tokens, None,
sampling_params, kwargs.get('slot_remap'))``; so is a function call handing such an object on
(``_run_decode(self.generator, tokens, ...)``). The class of ``self.generator`` is recorded by
``composed_type.composed_lines``; the method's body facts by the lines every method keeps.
"""

from __future__ import annotations

import ast
import builtins

from vllm_tt_plugin.contract.source_ast import kwargs_key
from vllm_tt_plugin.contract.source_rebind import rebinds


def _getattr_method(func: ast.expr) -> ast.expr | None:
    """``getattr(obj, "name")`` (the object), else None."""
    if (
        isinstance(func, ast.Call) and isinstance(func.func, ast.Name)
        and func.func.id == "getattr" and len(func.args) == 2 and not func.keywords
        and isinstance(func.args[1], ast.Constant) and isinstance(func.args[1].value, str)
    ):  # fmt: skip
        return func.args[0]
    return None


def _held(x: ast.expr, me: str) -> bool:
    return isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id == me


def composed_call_text(
    node: ast.Call, me: str | None, params: set[str], kwarg: str | None
) -> str | None:
    """The call as a skeleton keeps it, when it calls a method of ``me.<attr>`` with
    arguments the checker counts; None for anything else."""
    if me is None:
        return None
    func = node.func
    holder = func.value if isinstance(func, ast.Attribute) else _getattr_method(func)
    if isinstance(func, ast.Name) and not hasattr(builtins, func.id):
        # `_run_decode(self.generator, tokens, ...)`: a function handed the object (R11)
        holder = next((a for a in node.args if _held(a, me)), None)
    if holder is None or not _held(holder, me):
        return None
    if any(isinstance(a, ast.Starred) for a in node.args) or any(
        k.arg is None for k in node.keywords
    ):
        return None  # `*x` / `**x`: the composition rules read those as they are

    def arg(x: ast.expr) -> str:
        if isinstance(x, ast.Name) and x.id in params and x.id != me:
            return x.id
        key = kwargs_key(x, kwarg)
        return f"{kwarg}.get({key!r})" if key is not None else "None"

    args = [arg(x) for x in node.args]
    args += [f"{k.arg}={arg(k.value)}" for k in node.keywords]
    return f"{ast.unparse(func)}({', '.join(args)})"


def carried_params(fn: ast.FunctionDef | ast.AsyncFunctionDef, params: set[str]) -> set[str]:
    """The parameters still holding the plugin's values where a composed call reads them: not
    set by the body, or set only from other parameters (``a, b = b, a``: ``composed_locals``
    names the call's arguments by the parameter they came from)."""
    out = set()
    for p in params:
        values = [
            n.value for n in ast.walk(fn)
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
            and any(isinstance(t, ast.Name) and t.id == p for tg in (
                n.targets if isinstance(n, ast.Assign) else [n.target]) for t in ast.walk(tg))
        ]  # fmt: skip
        if not rebinds(fn, p) or (values and all(_from_params(v, params) for v in values)):
            out.add(p)
    return out


def _from_params(value: ast.expr | None, params: set[str]) -> bool:
    elts = value.elts if isinstance(value, ast.Tuple) else [value]
    return all(isinstance(e, ast.Name) and e.id in params for e in elts)
