"""Does a tt-metal checkout still accept the calls the plugin makes? (``tox -e contract-parity``)

For every class the built-in registry can target (any selector value), the adapter module is
read from ``$TT_METAL_HOME`` with ``ast`` (``contract_source.CheckoutReader``: no import, no
device, no tt-metal environment). The facts the plugin reads from the class
(``decode_input_update_contract``, ``model_capabilities``, the hybrid and allocation hooks, the
signature names it checks) are read from the checkout's class, and the calls are planned from
them by ``call_plan``, the planner ``ModelAdapter`` sends its calls from. Each call is then bound
along the real call path: the method as the MRO finds it, then every method it hands its
``*args`` / ``**kwargs`` on to (``super()``, ``super(C, self)`` starting after ``C``,
``self.m(...)``, a bound method handed to a helper), each link with only the arguments that
reach it. Signatures are compared with the fixture (``fixtures/tt_metal/signatures.json``):

- ``broken``: a plugin call does not bind (renamed, missing, unexpected argument) -- fails;
- ``missing``: a method the plugin needs, or one a pass-through forwards to, is not defined
  in the class or the rest of its MRO -- fails;
- ``abstract``: the call reaches a method whose body only raises ``NotImplementedError`` -- fails;
- ``known``: a call the fixture already records as not binding, signature unchanged;
- ``drift``: the signatures differ from the fixture but every call binds (re-curate);
- ``absent``: an optional method is not defined (the plugin falls back or skips the step);
- ``unresolved``: a method (or a pass-through's target) was not found, but a tt-metal base class
  of the target is not in the checkout, so it may be defined there -- fails (the adapter module
  would not import from this checkout either);
- ``facts``: the class declares other facts than the fixture records (the class's are used);
- ``no_class``: the module or class is not in this checkout (fails with ``--require-all``);
- ``unlisted``: (checking the fixture alone) the fixture has no data for the method.

``python -m vllm_tt_plugin.contract.parity`` exits 0 when nothing fails, 1 on a failure, 2 on
bad input. Without ``TT_METAL_HOME`` it says so, checks the fixture itself and exits 0.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from vllm_tt_plugin.contract.call_plan import (
    METHODS,
    PlanFacts,
    ServedFacts,
    derive_facts,
    plan_calls,
)
from vllm_tt_plugin.contract.signatures import (
    DEFAULT_FIXTURE,
    ContractMismatch,
    FamilyProfile,
    FixtureError,
    bind_signature,
    format_signature,
    load_profiles,
)
from vllm_tt_plugin.contract.source import (
    CheckoutReader,
    FixtureSource,
    FoundMethod,
    SignatureSource,
    class_label,
    describe_chain,
    find_method,
    pass_on,
)
from vllm_tt_plugin.launch import envs

__all__ = [
    "CheckoutReader",
    "Finding",
    "FixtureSource",
    "check",
    "check_target",
    "failures",
    "main",
    "plan_facts",
    "render",
]

Status = Literal[
    "ok",
    "drift",
    "known",
    "broken",
    "missing",
    "unresolved",
    "abstract",
    "absent",
    "facts",
    "unlisted",
    "no_class",
    "unprofiled",
]
FAILING: frozenset[str] = frozenset({"broken", "missing", "unresolved", "abstract", "unprofiled"})
FACTS = "(class facts)"  # the method column of a "facts" finding
_MAX_LINKS = 8


@dataclass(frozen=True)
class Finding:
    target: str
    archs: tuple[str, ...]
    method: str
    status: Status
    detail: str = ""


def plan_facts(source: SignatureSource, profile: FamilyProfile) -> tuple[PlanFacts, list[str]]:
    """The planner's facts for ``profile.target`` as the plugin would read them from the
    source's class, and where the fixture's facts disagree with the class."""
    target = profile.target
    fixture = profile.facts

    def method(name: str) -> FoundMethod | None:
        return find_method(source, target, name)

    def takes(name: str, param: str) -> bool:
        found = method(name)
        return found is not None and param in found.signature.parameters

    def signature(name: str) -> inspect.Signature | None:
        found = method(name)
        return found.signature if found is not None else None

    read = source.class_facts(target)
    if read is None:  # the fixture alone: its recorded facts stand for the class's
        return derive_facts(
            decode_contract=fixture.decode_contract,
            device_sampling=fixture.device_sampling,
            output_tokens_per_step=2 if fixture.block_output else 1,
            has_method=lambda n: (
                method(n) is not None or (n == "get_kv_cache_spec" and fixture.hybrid)
            ),
            takes=takes,
            signature=signature,
        ), []
    facts = derive_facts(
        decode_contract=read.decode_contract,
        device_sampling=read.device_sampling,
        output_tokens_per_step=read.output_tokens_per_step,
        has_method=lambda n: method(n) is not None,
        takes=takes,
        signature=signature,
    )
    differences = [f"{name} not a literal: read as the default" for name in read.unreadable]
    pairs: list[tuple[str, Any, Any]] = [
        ("decode_contract (decode_input_update_contract)", fixture.decode_contract,
         facts.decode_contract),
        ("device_sampling (supports_sample_on_device)", fixture.device_sampling,
         facts.device_sampling),
        ("hybrid (get_kv_cache_spec)", fixture.hybrid, facts.hybrid_tables is not None),
        ("block_output (output_tokens_per_step > 1)", fixture.block_output, facts.block_output),
    ]  # fmt: skip
    differences += [f"{n}: fixture {f}, class {c}" for n, f, c in pairs if f != c]
    return facts, differences


@dataclass
class _Walk:
    """What binding one method's calls along its call paths found."""

    errors: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    abstract: list[str] = field(default_factory=list)
    paths: list[list[FoundMethod]] = field(default_factory=list)
    structure: list[FoundMethod] = field(default_factory=list)  # first forwards, unbound


