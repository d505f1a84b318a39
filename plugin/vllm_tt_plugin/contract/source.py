"""Where the parity checker reads classes from: a tt-metal checkout (with ``ast``) or the fixture.

Both sources answer the same questions (``SignatureSource``): the MRO of a class, a class's own
method (signature, where it is, what it forwards its arguments to, whether it is only a
``NotImplementedError`` stub) and the facts the plugin reads from the class. The checkout reader
imports nothing from the tree: module path -> file under the root, following re-exports,
relative imports and ``module.Class`` bases; a base outside the tree is skipped.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from vllm_tt_plugin.contract.class_scope import class_scope
from vllm_tt_plugin.contract.fact_alias import fact_exposure
from vllm_tt_plugin.contract.found_method import FoundMethod as FoundMethod
from vllm_tt_plugin.contract.mro_bases import assigns, base_entries, entry_method, linearize, opaque
from vllm_tt_plugin.contract.parsed_module import ParsedModule
from vllm_tt_plugin.contract.signatures import FamilyProfile, signature_from_ast
from vllm_tt_plugin.contract.source_alias import ModuleContext, aliased, carried
from vllm_tt_plugin.contract.source_body import (
    Body,
    Construct,
    Forward,
    Passed,
    SelfCall,
    _only_raises_not_implemented,
    body_of,
    forwards_of,
)
from vllm_tt_plugin.contract.source_bodyhost import method_failures
from vllm_tt_plugin.contract.source_closure import import_closure
from vllm_tt_plugin.contract.source_env import UNREADABLE, ClassFacts, EnvFacts, constant
from vllm_tt_plugin.contract.source_loadable import later_star, trusted_decorator, wrapped_builtin
from vllm_tt_plugin.contract.source_module import (
    SourceDecodeError,
    body_mutation,
    class_binding_doubt,
    decode_source,
    instance_store,
    parse_module,
)
from vllm_tt_plugin.contract.source_py310 import compile_error
from vllm_tt_plugin.contract.source_scan import Scan, builds_of, imports_of
from vllm_tt_plugin.contract.source_shape import (
    Doubt,
    ShapeFacts,
    dataclass_init,
    mangle,
    mangled,
    sets_attribute,
)

__all__ = [
    "Body",
    "CheckoutReader",
    "ClassFacts",
    "Construct",
    "DuplicateKeyword",
    "FixtureSource",
    "Forward",
    "FoundMethod",
    "Passed",
    "SelfCall",
    "SignatureSource",
    "SourceDecodeError",
    "decode_source",
    "find_method",
    "forwards_of",
    "lookup",
    "pass_on",
]

_MAX_DEPTH = 20
TT_METAL_PACKAGE = "models."  # tt-metal's model code; other bases (vLLM, torch) are not followed
# Bases from outside tt-metal that define no methods a tt-metal adapter calls on itself.
_INTERFACE_MODULES = ("vllm.", "typing:", "typing_extensions:", "abc:")


class SignatureSource(Protocol):
    # A checkout is complete (a method not found is not there); the fixture lists only what
    # the public sources showed.
    complete: bool

    def has_class(self, target: str) -> bool: ...

    def mro(self, target: str) -> list[str]: ...

    def own_method(self, cls: str, method: str) -> FoundMethod | None: ...

    def class_facts(self, target: str) -> ClassFacts | None:
        """None when the source cannot tell (the fixture: its facts are used)."""
        ...

    def unresolved_bases(self, target: str) -> list[str]:
        """tt-metal base classes (``models.*``) along the MRO that the source does not hold:
        where one is missing, a method not found may still be defined there."""
        ...


_ANY = inspect.Signature(
    [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
     inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
)  # fmt: skip


def find_method(
    source: SignatureSource, target: str, method: str, after: str | None = None
) -> FoundMethod | None:
    """Attribute lookup on ``target``'s MRO, starting after ``after`` when given (super())."""
    order = source.mro(target)
    if after is not None:
        order = order[order.index(after) + 1 :] if after in order else []
    found = next((f for f in (source.own_method(c, method) for c in order) if f), None)
    if found is not None and found.kind == "constant":  # `m = None` hides a base's m:
        found = None  # `callable(getattr(...))` is False
    # A metaclass, an attribute hook or an instance write along the MRO: not this def.
    shape: Any = getattr(source, "shape_doubt", None)
    if shape is not None and not (found is not None and found.unresolved):
        why = shape(target, method, found.kind if found else "", found.owner if found else "")
        if why:
            where = found.where if found else "(source)"
            return FoundMethod(found.owner if found else target, method, _ANY, where,
                               unresolved=why)  # fmt: skip
    return found


