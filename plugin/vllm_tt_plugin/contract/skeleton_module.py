"""What a skeleton keeps of module-level and class-level code besides headers, so the checker
reads it as it reads the checkout (``source_module`` / ``source_scan``): changes made after a
class body (``Class.m = f``, ``setattr``, ``CAPS["k"] = v``), names a class body binds inside an
``if`` / ``try`` or changes in place, and in a method the plugin modules it imports by name, the
module functions it calls that import them, the served class built by name or through an alias
of ``cls``, and an attribute the plugin reads set on an object other than at the top of
``__init__``."""

from __future__ import annotations

import ast

from vllm_tt_plugin.contract.call_plan import METHODS
from vllm_tt_plugin.contract.skeleton_shape import method_lines
from vllm_tt_plugin.contract.source_import import bound_names
from vllm_tt_plugin.contract.source_live import constant_test
from vllm_tt_plugin.contract.source_module import MUTATORS, PLUGIN_PACKAGE
from vllm_tt_plugin.contract.source_scan import _is_own_class, imports_of

Def = ast.FunctionDef | ast.AsyncFunctionDef
# Attributes whose store on an object the checker reads: the contract, the methods it calls.
_READ = frozenset({"decode_input_update_contract", *(plan.method for plan in METHODS)})
_NESTING = (ast.If, ast.Try, ast.For, ast.While, ast.With, ast.Match)


def _change(node: ast.stmt) -> str:
    """A statement that changes a name or a class attribute in place, as a skeleton line with
    its values elided ("" for any other statement)."""
    if isinstance(node, ast.Delete):
        gone = [ast.unparse(t) if isinstance(t, (ast.Name, ast.Attribute))
                else f"{ast.unparse(t.value)}[...]" if isinstance(t, ast.Subscript)
                and _named(t.value) else "" for t in node.targets]  # fmt: skip
        return f"del {', '.join(g for g in gone if g)}" if any(gone) else ""
    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                return f"{t.value.id}.{t.attr} = ..."
            if isinstance(t, ast.Subscript) and _named(t.value):  # `Cls.__dict__[k][j] = v` too
                shown = ast.unparse(node.value) if isinstance(node.value, ast.Name) else "..."
                return f"{ast.unparse(t.value)}[...] = {shown}"  # a dict stored elsewhere: kept
            if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "globals()":
                return "globals()[...] = ..."  # binds names the checker does not see
            if isinstance(node, ast.AugAssign) and isinstance(t, ast.Name):
                op = ast.unparse(ast.AugAssign(t, node.op, ast.Constant(...))).split()[1]
                return f"{t.id} {op} ..."  # changed in place (`caps |= {...}`), not rebound
        return ""
    call = node.value if isinstance(node, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return ""
    func = call.func
    if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and len(call.args) > 1:
        owner, key = call.args[0], call.args[1]
        if isinstance(owner, ast.Name):
            name = ast.unparse(key) if isinstance(key, ast.Constant) else "..."
            return f"{func.id}({owner.id}, {name}, ...)" if func.id == "setattr" else (
                f"delattr({owner.id}, {name})"
            )  # fmt: skip
    if isinstance(func, ast.Attribute) and func.attr in MUTATORS:
        inner = func.value
        if isinstance(inner, ast.Name) or (
            isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name)
        ):
            first = call.args[0] if call.args else None  # setdefault of a literal key: kept
            shown = f"{ast.unparse(first)}, ..." if isinstance(first, ast.Constant) else "..."
            return f"{ast.unparse(inner)}.{func.attr}({shown})"
    handed = [a for a in (*call.args, *(k.value for k in call.keywords)) if _named(a)]
    if handed and _named(func):  # `_patch(_CAPS)`: the callee may change what it is handed
        return f"{ast.unparse(func)}({', '.join(ast.unparse(a) for a in handed)})"
    return ""


def _named(expr: ast.expr) -> bool:
    """A name, or attributes and subscripts of one (``Cls.__dict__["caps"]``)."""
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return isinstance(expr, ast.Name)


