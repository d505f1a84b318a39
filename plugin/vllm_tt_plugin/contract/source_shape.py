"""Is a class body (or its module) plain enough to read statically, and if not, which names are
in doubt and why.

The checker reads a class as its plain ``def`` s and assignments, the last binding of a name
winning. Anything else that binds or replaces a name (a tuple target, ``del``, ``+=``, a walrus,
an import in the body, ``exec`` / ``eval`` / ``locals()`` / ``vars()`` / ``globals()``, a
metaclass, a class decorator, class keywords, attribute hooks such as ``__getattribute__`` /
``__setattr__`` / ``__new__`` / ``__init_subclass__``, writes through an instance's ``__dict__``)
makes the names it may touch ``unresolved``: Python may keep another object than the one read.
Also here: private-name mangling (``self.__h`` in class ``C`` is ``_C__h``), the abstract
methods an ``abc`` class leaves unimplemented, ``__slots__``, a classmethod's ``cls.x`` reads,
and the ``__init__`` a ``@dataclass`` generates.
"""

from __future__ import annotations

import abc
import ast
import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Class decorators that return the class they are given with its methods as written:
# typing.final (sets __final__), functools.total_ordering (adds only comparison methods), and
# vLLM's MULTIMODAL_REGISTRY.register_processor(...), whose wrapper sets `_processor_factory`
# and returns the class (vllm-project/vllm vllm/multimodal/registry.py @ 8e465ea29ec7fb6f03bd
# bd89636e8950169db54a). `dataclass` is modelled below (dataclass_init).
_PLAIN_CLASS_DECORATORS = ("final", "total_ordering", "runtime_checkable")
_REGISTRY_DECORATOR = "MULTIMODAL_REGISTRY.register_processor"
# dataclass options that leave the class's methods as written (frozen adds a raising
# __setattr__, slots builds a new class).
_PLAIN_DATACLASS_OPTIONS = {"init", "repr", "eq", "order", "unsafe_hash", "match_args", "kw_only"}
# Hooks that change how attributes of the class or its instances are found or set, or what
# the class and its subclasses are: inherited, so they put every name of a subclass in doubt.
_HOOKS = ("__getattribute__", "__setattr__", "__delattr__", "__new__", "__init_subclass__",
          "__class_getitem__", "__set_name__")  # fmt: skip
_DYNAMIC = ("exec", "eval", "locals", "vars", "globals", "compile")
_METACLASSES = ("ABCMeta", "abc.ABCMeta")
_NAMESPACE_WRITES = ("update", "setdefault", "pop", "popitem", "clear", "__setitem__")


@dataclass(frozen=True)
class Doubt:
    """Why the object Python keeps for a name may not be the one the checker reads."""

    line: int
    why: str
    inherited: bool = False  # reaches subclasses and instances (a metaclass, a hook)


def mangle(name: str, cls: str) -> str:
    """The attribute name Python stores ``name`` under when written in class ``cls``."""
    stripped = cls.lstrip("_")
    if not name.startswith("__") or name.endswith("__") or not stripped:
        return name
    return f"_{stripped}{name}"


def mangled(
    item: ast.FunctionDef | ast.AsyncFunctionDef, cls: str
) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """``item`` with every ``obj.__name`` as Python compiles it inside class ``cls``."""
    if not any(
        isinstance(n, ast.Attribute) and mangle(n.attr, cls) != n.attr for n in ast.walk(item)
    ):
        return item
    item = copy.deepcopy(item)
    for n in ast.walk(item):
        if isinstance(n, ast.Attribute):
            n.attr = mangle(n.attr, cls)
    return item


def _name(expr: ast.expr) -> str:
    return ast.unparse(expr.func if isinstance(expr, ast.Call) else expr)


def _dynamic_call(n: ast.AST) -> str:
    """``exec(...)`` / ``eval(...)`` / ``locals()`` / ``vars()`` / ``globals()``: its name."""
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _DYNAMIC:
        return n.func.id
    return ""


