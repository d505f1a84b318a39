"""One module of a checkout as the import would see it: decoded as ``compile`` decodes it, and
its module-level bindings in order (the last binding of a name is what other modules import; a
base or alias written earlier refers to what the name was bound to at that line)."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path
from typing import Any

from vllm_tt_plugin.contract.parsed_module import ParsedModule
from vllm_tt_plugin.contract.source_import import conditional_bindings, import_time_raises
from vllm_tt_plugin.contract.source_live import NO_CLASS_CELL
from vllm_tt_plugin.contract.source_shape import class_doubt, handed_names, module_doubt

PLUGIN_PACKAGE = "vllm_tt_plugin"
# Methods of a dict / list that change it in place (``CAPS.update(...)``, ``CAPS.pop(k)``).
MUTATORS = frozenset(
    {"update", "setdefault", "pop", "popitem", "clear", "append", "extend", "insert", "remove",
     "__setitem__", "__delitem__", "add", "discard"}
)  # fmt: skip


class SourceDecodeError(ValueError):
    """A module's bytes do not decode as Python decodes them; the message names file and line."""


def decode_source(data: bytes, name: str) -> str:
    """``data`` as the import reads it. The import compiles the bytes (a PEP 263 coding line, a
    BOM, else UTF-8); its tokenizer skips a comment without decoding it, so an invalid byte in a
    comment imports (CPython 3.6 to 3.13 alike) and is read here as U+FFFD. Anywhere else, or
    with an unknown codec, it fails: ``SourceDecodeError`` naming the line."""
    encoding: str | None = None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        first: Exception = exc
    try:
        compile(data, name, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        if line is None:  # detect_encoding's refusal carries no line: find the byte
            start = getattr(first, "start", 0)
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as bad:
                start = bad.start
            line = data[:start].count(b"\n") + 1
        raise SourceDecodeError(f"{name}:{line}: does not decode: {exc}") from exc
    return data.decode(encoding or "utf-8", errors="replace")


def absolute(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".") if package else []
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, *([module] if module else [])])


def _guarded(node: ast.Try) -> bool:
    """``try: ... except ImportError:`` (or a bare / broad handler): a failing import there is
    caught."""
    names = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for handler in node.handlers:
        if handler.type is None:
            return True
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(k, ast.Name) and k.id in names for k in kinds):
            return True
    return False