def module_statement(node: ast.stmt) -> list[str]:
    """Module-level code the skeleton otherwise drops that the checker reads: a change after a
    class body or of a module constant (``source_module._changes``), and a compound statement
    binding names, with its shape (``compound``)."""
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)) and any(
        isinstance(n, ast.Name) and n.id == "__all__" for n in ast.walk(node)
    ):  # `__all__ += [...]`, `__all__.append("X")`: whole (what `import *` binds)
        return [ast.unparse(node)]
    text = _change(node)
    if text:
        return [text]
    if isinstance(node, (*_NESTING, ast.Match)):
        return compound(node, "")
    return []


def _test(test: ast.expr) -> str:
    """A test as the checker reads it: a constant (``False``, ``TYPE_CHECKING``) kept."""
    return ast.unparse(test) if constant_test(test) is not None else "..."


def _iterable(expr: ast.expr) -> str:
    """A loop's iterable made only of names, attributes, literals and displays, as written: the
    alias rule reads the objects it holds (rt45g FA11: `for d in (_CAPS,): d[k] = v`)."""
    plain = (ast.Name, ast.Attribute, ast.Constant, ast.Tuple, ast.List, ast.Starred, ast.Load)
    return ast.unparse(expr) if all(isinstance(n, plain) for n in ast.walk(expr)) else "..."


def compound(node: ast.stmt, indent: str) -> list[str]:
    """A compound statement as the checker reads it (``source_import``, ``source_module``,
    ``source_shape``): its shape (``if`` / ``try`` / ``except ... as`` / ``with`` / loop /
    ``match`` with its patterns), the imports in it as written, the changes in it (``_change``),
    every other name it binds as ``name = ...`` ("" when it binds and changes nothing)."""
    inner = indent + "    "
    changes: list[str] = []  # what it keeps besides the names it binds

    def block(stmts: list[ast.stmt], inner: str = inner) -> list[str]:
        out: list[str] = []
        for st in stmts:
            change = _change(st)
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                out.append(inner + ast.unparse(st))
            elif isinstance(st, (*_NESTING, ast.Match)):
                nested = compound(st, inner)
                changes.extend(nested)
                out += nested
            elif change:
                changes.append(change)
                out.append(inner + change)
            else:
                out += [f"{inner}{n} = ..." for n, _ in dict.fromkeys(bound_names([st]))]
        return out or [inner + "pass"]

    if isinstance(node, ast.If):
        lines = [f"{indent}if {_test(node.test)}:", *block(node.body)]
        if node.orelse:
            lines += [f"{indent}else:", *block(node.orelse)]
    elif isinstance(node, ast.Try):
        lines = [f"{indent}try:", *block([*node.body, *node.orelse])]
        for h in node.handlers:
            caught = f" {ast.unparse(h.type)}" if h.type is not None else ""
            named = f" as {h.name}" if h.name else ""
            lines += [f"{indent}except{caught}{named}:", *block(h.body)]
        if node.finalbody:
            lines += [f"{indent}finally:", *block(node.finalbody)]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        lines = [f"{indent}for {ast.unparse(node.target)} in {_iterable(node.iter)}:",
                 *block(node.body)]  # fmt: skip
    elif isinstance(node, ast.While):
        lines = [f"{indent}while {_test(node.test)}:", *block(node.body)]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        names = [f" as {ast.unparse(i.optional_vars)}" for i in node.items if i.optional_vars]
        lines = [f"{indent}with ...{names[0] if names else ''}:", *block(node.body)]
    else:  # a match: its patterns bind names (captures)
        lines = [f"{indent}match ...:"]
        for case in getattr(node, "cases", []):
            guard = " if ..." if case.guard is not None else ""
            pattern = f"{inner}case {ast.unparse(case.pattern)}{guard}:"
            lines += [pattern, *block(case.body, inner + "    ")]
    captures = any(isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name for n in ast.walk(node))
    return lines if bound_names([node]) or changes or captures else []


def class_statement(node: ast.stmt) -> list[str]:
    """A class-body statement the skeleton otherwise drops: a change of a name in place, or a
    compound statement binding names, with its shape (``compound``: which branch Python takes
    is not read)."""
    text = _change(node)
    if text:
        return [f"    {text}"]
    return compound(node, "    ") if isinstance(node, _NESTING) else []


def importers(tree: ast.Module) -> set[str]:
    """Module functions that import the plugin (directly or through another one)."""
    functions = {
        n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }

    def find(expr: ast.expr) -> Def | None:
        return functions.get(expr.id) if isinstance(expr, ast.Name) else None

    out: set[str] = set()
    for name, fn in functions.items():
        if function_imports(fn) or imports_of(fn, find):
            out.add(name)
    return out