def _statements(body: Sequence[ast.stmt]) -> list[ast.AST]:
    """Every node of ``body`` outside nested defs and classes (code the body itself runs)."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(body)
    while stack:
        n = stack.pop()
        out.append(n)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return out


def module_doubt(tree: ast.Module) -> Doubt | None:
    """Module code that may bind or replace anything: ``exec`` / ``eval`` / ``globals()`` ...
    outside functions and classes."""
    for n in _statements(tree.body):
        name = _dynamic_call(n)
        if name:
            return Doubt(getattr(n, "lineno", 0), f"module code calls {name}() (line "
                         f"{getattr(n, 'lineno', 0)}): what it binds is not evaluated")  # fmt: skip
    return None


def handed_names(tree: ast.Module) -> dict[str, tuple[int, str]]:
    """Names module code (outside functions and classes) passes to a call as an argument
    (``_install(Cls)``): the callee may replace the class's attributes. name -> (first line,
    callee)."""
    out: dict[str, tuple[int, str]] = {}
    for n in _statements(tree.body):
        if isinstance(n, ast.Call):
            for arg in [*n.args, *(k.value for k in n.keywords)]:
                value = arg.value if isinstance(arg, ast.Starred) else arg
                if isinstance(value, ast.Name):
                    out.setdefault(value.id, (n.lineno, ast.unparse(n.func)))
    return out


def _plain_decorator(d: ast.expr) -> bool:
    name = _name(d)
    last = name.rpartition(".")[2]
    if last in _PLAIN_CLASS_DECORATORS or name.startswith(_REGISTRY_DECORATOR):
        return True
    if last == "dataclass":
        keywords = d.keywords if isinstance(d, ast.Call) else []
        return all(k.arg in _PLAIN_DATACLASS_OPTIONS for k in keywords) and not (
            isinstance(d, ast.Call) and d.args
        )
    return False


def _doubts(node: ast.ClassDef, name: str) -> Iterator[Doubt]:
    """Why ``node``'s own binding of ``name`` may not be what the checker reads: a form of
    binding it does not follow, or something that may replace any name of the class."""
    for d in node.decorator_list:
        if not _plain_decorator(d):
            # Inherited: what a subclass derives from is whatever the decorator returned.
            yield Doubt(d.lineno, f"{node.name} is decorated with @{ast.unparse(d)}: the "
                         "object it returns is not read", True)  # fmt: skip
    for k in node.keywords:
        value = ast.unparse(k.value)
        if k.arg == "metaclass" and value in _METACLASSES:
            continue
        what = f"metaclass={value}" if k.arg == "metaclass" else f"the class keyword {k.arg}="
        yield Doubt(node.lineno, f"{node.name} is built with {what}: what it makes of the "
                     "class body is not evaluated", k.arg == "metaclass")  # fmt: skip
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in _HOOKS:
            yield Doubt(stmt.lineno, f"{node.name} defines {stmt.name}: attribute lookup, "
                         "setting or construction is not evaluated", True)  # fmt: skip
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            instance = _instance_doubt(node, stmt, name)
            if instance is not None:
                yield instance
            continue
        if isinstance(stmt, ast.ClassDef):
            if stmt.name == name:
                yield Doubt(stmt.lineno, f"{name} is a nested class in {node.name}")
            continue
        for n in _statements([stmt]):
            dyn = _dynamic_call(n)
            if dyn:
                yield Doubt(stmt.lineno, f"the body of {node.name} calls {dyn}() (line "
                             f"{stmt.lineno}): what it binds is not evaluated")  # fmt: skip
        why = _odd_binding(stmt, name)
        if why:
            yield Doubt(stmt.lineno, f"{name} is {why} in the body of {node.name} (line "
                         f"{stmt.lineno}): which object Python keeps is not evaluated")  # fmt: skip


def class_doubt(node: ast.ClassDef, name: str) -> Doubt | None:
    """The first reason ``node``'s own binding of ``name`` may not be what the checker reads."""
    return next(_doubts(node, name), None)


def _odd_binding(stmt: ast.stmt, name: str) -> str:
    """How ``stmt`` binds ``name`` when not as a plain ``name = v`` / ``name: T = v``."""
    if isinstance(stmt, ast.Delete) and any(
        isinstance(t, ast.Name) and t.id == name for t in stmt.targets
    ):
        return "removed with `del`"
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return f"changed with `{ast.unparse(stmt)}`" if stmt.target.id == name else ""
    if isinstance(stmt, ast.Assign):
        for t in stmt.targets:
            if not isinstance(t, ast.Name) and any(  # `name["k"] = v` binds no name
                isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                for n in ast.walk(t)
            ):
                return f"unpacked from `{ast.unparse(stmt.value)}`"
    if isinstance(stmt, (ast.Import, ast.ImportFrom)) and any(
        (a.asname or a.name.split(".")[0]) == name for a in stmt.names
    ):
        return "imported"
    for n in _statements([stmt]):
        if isinstance(n, ast.NamedExpr) and n.target.id == name:
            return "bound with `:=`"
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return ""
    for n in _statements([stmt]):  # a loop or `with` target, an `except ... as`, a match capture
        if (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == name) or (
            isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name == name
        ):
            return f"bound by a `{type(stmt).__name__.lower()}` statement"
    return ""


