"""Real tt-metal adapter signatures as data, and binding the plugin's calls to them.

``tt_metal_signatures.json`` (beside this module; ``fixtures/tt_metal/signatures.json`` links
to it) holds, per class the built-in registry targets (and the
base classes they inherit methods from), the real parameter lists read from public
tenstorrent/tt-metal files, each with its provenance (repo, path, commit, link; required).
This module turns them into typed profiles and binds calls to them with
``inspect.Signature.bind``, so a renamed, missing or unexpected argument is caught without
tt-metal, a device or an import of the model. It imports only the standard library:
``tox -e contract-parity`` runs it without vLLM or torch.

API (see also docs/CONTRACT_PARITY.md)::

    profiles = load_profiles()                      # {"module:Class": FamilyProfile}
    llama = profiles["models.tt_transformers.tt.generator_vllm:LlamaForCausalLM"]
    bind_call(llama, "decode_forward", (), {"tokens": t, "page_table": p, ...})
    # -> inspect.BoundArguments, or ContractMismatch (a TypeError) naming the family, the
    #    method and each renamed / missing / unexpected argument.

``FamilyProfile.lookup(method)`` follows the profile's bases as Python follows a class's, and a
pass-through ``(*args, **kwargs)`` method that ``delegates_to`` another is bound to both. Which
calls the plugin makes is ``call_plan``'s (the planner ``ModelAdapter`` sends them from).

Signature text: ``(a, b=, *, c=, **kwargs)``: ``name=`` has a default, names after ``*`` (or
``*args``) are keyword-only, ``/`` ends positional-only names.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# The signature data (evidence with provenance) is package data: `python -m
# vllm_tt_plugin.contract.parity` runs from an installed wheel against TT_METAL_HOME as it does
# from a checkout. fixtures/tt_metal/signatures.json is a link to this file.
DEFAULT_FIXTURE = Path(__file__).with_name("tt_metal_signatures.json")


class _HasDefault:
    """Stands for a parameter default whose value the data does not give."""

    def __repr__(self) -> str:
        return "..."


HAS_DEFAULT: Any = _HasDefault()


class FixtureError(ValueError):
    """The signature fixture is malformed; the message names the profile, method and field."""


ProblemKind = Literal["renamed", "missing", "unexpected", "positional", "duplicate", "no_method"]


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    argument: str
    detail: str


class ContractMismatch(TypeError):
    """A call does not bind to a real adapter signature (a TypeError, as the real call would be)."""

    def __init__(self, target: str, family: str, method: str, problems: Sequence[Problem]):
        self.target = target
        self.family = family
        self.method = method
        self.problems = tuple(problems)
        details = "; ".join(p.detail for p in self.problems)
        super().__init__(f"{family} ({target}).{method}: {details}")


# --- signatures -------------------------------------------------------------------------------


def signature_from_ast(
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, *, drop_first: bool
) -> inspect.Signature:
    """The call signature of a ``def`` (``drop_first`` drops ``self``/``cls``); defaults are
    marked ``HAS_DEFAULT`` (their values are not evaluated)."""
    a = node.args
    kinds = inspect.Parameter
    positional: list[tuple[str, inspect._ParameterKind]]
    positional = [(p.arg, kinds.POSITIONAL_ONLY) for p in a.posonlyargs]
    positional += [(p.arg, kinds.POSITIONAL_OR_KEYWORD) for p in a.args]
    first_default = len(positional) - len(a.defaults)
    params = [
        inspect.Parameter(name, kind, default=HAS_DEFAULT if i >= first_default else kinds.empty)
        for i, (name, kind) in enumerate(positional)
    ]
    if drop_first and params:
        params = params[1:]
    if a.vararg is not None:
        params.append(inspect.Parameter(a.vararg.arg, kinds.VAR_POSITIONAL))
    for p, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        has = default is not None
        params.append(
            inspect.Parameter(
                p.arg, kinds.KEYWORD_ONLY, default=HAS_DEFAULT if has else kinds.empty
            )
        )
    if a.kwarg is not None:
        params.append(inspect.Parameter(a.kwarg.arg, kinds.VAR_KEYWORD))
    return inspect.Signature(params)


_BARE_DEFAULT = re.compile(r"=\s*(?=[,)])")


def parse_signature(text: str, where: str = "signature") -> inspect.Signature:
    """``"(tokens, page_table=, *, reload_inputs=, **kwargs)"`` -> ``inspect.Signature``."""
    stripped = text.strip()
    if not (stripped.startswith("(") and stripped.endswith(")")):
        raise FixtureError(f"{where}: {text!r} is not a parenthesised parameter list")
    source = f"def _f{_BARE_DEFAULT.sub('=...', stripped)}: pass"
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise FixtureError(f"{where}: cannot parse {text!r}: {exc.msg}") from exc
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    return signature_from_ast(fn, drop_first=False)


def format_signature(sig: inspect.Signature) -> str:
    """The fixture's text form of a signature (defaults shown as a bare ``=``)."""
    kinds = inspect.Parameter
    parts: list[str] = []
    star_written = False
    previous: Any = None
    for p in sig.parameters.values():
        if previous is kinds.POSITIONAL_ONLY and p.kind is not kinds.POSITIONAL_ONLY:
            parts.append("/")
        if p.kind is kinds.KEYWORD_ONLY and not star_written:
            parts.append("*")
            star_written = True
        if p.kind is kinds.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            star_written = True
        elif p.kind is kinds.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        else:
            parts.append(p.name + ("=" if p.default is not kinds.empty else ""))
        previous = p.kind
    if previous is kinds.POSITIONAL_ONLY:
        parts.append("/")
    return "(" + ", ".join(parts) + ")"