def c3(cls: str, bases_of: Any, depth: int = 0) -> list[str]:
    """Python's C3 linearisation; an inconsistent hierarchy falls back to depth first."""
    bases: list[str] = list(bases_of(cls))
    if depth > _MAX_DEPTH:
        return [cls]
    seqs = [c3(b, bases_of, depth + 1) for b in bases] + [bases]
    result = [cls]
    while True:
        seqs = [s for s in seqs if s]
        if not seqs:
            return result
        for seq in seqs:
            head = seq[0]
            if not any(head in other[1:] for other in seqs):
                break
        else:  # no consistent order: Python would refuse the class; keep going depth first
            head = seqs[0][0]
        result.append(head)
        seqs = [s[1:] if s[0] == head else [x for x in s if x != head] for s in seqs]


# --- reading a checkout ---------------------------------------------------------------------------


class CheckoutReader(EnvFacts, ShapeFacts):
    """Reads classes, method signatures and class facts out of a source tree with ``ast``."""

    complete = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self._modules: dict[str, ParsedModule | None] = {}
        self._mro: dict[str, list[str]] = {}
        # Modules whose file is there but does not parse / decode: module -> "file:line: error".
        # Such a module must fail the check, never vanish into "no_class" or a skipped base.
        self.unreadable: dict[str, str] = {}
        self._touched: set[str] = set()  # modules looked up since ``begin_target``

    def begin_target(self) -> None:
        self._touched = set()

    def unreadable_touched(self) -> list[str]:
        """The parse errors of the modules looked up since ``begin_target`` (and of those
        importing them runs)."""
        touched = import_closure(self._touched, self._module)
        return [self.unreadable[m] for m in touched if m in self.unreadable]

    def touched_modules(self) -> list[ParsedModule]:
        """The modules looked up since ``begin_target`` that exist and parse, with every
        module importing them runs (parent packages, module-level imports)."""
        found = (self._modules.get(m) for m in import_closure(self._touched, self._module))
        return [m for m in found if m is not None]

    def module(self, name: str) -> ParsedModule | None:
        return self._module(name)

    def module_file(self, module: str) -> tuple[Path, bool] | None:
        base = self.root.joinpath(*module.split("."))
        # A package directory wins over a module file of the same name, as the import finds it.
        if (base / "__init__.py").is_file():
            return base / "__init__.py", True
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), False
        return None

    def parsed_modules(self) -> list[ParsedModule]:
        """The modules read so far (what a skeleton of this checkout must hold)."""
        return [m for m in self._modules.values() if m is not None]

    def _module(self, module: str) -> ParsedModule | None:
        self._touched.add(module)
        if module not in self._modules:
            self._modules[module] = self._parse(module)
        return self._modules[module]

    def _parse(self, module: str) -> ParsedModule | None:
        found = self.module_file(module)
        if found is None:
            return None
        path, is_package = found
        rel = path.relative_to(self.root)
        try:
            data = path.read_bytes()
        except OSError as exc:
            self.unreadable[module] = f"{rel}: cannot be read: {exc}"
            return None
        try:
            text = decode_source(data, str(rel))
        except SourceDecodeError as exc:
            self.unreadable[module] = f"{exc} (the import fails)"
            return None
        try:
            tree = ast.parse(text, filename=str(path))
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:  # too deep: CR3
            line = getattr(exc, "lineno", None) or 1
            msg = getattr(exc, "msg", None) or str(exc) or "nested too deeply"
            self.unreadable[module] = f"{rel}:{line}: does not parse: {msg} (the import fails)"
            return None
        error = compile_error(text, str(path))  # what the compiler refuses after the parse
        if error is not None:
            self.unreadable[module] = (
                f"{rel}:{error.lineno or 1}: does not compile: {error.msg} (the import fails)"
            )
            return None
        return parse_module(module, path, is_package, tree)

    def attribute_shape(self, target: str, name: str) -> str:
        for cls in self.mro(target):
            found = self.resolve_class(cls)
            if found is None:
                continue
            module, node = found
            touched = (node.name, name) in module.touched
            if touched and name == "model_capabilities":  # module code only reads it
                touched = bool(fact_exposure(self, target, name))
            if touched or class_binding_doubt(module, node, name):
                return "changed"
            if body_mutation(node, name):  # `caps["k"] = v` / `caps.update(...)` in the body
                return "changed"
            for item in reversed(node.body):  # the class body's last binding is the attribute
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    return "def"
                if assigns(item, name):
                    return ""
        return ""

    def attribute_doubt(self, target: str, name: str) -> str:
        """Why the value of ``name`` the plugin reads may not be its class-level assignment:
        a method along the MRO sets it on an object (``self.name = ...``, ``model.name = ...``
        in ``initialize_vllm_model``, a base ``__init__`` that may or may not run), a
        property, a class-level ``if`` / ``try``, or module code after the class ("": none)."""
        # `self.name = value` first in the __init__ the MRO finds runs whenever the class is
        # built (attribute_expr reads it); any other store may or may not run.
        init = self._def_of(target, "__init__")
        known = next(
            (t for stmt in (init.body if init else []) if isinstance(stmt, ast.Assign)
             for t in stmt.targets if isinstance(t, ast.Attribute) and t.attr == name
             and isinstance(t.value, ast.Name) and t.value.id == "self"),
            None,
        )  # fmt: skip
        for cls in self.mro(target):
            found = self.resolve_class(cls)
            if found is None:
                continue
            module, node = found
            rel = module.path.relative_to(self.root)
            line = instance_store(node, name, known)
            if line:
                return f"{name} is set on an object in a method of {node.name} [{rel}:{line}]"
            doubt = class_binding_doubt(module, node, name)
            if doubt:
                return f"{doubt[1]} [{rel}:{doubt[0]}]"
            if (node.name, name) in module.touched:
                return f"{node.name}.{name} is used or changed by module-level code [{rel}]"
        if self.attribute_shape(target, name) == "def":
            return f"{name} is a method or property, not a value the checker reads"
        return ""

    def resolve_class(
        self, target: str, depth: int = 0
    ) -> tuple[ParsedModule, ast.ClassDef] | None:
        """The class definition a ``module:Class`` name refers to, following re-exports
        (``module:Class@line``: a class whose name a later statement rebinds)."""
        module_name, _, cls = target.partition(":")
        module = self._module(module_name)
        if module is None or depth > _MAX_DEPTH:
            return None
        if "@" in cls:
            earlier = module.earlier.get(cls)
            return (module, earlier) if earlier is not None else None
        star = later_star(self, module, cls)  # `from m import *` below rebinds it: last wins
        if star is not None:
            return self.resolve_class(f"{star}:{cls}", depth + 1)
        if cls in module.classes:
            return module, module.classes[cls]
        imported = module.imports.get(cls)
        if imported and ":" in imported:
            return self.resolve_class(imported, depth + 1)
        alias = module.assigns.get(cls)  # `Generator = GeneratorV2`, as bound at that line
        if alias is not None:
            line = module.timeline[cls][-1][0]
            ref = self._class_ref(module, alias, before=line)
            return self.resolve_class(ref, depth + 1) if ref and ref != target else None
        if cls in module.timeline:  # bound last to a function or a module: not a class
            return None
        for star in reversed(module.stars):  # `from m import *`: the last one binds the name
            if not self.star_exports(star, cls):
                continue
            found = self.resolve_class(f"{star}:{cls}", depth + 1)
            if found is not None:
                return found
        return None

    def star_exports(self, module_name: str, name: str) -> bool:
        """``from module import *`` binds ``name``: listed in its ``__all__``, or public when
        it has none (a name starting with ``_`` is not imported: a NameError)."""
        module = self._module(module_name)
        if module is None:
            return False
        if module.all_names is not None:
            return name in module.all_names
        return not name.startswith("_")

    def class_id(self, module: ParsedModule, node: ast.ClassDef) -> str:
        """``module:Class``, or ``module:Class@line`` for a class whose name was rebound."""
        if module.classes.get(node.name) is node:
            return f"{module.name}:{node.name}"
        return f"{module.name}:{node.name}@{node.lineno}"

    def _bound_before(self, module: ParsedModule, name: str, line: int) -> str | bool | None:
        """The class ref ``name`` is bound to just before ``line`` (None: not a class; False:
        no binding before it in this module)."""
        prior = [(at, v) for at, v in module.timeline.get(name, []) if at < line]
        if not prior:
            return False
        at, value = prior[-1]
        if isinstance(value, ast.ClassDef):
            return self.class_id(module, value)
        if isinstance(value, str):
            return value if ":" in value else None
        if isinstance(value, ast.expr):
            return self._class_ref(module, value, before=at)
        return None

    def has_class(self, target: str) -> bool:
        return self.resolve_class(target) is not None

    def canonical(self, ref: str) -> str | None:
        found = self.resolve_class(ref)
        return None if found is None else self.class_id(*found)

    def bases(self, target: str) -> list[str]:
        """The ``module:Class`` of each base class in the tree, an opaque entry for each the
        checker cannot read, a library entry for the rest (``mro_bases``)."""
        return base_entries(self, target)

    def unresolved_bases(self, target: str) -> list[str]:
        unresolved: list[str] = []
        for cls in self.mro(target):
            found = self.resolve_class(cls)
            if found is None:
                continue
            module, node = found
            for expr in node.bases:
                ref = self._class_ref(module, expr, before=node.lineno)
                if ref and ref.startswith(TT_METAL_PACKAGE) and self.canonical(ref) is None:
                    unresolved.append(ref)
        return list(dict.fromkeys(unresolved))

    def _class_ref(
        self, module: ParsedModule, expr: ast.expr, before: int | None = None
    ) -> str | None:
        """The ``module:Class`` ``expr`` names (as bound before line ``before`` when given: a
        base list or an alias is evaluated where it stands; else the module's last binding)."""
        if isinstance(expr, ast.Subscript):  # Generic[T], Base[...]
            expr = expr.value
        if isinstance(expr, ast.Name) and before is not None:
            bound = self._bound_before(module, expr.id, before)
            if bound is not False:
                return bound if isinstance(bound, str) else None
        if isinstance(expr, ast.Name):
            if expr.id in module.classes or expr.id in module.assigns:
                return f"{module.name}:{expr.id}"
            imported = module.imports.get(expr.id)
            if imported and ":" in imported:
                return imported
            # A name a `from m import *` may bind (resolve_class looks).
            star = module.stars and not hasattr(builtins, expr.id)
            return f"{module.name}:{expr.id}" if star else None
        if isinstance(expr, ast.Attribute):
            parts: list[str] = [expr.attr]
            value: ast.expr = expr.value
            while isinstance(value, ast.Attribute):
                parts.insert(0, value.attr)
                value = value.value
            if not isinstance(value, ast.Name):
                return None
            head = module.imports.get(value.id)
            if head is None:
                return None
            # `import a.b as m` -> "a.b"; `from a import b` -> "a:b", i.e. module a.b
            dotted = ".".join([head.replace(":", "."), *parts[:-1]])
            return f"{dotted}:{parts[-1]}"
        return None

    def mro(self, target: str) -> list[str]:
        start = self.canonical(target)
        if start is None:
            return []
        if start not in self._mro:
            self._mro[start] = linearize(start, self.bases, c3)
        return self._mro[start]

    def find_method(self, target: str, method: str) -> FoundMethod | None:
        return find_method(self, target, method)

    def own_method(self, cls: str, method: str) -> FoundMethod | None:
        found = self.resolve_class(cls)
        if found is None:  # an opaque base, `object`, or not a class
            return entry_method(cls, method, FoundMethod, _ANY)
        module, node = found
        owner = self.class_id(module, node)
        rel = module.path.relative_to(self.root)
        doubt = class_binding_doubt(module, node, method)
        if doubt:
            return FoundMethod(owner, method, _ANY, f"{rel}:{doubt[0]}", unresolved=doubt[1])
        # The class body's last binding of the name is the attribute (a later duplicate def
        # or a class-level alias `allocate_kv_cache = allocate_vllm_kv_cache` replaces it).
        defs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        item: ast.FunctionDef | ast.AsyncFunctionDef | None = None
        assigned: ast.Assign | None = None
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[mangle(stmt.name, node.name)] = stmt  # `def __h` in C is `_C__h`
                if mangle(stmt.name, node.name) == method:
                    item, assigned = stmt, None
            elif isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == method for t in stmt.targets
            ):
                value = stmt.value
                item = defs.get(value.id) if isinstance(value, ast.Name) else None
                if item is None:  # `decode_forward = _decode`: a module-level def
                    item = self.module_function(module, value)
                assigned = stmt if item is None else None
        if assigned is not None and isinstance(assigned.value, ast.Constant):
            return FoundMethod(owner, method, _ANY, f"{rel}:{assigned.lineno}", kind="constant")
        if assigned is not None:  # a base's function (`m = Base.f`), else unread: never "ok"
            why = f"bound to `{ast.unparse(assigned.value)}`, which the checker does not read"
            return aliased(self, module, assigned.value) or FoundMethod(
                owner, method, _ANY, f"{rel}:{assigned.lineno}", unresolved=why)  # fmt: skip
        if item is None and method == "__init__":  # a @dataclass's generated __init__
            made = dataclass_init(node, [n for _, n in self._mro_nodes(owner)])
            if isinstance(made, Doubt):
                return FoundMethod(owner, method, _ANY, f"{rel}:{made.line}", unresolved=made.why)
            item = made
        if item is None:
            return None
        item = mangled(item, node.name)
        decorators = {
            d.id if isinstance(d, ast.Name) else getattr(d, "attr", "") for d in item.decorator_list
        }
        sig = signature_from_ast(item, drop_first="staticmethod" not in decorators)

        def resolve(expr: ast.expr, module: ParsedModule = module) -> str | None:
            ref = self._class_ref(module, expr)
            return self.canonical(ref) if ref else None

        def function(
            expr: ast.expr, module: ParsedModule = module
        ) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, int] | None:
            """A helper's def, and how many of its parameters come before the call's first
            argument (1 for a method called on ``self``: the instance)."""
            if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
                if expr.value.id == "self":
                    found = self._def_of(owner, expr.attr, mangle_body=True)
                    return (found, 1) if found is not None else None
                return None
            fn = self.module_function(module, expr)
            return (fn, 0) if fn is not None else None

        kind = next((k for k in ("classmethod", "staticmethod") if k in decorators), "method")
        firsts = [*item.args.posonlyargs, *item.args.args]
        me = firsts[0].arg if firsts and kind != "staticmethod" else None

        def own_class(expr: ast.expr) -> str | None:  # the class by name: built with its __init__
            ref = self._class_ref(module, expr)
            return owner if ref and self.canonical(ref) == owner else None

        scan = Scan(
            tuple(imports_of(item, lambda e: self.module_function(module, e))),
            tuple(builds_of(item, me, kind, own_class)),
            tuple(method_failures(self, module, node.name, item)),
        )
        others = [
            ast.unparse(d) for d in item.decorator_list if not trusted_decorator(self, module, d)
        ]
        fails = wrapped_builtin(self, module, item.decorator_list)
        unresolved = fails or (
            f"decorated with @{', @'.join(others)} (not trusted): the signature may differ"
            if others
            else ""
        )
        return FoundMethod(
            owner,
            method,
            sig,
            f"{rel}:{item.lineno}",
            forwards_of(item, resolve, function, ModuleContext(self, module)),
            _only_raises_not_implemented(item),
            body_of(item, resolve, kind=kind, function=function),
            unresolved,
            kind,
            isinstance(item, ast.AsyncFunctionDef),
            scan,
            bool(fails),
            item,
        )

    def _def_of(
        self, cls: str, name: str, mangle_body: bool = False
    ) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The last ``def name`` in the first class along ``cls``'s MRO that has one (private
        names as Python mangles them; its body's too with ``mangle_body``)."""
        for c in self.mro(cls):
            found = self.resolve_class(c)
            if found is None:
                continue
            node = found[1]
            defs = [
                d for d in node.body
                if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))
                and mangle(d.name, node.name) == name
            ]  # fmt: skip
            if defs:
                return mangled(defs[-1], node.name) if mangle_body else defs[-1]
        return None

    def module_function(
        self, module: ParsedModule, expr: ast.expr, depth: int = 0
    ) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The module-level def a name refers to (followed through from-imports)."""
        if not isinstance(expr, ast.Name) or depth > _MAX_DEPTH:
            return None
        if expr.id in module.functions:
            return module.functions[expr.id]
        source_name, _, name = module.imports.get(expr.id, "").partition(":")
        other = self._module(source_name) if name else None
        if other is None:
            return None
        return self.module_function(other, ast.Name(name, ast.Load()), depth + 1)

    def composes(self, target: str) -> bool:
        """A class along the MRO defines ``__getattr__`` / ``__getattribute__``: a name not
        found may be delegated."""
        return any(
            self.own_method(c, m) is not None
            for c in self.mro(target)
            if not opaque(c)
            for m in ("__getattr__", "__getattribute__")
        )

    def has_attribute(self, target: str, name: str) -> bool:
        """``name`` is set on the class or its instances somewhere along the MRO: a class-level
        assignment, or ``self.name = ...`` / ``cls.name = ...`` in any method (so
        ``self.name(...)`` may call it)."""
        return any(sets_attribute(n, name) for _, n in self._mro_nodes(target))

    def foreign_bases(self, target: str) -> list[str]:
        """Bases along the MRO from outside tt-metal that may define methods (not vLLM's
        interface mixins, ``typing`` or ``abc``): a ``self.m(...)`` not found may be theirs."""
        foreign: list[str] = []
        for cls in self.mro(target):
            found = self.resolve_class(cls)
            if found is None:
                continue
            module, node = found
            for expr in node.bases:
                ref = self._class_ref(module, expr, before=node.lineno)
                if ref is None:
                    if isinstance(expr, ast.Name) and expr.id in ("object",):
                        continue
                    if isinstance(expr, (ast.Name, ast.Attribute)):
                        foreign.append(ast.unparse(expr))
                    continue
                if ref.startswith(TT_METAL_PACKAGE) or self.canonical(ref) is not None:
                    continue
                if ref.startswith(_INTERFACE_MODULES):
                    continue
                foreign.append(ref)
        return list(dict.fromkeys(foreign))

    # --- class facts ---------------------------------------------------------------------------
    def _value(self, module: ParsedModule, expr: ast.expr, depth: int = 0) -> Any:
        """A literal, or a module-level constant (followed through imports)."""
        try:
            return ast.literal_eval(expr)
        except ValueError:
            pass
        if isinstance(expr, ast.Name) and depth < _MAX_DEPTH:
            if expr.id in module.assigns and constant(module, expr.id):
                return self._value(module, module.assigns[expr.id], depth + 1)
            imported = module.imports.get(expr.id, "")
            source_name, _, name = imported.partition(":")
            other = self._module(source_name) if name else None
            if other is not None and name in other.assigns and constant(other, name):
                return self._value(other, other.assigns[name], depth + 1)
        return UNREADABLE

    def attribute_expr(self, target: str, name: str) -> tuple[ParsedModule, ast.expr] | None:
        """Where ``getattr(instance, name)`` reads from: ``self.name = ...`` in an ``__init__``
        (not ``model_capabilities``: the plugin reads the class's), then class bodies."""
        classes = [self.resolve_class(c) for c in self.mro(target)]
        for found in classes if name != "model_capabilities" else ():
            if found is None:
                continue
            module, node = found
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    for stmt in ast.walk(item):
                        if isinstance(stmt, ast.Assign) and any(
                            isinstance(t, ast.Attribute)
                            and isinstance(t.value, ast.Name)
                            and t.value.id == "self"
                            and t.attr == name
                            for t in stmt.targets
                        ):
                            return module, stmt.value
        for found in classes:
            if found is None:
                continue
            module, node = found
            for item in reversed(node.body):  # the last binding, in the class body's scope
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in item.targets
                ):
                    return class_scope(module, node, item.lineno), item.value
                if (
                    isinstance(item, ast.AnnAssign)
                    and isinstance(item.target, ast.Name)
                    and item.target.id == name
                    and item.value is not None
                ):
                    return class_scope(module, node, item.lineno), item.value
        return None

    def attribute(self, target: str, name: str) -> tuple[bool, Any]:
        """(declared, value) of ``name`` as ``getattr(instance, name)`` finds it: an
        ``self.name = ...`` in an ``__init__`` first, then class bodies along the MRO."""
        found = self.attribute_expr(target, name)
        if found is None:
            return False, None
        return True, self._value(*found)