def _walk(
    source: SignatureSource,
    target: str,
    family: str,
    variant: str,
    link: FoundMethod,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    path: list[FoundMethod],
    out: _Walk,
) -> None:
    path = [*path, link]
    if link.abstract:
        out.abstract.append(
            f"{describe_chain(path)} only raises NotImplementedError [{link.where}]"
        )
        return
    try:
        bound = bind_signature(
            link.signature, args, kwargs, target=link.owner, family=family, method=link.name
        )
    except ContractMismatch as exc:
        out.errors.append(f"{variant} call: {exc} [{link.where}]")
        return
    followed = False
    for fwd in link.forwards if len(path) < _MAX_LINKS else ():
        after = (fwd.after or link.owner) if fwd.how == "super" else None
        nxt = find_method(source, target, fwd.method, after=after)
        if nxt is None:
            start = f"after {class_label(after)} " if after else ""
            out.missing.append(
                f"{describe_chain(path)} forwards to {fwd.describe()}, which no class "
                f"{start}in the MRO of {class_label(target)} defines [{link.where}]"
            )
            continue
        if any((m.owner, m.name) == (nxt.owner, nxt.name) for m in path):
            continue  # a recursive hand-off: already bound on this path
        followed = True
        next_args, next_kwargs = pass_on(link.signature, bound, fwd)
        _walk(source, target, family, variant, nxt, next_args, next_kwargs, path, out)
    if not followed:
        out.paths.append(path)


def _first_path(source: SignatureSource, target: str, found: FoundMethod) -> list[FoundMethod]:
    """The call path through each method's first forwarding call, without binding (what the
    fixture's chain is compared with when a call does not bind)."""
    path = [found]
    while path[-1].forwards and len(path) < _MAX_LINKS:
        link, fwd = path[-1], path[-1].forwards[0]
        after = (fwd.after or link.owner) if fwd.how == "super" else None
        nxt = find_method(source, target, fwd.method, after=after)
        if nxt is None or any((m.owner, m.name) == (nxt.owner, nxt.name) for m in path):
            break
        path.append(nxt)
    return path


def _signatures(path: Sequence[FoundMethod]) -> list[str]:
    return [format_signature(m.signature) for m in path]