def _diagnose(sig: inspect.Signature, n_positional: int, keywords: Iterable[str]) -> list[Problem]:
    kinds = inspect.Parameter
    params = list(sig.parameters.values())
    positional = [
        p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    var_pos = any(p.kind is kinds.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind is kinds.VAR_KEYWORD for p in params)
    problems: list[Problem] = []
    if n_positional > len(positional) and not var_pos:
        problems.append(
            Problem(
                "positional",
                "*",
                f"takes {len(positional)} positional argument(s), the call passes {n_positional}",
            )
        )
    supplied = {p.name for p in positional[:n_positional]}
    by_name = {p.name: p for p in params if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)}
    unexpected: list[str] = []
    for name in keywords:
        param = by_name.get(name)
        if param is not None and param.kind is not kinds.POSITIONAL_ONLY:
            if name in supplied:
                problems.append(
                    Problem("duplicate", name, f"argument {name!r} given positionally and by name")
                )
            supplied.add(name)
        elif not var_kw:
            unexpected.append(name)
    missing = [
        p.name
        for p in params
        if p.default is kinds.empty
        and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
        and p.name not in supplied
    ]
    unsupplied = [n for n in by_name if n not in supplied]
    for name in unexpected:
        # A qualified variant (reload_sampling_params vs sampling_params) is another parameter,
        # not a rename.
        candidates = [
            n for n in unsupplied if not (name.endswith(f"_{n}") or n.endswith(f"_{name}"))
        ]
        match = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
        if not match and len(unexpected) == 1 and len(missing) == 1:
            match = missing
        if match:
            problems.append(
                Problem(
                    "renamed",
                    name,
                    f"argument {name!r} is not accepted; the signature names {match[0]!r} "
                    "(renamed?)",
                )
            )
            unsupplied.remove(match[0])
            if match[0] in missing:
                missing.remove(match[0])
        else:
            problems.append(Problem("unexpected", name, f"unexpected argument {name!r}"))
    problems.extend(
        Problem("missing", name, f"missing required argument {name!r}") for name in missing
    )
    return problems


def bind_signature(
    sig: inspect.Signature,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    target: str,
    family: str,
    method: str,
) -> inspect.BoundArguments:
    """``sig.bind(*args, **kwargs)``, failing with a ContractMismatch that names the problem."""
    try:
        return sig.bind(*args, **kwargs)
    except TypeError as exc:
        problems = _diagnose(sig, len(args), kwargs) or [Problem("unexpected", "?", str(exc))]
        sig_text = format_signature(sig)
        raise ContractMismatch(target, family, f"{method}{sig_text}", problems) from exc


# --- profiles ---------------------------------------------------------------------------------

# The one repository a fixture fact may come from (issue #33: never a fork).
UPSTREAM = "tenstorrent/tt-metal"
_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Provenance:
    """Where a method's signature was read: a file of tenstorrent/tt-metal at one commit."""

    repo: str
    path: str
    commit: str
    link: str


def expected_link(path: str, commit: str) -> str:
    return f"https://github.com/{UPSTREAM}/blob/{commit}/{path}"