# --- the fixture as a source ----------------------------------------------------------------------


class FixtureSource:
    """The fixture's own profiles as a signature source (the check without a checkout)."""

    complete = False

    def __init__(self, profiles: Mapping[str, FamilyProfile]) -> None:
        self.profiles = profiles

    def has_class(self, target: str) -> bool:
        return target in self.profiles

    def mro(self, target: str) -> list[str]:
        if target not in self.profiles:
            return []
        return c3(target, lambda t: [b.target for b in self.profiles[t].bases])

    def find_method(self, target: str, method: str) -> FoundMethod | None:
        return find_method(self, target, method)

    def own_method(self, cls: str, method: str) -> FoundMethod | None:
        profile = self.profiles.get(cls)
        if profile is None or method not in profile.methods:
            return None
        m = profile.methods[method]
        forwards: tuple[Forward, ...] = ()
        if m.delegates_to is not None:
            forwards = (_delegation(m.signature, m.delegates_to),)
        # The fixture records classmethods; other kinds are not recorded ("": not known).
        kind = "classmethod" if m.is_classmethod else ""
        return FoundMethod(cls, method, m.signature, "fixture", forwards, kind=kind)

    def class_facts(self, target: str) -> ClassFacts | None:
        return None

    def unresolved_bases(self, target: str) -> list[str]:
        return []  # the fixture's bases are profiles (a unit test keeps them present)


