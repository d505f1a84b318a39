"""Does a tt-metal checkout still accept the calls the plugin makes? (``tox -e contract-parity``)

For every class the built-in registry can target (any selector value), the adapter module is
read from ``$TT_METAL_HOME`` with ``ast`` (no import, no device, no tt-metal environment):
module path -> file, class -> method, following base classes defined in the same checkout when a
method is inherited (e.g. ``Generator`` in ``models/tt_transformers/tt/generator.py``), and the
method a pass-through ``(*args, **kwargs)`` method forwards to (``super().X(*args, **kwargs)``
in its body, else the fixture's ``delegates_to``). The plugin's contract-v2 calls
(``contract_signatures.CALL_SHAPES``) are bound to what was read and the signatures compared
with the fixture (``fixtures/tt_metal/signatures.json``):

- ``broken``: a plugin call no longer binds (renamed, missing, unexpected argument) -- fails;
- ``missing``: a method the plugin needs is not defined in the class or its bases -- fails;
- ``known``: a call the fixture already records as not binding, signature unchanged;
- ``drift``: the signature differs from the fixture but every call still binds (re-curate);
- ``absent``: an optional method is not defined (the plugin falls back);
- ``no_class``: the module or class is not in this checkout (fails with ``--require-all``);
- ``unlisted``: (checking the fixture alone) the fixture has no data for the method.

``python -m vllm_tt_plugin.contract_parity`` exits 0 when nothing fails, 1 on a failure, 2 on
bad input. Without ``TT_METAL_HOME`` it says so, checks the fixture itself and exits 0.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from vllm_tt_plugin import envs
from vllm_tt_plugin.contract_signatures import (
    CALL_SHAPES,
    CallContext,
    ContractMismatch,
    FamilyProfile,
    FixtureError,
    bind_signature,
    format_signature,
    load_profiles,
    plan_calls,
    signature_from_ast,
)


@dataclass(frozen=True)
class FoundMethod:
    owner: str  # "module:Class" that defines it
    name: str
    signature: inspect.Signature
    where: str  # file:line, or "fixture"
    # A pass-through method forwarding its *args/**kwargs to this method of a base (super()).
    delegates_to: str | None = None


class SignatureSource(Protocol):
    """Where method signatures are read from: a tt-metal checkout, or the fixture itself."""

    # A checkout is complete (a method not found is not there); the fixture lists only what
    # the public sources showed.
    complete: bool

    def has_class(self, target: str) -> bool: ...

    def find_method(self, target: str, method: str) -> FoundMethod | None: ...

    def find_in_bases(self, target: str, method: str) -> FoundMethod | None: ...


# --- reading a checkout -------------------------------------------------------------------------


@dataclass
class _Module:
    name: str
    path: Path
    is_package: bool
    classes: dict[str, ast.ClassDef]
    imports: dict[str, str]  # local name -> "module" (import) or "module:Name" (from-import)


def _split(target: str) -> tuple[str, str]:
    module, _, cls = target.partition(":")
    return module, cls


class CheckoutReader:
    """Reads classes and method signatures out of a source tree with ``ast``."""

    complete = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self._modules: dict[str, _Module | None] = {}

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
        classes: dict[str, ast.ClassDef] = {}
        imports: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        imports[alias.asname] = alias.name
                    else:  # `import a.b.c` binds `a`
                        head = alias.name.split(".")[0]
                        imports[head] = head
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(package, node.module, node.level)
                for alias in node.names:
                    if alias.name != "*":
                        imports[alias.asname or alias.name] = f"{source}:{alias.name}"
        return _Module(module, path, is_package, classes, imports)

    def resolve_class(self, target: str, depth: int = 0) -> tuple[_Module, ast.ClassDef] | None:
        """The class definition a ``module:Class`` name refers to, following re-exports."""
        module_name, cls = _split(target)
        module = self._module(module_name)
        if module is None or depth > 20:
            return None
        if cls in module.classes:
            return module, module.classes[cls]
        imported = module.imports.get(cls)
        if imported and ":" in imported:
            found = self.resolve_class(imported, depth + 1)
            if found is not None:
                return found
            # `from pkg import mod` binds a module, not a class: nothing to follow.
        return None

    def has_class(self, target: str) -> bool:
        return self.resolve_class(target) is not None

    def bases(self, target: str) -> list[str]:
        """The ``module:Class`` of each base class; a base outside the checkout is skipped."""
        found = self.resolve_class(target)
        if found is None:
            return []
        module, node = found
        result: list[str] = []
        for expr in node.bases:
            ref = self._base_ref(module, expr)
            if ref is not None and self.has_class(ref):
                result.append(self._canonical(ref))
        return result

    def _canonical(self, ref: str) -> str:
        found = self.resolve_class(ref)
        assert found is not None
        return f"{found[0].name}:{found[1].name}"

    def _base_ref(self, module: _Module, expr: ast.expr) -> str | None:
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
            prefix = head.replace(":", ".")
            dotted = ".".join([prefix, *parts[:-1]])
            return f"{dotted}:{parts[-1]}"
        return None

    def _own_method(self, target: str, method: str) -> FoundMethod | None:
        found = self.resolve_class(target)
        if found is None:
            return None
        module, node = found
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method:
                decorators = {
                    d.id if isinstance(d, ast.Name) else getattr(d, "attr", "")
                    for d in item.decorator_list
                }
                sig = signature_from_ast(item, drop_first="staticmethod" not in decorators)
                rel = module.path.relative_to(self.root)
                return FoundMethod(
                    f"{module.name}:{node.name}",
                    method,
                    sig,
                    f"{rel}:{item.lineno}",
                    _forwarded_to(item),
                )
        return None

    def _linearised(self, target: str) -> list[str]:
        """The class and its checkout bases, depth first, left to right (close enough to the
        MRO for the single-inheritance-with-mixins adapters tt-metal has)."""
        order: list[str] = []

        def visit(t: str) -> None:
            if t in order or len(order) > 64:
                return
            order.append(t)
            for base in self.bases(t):
                visit(base)

        found = self.resolve_class(target)
        if found is not None:
            visit(f"{found[0].name}:{found[1].name}")
        return order

    def find_method(self, target: str, method: str) -> FoundMethod | None:
        for cls in self._linearised(target):
            found = self._own_method(cls, method)
            if found is not None:
                return found
        return None

    def find_in_bases(self, target: str, method: str) -> FoundMethod | None:
        for cls in self._linearised(target)[1:]:
            found = self._own_method(cls, method)
            if found is not None:
                return found
        return None


def _forwarded_to(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """``X`` when ``fn`` passes its ``*args`` / ``**kwargs`` on to ``super().X(...)``."""
    passed = {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
    if not passed:
        return None
    for node in ast.walk(fn):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Call)
            and isinstance(node.func.value.func, ast.Name)
            and node.func.value.func.id == "super"
        ):
            continue
        starred = [a.value for a in node.args if isinstance(a, ast.Starred)]
        double = [k.value for k in node.keywords if k.arg is None]
        if any(isinstance(v, ast.Name) and v.id in passed for v in starred + double):
            return node.func.attr
    return None


def _absolute(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".") if package else []
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, *([module] if module else [])])


class FixtureSource:
    """The fixture's own profiles as a signature source (the check without a checkout)."""

    complete = False

    def __init__(self, profiles: Mapping[str, FamilyProfile]) -> None:
        self.profiles = profiles

    def has_class(self, target: str) -> bool:
        return target in self.profiles

    def _found(self, owner: FamilyProfile, name: str) -> FoundMethod:
        method = owner.methods[name]
        return FoundMethod(owner.target, name, method.signature, "fixture", method.delegates_to)

    def find_method(self, target: str, method: str) -> FoundMethod | None:
        found = self.profiles[target].lookup(method) if target in self.profiles else None
        return self._found(found[0], method) if found else None

    def find_in_bases(self, target: str, method: str) -> FoundMethod | None:
        found = self.profiles[target].lookup_in_bases(method) if target in self.profiles else None
        return self._found(found[0], method) if found else None


