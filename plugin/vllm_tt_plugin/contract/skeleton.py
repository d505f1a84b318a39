"""Interface skeletons of a checkout: ``tox -e tt-metal-skeleton -- <TT_METAL_HOME> <out>``.

For every class the built-in registry can target, the modules the parity checker reads (the
target's module, every module along its MRO, re-exports, modules holding the constants its facts
use) are written under ``<out>`` at the same paths as interface skeletons: imports, class lines,
class attributes, ``def`` headers (defaults as ``...``, no annotations) and, in each body,
flattened (no control flow), what the checker reads there: forwarding calls, calls of the
instance's own methods and of objects it composes (``skeleton_composed``), ``cls(...)``
constructions, reads of ``**kwargs``, ``hasattr(self, ...)``
guards, instance attribute assignments, a ``NotImplementedError`` stub; code that cannot run
(``source_live``) is left out, and a zero-argument ``super()`` call made in a nested frame is
written as ``(lambda: super().m(...))()``. A body with nothing of that is ``pass``. Module-level
``if`` / ``try`` / ``with`` / loops keep their shape (``skeleton_module.compound``), expressions
that raise on import (``source_import``) are kept whole, and a module value the checker cannot
evaluate is written ``unevaluated()``. What the class-shape rules (``source_shape``) read is
kept by ``skeleton_shape``: class decorators, annotations, tuple targets, ``exec`` / walrus,
module calls handing a class on, a method's writes to its own instance. No other code is kept.
Each file's header names the repository, the path and the commit (``--commit``, else ``git
rev-parse HEAD`` of the checkout, else the commit a skeleton being re-skeletoned records), so a
TT engineer refreshes ``fixtures/tt_metal/skeletons/`` at a bump in one command and the checker
reads the skeleton exactly as it reads the checkout. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_tt_plugin.contract import skeleton_guards, skeleton_module, skeleton_shape, warmup_flag
from vllm_tt_plugin.contract.attr_setters import maybe_none, skeleton_keeps
from vllm_tt_plugin.contract.call_plan import CONTENT_KEYWORDS
from vllm_tt_plugin.contract.class_caps import kept_step
from vllm_tt_plugin.contract.composed_locals import resolved_call
from vllm_tt_plugin.contract.init_chain import dispatch_text
from vllm_tt_plugin.contract.parity_content import (
    CARRIED,
    COMMANDS_KEPT,
    STORE_CHECKED,
    command_lines,
    set_keys,
    stored_only,
    stored_text,
)
from vllm_tt_plugin.contract.parity_shapes import result_kind
from vllm_tt_plugin.contract.protocol_stubs import skeleton_body
from vllm_tt_plugin.contract.returned_model import with_returns
from vllm_tt_plugin.contract.signatures import UPSTREAM, FixtureError
from vllm_tt_plugin.contract.skeleton_composed import carried_params, composed_call_text
from vllm_tt_plugin.contract.skeleton_files import (
    Written,
    checkout_head,
    imported_modules,
    placeholder,
    read_modules,
    record_checkout_failures,
    recorded_provenance,
)
from vllm_tt_plugin.contract.skeleton_header import header as _header
from vllm_tt_plugin.contract.skeleton_header import kind as _kind
from vllm_tt_plugin.contract.skeleton_kwargs import (
    call_text,
    copy_text,
    moved_text,
    resolver,
    unhanded,
)
from vllm_tt_plugin.contract.skeleton_values import (
    _constant,
    _docstring,
    _fact,
    _simple,
    _simple_statement,
    _value,
)
from vllm_tt_plugin.contract.source import SourceDecodeError, decode_source
from vllm_tt_plugin.contract.source_body import (
    _SAFE_WITH_SELF,
    _aliases,
    _callee,
    _composed,
    _elided,
    _explicit,
    _handed_on,
    _hands_all,
    _literal_keys,
    _only_raises_not_implemented,
    _partial,
    _passes_on,
    _walk_body,
    body_of,
    plugin_imports,
)
from vllm_tt_plugin.contract.source_flow import (
    always_raises,
    always_run,
    elided,
    guarded_calls,
    parents_of,
    unused_params,
    value_used,
)
from vllm_tt_plugin.contract.source_guards import guarded_reads, is_guarded
from vllm_tt_plugin.contract.source_helpers import value_reaches
from vllm_tt_plugin.contract.source_import import import_time_raises
from vllm_tt_plugin.contract.source_kwargs import copies
from vllm_tt_plugin.contract.source_live import live_nodes, own_frame_nodes
from vllm_tt_plugin.contract.source_loadable import (
    IMPORTS_KEPT,
    NOT_PY310,
    newer_syntax,
)
from vllm_tt_plugin.contract.source_module import parse_module
from vllm_tt_plugin.contract.source_py310 import failure_lines
from vllm_tt_plugin.contract.source_varargs import vararg_reads

# The attributes whose value the checker evaluates (kept whole when they are simple).
FACT_ATTRIBUTES = ("model_capabilities", "decode_input_update_contract")
_FLAGS = (None, True, False)  # attribute values kept (rt45g R13: a warm-up's own flag)


def body_lines(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    stored: frozenset[str] = frozenset(),
    function: Any = None,
) -> list[str]:
    """What the checker reads from ``fn``'s body, one statement a line, in source order
    (``stored``: attributes the class stores plugin arguments in: their reads are kept;
    ``function``: the helpers it hands values to, whose reads are kept as the method's)."""
    if _elided(fn):
        return ["..."]
    if _only_raises_not_implemented(fn):
        return ["raise NotImplementedError"]
    a = fn.args
    kind = _kind(fn)
    firsts = [*a.posonlyargs, *a.args]
    me = firsts[0].arg if firsts and kind != "staticmethod" else None
    vararg = a.vararg.arg if a.vararg else None
    kwarg = a.kwarg.arg if a.kwarg else None
    params = {p.arg for p in (*firsts, *a.kwonlyargs)} | {n for n in (vararg, kwarg) if n}
    live = live_nodes(fn)  # code that cannot run is not written (flattened, it would run)
    nested = own_frame_nodes(fn)
    nodes = sorted(
        (n for n in _walk_body(fn, me) if hasattr(n, "lineno") and id(n) in live),
        key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)),
    )
    prefix, lines, unsure = skeleton_keeps(fn)  # attr_setters: where an attribute is surely set
    parents = parents_of(fn)
    kw_names = copies(fn, kwarg) if kwarg else set()
    run = always_run(fn)
    guards = guarded_calls(fn, me)
    locals_ = {
        n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    # How a key leaves **kwargs matters to the checker: a pop whose value is used is a read, a
    # bare pop / del is not, and only one that is a statement of the body itself is certain.
    top = {id(n) for st in fn.body for n in ast.walk(st) if isinstance(st, (ast.Delete, ast.Expr))}
    bare = {id(n.value) for n in nodes if isinstance(n, ast.Expr)}
    aliases = _aliases(fn, me)
    present = guarded_reads(fn, kw_names)  # a read that cannot KeyError is kept as a get
    writes = skeleton_shape.written_by(fn)  # skeleton_shape.method_lines keeps them
    carry = carried_params(fn, params)  # still the plugin's values

    def helper(call: ast.Call, arg: ast.AST, hops: int, decides: bool = False) -> bool | None:
        return value_reaches(call, arg, function, hops, decides)

    def placed(node: ast.AST, text: str) -> str:
        return text if id(node) in top else f"if ...: {text}"

    def add(node: ast.AST, text: str) -> None:
        sure = id(node) in run or not isinstance(node, ast.Call) or text.startswith("if ")
        if id(node) in nested and "super()" in text:  # its frame is not the method's
            text = f"(lambda: {text.removeprefix('return ')})()"
        lines.append((getattr(node, "lineno", 0), text if sure else f"if ...: {text}"))

    def add_call(node: ast.Call, text: str) -> None:
        # A local mapping passed as ``**kw`` (``kw = dict(a=...)`` / ``{"a": ...}``, bound once)
        # is copied with its keys (values ``...``): the checker counts them, and a skeleton
        # without the binding would read as "cannot count".
        for k in node.keywords:
            if k.arg is None and isinstance(k.value, ast.Name) and k.value.id != kwarg:
                keys = _literal_keys(fn, k.value)
                binding = next(
                    (n for n in nodes if isinstance(n, ast.Assign) and len(n.targets) == 1
                     and isinstance(n.targets[0], ast.Name) and n.targets[0].id == k.value.id),
                    None,
                )  # fmt: skip
                if keys is not None and binding is not None:
                    items = ", ".join(f"{key!r}: ..." for key in keys)
                    add(binding, f"{k.value.id} = {{{items}}}")
        add(node, text)

    for node in nodes:
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and node.attr in stored
            and isinstance(node.value, ast.Name)
            and node.value.id == me
        ):
            add(node, f"used({me}.{node.attr})")
        if isinstance(node, ast.Call) and id(node) not in writes:
            if isinstance(node.func, ast.Name) and node.func.id in aliases:
                # `f = self.m; f(...)`: written as the call it is (the binding is not kept;
                # the tree is skeleton_text's own parse, so it is changed in place)
                node.func = aliases[node.func.id]
            func = node.func
            forward = _passes_on(node, vararg, kwarg) and (
                _callee(func, me) is not None
                or _handed_on(node) is not None
                or _explicit(node, me) is not None  # Base.m(self, *args, **kwargs)
                or _partial(func) is not None
                or (_composed(node, me) is not None and _hands_all(node, vararg, kwarg))
                or (isinstance(func, ast.Name) and func.id not in locals_
                    and not hasattr(builtins, func.id))  # a module function: followed
            )  # fmt: skip
            if forward:
                returned = isinstance(parents.get(id(node)), ast.Return)
                add_call(node, ("return " if returned else "") + call_text(node, params))
                continue
            if (
                isinstance(func, ast.Name) and func.id in params and func.id != me
                and _passes_on(node, vararg, kwarg)
            ):  # fmt: skip
                add(node, call_text(node, params))  # a helper calling the method it is handed
                continue
            partial = _partial(func)
            if partial is not None and _callee(partial.args[0], me) is not None:
                # partial(self.m, a)(b): both argument lists reach m (the checker binds them).
                outer = call_text(node, params)[len(ast.unparse(func)) :]
                add(node, call_text(partial, params) + outer)
                continue
            target = _callee(func, me)
            if target is not None:
                text = call_text(unhanded(node, kwarg, function), params)
                if target[0] == "self" and target[1] in guards.get(id(node), set()):
                    text = f"if hasattr({me}, {target[1]!r}): {text}"  # the guard holds here
                add(node, text)
                continue
            composed = composed_call_text(resolved_call(fn, node), me, carry, kwarg)  # rt45h
            if composed is not None:
                add(node, composed)
                continue
            root = func
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            gives_me = me is not None and any(
                isinstance(x, ast.Name) and x.id == me
                for x in (*node.args, *(k.value for k in node.keywords))
            )
            safe = isinstance(func, ast.Name) and func.id in _SAFE_WITH_SELF
            if (gives_me and not safe) or (
                isinstance(root, ast.Call) and _hands_all(node, vararg, kwarg)
            ):
                # The instance or the arguments handed to what the checker does not follow.
                add(node, call_text(node, params | {me or ""}))
                continue
            if (
                isinstance(root, ast.Name)
                and root.id in locals_
                and _hands_all(node, vararg, kwarg)
            ):
                add(node, f"{root.id} = ...")
                add(node, call_text(node, params))
                continue
            if isinstance(func, ast.Name) and me is not None:
                if func.id == me and kind == "classmethod":
                    add_call(node, prefix.get(id(node), "") + call_text(node, set()))
                    continue
                if (
                    func.id == "hasattr"
                    and len(node.args) == 2
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id == me
                    and isinstance(node.args[1], ast.Constant)
                ):
                    add(node, ast.unparse(node))
                    continue
            if (
                isinstance(func, ast.Call)
                and isinstance(func.func, ast.Name)
                and func.func.id == "type"
                and me is not None
            ):
                add(node, call_text(node, set()))
                continue
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in kw_names
                and func.attr in ("update", "clear", "popitem")
            ):  # an edit of **kwargs (or a copy) before it is handed on
                add(node, placed(node, copy_text(node)))
                continue
            if (
                kwarg is not None
                and isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in kw_names
                and func.attr in ("get", "pop", "setdefault")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                safe = len(node.args) > 1 or is_guarded(present, node, str(node.args[0].value))
                key_text = repr(node.args[0].value) + (
                    ", None" if safe else ""
                )  # not `...`: elided
                text = f"{func.value.id}.{func.attr}({key_text})"
                if id(node) in bare:
                    add(node, placed(node, text))
                elif value_used(fn, node, parents, helper=helper):
                    add(node, f"used({text})")
                elif func.attr == "get":  # read, value unused: not `_ = ...`, which an
                    add(node, text)  # `if ...:` elsewhere in the body would read as used (X1)
                else:
                    add(node, f"_ = {text}")
        elif (
            kwarg is not None
            and isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == kwarg
            and isinstance(node.slice, ast.Constant)
        ):
            key = repr(node.slice.value)
            if isinstance(node.ctx, ast.Load):
                used = value_used(fn, node, parents, helper=helper)
                read = f"{kwarg}[{key}]"
                if is_guarded(present, node, str(node.slice.value)):
                    read = f"{kwarg}.get({key})"
                text = f"used({read})" if used else (read if "[" in read else f"_ = {read}")
                add(node, text if id(node) in run else f"if ...: {text}")
            elif isinstance(node.ctx, ast.Del):
                add(node, placed(node, f"del {kwarg}[{key}]"))
            else:  # a value moved from another key keeps where it came from
                stmt = parents.get(id(node))
                text = f"{kwarg}[{key}] = {moved_text(stmt, kw_names)}"
                add(node, text if id(stmt) in run else f"if ...: {text}")  # as the checker reads
        elif (
            kwarg is not None
            and isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and isinstance(node.comparators[0], ast.Name)
            and node.comparators[0].id == kwarg
            and isinstance(node.left, ast.Constant)
        ):
            add(node, f"{node.left.value!r} in {kwarg}")
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in kw_names
            and (
                node.targets[0].id != kwarg
                or isinstance(node.value, ast.DictComp)
                or bool(set_keys(node.value, kw_names))
            )  # `kwargs = {**kwargs, "k": v}`
        ):
            text = f"{node.targets[0].id} = {copy_text(node.value)}"  # a copy of **kwargs
            sure = id(node) in run or not set_keys(node.value, kw_names)
            add(node, text if sure else f"if ...: {text}")  # a key set on some calls only
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.ctx, ast.Store)  # not `self.__class__` in `...x = v`
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id == me
                    ):
                        # A fact, a `None` placeholder (a callable not set yet) or a flag is kept.
                        flag = isinstance(node.value, ast.Constant) and node.value.value in _FLAGS
                        value = node.value if sub.attr in FACT_ATTRIBUTES or flag else None
                        kept = ast.unparse(node.value) if (
                            isinstance(node.value, ast.Name) and node.value.id == kwarg
                        ) else _value(value)  # fmt: skip
                        kept = dispatch_text(node.value) or kept  # self._a if c else self._b
                        if node.value is not None and maybe_none(node.value):
                            kept = ast.unparse(node.value)  # GD03 / GD04: None kept
                        v = node.value
                        if (
                            isinstance(v, ast.Name)
                            and v.id in CONTENT_KEYWORDS
                            and stored_only(fn, v.id)
                        ):  # a plugin value only stored: its attribute decides (rt45f H01)
                            kept = v.id
                        kept = (v is not None and stored_text(fn, v)) or kept  # HC04
                        cond = "if ...: " if sub.attr in unsure else ""
                        add(node, f"{cond}{me}.{sub.attr} = {kept}")
    for r in vararg_reads(fn, vararg, run):  # *args read by position: raises when short
        lines.append((r.line, r.skeleton()))
    raises = always_raises(fn)
    if raises:
        line = int(raises.rpartition("(line ")[2].rstrip(")"))
        lines.append((line, raises.rpartition(" (line ")[0]))
    # Every named parameter: a composed object's method may take the plugin's values under
    # other names (rt45h CK12), and its body is judged by what it uses.
    named = {p.arg for p in (*firsts, *a.kwonlyargs)} - {me or ""}
    unused = set(unused_params(fn, named, helper)) if not elided(fn) else set()
    if any(isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("locals", "vars")
           for n in ast.walk(fn)):  # fmt: skip
        lines.append((fn.body[0].lineno, "used(locals())"))  # every local handed on (F35)
    for p in sorted(named - unused):
        if not (p in STORE_CHECKED and stored_only(fn, p)):  # else kept as its stores
            lines.append((fn.body[0].lineno, f"used({p})"))
    lines += [(fn.body[0].lineno, t) for t in command_lines(fn, unused - CONTENT_KEYWORDS)]
    lines += warmup_flag.skeleton_lines(fn)  # a warm-up's own flag guard (rt45g R13)
    for at_line, module, names in plugin_imports(fn):
        # The checker asks whether the serving plugin ships it.
        text = f"from {module} import {', '.join(names)}" if names else f"import {module}"
        lines.append((at_line, text))
    seen = body_of(fn, lambda expr: None, kind=kind, function=function) if kwarg else None
    own = body_of(fn, lambda expr: None, kind=kind).kwargs_reads if kwarg else ()
    for key in seen.kwargs_reads if seen is not None else ():
        if key not in own:  # read by a helper handed the mapping: kept as the method's read
            lines.append((fn.body[0].lineno, f"used({kwarg}.get({key!r}))"))
    if kwarg is not None and seen is not None and seen.kwargs_opaque:
        # **kwargs used whole (passed on, copied, iterated): the checker counts every key read.
        first = next(n for n in nodes if isinstance(n, ast.Name) and n.id == kwarg)
        add(first, f"used({kwarg})")
    # Last, so nothing after it reads as dead code: whether the plugin gets a value back
    # (parity_shapes; `return ...` would read as an elided use of every name).
    kept_guards, closing = skeleton_guards.method_lines(fn)  # parity_raises reads them
    lines += kept_guards
    result = {"generator": "yield", "value": "return None  # a value (elided)"}.get(result_kind(fn))
    if result and (closing is None or not result.startswith("return") or closing):
        result = closing if closing and result.startswith("return") else result
        lines.append((sys.maxsize, skeleton_guards.pair_kept(fn, result, function)))
    out = dict.fromkeys(text for _, text in sorted(lines, key=lambda x: x[0]))
    if any("..." in text for text in out):  # read as elided: any parameter may be used
        out = {t: None for t in out if t not in {f"used({p})" for p in named - CARRIED}}
    return [ln for text in out for ln in text.split("\n")] or ["pass"]