def _instance_doubt(
    node: ast.ClassDef, method: ast.FunctionDef | ast.AsyncFunctionDef, name: str
) -> Doubt | None:
    """The first of ``instance_writes`` of ``method`` that may set ``name``."""
    for n, why in instance_writes(method, name):
        line = getattr(n, "lineno", method.lineno)
        return Doubt(line, f"{node.name}.{method.name} {why} [line {line}]: the attributes "
                     "an instance ends up with are not evaluated", True)  # fmt: skip
    return None


def instance_writes(
    method: ast.FunctionDef | ast.AsyncFunctionDef, name: str | None = None
) -> Iterator[tuple[ast.AST, str]]:
    """(node, what it does) for each place ``method`` sets attributes on its instance (or class)
    in ways the checker does not read: through ``__dict__`` / ``vars(obj)`` (written, not read),
    ``object.__setattr__`` / ``setattr`` with a computed name (or ``name``; any name when None),
    ``type(self).name = ...``, or a swap of ``__class__``. Stores on other objects
    (``self.args``) are not the instance's."""
    firsts = [*method.args.posonlyargs, *method.args.args]
    me = firsts[0].arg if firsts else ""

    def mine(expr: ast.expr) -> bool:  # the instance, or its class
        return (isinstance(expr, ast.Name) and expr.id == me) or _names_class(expr)

    def namespace(expr: ast.expr) -> bool:  # obj.__dict__ / vars(obj) of the instance
        if isinstance(expr, ast.Attribute) and expr.attr == "__dict__":
            return mine(expr.value)
        return (
            isinstance(expr, ast.Call) and _name(expr) == "vars" and len(expr.args) == 1
            and mine(expr.args[0])
        )  # fmt: skip

    for n in ast.walk(method):
        if isinstance(n, ast.Attribute) and n.attr == "__class__" and isinstance(n.ctx, ast.Store):
            yield n, "assigns `__class__`"
        elif (
            isinstance(n, ast.Attribute) and name in (None, n.attr)
            and isinstance(n.ctx, ast.Store) and _names_class(n.value)
        ):  # fmt: skip
            yield n, f"sets `{ast.unparse(n)}` on the class"
        elif (
            isinstance(n, ast.Subscript) and isinstance(n.ctx, (ast.Store, ast.Del))
            and namespace(n.value)
        ) or (
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in _NAMESPACE_WRITES and namespace(n.func.value)
        ):  # fmt: skip
            yield n, f"writes `{ast.unparse(n)}`"
        elif isinstance(n, ast.Call) and _name(n) in ("setattr", "object.__setattr__"):
            key = n.args[1] if len(n.args) > 1 else None
            literal = isinstance(key, ast.Constant) and isinstance(key.value, str)
            if (
                n.args
                and mine(n.args[0])
                and (not literal or name is None or getattr(key, "value", "") == name)
            ):
                yield n, f"calls `{_name(n)}` on the instance"


def _names_class(expr: ast.expr) -> bool:
    """``type(x)`` or ``x.__class__``: the class of an instance."""
    if isinstance(expr, ast.Attribute):
        return expr.attr == "__class__"
    return isinstance(expr, ast.Call) and _name(expr) == "type" and len(expr.args) == 1


def inherited_doubt(node: ast.ClassDef, name: str) -> Doubt | None:
    """The doubts of ``node`` that reach its subclasses and their instances (a metaclass, the
    attribute hooks, instance writes in its methods), for a name another class defines."""
    return next((d for d in _doubts(node, name) if d.inherited), None)


def slots_doubt(classes: Sequence[ast.ClassDef], foreign: bool) -> str:
    """Every class along the MRO declares ``__slots__`` (and no base from outside the checkout
    may give instances a ``__dict__``): an attribute write outside them raises."""
    if foreign or not classes:
        return ""
    if all(_binds_plainly(c, "__slots__") for c in classes):
        return (f"every class along the MRO of {classes[0].name} declares __slots__: which "
                "attribute writes succeed is not evaluated")  # fmt: skip
    return ""


def _binds_plainly(node: ast.ClassDef, name: str) -> bool:
    for stmt in node.body:
        targets = (
            stmt.targets if isinstance(stmt, ast.Assign)
            else [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
            else []
        )  # fmt: skip
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def class_binds(node: ast.ClassDef, name: str) -> bool:
    """The class body binds ``name`` (a def, class, assignment or import)."""
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if mangle(stmt.name, node.name) == name:
                return True
        elif _binds_plainly(node, name) or _odd_binding(stmt, name):
            return True
    return False


def _abstract(item: ast.stmt) -> bool:
    return isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        _name(d).rpartition(".")[2] == "abstractmethod" for d in item.decorator_list
    )