def _delegation(sig: inspect.Signature, method: str) -> Forward:
    """The fixture's ``delegates_to``: a ``super()`` call passing ``*args``/``**kwargs`` on
    (every named parameter by name when the signature has neither)."""
    kinds = inspect.Parameter
    args: list[Passed] = []
    keywords: list[tuple[str | None, Passed]] = []
    for p in sig.parameters.values():
        if p.kind is kinds.VAR_POSITIONAL:
            args.append(Passed("star", p.name))
        elif p.kind is kinds.VAR_KEYWORD:
            keywords.append((None, Passed("double_star", p.name)))
    if not args and not keywords:
        keywords = [(n, Passed("param", n)) for n in sig.parameters]
    return Forward("super", method, None, tuple(args), tuple(keywords), 0)


class DuplicateKeyword(ValueError):
    """A forward names a keyword its ``**kwargs`` also carries: Python's TypeError."""


def lookup(
    source: SignatureSource, target: str, how: str, method: str, after: str | None, owner: str
) -> FoundMethod | None:
    """The method a forward or call reaches: ``Base.m`` on Base's own MRO, ``super()`` after
    the defining class (or after C), ``self.m`` on the served class's MRO."""
    if how == "class":
        return find_method(source, after, method) if after else None
    if how == "super":
        return find_method(source, target, method, after=after or owner)
    return find_method(source, target, method)


