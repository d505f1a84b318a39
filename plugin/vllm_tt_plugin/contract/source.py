"""Where the parity checker reads classes from: a tt-metal checkout (with ``ast``) or the fixture.

Both sources answer the same questions (``SignatureSource``): the MRO of a class, a class's own
method (signature, where it is, what it forwards its arguments to, whether it is only a
``NotImplementedError`` stub) and the facts the plugin reads from the class. The checkout reader
imports nothing from the tree: module path -> file under the root, following re-exports,
relative imports and ``module.Class`` bases; a base outside the tree is skipped.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from vllm_tt_plugin.contract.signatures import FamilyProfile, signature_from_ast

_MAX_DEPTH = 20
TT_METAL_PACKAGE = "models."  # tt-metal's model code; other bases (vLLM, torch) are not followed


@dataclass(frozen=True)
class Passed:
    """One argument of a forwarding call, as far as where its value came from."""

    kind: Literal["star", "double_star", "param", "other"]
    name: str = ""  # the caller's parameter ("param"), or the mapping/sequence name


@dataclass(frozen=True)
class Forward:
    """A call in a method's body that passes the method's ``*args`` or ``**kwargs`` on."""

    how: Literal["super", "self"]  # super().m / super(C, self).m, or self.m
    method: str
    after: str | None  # super(C, self): the class ("module:Class") the lookup starts after
    args: tuple[Passed, ...]
    keywords: tuple[tuple[str | None, Passed], ...]  # None: a ``**mapping``
    line: int
    dropped: tuple[str, ...] = ()  # keys the body pops or deletes from its **kwargs
    added: tuple[str, ...] = ()  # keys the body sets in its **kwargs

    def describe(self) -> str:
        head = "self" if self.how == "self" else "super()"
        if self.after is not None:
            head = f"super({self.after.rpartition(':')[2]}, self)"
        return f"{head}.{self.method}(...)"


@dataclass(frozen=True)
class FoundMethod:
    owner: str  # "module:Class" that defines it
    name: str
    signature: inspect.Signature
    where: str  # file:line, or "fixture"
    forwards: tuple[Forward, ...] = ()
    abstract: bool = False  # the body only raises NotImplementedError

    @property
    def delegates_to(self) -> str | None:
        """The method the first forwarding call hands the arguments to."""
        return self.forwards[0].method if self.forwards else None


@dataclass(frozen=True)
class ClassFacts:
    """The attributes the plugin reads from a class, as declared in its source."""

    decode_contract: int = 0  # decode_input_update_contract (0 when not declared)
    capabilities: Mapping[str, Any] = field(default_factory=dict)  # model_capabilities
    unreadable: tuple[str, ...] = ()  # declared but not a literal: named here

    @property
    def device_sampling(self) -> bool:
        return self.capabilities.get("supports_sample_on_device") is True

    @property
    def output_tokens_per_step(self) -> int:
        value = self.capabilities.get("output_tokens_per_step", 1)
        return value if isinstance(value, int) else 1


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


def find_method(
    source: SignatureSource, target: str, method: str, after: str | None = None
) -> FoundMethod | None:
    """Attribute lookup on ``target``'s MRO, starting after ``after`` when given (super())."""
    order = source.mro(target)
    if after is not None:
        order = order[order.index(after) + 1 :] if after in order else []
    for cls in order:
        found = source.own_method(cls, method)
        if found is not None:
            return found
    return None


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


# --- a method body ----------------------------------------------------------------------------


def _only_raises_not_implemented(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = [
        s
        for s in fn.body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))  # docstring
        and not isinstance(s, ast.Pass)
    ]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc
    if isinstance(exc, ast.Call):
        exc = exc.func
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _passed(expr: ast.expr, params: set[str], star: bool) -> Passed:
    if isinstance(expr, ast.Name):
        if star:
            return Passed("star", expr.id)
        return Passed("param" if expr.id in params else "other", expr.id)
    return Passed("other")


def _callee(func: ast.expr) -> tuple[Literal["super", "self"], str, ast.expr | None] | None:
    """``super().m`` / ``super(C, self).m`` / ``self.m`` -> (how, m, C or None)."""
    if not isinstance(func, ast.Attribute):
        return None
    value = func.value
    if isinstance(value, ast.Name) and value.id == "self":
        return "self", func.attr, None
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "super"
    ):
        return "super", func.attr, value.args[0] if value.args else None
    return None


