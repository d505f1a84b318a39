"""What a skeleton keeps of the class bodies and module code the checker reads as not plain
(``source_shape``), so a skeleton reads as its checkout: class decorators, annotations (a
dataclass's fields, an annotation alone), tuple targets and imports in a class body, the
``exec`` / ``eval`` / ``locals()`` ... calls and walruses of a class body or module code, module
calls handing a class on, a method's writes to its own instance (``self.__dict__``,
``setattr(self, name, v)``, ``type(self).m = f``) and a classmethod's ``cls.x`` reads. Values
are elided where only their presence decides."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from vllm_tt_plugin.contract.source_shape import (
    _dynamic_call,
    _statements,
    class_binds,
    instance_writes,
)

Value = Callable[[ast.expr], str]  # how the skeleton writes a value it keeps (skeleton._fact)
Def = ast.FunctionDef | ast.AsyncFunctionDef
_COMPOUND = (ast.If, ast.Try, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Match)


def _args(call: ast.Call, keep: Callable[[ast.expr], str | None]) -> str:
    """``call``'s arguments, each as ``keep`` writes it, else ``...`` (keyword names kept)."""
    out = []
    for a in call.args:
        inner = a.value if isinstance(a, ast.Starred) else a
        text = keep(inner) or "..."
        out.append(f"*{text}" if isinstance(a, ast.Starred) else text)
    for k in call.keywords:
        text = keep(k.value) or "..."
        out.append(f"{k.arg}={text}" if k.arg else f"**{text}")
    return ", ".join(out)


def _constant(expr: ast.expr) -> str | None:
    return ast.unparse(expr) if isinstance(expr, ast.Constant) else None


def decorators(node: ast.ClassDef, keep: frozenset[int], indent: str = "") -> list[str]:
    """A class's decorators as written, call arguments other than constants elided: which
    decorator, and a dataclass's options, decide (``source_shape._plain_decorator``). One the
    import raises on (``keep``) is whole."""
    out = []
    for d in node.decorator_list:
        if isinstance(d, ast.Call) and id(d) not in keep:
            out.append(f"{indent}@{ast.unparse(d.func)}({_args(d, _constant)})")
        else:
            out.append(f"{indent}@{ast.unparse(d)}")
    return out


def annotated(item: ast.AnnAssign, value: Value) -> str:
    """``name: T = v`` with its annotation (``ClassVar``, ``KW_ONLY``, ``InitVar`` decide a
    dataclass's fields) and ``v`` as ``value`` writes it, or ``name: T`` (binds nothing); a
    ``field(...)`` default keeps its keyword names."""
    head = f"{ast.unparse(item.target)}: {ast.unparse(item.annotation)}"
    v = item.value
    if v is None:
        return head
    if isinstance(v, ast.Call) and ast.unparse(v.func).rpartition(".")[2] == "field":
        return f"{head} = {ast.unparse(v.func)}({_args(v, lambda e: None)})"
    return f"{head} = {value(v)}"


def class_form(item: ast.stmt, value: Value, indent: str = "    ") -> list[str]:
    """A class-body binding that is not ``name = v``: an import (as written) or an assignment
    to a tuple / starred target (values as ``value`` writes them, element by element)."""
    if isinstance(item, (ast.Import, ast.ImportFrom)):
        return [indent + ast.unparse(item)]
    if isinstance(item, ast.Assign) and not all(isinstance(t, ast.Name) for t in item.targets):
        targets = " = ".join(ast.unparse(t) for t in item.targets)
        return [f"{indent}{targets} = {_unpacked(item.value, value)}"]
    return []


def _unpacked(expr: ast.expr, value: Value) -> str:
    if isinstance(expr, (ast.Tuple, ast.List)):
        items = [
            f"*{value(e.value)}" if isinstance(e, ast.Starred) else value(e) for e in expr.elts
        ]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    return value(expr)