def _provenance(data: Any, where: str) -> Provenance:
    """A method's ``provenance`` (required): repo tenstorrent/tt-metal, path, commit, link."""
    if not isinstance(data, Mapping):
        raise FixtureError(
            f"{where}: needs a 'provenance' object (repo {UPSTREAM!r}, path, commit, link)"
        )
    values: dict[str, str] = {}
    for key in ("repo", "path", "commit", "link"):
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise FixtureError(f"{where}.provenance: field {key!r} is required (a string)")
        values[key] = value
    if values["repo"] != UPSTREAM:
        raise FixtureError(
            f"{where}.provenance: repo {values['repo']!r} is not {UPSTREAM!r} "
            "(facts come from the upstream repository, never a fork)"
        )
    if not _COMMIT.fullmatch(values["commit"]):
        raise FixtureError(
            f"{where}.provenance: commit {values['commit']!r} is not a full 40-hex commit"
        )
    path = values["path"]
    if path.startswith("/") or ".." in path.split("/") or not path.endswith(".py"):
        raise FixtureError(f"{where}.provenance: path {path!r} is not a .py file in the repo")
    link = expected_link(path, values["commit"])
    if values["link"] != link:
        raise FixtureError(f"{where}.provenance: link {values['link']!r} is not {link!r}")
    return Provenance(**values)


@dataclass(frozen=True)
class MethodProfile:
    name: str
    signature: inspect.Signature
    text: str
    source: str
    is_classmethod: bool = False
    delegates_to: str | None = None  # looked up from the owner's bases (a super() call)
    notes: str = ""
    provenance: Provenance | None = None


@dataclass(frozen=True)
class FamilyFacts:
    """What decides the conditional arguments the plugin sends to a family (contract v2)."""

    decode_contract: int = 0  # decode_input_update_contract: >= 1 -> the four reload commands
    device_sampling: bool = False  # supports_sample_on_device
    hybrid: bool = False  # get_kv_cache_spec present -> hybrid page tables
    mrope: bool = False  # rope_deltas_all_users on decode
    multimodal_kwargs: tuple[str, ...] = ()
    block_output: bool = False  # release_request / release_persistent_capture


@dataclass(frozen=True)
class FamilyProfile:
    target: str  # "module.path:ClassName"
    family: str
    role: Literal["served", "base"]
    facts: FamilyFacts
    methods: Mapping[str, MethodProfile]
    bases: tuple[FamilyProfile, ...] = ()
    known_breaks: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""

    def lookup(self, method: str) -> tuple[FamilyProfile, MethodProfile] | None:
        """(owner, method) as attribute lookup finds it: this class, then its bases in order."""
        if method in self.methods:
            return self, self.methods[method]
        for base in self.bases:
            found = base.lookup(method)
            if found is not None:
                return found
        return None

    def lookup_in_bases(self, method: str) -> tuple[FamilyProfile, MethodProfile] | None:
        for base in self.bases:
            found = base.lookup(method)
            if found is not None:
                return found
        return None

    def call_chain(self, method: str) -> list[tuple[FamilyProfile, MethodProfile]]:
        """The method and every method it delegates to, outermost first."""
        found = self.lookup(method)
        if found is None:
            return []
        chain = [found]
        while chain[-1][1].delegates_to is not None:
            owner, profile = chain[-1]
            delegate = owner.lookup_in_bases(profile.delegates_to or "")
            if delegate is None:
                break
            chain.append(delegate)
        return chain