def forwards_of(fn: ast.FunctionDef | ast.AsyncFunctionDef, resolve: Any) -> tuple[Forward, ...]:
    """The calls in ``fn`` that pass its ``*args`` / ``**kwargs`` on to another method of the
    instance: ``super()``, ``super(C, self)``, ``self.m(...)``, or a bound method handed to a
    helper with them (``helper(self.m, *args, **kwargs)``). ``resolve(expr)`` names the class
    of a ``super(C, self)`` (None when it cannot)."""
    a = fn.args
    vararg = a.vararg.arg if a.vararg else None
    kwarg = a.kwarg.arg if a.kwarg else None
    if vararg is None and kwarg is None:
        return ()
    params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    dropped: list[str] = []
    added: list[str] = []
    for node in ast.walk(fn):  # what the body does to its **kwargs (flow-insensitive)
        if kwarg is None:
            break
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            key = node.args[0] if node.args else None
            if isinstance(owner, ast.Name) and owner.id == kwarg and isinstance(key, ast.Constant):
                if node.func.attr == "pop" and isinstance(key.value, str):
                    dropped.append(key.value)
                elif node.func.attr == "setdefault" and isinstance(key.value, str):
                    added.append(key.value)
        targets = node.targets if isinstance(node, (ast.Delete, ast.Assign)) else []
        for t in targets:
            if (
                isinstance(t, ast.Subscript)
                and isinstance(t.value, ast.Name)
                and t.value.id == kwarg
                and isinstance(t.slice, ast.Constant)
                and isinstance(t.slice.value, str)
            ):
                (dropped if isinstance(node, ast.Delete) else added).append(t.slice.value)
    found: list[Forward] = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        passes = any(
            isinstance(x, ast.Starred) and isinstance(x.value, ast.Name) and x.value.id == vararg
            for x in node.args
        ) or any(
            k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwarg
            for k in node.keywords
        )
        if not passes:
            continue
        target = _callee(node.func)
        rest = list(node.args)
        for i, arg in enumerate(node.args):  # a bound method handed on wins over the helper
            handed = _callee(arg)
            if handed is not None:
                target, rest = handed, node.args[:i] + node.args[i + 1 :]
                break
        if target is None:
            continue
        how, method, cls_expr = target
        after = None
        if cls_expr is not None:
            after = resolve(cls_expr)
            if after is None:
                continue  # super(<something unreadable>, self): cannot follow
        args = tuple(
            _passed(x.value, params, True)
            if isinstance(x, ast.Starred)
            else _passed(x, params, False)
            for x in rest
        )
        keywords = tuple(
            (
                k.arg,
                Passed("double_star", k.value.id if isinstance(k.value, ast.Name) else "")
                if k.arg is None
                else _passed(k.value, params, False),
            )
            for k in node.keywords
        )
        same = (how, method, after, args, keywords)
        if all((f.how, f.method, f.after, f.args, f.keywords) != same for f in found):
            found.append(
                Forward(how, method, after, args, keywords, node.lineno, (*dropped,), (*added,))
            )
    return tuple(found)


# --- reading a checkout ---------------------------------------------------------------------------


@dataclass
class _Module:
    name: str
    path: Path
    is_package: bool
    classes: dict[str, ast.ClassDef]
    imports: dict[str, str]  # local name -> "module" (import) or "module:Name" (from-import)
    assigns: dict[str, ast.expr]  # module-level NAME = value


def _absolute(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".") if package else []
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, *([module] if module else [])])


_UNREADABLE = object()