def kept_forms(
    item: ast.stmt, written: Sequence[str], value: Value, classes: frozenset[str] | None = None
) -> list[str]:
    """The calls and walruses in ``item`` (code a class body or the module runs, not nested
    defs) the checker reads where it does not evaluate the statement, each as a statement of its
    own unless ``written`` already holds it: ``exec(...)`` / ``eval`` / ``locals()`` ... by
    name; in a class body (``classes`` None) ``(name := v)``; in module code (``classes``: the
    module's classes) a call handing one of them on (``_install(Cls)``)."""
    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    text = "\n".join(written)
    out: list[str] = []
    for n in sorted(_statements([item]), key=lambda n: (getattr(n, "lineno", 0),
                                                         getattr(n, "col_offset", 0))):  # fmt: skip
        name = _dynamic_call(n)
        if name and isinstance(n, ast.Call):
            if f"{name}(" not in text:
                out.append(f"{name}(...)" if n.args or n.keywords else f"{name}()")
        elif classes is None and isinstance(n, ast.NamedExpr):
            out.append(f"({n.target.id} := {value(n.value)})")
        elif classes is not None and isinstance(n, ast.Call):

            def handed(e: ast.expr) -> str | None:
                return e.id if isinstance(e, ast.Name) and e.id in classes else None

            args = [a.value if isinstance(a, ast.Starred) else a for a in n.args]
            if any(handed(a) for a in [*args, *(k.value for k in n.keywords)]):
                out.append(f"{ast.unparse(n.func)}({_args(n, handed)})")
    return [line for line in dict.fromkeys(out) if line not in text]


def method_lines(fn: Def, cls: ast.ClassDef) -> list[str]:
    """Lines of ``fn``'s skeleton body the shape rules read: its writes to its own instance or
    class (``source_shape.instance_writes``, any name) and, in a classmethod, the ``cls.x`` it
    reads that its class body does not bind (``source_shape.cls_reads_missing``) and the
    ``cls.x`` it sets."""
    # Unconditional where the tree's is (a top-level statement): a conditional one stays so.
    top = {id(n) for st in fn.body if not isinstance(st, _COMPOUND) for n in ast.walk(st)}
    out = [_write(n) if id(n) in top else f"if ...: {_write(n)}" for n, _ in instance_writes(fn)]
    firsts = [*fn.args.posonlyargs, *fn.args.args]
    names = {getattr(d, "id", getattr(d, "attr", "")) for d in fn.decorator_list}
    if "classmethod" in names and firsts:
        me = firsts[0].arg
        for n in ast.walk(fn):
            if not (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)):
                continue
            if n.value.id == "cls" and isinstance(n.ctx, ast.Store):
                out.append(f"if ...: cls.{n.attr} = ...")
            elif (
                n.value.id == me and isinstance(n.ctx, ast.Load)
                and not (n.attr.startswith("__") and n.attr.endswith("__"))
                and not class_binds(cls, n.attr)
            ):  # fmt: skip
                out.append(f"used({me}.{n.attr})")
    return list(dict.fromkeys(out))


def written_by(fn: Def) -> set[int]:
    """The nodes of ``instance_writes`` in ``fn`` (``method_lines`` writes them, not
    ``skeleton.body_lines``, which would elide a literal name)."""
    return {id(n) for n, _ in instance_writes(fn)}


def _write(n: ast.AST) -> str:
    """One of ``instance_writes`` as a skeleton statement (values elided)."""
    if isinstance(n, ast.Attribute):  # `self.__class__ = ...`, `type(self).m = ...`
        return f"{ast.unparse(n)} = ..."
    if isinstance(n, ast.Subscript):  # `self.__dict__["m"] = ...`, `del vars(self)[k]`
        target = f"{ast.unparse(n.value)}[{_constant(n.slice) or '...'}]"
        return f"del {target}" if isinstance(n.ctx, ast.Del) else f"{target} = ..."
    assert isinstance(n, ast.Call)
    func = ast.unparse(n.func)
    if func in ("setattr", "object.__setattr__") and n.args:
        key = n.args[1] if len(n.args) > 1 else None
        literal = isinstance(key, ast.Constant) and isinstance(key.value, str)
        name = ast.unparse(key) if key is not None and literal else "..."
        return f"{func}({ast.unparse(n.args[0])}, {name}, ...)"
    return f"{func}({_args(n, lambda e: None)})"