def parse_module(module: str, path: Path, is_package: bool, tree: ast.Module) -> ParsedModule:
    """The module-level names of ``tree``, each as its last binding leaves it."""
    package = module if is_package else module.rpartition(".")[0]
    parsed = ParsedModule(module, path, is_package, {}, {}, {}, tree=tree)
    # `try: from a import X / except ImportError: X = object`: the try branch is read as the
    # binding; a handler binding the name too makes it conditional (`source_import`).
    statements: list[tuple[ast.stmt, bool]] = []
    for node in tree.body:
        if isinstance(node, ast.Try):
            guarded = _guarded(node)
            statements += [(s, guarded) for s in [*node.body, *node.orelse]]
        else:
            statements.append((node, False))

    def bind(name: str, line: int, value: Any) -> None:
        for table in (parsed.classes, parsed.imports, parsed.assigns, parsed.functions):
            table.pop(name, None)
        parsed.timeline.setdefault(name, []).append((line, value))

    for node, guarded in statements:
        if isinstance(node, ast.ClassDef):
            earlier = parsed.classes.get(node.name)
            if earlier is not None:
                parsed.earlier[f"{node.name}@{earlier.lineno}"] = earlier
            bind(node.name, node.lineno, node)
            parsed.classes[node.name] = node
        elif isinstance(node, ast.Import):
            if not guarded:
                parsed.module_imports += [(node.lineno, a.name, False) for a in node.names]
            for alias in node.names:
                if alias.name.split(".")[0] == PLUGIN_PACKAGE and not guarded:
                    parsed.plugin_imports.append((node.lineno, alias.name, ()))
                local = alias.asname or alias.name.split(".")[0]  # `import a.b.c` binds `a`
                bind(local, node.lineno, alias.name if alias.asname else local)
                parsed.imports[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom):
            source = absolute(package, node.module, node.level)
            if not guarded:  # `from .....x import y` past the top-level package: ImportError
                beyond = node.level > len(package.split(".") if package else [])
                parsed.module_imports.append((node.lineno, source, node.level > 0 and beyond))
            if source.split(".")[0] == PLUGIN_PACKAGE and not guarded:
                parsed.plugin_imports.append(
                    (node.lineno, source, tuple(a.name for a in node.names))
                )
            if not guarded:
                parsed.from_imports.append((node.lineno, source, tuple(a.name for a in node.names)))
            for alias in node.names:
                if guarded:
                    parsed.guarded.add(alias.asname or alias.name)
                if alias.name != "*":
                    ref = f"{source}:{alias.name}"
                    bind(alias.asname or alias.name, node.lineno, ref)
                    parsed.imports[alias.asname or alias.name] = ref
                else:
                    parsed.stars.append(source)
                    parsed.star_lines.append((node.lineno, source))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and node.value is not None:
                    if t.id in parsed.timeline:
                        parsed.rebound.add(t.id)
                    bind(t.id, node.lineno, node.value)
                    parsed.assigns[t.id] = node.value
        elif isinstance(node, ast.Delete):  # `del Name`: no longer bound
            for t in node.targets:
                if isinstance(t, ast.Name):
                    bind(t.id, node.lineno, None)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            setattr(node, NO_CLASS_CELL, True)  # a class body may bind it: super() fails there
            bind(node.name, node.lineno, node)
            if isinstance(node, ast.FunctionDef):
                parsed.functions[node.name] = node
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            _changes(parsed, node)
    for node in tree.body:  # names bound inside an if / loop / with: which binding is kept
        if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Match)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.stmt) and inner is not node:
                    for name in parsed.timeline:
                        if _binds(inner, name):
                            parsed.nested.setdefault(name, inner.lineno)
    for node in tree.body:  # every name module code binds, in any branch (not in defs)
        stack: list[ast.AST] = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                parsed.bound.add(n.name)
                continue
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                parsed.bound.add(n.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                parsed.bound |= {(a.asname or a.name.split(".")[0]) for a in n.names}
            stack.extend(ast.iter_child_nodes(n))
    parsed.conditional = conditional_bindings(tree)
    parsed.raises = import_time_raises(tree)
    parsed.dynamic = module_doubt(tree)
    parsed.handed = handed_names(tree)
    _exports(parsed, [node for node, _ in statements])
    return parsed


def _literal_names(expr: ast.expr | None) -> list[str] | None:
    """The names of a literal list / tuple of strings (None: anything else)."""
    try:
        value = ast.literal_eval(expr) if expr is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(n, str) for n in value):
        return None
    return list(value)


def _exports(parsed: ParsedModule, statements: list[ast.stmt]) -> None:
    """``__all__`` as module code leaves it: its assignment, then ``__all__ += [...]``,
    ``__all__.append("X")`` / ``.extend([...])`` with literal names, in order. Any other change
    (or a non-literal value) sets ``all_doubt``: which names ``import *`` takes is not read."""
    names: list[str] | None = None
    for node in statements:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                names = _literal_names(node.value)
                parsed.all_doubt = 0 if names is not None else node.lineno
            continue
        if "__all__" not in parsed.timeline:
            continue
        added: list[str] | None = None
        if isinstance(node, ast.AugAssign) and getattr(node.target, "id", "") == "__all__":
            added = _literal_names(node.value) if isinstance(node.op, ast.Add) else None
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func, args = node.value.func, node.value.args
            if not (isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "__all__"):
                continue
            if func.attr == "append" and len(args) == 1:
                added = _literal_names(ast.List([args[0]], ast.Load()))
            elif func.attr == "extend" and len(args) == 1:
                added = _literal_names(args[0])
        elif not any(
            isinstance(n, ast.Name) and n.id == "__all__" for n in ast.walk(node)
        ):  # a statement that does not name __all__ leaves it as it is
            continue
        if added is None or names is None:
            parsed.all_doubt = parsed.all_doubt or node.lineno
        else:
            names = [*names, *added]
    parsed.all_names = names