# --- the check ----------------------------------------------------------------------------------

Status = Literal[
    "ok", "drift", "known", "broken", "missing", "absent", "unlisted", "no_class", "unprofiled"
]
FAILING: frozenset[str] = frozenset({"broken", "missing", "unprofiled"})


@dataclass(frozen=True)
class Finding:
    target: str
    archs: tuple[str, ...]
    method: str
    status: Status
    detail: str = ""


def _fixture_chain(profile: FamilyProfile, method: str) -> list[str]:
    return [format_signature(m.signature) for _, m in profile.call_chain(method)]


def check_target(
    source: SignatureSource,
    profile: FamilyProfile,
    archs: tuple[str, ...] = (),
) -> list[Finding]:
    """Bind every call the plugin makes to ``profile.target`` against ``source``."""
    target = profile.target
    if not source.has_class(target):
        return [Finding(target, archs, "*", "no_class", "module or class not in this checkout")]

    def has_method(name: str) -> bool:
        return source.find_method(target, name) is not None

    findings: list[Finding] = []
    for shape in CALL_SHAPES:
        found = source.find_method(target, shape.method)
        ctx = CallContext(profile.facts, has_method, found.signature if found else None)
        if not shape.applies(ctx):
            continue
        fixture_entry = profile.lookup(shape.method)
        if found is None:
            listed = " (the fixture lists it)" if fixture_entry else ""
            if not source.complete:
                findings.append(
                    Finding(target, archs, shape.method, "unlisted", "no public signature data")
                )
            elif shape.optional:
                findings.append(
                    Finding(target, archs, shape.method, "absent", f"not defined{listed}")
                )
            else:
                findings.append(
                    Finding(
                        target,
                        archs,
                        shape.method,
                        "missing",
                        f"not defined in the class or its bases{listed}",
                    )
                )
            continue
        # Follow pass-through methods as the checkout forwards them (super().X(*args,
        # **kwargs)), or as the fixture records it when the body does not show it.
        chain = [found]
        fallback = fixture_entry[1].delegates_to if fixture_entry else None
        while len(chain) < 8:
            delegate = chain[-1].delegates_to or (fallback if len(chain) == 1 else None)
            forwarded = source.find_in_bases(chain[-1].owner, delegate) if delegate else None
            if forwarded is None:
                break
            chain.append(forwarded)
        errors: list[str] = []
        for call in plan_calls(shape, ctx):
            args, kwargs = call.as_call()
            for link in chain:
                try:
                    bind_signature(
                        link.signature,
                        args,
                        kwargs,
                        target=link.owner,
                        family=profile.family,
                        method=link.name,
                    )
                except ContractMismatch as exc:
                    errors.append(f"{call.variant} call: {exc} [{link.where}]")
        read = [format_signature(link.signature) for link in chain]
        expected = _fixture_chain(profile, shape.method)
        changed = read != expected
        change = f"fixture {' -> '.join(expected) or '(none)'}, checkout {' -> '.join(read)}"
        known = profile.known_breaks.get(shape.method) or (
            fixture_entry[0].known_breaks.get(shape.method) if fixture_entry else None
        )
        if errors and known and not changed:
            findings.append(Finding(target, archs, shape.method, "known", known))
        elif errors:
            detail = "; ".join(dict.fromkeys(errors))
            findings.append(
                Finding(
                    target,
                    archs,
                    shape.method,
                    "broken",
                    detail + (f" ({change})" if changed else ""),
                )
            )
        elif changed:
            findings.append(Finding(target, archs, shape.method, "drift", change))
        else:
            findings.append(Finding(target, archs, shape.method, "ok", " -> ".join(read)))
    return findings