def _field(data: Mapping[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    value = data.get(key, default)
    if not isinstance(value, kind):
        raise FixtureError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _method(name: str, data: Any, where: str) -> MethodProfile:
    if not isinstance(data, Mapping):
        raise FixtureError(f"{where}: must be an object with a 'signature'")
    text = _field(data, "signature", str, where, "")
    delegates = data.get("delegates_to")
    if delegates is not None and not isinstance(delegates, str):
        raise FixtureError(f"{where}: field 'delegates_to' must be a method name")
    return MethodProfile(
        name=name,
        signature=parse_signature(text, f"{where}.signature"),
        text=text,
        source=_field(data, "source", str, where, ""),
        is_classmethod=_field(data, "classmethod", bool, where, False),
        delegates_to=delegates,
        notes=_field(data, "notes", str, where, ""),
        provenance=_provenance(data.get("provenance"), where),
    )


def _facts(data: Any, where: str) -> FamilyFacts:
    if not isinstance(data, Mapping):
        raise FixtureError(f"{where}: must be an object")
    known = set(FamilyFacts.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise FixtureError(f"{where}: unknown fact(s) {unknown}; known: {sorted(known)}")
    contract = data.get("decode_contract", 0)
    if not isinstance(contract, int) or isinstance(contract, bool) or contract < 0:
        raise FixtureError(f"{where}: 'decode_contract' must be an int >= 0, got {contract!r}")
    mm = data.get("multimodal_kwargs", [])
    if not isinstance(mm, list) or not all(isinstance(x, str) for x in mm):
        raise FixtureError(f"{where}: 'multimodal_kwargs' must be a list of names")
    flags = {
        k: _field(data, k, bool, where, False)
        for k in ("device_sampling", "hybrid", "mrope", "block_output")
    }
    return FamilyFacts(decode_contract=contract, multimodal_kwargs=tuple(mm), **flags)


def profiles_from_mapping(
    data: Mapping[str, Any], where: str = "fixture"
) -> dict[str, FamilyProfile]:
    """Build the profiles of a fixture document (``{"profiles": {target: {...}}}``)."""
    raw = data.get("profiles")
    if not isinstance(raw, Mapping) or not raw:
        raise FixtureError(f"{where}: 'profiles' must be a non-empty object")
    built: dict[str, FamilyProfile] = {}

    def build(target: str, stack: tuple[str, ...]) -> FamilyProfile:
        if target in built:
            return built[target]
        here = f"{where}: profile {target!r}"
        if target in stack:
            raise FixtureError(f"{here}: inherits from itself ({' -> '.join((*stack, target))})")
        entry = raw.get(target)
        if not isinstance(entry, Mapping):
            origin = f" (a base of {stack[-1]!r})" if stack else ""
            raise FixtureError(f"{where}: no profile {target!r}{origin}")
        module, sep, cls = target.partition(":")
        if not sep or not module or not cls:
            raise FixtureError(f"{here}: the key must be 'module.path:ClassName'")
        role = entry.get("role", "served")
        if role not in ("served", "base"):
            raise FixtureError(f"{here}: 'role' must be 'served' or 'base', got {role!r}")
        base_names = _field(entry, "bases", list, here, [])
        methods_raw = _field(entry, "methods", Mapping, here, {})
        methods = {name: _method(name, m, f"{here}.{name}") for name, m in methods_raw.items()}
        known = _field(entry, "known_breaks", Mapping, here, {})
        for name in known:
            if name not in methods:
                raise FixtureError(f"{here}: known_breaks names {name!r}, which it does not list")
        profile = FamilyProfile(
            target=target,
            family=_field(entry, "family", str, here, target),
            role=role,
            facts=_facts(entry.get("facts", {}), f"{here}.facts"),
            methods=methods,
            bases=tuple(build(b, (*stack, target)) for b in base_names),
            known_breaks=dict(known),
            notes=_field(entry, "notes", str, here, ""),
        )
        for owner, method in ((profile, m) for m in methods.values() if m.delegates_to is not None):
            if owner.lookup_in_bases(method.delegates_to or "") is None:
                raise FixtureError(
                    f"{here}.{method.name}: delegates_to {method.delegates_to!r}, which no base "
                    "profile lists"
                )
        built[target] = profile
        return profile

    for target in raw:
        build(target, ())
    return built


def load_profiles(path: Path | None = None) -> dict[str, FamilyProfile]:
    """The fixture's profiles (default: the package's ``tt_metal_signatures.json``)."""
    if path is None:
        path = DEFAULT_FIXTURE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise FixtureError(f"signature fixture {path} not found (pass --fixture PATH)") from exc
    except json.JSONDecodeError as exc:
        raise FixtureError(f"signature fixture {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, Mapping):
        raise FixtureError(f"signature fixture {path} must hold a JSON object")
    return profiles_from_mapping(data, str(path))


def bind_call(
    profile: FamilyProfile,
    method: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
) -> inspect.BoundArguments:
    """Bind ``profile.<method>(*args, **kwargs)`` to the real signature (and to what it
    delegates to). Raises ContractMismatch naming the family, method and argument."""
    kwargs = kwargs or {}
    chain = profile.call_chain(method)
    if not chain:
        raise ContractMismatch(
            profile.target,
            profile.family,
            method,
            [Problem("no_method", method, f"the fixture lists no {method!r} for this class")],
        )
    bound: inspect.BoundArguments | None = None
    for owner, m in chain:
        result = bind_signature(
            m.signature,
            args,
            kwargs,
            target=profile.target,
            family=profile.family,
            method=method if owner is profile else f"{method} -> {owner.target}.{m.name}",
        )
        bound = bound or result
    assert bound is not None
    return bound