def _changes(parsed: ParsedModule, node: ast.stmt) -> None:
    """What module-level code outside classes and functions changes: ``name.attribute``
    touched, ``Class.attr = ...`` / ``setattr(Class, "attr", ...)`` stored, and names whose
    value is changed in place (``CAPS["k"] = v``, ``CAPS.update(...)``)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            parsed.touched.add((n.value.id, n.attr))
            if isinstance(n.ctx, (ast.Store, ast.Del)):
                parsed.stored.setdefault((n.value.id, n.attr), n.lineno)
            elif n.attr in MUTATORS:
                parsed.mutated.setdefault(n.value.id, n.lineno)
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, (ast.Store, ast.Del)):
            if isinstance(n.value, ast.Name):
                parsed.mutated.setdefault(n.value.id, n.lineno)
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            parsed.mutated.setdefault(n.target.id, n.lineno)
        elif (
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id in ("setattr", "delattr") and len(n.args) > 1
            and isinstance(n.args[0], ast.Name)
        ):  # fmt: skip
            key = n.args[1]
            attr = "*"  # setattr(C, name, f): any attribute
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                attr = key.value
            parsed.touched.add((n.args[0].id, attr))
            parsed.stored.setdefault((n.args[0].id, attr), n.lineno)


def body_mutation(node: ast.ClassDef, name: str) -> int:
    """The line where the class body changes its own ``name`` in place after binding it
    (``name["k"] = v``, ``name.update(...)``, ``name |= {...}``), or 0."""
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for n in ast.walk(stmt):
            target = (
                n.value if isinstance(n, ast.Subscript) and isinstance(n.ctx, (ast.Store, ast.Del))
                else n.value if isinstance(n, ast.Attribute) and n.attr in MUTATORS
                else n.target if isinstance(n, ast.AugAssign) else None
            )  # fmt: skip
            if isinstance(target, ast.Name) and target.id == name:
                return stmt.lineno
    return 0


def instance_store(node: ast.ClassDef, name: str, known: ast.AST | None = None) -> int:
    """The line where a method of the class sets attribute ``name`` on an object it names
    (``self.name = v``, ``model.name = v``, ``setattr(obj, "name", v)``), or 0; ``known``: a
    store the caller evaluates itself (skipped)."""
    for item in node.body:
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for n in ast.walk(item):
            if n is known:
                continue
            if (
                isinstance(n, ast.Attribute) and n.attr == name and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name)  # not `self.model.name = ...`: another object
            ):  # fmt: skip
                return n.lineno
            if (
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                and n.func.id == "setattr" and len(n.args) > 1
                and isinstance(n.args[1], ast.Constant) and n.args[1].value == name
            ):  # fmt: skip
                return n.lineno
    return 0


_NESTING = (ast.If, ast.Try, ast.For, ast.While, ast.With, ast.Match)


def _binds(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return stmt.name == name
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name.split(".")[0]) == name for a in stmt.names)
    targets = (
        stmt.targets if isinstance(stmt, ast.Assign)
        else [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else []
    )  # fmt: skip
    return any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t))


def class_binding_doubt(
    module: ParsedModule, node: ast.ClassDef, name: str
) -> tuple[int, str] | None:
    """(line, why) when the checker cannot say which object ``Class.name`` is: the class body
    binds it inside an ``if`` / ``try`` / loop (which branch runs is not read), or module code
    assigns it after the body (``Class.name = f``, ``setattr(Class, "name", f)``)."""
    for stmt in node.body:
        if isinstance(stmt, _NESTING):
            for inner in ast.walk(stmt):
                if isinstance(inner, ast.stmt) and inner is not stmt and _binds(inner, name):
                    kind = type(stmt).__name__.lower()
                    return inner.lineno, (
                        f"{name} is bound inside a class-level `{kind}` (line {stmt.lineno}): "
                        "which binding Python keeps is not evaluated"
                    )
    shape = class_doubt(node, name) or module.dynamic  # not a plain def / assignment
    if shape is not None:
        return shape.line, shape.why
    if node.name in module.handed and module.classes.get(node.name) is node:
        line, callee = module.handed[node.name]
        return line, (
            f"{node.name} is handed to {callee}(...) in module code (line {line}): what that "
            "call does to the class is not evaluated"
        )
    known = {node.name, *module.classes, *module.imports, *module.functions}
    for (obj, attr), line in module.stored.items():  # `C = Cls; C.m = f`, a loop variable
        if attr in (name, "*") and obj not in known:
            return line, (
                f"{obj}.{attr} is assigned at module level (line {line}) and {obj} may be "
                f"{node.name}: the object Python calls is not evaluated"
            )
    for key in ((node.name, name), (node.name, "*")):
        if key in module.stored and module.classes.get(node.name) is node:
            return module.stored[key], (
                f"{node.name}.{name} is assigned at module level after the class body (line "
                f"{module.stored[key]}): the object Python calls is not this def"
            )
    return None