def _function(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    indent: str,
    stored: frozenset[str] = frozenset(),
    keep: frozenset[int] = frozenset(),
    function: Any = None,
) -> list[str]:
    # Every decorator: the checker cannot follow one that may change the signature.
    out = [f"{indent}@{ast.unparse(d)}" for d in fn.decorator_list]
    out.append(f"{indent}{_header(fn, keep)}")
    out += [f"{indent}    {line}" for line in body_lines(fn, stored, function)]
    return out


def _module_function(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, keep: frozenset[int] = frozenset()
) -> list[str]:
    """A module-level function: whole when the checker can evaluate it (an argument-less
    builder of a capability dict from the environment), else its header."""
    simple = (
        not fn.args.args
        and not fn.args.kwonlyargs
        and fn.args.vararg is None
        and fn.args.kwarg is None
        and all(_simple_statement(s) for s in fn.body)
    )
    if simple:
        body = [s for s in fn.body if not _docstring(s)]
        return [
            f"def {fn.name}():",
            *("    " + ln for s in body for ln in ast.unparse(s).split("\n")),
        ]
    # A helper handed a bound method: the call that hands the method its arguments is kept
    # (the checker reads what it adds).
    a = fn.args
    vararg, kwarg = (a.vararg.arg if a.vararg else None), (a.kwarg.arg if a.kwarg else None)
    params = {p.arg for p in (*a.posonlyargs, *a.args)}
    hands = [
        n for n in ast.walk(fn)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in params
        and _passes_on(n, vararg, kwarg)
    ]  # fmt: skip
    if hands:
        names = params | {n for n in (vararg, kwarg) if n}
        return [_header(fn, keep), *dict.fromkeys(f"    {call_text(c, names)}" for c in hands)]
    return skeleton_guards.guard_function(fn, _header(fn, keep)) or [f"{_header(fn, keep)} ..."]