def check(
    source: SignatureSource,
    profiles: Mapping[str, FamilyProfile],
    targets: Mapping[str, tuple[str, ...]],
) -> list[Finding]:
    """Findings for every registry target (``{"module:Class": (archs, ...)}``)."""
    findings: list[Finding] = []
    for target, archs in targets.items():
        profile = profiles.get(target)
        if profile is None:
            findings.append(
                Finding(target, archs, "*", "unprofiled", "no profile in the signature fixture")
            )
            continue
        findings.extend(check_target(source, profile, archs))
    return findings


def failures(findings: Sequence[Finding], require_all: bool = False) -> list[Finding]:
    failing = FAILING | ({"no_class"} if require_all else set())
    return [f for f in findings if f.status in failing]


def render(findings: Sequence[Finding]) -> str:
    lines: list[str] = []
    current = None
    for f in findings:
        if f.target != current:
            current = f.target
            lines.append(f"{f.target}  [{', '.join(f.archs)}]")
        lines.append(f"  {f.status:<10} {f.method}: {f.detail}")
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.status] = counts.get(f.status, 0) + 1
    lines.append("summary: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def registry_targets(archs: Sequence[str] = ()) -> dict[str, tuple[str, ...]]:
    """The built-in registry's targets, optionally only those serving ``archs``."""
    from vllm_tt_plugin.model_registry import all_builtin_targets, tt_arch

    targets = all_builtin_targets()
    if not archs:
        return targets
    wanted = {tt_arch(a) for a in archs}
    unknown = wanted - {a for served in targets.values() for a in served}
    if unknown:
        raise FixtureError(f"--arch {', '.join(sorted(unknown))}: not a built-in architecture")
    return {t: a for t, a in targets.items() if wanted & set(a)}


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_tt_plugin.contract_parity", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--tt-metal-home", type=Path, default=envs.TT_METAL_HOME.get(environ))
    parser.add_argument("--fixture", type=Path, default=None)
    parser.add_argument("--arch", action="append", default=[], help="only these architectures")
    parser.add_argument(
        "--require-all", action="store_true", help="a target missing from the checkout fails"
    )
    parser.add_argument("--verbose", action="store_true", help="list ok findings too")
    args = parser.parse_args(argv)
    out: Callable[[str], None] = print
    try:
        profiles = load_profiles(args.fixture)
        targets = registry_targets(args.arch)
    except FixtureError as exc:
        print(f"contract-parity: {exc}", file=sys.stderr)
        return 2
    if not args.tt_metal_home:
        fixture_findings = check(FixtureSource(profiles), profiles, targets)
        bad = failures(fixture_findings)
        if bad:
            out(render(bad))
            out("contract-parity: the plugin's calls do not bind to the fixture (see above)")
            return 1
        out(
            "contract-parity: TT_METAL_HOME not set: skipping the check against a tt-metal "
            f"checkout (fixture: {len(profiles)} profiles parsed, the plugin's calls bind to "
            f"them for {len(targets)} registry targets). Set TT_METAL_HOME=/path/to/tt-metal "
            "to run it."
        )
        return 0
    root = Path(args.tt_metal_home)
    if not (root / "models").is_dir():
        print(
            f"contract-parity: TT_METAL_HOME={root} is not a tt-metal checkout (no models/)",
            file=sys.stderr,
        )
        return 2
    findings = check(CheckoutReader(root), profiles, targets)
    shown = findings if args.verbose else [f for f in findings if f.status != "ok"]
    out(f"contract-parity: {root} against {args.fixture or 'fixtures/tt_metal/signatures.json'}")
    out(render(shown))
    bad = failures(findings, args.require_all)
    if bad:
        out(f"contract-parity: {len(bad)} failing finding(s)")
        return 1
    out("contract-parity: every call the plugin makes binds to this checkout")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