def function_imports(fn: Def) -> list[str]:
    """The plugin imports of a module function, as lines of its skeleton body."""
    out: list[str] = []
    for n in ast.walk(fn):
        if (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == PLUGIN_PACKAGE) or (
            isinstance(n, ast.Import) and n.names[0].name.split(".")[0] == PLUGIN_PACKAGE
        ):
            out.append(f"    {ast.unparse(n)}")
    return out


def method_extras(fn: Def, cls_name: str, calling: set[str]) -> list[str]:
    """Body lines of ``fn`` the checker reads through ``source_scan`` and the contract rules."""
    firsts = [*fn.args.posonlyargs, *fn.args.args]
    kinds = {getattr(d, "id", getattr(d, "attr", "")) for d in fn.decorator_list}
    kind = next((k for k in ("classmethod", "staticmethod") if k in kinds), "method")
    me = firsts[0].arg if firsts and kind != "staticmethod" else None
    out: list[str] = []
    aliases: set[str] = set()
    top = {id(s) for s in fn.body}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if isinstance(t, ast.Name) and me is not None and _is_own_class(node.value, me, kind):
                aliases.add(t.id)
                out.append(f"{t.id} = {ast.unparse(node.value)}")
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and sub.attr in _READ:
                    owner = ast.unparse(sub.value)
                    if not (owner == me and id(node) in top):  # body_lines keeps those
                        out.append(f"if ...: {owner}.{sub.attr} = ...")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else ""
        first = node.args[0] if node.args else None
        if (
            name == "setattr" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in _READ
        ):  # fmt: skip
            out.append(f"setattr({ast.unparse(node.args[0])}, {node.args[1].value!r}, ...)")
            continue
        if name in ("__import__",) or getattr(func, "attr", "") == "import_module":
            if isinstance(first, ast.Constant) and str(first.value).startswith(PLUGIN_PACKAGE):
                out.append(f"__import__({first.value!r})")
        elif name in calling:
            out.append(f"{name}()")
        elif name and (name == cls_name or name in aliases):
            out.append(_built(node))
    return list(dict.fromkeys(out))


def _built(node: ast.Call) -> str:
    """A construction with its argument count and keyword names (values elided)."""
    args = ["*..." if isinstance(a, ast.Starred) else "..." for a in node.args]
    args += [f"{k.arg}=..." if k.arg else "**..." for k in node.keywords]
    return f"{ast.unparse(node.func)}({', '.join(args)})"


def with_extras(lines: list[str], fn: Def, cls: ast.ClassDef, calling: set[str]) -> list[str]:
    """``_function``'s lines with ``method_extras`` and the lines the shape rules read
    (``skeleton_shape.method_lines``) added at the top of the body."""
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def ")))
    body = [line for line in lines[at + 1 :] if line.strip() != "pass"]
    kept = {line.strip().removeprefix("if ...: ") for line in body}
    shape = [e for e in method_lines(fn, cls) if e.removeprefix("if ...: ") not in kept]
    extra = list(dict.fromkeys([*method_extras(fn, cls.name, calling), *shape]))
    if not extra:
        return lines
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())] + "    "
    return [*lines[: at + 1], *(indent + e for e in extra), *body]


def assigned_functions(tree: ast.Module) -> set[str]:
    """Module functions a class body binds as methods (``decode_forward = _decode``): their
    skeleton is a method's."""
    return {
        item.value.id
        for node in tree.body if isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, ast.Assign) and isinstance(item.value, ast.Name)
    }  # fmt: skip


def handed_functions(tree: ast.Module) -> set[str]:
    """Module functions a method hands its ``*args`` / ``**kwargs`` to (``return
    allocate_vllm_kv_cache(*args, **kwargs, model=...)``): the checker follows the call into
    them, so their skeleton keeps what a method's does."""
    out: set[str] = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in (i for i in cls.body if isinstance(i, (ast.FunctionDef, ast.AsyncFunctionDef))):
            variadic = {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and any(
                    isinstance(v, ast.Name) and v.id in variadic
                    for v in (*(x.value for x in node.args if isinstance(x, ast.Starred)),
                              *(k.value for k in node.keywords if k.arg is None))
                ):  # fmt: skip
                    out.add(node.func.id)
    return out