def _class(
    node: ast.ClassDef,
    calling: frozenset[str] = frozenset(),
    keep: frozenset[int] = frozenset(),
    functions: Mapping[str, ast.FunctionDef | ast.AsyncFunctionDef] | None = None,
) -> list[str]:
    bases = [ast.unparse(b) for b in node.bases]
    bases += [ast.unparse(k) for k in node.keywords]
    out = skeleton_shape.decorators(node, keep)
    out.append(f"class {node.name}({', '.join(bases)}):" if bases else f"class {node.name}:")
    body: list[str] = []
    stored = frozenset(
        attr
        for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
        for _, attr in body_of(item, lambda expr: None, kind=_kind(item)).kwargs_stored
    ) | frozenset(
        attr
        for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
        for p in STORE_CHECKED
        for attr in stored_only(item, p)
    )
    for item in node.body:
        at = len(body)
        # Changed in place, bound in an if / try, imported, unpacked.
        step = kept_step(item)  # class_caps: `model_capabilities["k"] = False` read as written
        extra = [f"    {step}"] if step else (
            skeleton_module.class_statement(item) or skeleton_shape.class_form(item, _fact)
        )  # fmt: skip
        if isinstance(item, (ast.Expr, ast.Assign, ast.AugAssign)) and id(item.value) in keep:
            body.append(f"    {ast.unparse(item)}")  # raises on import: kept whole
        elif extra:
            body += extra
        elif isinstance(item, ast.Assign):
            names = [ast.unparse(t) for t in item.targets if isinstance(t, ast.Name)]
            if names:
                value = item.value if _simple(item.value) else None
                facts = set(names) & set(FACT_ATTRIBUTES)
                # never a constant where the tree binds something else (rt45g S05: a
                # `functools.partialmethod(...)` method is unresolved, `...` would be absent)
                text = _fact(item.value) if facts else _value(value) if value else "unevaluated()"
                body.append(f"    {' = '.join(names)} = {text}")
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            fact = item.target.id in FACT_ATTRIBUTES
            body.append(f"    {skeleton_shape.annotated(item, _fact if fact else _value)}")
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if body:
                body.append("")
            lines = skeleton_body(
                node,
                item,
                with_returns(
                    item, _function(item, "    ", stored, keep, resolver(node, functions or {}))
                ),
            )
            body += skeleton_module.with_extras(lines, item, node, set(calling))
        elif isinstance(item, ast.ClassDef):
            if body:
                body.append("")
            body += ["    " + line if line else "" for line in _class(item, keep=keep)]
        body += ["    " + f for f in skeleton_shape.kept_forms(item, body[at:], _fact)]
    return out + (body or ["    pass"])