def check_target(
    source: SignatureSource,
    profile: FamilyProfile,
    archs: tuple[str, ...] = (),
) -> list[Finding]:
    """Bind every call the plugin makes to ``profile.target`` against ``source``."""
    target = profile.target
    if not source.has_class(target):
        return [Finding(target, archs, "*", "no_class", "module or class not in this checkout")]
    facts, differences = plan_facts(source, profile)
    findings: list[Finding] = []
    if differences:
        findings.append(Finding(target, archs, FACTS, "facts", "; ".join(differences)))
    served = ServedFacts(profile.facts.mrope, profile.facts.multimodal_kwargs)
    for plan in METHODS:
        if not plan.applies(facts):
            continue
        method = plan.method
        found = find_method(source, target, method)
        fixture_entry = profile.lookup(method)
        if found is None:
            listed = " (the fixture lists it)" if fixture_entry else ""
            if not source.complete:
                status: Status = "unlisted"
                detail = "no public signature data"
            elif plan.optional:
                status, detail = "absent", f"not defined{listed}"
            else:
                status, detail = "missing", f"not defined in the class or its bases{listed}"
            findings.append(Finding(target, archs, method, status, detail))
            continue
        form = facts.warmup_form(method) if method.startswith("warmup_") else None
        if form is not None and form.refusal is not None:
            # The plugin refuses this form at launch (platform), before any device opens.
            detail = f"{form.error(target)} [{found.where}]"
            findings.append(Finding(target, archs, method, "broken", detail))
            continue
        walk = _Walk(structure=_first_path(source, target, found))
        for call in plan_calls(method, facts, served):
            args, kwargs = call.as_call()
            _walk(source, target, profile.family, call.variant, found, args, kwargs, [], walk)
        findings.append(_verdict(profile, method, walk, fixture_entry is not None, archs))
    unresolved = source.unresolved_bases(target)
    return [_unresolved(f, unresolved) for f in findings]


def _verdict(
    profile: FamilyProfile, method: str, walk: _Walk, listed: bool, archs: tuple[str, ...]
) -> Finding:
    target = profile.target
    if walk.missing:
        return Finding(target, archs, method, "missing", "; ".join(dict.fromkeys(walk.missing)))
    if walk.abstract:
        return Finding(target, archs, method, "abstract", "; ".join(dict.fromkeys(walk.abstract)))
    read = _signatures(walk.paths[0]) if walk.paths else _signatures(walk.structure)
    expected = [format_signature(m.signature) for _, m in profile.call_chain(method)]
    changed = bool(read) and read != expected
    change = f"fixture {' -> '.join(expected) or '(none)'}, checkout {' -> '.join(read)}"
    owner = profile.lookup(method)
    known = profile.known_breaks.get(method) or (
        owner[0].known_breaks.get(method) if owner else None
    )
    if walk.errors and known and not changed:
        return Finding(target, archs, method, "known", known)
    if walk.errors:
        detail = "; ".join(dict.fromkeys(walk.errors))
        return Finding(
            target, archs, method, "broken", detail + (f" ({change})" if changed else "")
        )
    if changed:
        return Finding(target, archs, method, "drift", change)
    chain = describe_chain(walk.paths[0]) if walk.paths else method
    return Finding(target, archs, method, "ok", f"{chain}: {' -> '.join(read)}")


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


def _unresolved(finding: Finding, bases: Sequence[str]) -> Finding:
    """A "not found" verdict where part of the MRO is not in the source cannot say "missing"."""
    if not bases or finding.status not in ("missing", "absent"):
        return finding
    names = ", ".join(class_label(b) + f" ({b.partition(':')[0]})" for b in bases)
    detail = f"{finding.detail}; but the base {names} is not in this checkout, so it may define it"
    return Finding(finding.target, finding.archs, finding.method, "unresolved", detail)


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
        prog="python -m vllm_tt_plugin.contract.parity", description=__doc__.splitlines()[0]
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
    out(f"contract-parity: {root} against {args.fixture or DEFAULT_FIXTURE}")
    out(render(shown))
    bad = failures(findings, args.require_all)
    if bad:
        out(f"contract-parity: {len(bad)} failing finding(s)")
        return 1
    out("contract-parity: every call the plugin makes binds to this checkout")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