def abstract_left(classes: Sequence[ast.ClassDef]) -> list[str]:
    """The abstract methods an ``abc`` class (``ABC`` base or ``ABCMeta`` metaclass along
    ``classes``, the MRO) leaves unimplemented: ``cls(...)`` raises TypeError."""
    uses_abc = any(
        _name(b) in ("ABC", "abc.ABC") for c in classes for b in c.bases
    ) or any(k.arg == "metaclass" and ast.unparse(k.value) in _METACLASSES
             for c in classes for k in c.keywords)  # fmt: skip
    if not uses_abc:
        return []
    names = {s.name for c in classes for s in c.body if _abstract(s)}  # type: ignore[attr-defined]
    left = []
    for name in sorted(names):
        for c in classes:  # the first class along the MRO that binds it decides
            last = next((s for s in reversed(c.body) if _binds_here(s, name)), None)
            if last is not None:
                if _abstract(last):
                    left.append(name)
                break
    return left


def _binds_here(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return stmt.name == name
    targets = (
        stmt.targets if isinstance(stmt, ast.Assign)
        else [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
        else []
    )  # fmt: skip
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def cls_reads_missing(
    item: ast.FunctionDef | ast.AsyncFunctionDef, classes: Sequence[ast.ClassDef]
) -> list[str]:
    """``cls.x`` reads in a classmethod where no class along the MRO binds ``x`` in its body
    (nor sets ``cls.x``): an instance attribute, not on the class (AttributeError)."""
    firsts = [*item.args.posonlyargs, *item.args.args]
    if not firsts:
        return []
    me = firsts[0].arg
    stored = {
        n.attr for c in classes for n in ast.walk(c)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
        and isinstance(n.value, ast.Name) and n.value.id == "cls"
    }  # fmt: skip
    missing = []
    for n in ast.walk(item):
        if (
            isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
            and isinstance(n.value, ast.Name) and n.value.id == me
            and not (n.attr.startswith("__") and n.attr.endswith("__"))
            and n.attr not in stored
            and not any(class_binds(c, n.attr) for c in classes)
        ):  # fmt: skip
            missing.append(n.attr)
    return list(dict.fromkeys(missing))


def sets_attribute(node: ast.ClassDef, name: str) -> bool:
    """``name`` is bound in the class body or set as ``self.name`` / ``cls.name`` in one of its
    methods (private names as Python mangles them)."""
    if _binds_plainly(node, name):
        return True
    for item in node.body:
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for n in ast.walk(item):
            targets: list[ast.expr] = []
            if isinstance(n, ast.Assign):
                targets = list(n.targets)
            elif isinstance(n, (ast.AnnAssign, ast.AugAssign)):
                targets = [n.target]
            for t in targets:
                for sub in ast.walk(t):
                    if (
                        isinstance(sub, ast.Attribute)
                        and mangle(sub.attr, node.name) == name
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id in ("self", "cls")
                    ):
                        return True
    return False


def _dataclass(node: ast.ClassDef) -> ast.expr | None:
    return next((d for d in node.decorator_list if _name(d).rpartition(".")[2] == "dataclass"),
                None)  # fmt: skip


def dataclass_init(
    node: ast.ClassDef, mro: Sequence[ast.ClassDef]
) -> ast.FunctionDef | Doubt | None:
    """The ``__init__`` ``@dataclass`` generates for ``node`` (its fields and those of the
    dataclasses after it in ``mro``, bases first), or a Doubt where a field's form is not
    modelled; None when it generates none."""
    deco = _dataclass(node)
    if deco is None:
        return None
    options = {k.arg: k.value for k in deco.keywords} if isinstance(deco, ast.Call) else {}
    init = options.get("init")
    if isinstance(init, ast.Constant) and not init.value:
        return None
    fields: dict[str, tuple[ast.expr | None, bool]] = {}  # name -> (default, keyword-only)
    notes: dict[str, str] = {}  # name -> its annotation
    for cls in reversed(mro):
        d = _dataclass(cls)
        if d is None:
            continue
        kw_all = isinstance(d, ast.Call) and any(
            k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value
            for k in d.keywords
        )
        kw_only = bool(kw_all)
        for stmt in cls.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            note = ast.unparse(stmt.annotation)
            if note.startswith(("ClassVar", "typing.ClassVar")):
                continue
            if note in ("KW_ONLY", "dataclasses.KW_ONLY"):
                kw_only = True
                continue
            default: ast.expr | None = stmt.value
            if isinstance(default, ast.Call) and _name(default).rpartition(".")[2] == "field":
                keys = {k.arg: k.value for k in default.keywords}
                if set(keys) - {"default", "default_factory", "repr", "compare", "hash",
                                "metadata"} or default.args:  # fmt: skip
                    why = f"{cls.name}.{stmt.target.id} is `{ast.unparse(default)}`"
                    return Doubt(stmt.lineno, f"the dataclass field {why}: not modelled")
                default = (
                    ast.Constant(None) if keys.keys() & {"default", "default_factory"} else None
                )
            fields[stmt.target.id] = (default, kw_only)
            notes[stmt.target.id] = note
    positional = [(n, d) for n, (d, kw) in fields.items() if not kw]
    seen_default = False
    for field_name, d in positional:
        if d is None and seen_default:
            return Doubt(node.lineno, f"the dataclass {node.name} has field {field_name} without "
                         "a default after one with a default (TypeError at import)")  # fmt: skip
        seen_default = seen_default or d is not None
    args = ast.arguments(
        posonlyargs=[],
        args=[ast.arg("self"), *(ast.arg(n) for n, _ in positional)],
        vararg=None,
        kwonlyargs=[ast.arg(n) for n, (_, kw) in fields.items() if kw],
        kw_defaults=[d if d is not None else None for _, (d, kw) in fields.items() if kw],
        kwarg=None,
        defaults=[d for _, d in positional if d is not None],
    )
    # The generated __init__ ends with self.__post_init__(<InitVar fields>) when one is defined.
    initvars = [
        n for n, note in notes.items() if note.startswith(("InitVar", "dataclasses.InitVar"))
    ]
    body: list[ast.stmt] = [ast.Pass()]
    if any(
        isinstance(s, ast.FunctionDef) and s.name == "__post_init__" for c in mro for s in c.body
    ):
        call = ast.Call(
            ast.Attribute(ast.Name("self", ast.Load()), "__post_init__", ast.Load()),
            [ast.Name(n, ast.Load()) for n in initvars],
            [],
        )
        body = [ast.Expr(call)]
    made = ast.FunctionDef(name="__init__", args=args, body=body, decorator_list=[], returns=None)
    ast.copy_location(made, node)
    ast.fix_missing_locations(made)
    return made


class ShapeFacts(abc.ABC):
    """The target-wide shape rules, mixed into ``source.CheckoutReader`` (which supplies the
    lookups below): doubts reaching a class from along its MRO, and abstract methods left."""

    root: Path

    @abc.abstractmethod
    def mro(self, target: str) -> list[str]: ...

    @abc.abstractmethod
    def resolve_class(self, target: str, depth: int = 0) -> tuple[Any, ast.ClassDef] | None: ...

    @abc.abstractmethod
    def foreign_bases(self, target: str) -> list[str]: ...

    @abc.abstractmethod
    def _def_of(
        self, cls: str, name: str, mangle_body: bool = False
    ) -> ast.FunctionDef | ast.AsyncFunctionDef | None: ...

    def _mro_nodes(self, target: str) -> list[tuple[Path, ast.ClassDef]]:
        found = (self.resolve_class(c) for c in self.mro(target))
        return [(f[0].path, f[1]) for f in found if f is not None]

    def shape_doubt(self, target: str, method: str, kind: str, owner: str) -> str:
        """Why the object ``method`` names on an instance of ``target`` may not be the def the
        MRO finds (``kind``: how that def is bound; "" when none is found): a metaclass,
        attribute hook or instance write along the MRO, ``__slots__`` on every class, a
        classmethod reading ``cls.x`` that only instances hold. "": none."""
        nodes = self._mro_nodes(target)
        for path, node in nodes:
            doubt = inherited_doubt(node, method)
            if doubt is not None:
                return f"{doubt.why} [{path.relative_to(self.root)}:{doubt.line}]"
        classes = [n for _, n in nodes]
        slots = slots_doubt(classes, bool(self.foreign_bases(target)))
        if slots:
            return slots
        if kind != "classmethod":
            return ""
        item = self._def_of(owner, method)
        missing = cls_reads_missing(item, classes) if item is not None else []
        if missing:
            why = "no class along the MRO binds in its body (an instance attribute)"
            return f"{method} is a classmethod reading cls.{missing[0]}, which {why}"
        return ""

    def abstract_left(self, target: str) -> list[str]:
        """Abstract methods ``target`` (an ``abc`` class) leaves unimplemented."""
        return abstract_left([n for _, n in self._mro_nodes(target)])