def skeleton_text(source: str, path: str, commit: str) -> str:
    """The skeleton of one module (``source``), recording ``path @ commit``. A skeleton
    written by an older tool (no ``IMPORTS_KEPT``: no returns, unread modules left out) stays
    one: its header does not claim what it does not keep."""
    tree = ast.parse(source)
    older = recorded_provenance(source) is not None and IMPORTS_KEPT not in source
    lines = [
        "# Interface skeleton written by `python -m vllm_tt_plugin.contract.skeleton` (not the",
        "# file): imports, class lines, class attributes, def headers and, in each body,",
        "# flattened, the calls of the instance's own methods, cls(...), the reads of **kwargs",
        "# and the forwarding calls of",
        f"# {UPSTREAM} {path} @ {commit}",
        f"# https://github.com/{UPSTREAM}/blob/{commit}/{path}",
        *([] if older else [IMPORTS_KEPT, COMMANDS_KEPT]),
    ]
    imports: list[str] = []
    rest: list[list[str]] = []
    calling = frozenset(skeleton_module.importers(tree))
    as_methods = skeleton_module.assigned_functions(tree) | skeleton_module.handed_functions(tree)
    functions = {
        n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    keep = frozenset(id(r.node) for r in import_time_raises(tree))  # raises on import
    classes = frozenset(n.name for n in tree.body if isinstance(n, ast.ClassDef))
    for node in tree.body:
        at = len(rest)
        extra = skeleton_module.module_statement(node)  # changed after a class body
        if isinstance(node, (ast.Expr, ast.Assign, ast.AugAssign)) and id(node.value) in keep:
            rest.append([ast.unparse(node)])
        elif extra:
            rest.append(extra)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            # In place after other code: which names a cycle finds bound depends on the order.
            if rest:
                rest.append([ast.unparse(node)])
            else:
                imports.append(ast.unparse(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in as_methods:
            rest.append(_function(node, "", keep=keep))  # a class body binds it as a method
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in calling:
            rest.append([_header(node, keep), *skeleton_module.function_imports(node)])
        elif isinstance(node, ast.Assign):
            names = [ast.unparse(t) for t in node.targets if isinstance(t, ast.Name)]
            if names:
                rest.append([f"{' = '.join(names)} = {_constant(node.value)}"])
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.value is not None:
                rest.append([f"{node.target.id} = {_constant(node.value)}"])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            rest.append(_module_function(node, keep))
        elif isinstance(node, ast.ClassDef):
            rest.append(_class(node, calling, keep, functions))
        written = [line for block in rest[at:] for line in block]  # exec(...), _install(Cls)
        rest += [[f] for f in skeleton_shape.kept_forms(node, written, _constant, classes)]
    if imports:
        lines += ["", *imports]
    for block in rest:
        lines += ["", "", *block] if len(block) > 1 else ["", *block]
    newer = newer_syntax(source)
    if newer:  # the statement is not kept: what the checker reports of it is
        lines += ["", f"{NOT_PY310} {newer}"]
    parts = path.removesuffix(".py").split("/")  # what fails on the host's 3.10, recorded
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    host = failure_lines(parse_module(name, Path(path), parts[-1] == "__init__", tree), source)
    lines += ["", *host] if host else []
    text = "\n".join(lines) + "\n"
    ast.parse(text)  # a skeleton is Python the checker reads
    return text


def write_skeletons(
    root: Path, out: Path, targets: Iterable[str], commit: str | None = None
) -> list[Written]:
    """Write the skeleton of every module the checker reads for ``targets`` under ``out``."""
    limit = sys.getrecursionlimit()  # ast.unparse recurses per level: a nesting Python 3.10
    sys.setrecursionlimit(max(limit, 8000))  # imports (CR3c, 180 deep) must not overflow
    try:
        return _write_skeletons(root, out, targets, commit)
    except RecursionError as exc:
        raise FixtureError("an expression nests too deeply to write") from exc
    finally:
        sys.setrecursionlimit(limit)


def _write_skeletons(
    root: Path, out: Path, targets: Iterable[str], commit: str | None
) -> list[Written]:
    head = commit or checkout_head(root)
    written: list[Written] = []
    imported: list[str] = []
    for path in read_modules(root, targets):
        rel = path.relative_to(root).as_posix()
        try:
            # As the import (and the checker) decode it: a coding line or BOM, else UTF-8.
            text = decode_source(path.read_bytes(), rel)
        except SourceDecodeError as exc:
            raise FixtureError(str(exc)) from exc
        recorded = recorded_provenance(text)
        source_path, source_commit = recorded if recorded and not commit else (rel, head)
        if not re.fullmatch(r"[0-9a-f]{40}", source_commit):
            raise FixtureError(
                f"{rel}: no commit to record (pass --commit SHA, or run on a git checkout)"
            )
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(skeleton_text(text, source_path, source_commit), encoding="utf-8")
        written.append(Written(rel, source_path, source_commit))
        imported += imported_modules(rel, text)
    done = {w.path for w in written}
    for name in dict.fromkeys(imported):
        written += placeholder(root, out, name, done, head)
    record_checkout_failures(root, out, written)
    return written


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    from vllm_tt_plugin.contract.parity import registry_targets

    parser = argparse.ArgumentParser(
        prog="python -m vllm_tt_plugin.contract.skeleton", description=__doc__.splitlines()[0]
    )
    parser.add_argument("tt_metal_home", type=Path, help="a tt-metal checkout (TT_METAL_HOME)")
    parser.add_argument("out", type=Path, help="where the skeleton tree is written")
    parser.add_argument("--commit", help="the commit to record (default: git rev-parse HEAD)")
    parser.add_argument("--arch", action="append", default=[], help="only these architectures")
    args = parser.parse_args(argv)
    root: Path = args.tt_metal_home
    if not (root / "models").is_dir():
        print(f"tt-metal-skeleton: {root} is not a tt-metal checkout (no models/)", file=sys.stderr)
        return 2
    if args.commit is not None and not re.fullmatch(r"[0-9a-f]{40}", args.commit):
        print(
            f"tt-metal-skeleton: --commit {args.commit!r} is not a 40-hex commit", file=sys.stderr
        )
        return 2
    try:
        targets = registry_targets(args.arch)
        written = write_skeletons(root, args.out, targets, args.commit)
    except FixtureError as exc:
        print(f"tt-metal-skeleton: {exc}", file=sys.stderr)
        return 2
    for w in written:
        print(f"{w.path}  ({w.source} @ {w.commit[:12]})")
    print(f"tt-metal-skeleton: {len(written)} module(s) for {len(targets)} target(s) in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
