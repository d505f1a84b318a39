"""Which methods of a served class may run when the plugin serves it (``ast``): the methods
the plugin drives, the ones Python calls implicitly (dunders), the class bodies, and every
method any of those names (``self.m``, ``cls.m``, ``super().m``, ``getattr(self, "m")``, a bare
name, a decorator), transitively. A method nothing reached names (a public
``last_sampling_params`` that only tt-metal's own demos might call, rt45g R10; a private
``_debug_state``, rt45f H01) never runs under the plugin: an attribute only it reads is not
read."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from vllm_tt_plugin.contract.call_plan import METHODS

Fn = ast.FunctionDef | ast.AsyncFunctionDef
# What the plugin calls or reads on the model besides the planned methods (facts, the warm-up
# flag, the block-output fact, the HF config).
PLUGIN_READS = frozenset(
    {*(m.method for m in METHODS), "model_capabilities", "decode_input_update_contract",
     "already_warmed_up_prefill", "output_tokens_per_step", "config"}
)  # fmt: skip


def _names(node: ast.AST) -> set[str]:
    """Every name ``node`` mentions: attributes, bare names, string constants."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value)
    return out


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def reached(classes: Iterable[ast.ClassDef]) -> list[ast.AST]:
    """The class-body statements and methods of ``classes`` (a served class's MRO) that may
    run while the plugin serves it."""
    defs: dict[str, list[Fn]] = {}
    out: list[ast.AST] = []
    names = set(PLUGIN_READS)
    for cls in classes:
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs.setdefault(item.name, []).append(item)
                for d in item.decorator_list:  # run when the class body runs
                    names |= _names(d)
                if _dunder(item.name):
                    names.add(item.name)
            else:
                out.append(item)
                names |= _names(item)
    done: set[str] = set()
    todo = [n for n in names if n in defs]
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        for fn in defs[name]:
            out.append(fn)
            todo += [n for n in _names(fn) if n in defs and n not in done]
    return out