def pass_on(
    sig: inspect.Signature, bound: inspect.BoundArguments, fwd: Forward
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments ``fwd`` hands to the next method, given how the current one bound: only
    what reaches it (a parameter the current method consumed does not). Raises
    ``DuplicateKeyword`` where the call names a keyword its ``**mapping`` also holds."""
    kinds = inspect.Parameter
    var_pos = next((p.name for p in sig.parameters.values() if p.kind is kinds.VAR_POSITIONAL), "")
    var_kw = next((p.name for p in sig.parameters.values() if p.kind is kinds.VAR_KEYWORD), "")
    args: list[Any] = []
    for passed in fwd.args:
        if passed.kind == "star":
            args.extend(bound.arguments.get(var_pos, ()) if passed.name == var_pos else ())
        else:
            args.append(bound.arguments.get(passed.name, passed.name or "<expr>"))
    kwargs: dict[str, Any] = {}
    for key, passed in fwd.keywords:
        if key is None:
            if passed.name == var_kw:
                more = carried(bound.arguments.get(var_kw, {}), fwd)
                twice = sorted(set(more) & set(kwargs))
                if twice:
                    raise DuplicateKeyword(twice[0])
                kwargs.update(more)
        elif key in kwargs:
            raise DuplicateKeyword(key)
        else:
            kwargs[key] = bound.arguments.get(passed.name, key)
    for key in fwd.defaults:  # functools.partial's keywords: the call's own win
        kwargs.setdefault(key, key)
    return args, kwargs


def class_label(target: str) -> str:
    return target.rpartition(":")[2]


def describe_chain(links: Sequence[FoundMethod]) -> str:
    return " -> ".join(f"{class_label(m.owner)}.{m.name}" for m in links)