class CheckoutReader:
    """Reads classes, method signatures and class facts out of a source tree with ``ast``."""

    complete = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self._modules: dict[str, _Module | None] = {}
        self._mro: dict[str, list[str]] = {}

    def module_file(self, module: str) -> tuple[Path, bool] | None:
        base = self.root.joinpath(*module.split("."))
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), False
        if (base / "__init__.py").is_file():
            return base / "__init__.py", True
        return None

    def _module(self, module: str) -> _Module | None:
        if module not in self._modules:
            self._modules[module] = self._parse(module)
        return self._modules[module]

    def _parse(self, module: str) -> _Module | None:
        found = self.module_file(module)
        if found is None:
            return None
        path, is_package = found
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError):
            return None
        package = module if is_package else module.rpartition(".")[0]
        parsed = _Module(module, path, is_package, {}, {}, {})
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                parsed.classes[node.name] = node
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        parsed.imports[alias.asname] = alias.name
                    else:  # `import a.b.c` binds `a`
                        head = alias.name.split(".")[0]
                        parsed.imports[head] = head
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(package, node.module, node.level)
                for alias in node.names:
                    if alias.name != "*":
                        parsed.imports[alias.asname or alias.name] = f"{source}:{alias.name}"
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        parsed.assigns[t.id] = node.value
        return parsed

    def resolve_class(self, target: str, depth: int = 0) -> tuple[_Module, ast.ClassDef] | None:
        """The class definition a ``module:Class`` name refers to, following re-exports."""
        module_name, _, cls = target.partition(":")
        module = self._module(module_name)
        if module is None or depth > _MAX_DEPTH:
            return None
        if cls in module.classes:
            return module, module.classes[cls]
        imported = module.imports.get(cls)
        if imported and ":" in imported:
            return self.resolve_class(imported, depth + 1)
        return None

    def has_class(self, target: str) -> bool:
        return self.resolve_class(target) is not None

    def canonical(self, ref: str) -> str | None:
        found = self.resolve_class(ref)
        return None if found is None else f"{found[0].name}:{found[1].name}"

    def bases(self, target: str) -> list[str]:
        """The ``module:Class`` of each base class in the tree (others are skipped)."""
        found = self.resolve_class(target)
        if found is None:
            return []
        module, node = found
        refs = (self._class_ref(module, expr) for expr in node.bases)
        return [c for c in (self.canonical(r) for r in refs if r) if c is not None]

    def unresolved_bases(self, target: str) -> list[str]:
        unresolved: list[str] = []
        for cls in self.mro(target):
            found = self.resolve_class(cls)
            if found is None:
                continue
            module, node = found
            for expr in node.bases:
                ref = self._class_ref(module, expr)
                if ref and ref.startswith(TT_METAL_PACKAGE) and self.canonical(ref) is None:
                    unresolved.append(ref)
        return list(dict.fromkeys(unresolved))

    def _class_ref(self, module: _Module, expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Subscript):  # Generic[T], Base[...]
            expr = expr.value
        if isinstance(expr, ast.Name):
            if expr.id in module.classes:
                return f"{module.name}:{expr.id}"
            imported = module.imports.get(expr.id)
            return imported if imported and ":" in imported else None
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
            self._mro[start] = c3(start, self.bases)
        return self._mro[start]

    def find_method(self, target: str, method: str) -> FoundMethod | None:
        return find_method(self, target, method)

    def own_method(self, cls: str, method: str) -> FoundMethod | None:
        found = self.resolve_class(cls)
        if found is None:
            return None
        module, node = found
        owner = f"{module.name}:{node.name}"
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method:
                decorators = {
                    d.id if isinstance(d, ast.Name) else getattr(d, "attr", "")
                    for d in item.decorator_list
                }
                sig = signature_from_ast(item, drop_first="staticmethod" not in decorators)
                rel = module.path.relative_to(self.root)

                def resolve(expr: ast.expr, module: _Module = module) -> str | None:
                    ref = self._class_ref(module, expr)
                    return self.canonical(ref) if ref else None

                return FoundMethod(
                    owner,
                    method,
                    sig,
                    f"{rel}:{item.lineno}",
                    forwards_of(item, resolve),
                    _only_raises_not_implemented(item),
                )
        return None

    # --- class facts ---------------------------------------------------------------------------
    def _value(self, module: _Module, expr: ast.expr, depth: int = 0) -> Any:
        """A literal, or a module-level constant (followed through imports)."""
        try:
            return ast.literal_eval(expr)
        except ValueError:
            pass
        if isinstance(expr, ast.Name) and depth < _MAX_DEPTH:
            if expr.id in module.assigns:
                return self._value(module, module.assigns[expr.id], depth + 1)
            imported = module.imports.get(expr.id, "")
            source_name, _, name = imported.partition(":")
            other = self._module(source_name) if name else None
            if other is not None and name in other.assigns:
                return self._value(other, other.assigns[name], depth + 1)
        return _UNREADABLE

    def attribute(self, target: str, name: str) -> tuple[bool, Any]:
        """(declared, value) of ``name`` as ``getattr(instance, name)`` finds it: an
        ``self.name = ...`` in an ``__init__`` first, then class bodies along the MRO."""
        classes = [self.resolve_class(c) for c in self.mro(target)]
        for found in classes:
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
                            return True, self._value(module, stmt.value)
        for found in classes:
            if found is None:
                continue
            module, node = found
            for item in node.body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in item.targets
                ):
                    return True, self._value(module, item.value)
                if (
                    isinstance(item, ast.AnnAssign)
                    and isinstance(item.target, ast.Name)
                    and item.target.id == name
                    and item.value is not None
                ):
                    return True, self._value(module, item.value)
        return False, None

    def class_facts(self, target: str) -> ClassFacts:
        unreadable: list[str] = []
        declared, contract = self.attribute(target, "decode_input_update_contract")
        if not declared or contract is None:
            contract = 0  # the plugin's default (contract.decode_contract_version)
        elif isinstance(contract, bool) or not isinstance(contract, int) or contract < 0:
            unreadable.append("decode_input_update_contract")
            contract = 0
        declared, caps = self.attribute(target, "model_capabilities")
        if not declared or caps is None:
            caps = {}
        elif not isinstance(caps, dict):
            unreadable.append("model_capabilities")
            caps = {}
        return ClassFacts(contract, caps, tuple(unreadable))


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
        return FoundMethod(cls, method, m.signature, "fixture", forwards)

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


def pass_on(
    sig: inspect.Signature, bound: inspect.BoundArguments, fwd: Forward
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments ``fwd`` hands to the next method, given how the current one bound: only
    what reaches it (a parameter the current method consumed does not)."""
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
                extra: Mapping[str, Any] = bound.arguments.get(var_kw, {})
                kwargs.update({k: v for k, v in extra.items() if k not in fwd.dropped})
                kwargs.update({k: k for k in fwd.added})
        else:
            kwargs[key] = bound.arguments.get(passed.name, key)
    return args, kwargs


def class_label(target: str) -> str:
    return target.rpartition(":")[2]


def describe_chain(links: Sequence[FoundMethod]) -> str:
    return " -> ".join(f"{class_label(m.owner)}.{m.name}" for m in links)
