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
reach it; every ``self.m(...)`` / ``super().m(...)`` those methods reach must resolve, every
``cls(...)`` bind to the ``__init__`` the MRO finds, every content keyword be read; facts built
from ``os.environ`` are checked for each value. Signatures are compared with the fixture
(``tt_metal_signatures.json`` beside this module):

- ``broken``: a plugin call does not bind (renamed, missing, unexpected argument) -- fails;
- ``missing``: a method the plugin needs, or one a pass-through forwards to, is not defined
  in the class or the rest of its MRO -- fails;
- ``abstract``: the call reaches a method whose body only raises ``NotImplementedError`` -- fails;
- ``known``: a call the fixture already records as not binding, signature unchanged;
- ``drift``: the signatures differ from the fixture but every call binds (re-curate);
- ``absent``: an optional method is not defined (the plugin falls back or skips the step);
- ``unresolved``: a method (or a pass-through's target) was not found, but a tt-metal base class
  of the target is not in the checkout, so it may be defined there -- fails (the adapter module
  would not import from this checkout either); also a ``self.m(...)`` not found where a base from
  outside tt-metal (not vLLM's interface mixins) may define it; and a name a class body or
  module binds other than by a plain ``def`` / assignment (``source_shape``: a metaclass,
  ``exec``, attribute hooks, ``del``, tuple targets...), whose object Python keeps is not read;
- ``dropped``: content the plugin sends in ``**kwargs`` (images, sampling parameters, histories,
  tables) that no method on the call's path reads -- fails;
- ``facts``: the class declares other facts than the fixture records (the class's are used);
- ``unreadable``: a module on the class's path does not decode or parse -- fails;
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
from typing import Any

from vllm_tt_plugin.contract import parity_diff
from vllm_tt_plugin.contract.attr_setters import attribute_setters, instance_attribute
from vllm_tt_plugin.contract.call_plan import (
    METHODS,
    PlanFacts,
    ServedFacts,
    derive_facts,
    plan_calls,
)
from vllm_tt_plugin.contract.composed import composed_errors
from vllm_tt_plugin.contract.fact_rules import device_penalties
from vllm_tt_plugin.contract.init_chain import expand_dispatch
from vllm_tt_plugin.contract.mro_bases import known, unplanned
from vllm_tt_plugin.contract.parity_branches import unfollowed_binding
from vllm_tt_plugin.contract.parity_content import replaced_keys
from vllm_tt_plugin.contract.parity_flow import consumed_controls, short_varargs, swapped
from vllm_tt_plugin.contract.parity_import import doubt_findings, import_raises
from vllm_tt_plugin.contract.parity_reach import bind_call, check_kwargs, host_failures_reached
from vllm_tt_plugin.contract.parity_reach import (
    lone_read_back_hook as _lone_read_back_hook,
)
from vllm_tt_plugin.contract.parity_render import internal_error as internal_error
from vllm_tt_plugin.contract.parity_render import render as render
from vllm_tt_plugin.contract.parity_rules import (
    FACTS,
    FAILING,
    Finding,
    Status,
    block_hooks_without_blocks,
    call_shape,
    instance_shadow,
    module_findings,
    not_shipped,
)
from vllm_tt_plugin.contract.parity_shapes import (
    WRITTEN,
    read_only_writes,
    result_shape,
    with_result,
)
from vllm_tt_plugin.contract.parity_values import value_checks
from vllm_tt_plugin.contract.parity_variants import merge_variants
from vllm_tt_plugin.contract.protocol_stubs import stub_errors
from vllm_tt_plugin.contract.return_forms import missing_pair
from vllm_tt_plugin.contract.returned_model import returned_findings
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
    ClassFacts,
    DuplicateKeyword,
    FixtureSource,
    FoundMethod,
    SignatureSource,
    class_label,
    describe_chain,
    find_method,
    lookup,
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

_MAX_LINKS = 8


def plan_facts(
    source: SignatureSource, profile: FamilyProfile, read: ClassFacts | None = None
) -> tuple[PlanFacts, list[str]]:
    """The planner's facts for ``profile.target`` as the plugin would read them from the
    source's class (``read``: one variant of them; default the source's first), and where the
    fixture's facts disagree with the class."""
    target = profile.target
    fixture = profile.facts

    def method(name: str) -> FoundMethod | None:  # an opaque base's maybe plans as absent
        found = find_method(source, target, name)
        return found if known(found) else None

    def takes(name: str, param: str) -> bool:
        found = method(name)
        return found is not None and param in found.signature.parameters

    def signature(name: str) -> inspect.Signature | None:
        found = method(name)
        return found.signature if found is not None else None

    if read is None:
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
        device_penalties=device_penalties(read.capabilities),
    )
    differences = [f"{name} not a literal: read as the default" for name in read.unreadable]
    if read.env_vars or read.unknown:
        return facts, differences  # the variants are described by check_target
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
    dropped: list[str] = field(default_factory=list)  # content no method on the path reads
    unresolved: list[str] = field(default_factory=list)  # calls a foreign base may define
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
    certain: bool = True,
) -> None:
    path = [*path, link]
    if link.coroutine and len(path) > 1:  # the caller gets a coroutine unless it awaits it
        out.unresolved.append(f"{describe_chain(path)} hands the call to an `async def` "
                              f"[{link.where}]")  # fmt: skip
        return
    if link.unresolved:  # `fails`: the decorators' order makes every call raise
        failed = out.errors if link.fails else out.unresolved
        failed.append(f"{describe_chain(path)}: {link.unresolved} [{link.where}]")
        return
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
    if certain and link.body is not None and link.body.raises:
        out.errors.append(f"{variant} call: {describe_chain(path)} always raises: "
                          f"{link.body.raises} [{link.where}]")  # fmt: skip
        return
    at = f"[{link.where}]"
    swaps = swapped(link.signature, bound)
    if swaps:
        out.errors.append(f"{variant} call: {describe_chain(path)}: {'; '.join(swaps)} {at}")
        return
    for why, sure in short_varargs(link, bound):
        (out.errors if sure and certain else out.unresolved).append(
            f"{variant} call: {describe_chain(path)} {why} {at}"
        )
    check_kwargs(source, target, link, bound, variant, path, out)
    followed = False
    forwards = expand_dispatch(source, target, link.forwards)  # self._impl set in __init__
    if forwards and len(path) >= _MAX_LINKS:  # never "ok" past what was followed
        out.unresolved.append(
            f"{describe_chain(path)} hands the call on ({forwards[0].describe()}) past a depth "
            f"of {_MAX_LINKS} links, deeper than the checker follows [{link.where}]"
        )
        forwards = ()
    for fwd in forwards:
        if fwd.unresolved:
            out.unresolved.append(
                f"{describe_chain(path)} hands {fwd.describe()} on: {fwd.unresolved} "
                f"[{link.where.rpartition(':')[0]}:{fwd.line}]"
            )
            continue
        after = (fwd.after or link.owner) if fwd.how == "super" else fwd.after
        nxt = fwd.link or lookup(source, target, fwd.how, fwd.method, fwd.after, link.owner)
        if nxt is None:
            start = f"after {class_label(after)} " if after and fwd.how == "super" else ""
            mro = class_label(after) if fwd.how == "class" and after else class_label(target)
            out.missing.append(
                f"{describe_chain(path)} forwards to {fwd.describe()}, which no class "
                f"{start}in the MRO of {mro} defines [{link.where}]"
            )
            continue
        if any((m.owner, m.name) == (nxt.owner, nxt.name) for m in path):
            continue  # a recursive hand-off: already bound on this path
        followed = True
        try:
            next_args, next_kwargs = pass_on(link.signature, bound, fwd)
        except DuplicateKeyword as exc:
            out.errors.append(
                f"{variant} call: {fwd.describe()} is given {exc.args[0]!r} twice (by name and "
                f"in **kwargs: a TypeError) [{link.where.rpartition(':')[0]}:{fwd.line}]"
            )
            continue
        for why in consumed_controls(link, bound, fwd, nxt, next_kwargs, kwargs):
            out.dropped.append(f"{variant} call: {describe_chain(path)} {why} {at}")
        replaced_keys(link, fwd, bound, f"{variant} call: {describe_chain(path)}", out)
        _walk(source, target, family, variant, nxt, next_args, next_kwargs, path, out,
              certain and fwd.certain)  # fmt: skip
    if not followed:
        out.paths.append(path)


def _first_path(source: SignatureSource, target: str, found: FoundMethod) -> list[FoundMethod]:
    """The call path through each method's first forwarding call, without binding (what the
    fixture's chain is compared with when a call does not bind)."""
    path = [found]
    while path[-1].forwards and len(path) < _MAX_LINKS:
        link, fwd = path[-1], path[-1].forwards[0]
        nxt = fwd.link or lookup(source, target, fwd.how, fwd.method, fwd.after, link.owner)
        if nxt is None or any((m.owner, m.name) == (nxt.owner, nxt.name) for m in path):
            break
        path.append(nxt)
    return path


def _signatures(path: Sequence[FoundMethod]) -> list[str]:
    """The methods' signatures (a module function a method hands on to is bound, but the
    fixture pins methods only)."""
    return [format_signature(m.signature) for m in path if m.kind != "function"]


_MAX_REACHED = 400


def _reach(
    source: SignatureSource, target: str, family: str, start: FoundMethod, out: _Walk
) -> None:
    """Every ``self.m(...)`` / ``cls.m(...)`` / ``super().m(...)`` reachable from ``start``
    (through the methods they reach, inside the source) must resolve in the MRO, and the
    arguments of every ``cls(...)`` must bind to the ``__init__`` the MRO finds."""
    has_attribute = instance_attribute(source)  # rt45g R08: the loader's instance too
    foreign: Callable[[str], list[str]] = getattr(source, "foreign_bases", lambda target: [])
    queue: list[tuple[FoundMethod, list[FoundMethod]]] = [(start, [start])]
    seen = {(start.owner, start.name)}
    while queue and len(seen) < _MAX_REACHED:
        method, chain = queue.pop(0)
        body = method.body
        if body is None:
            continue
        nexts: list[FoundMethod | None] = [
            f.link if f.how == "function" else
            lookup(source, target, f.how, f.method, f.after, method.owner)
            for f in method.forwards
        ]  # fmt: skip
        for at_line, why in body.unresolved:
            out.unresolved.append(
                f"{describe_chain(chain)}: {why} [{method.where.rpartition(':')[0]}:{at_line}]"
            )
        host_failures_reached(source, target, method, chain, out)
        for at_line, module, names in (*body.plugin_imports, *method.scan.plugin_imports):
            lacking = not_shipped(module, names)
            if lacking:
                out.errors.append(
                    f"{describe_chain(chain)} imports {lacking}, which this plugin does not "
                    f"ship (an ImportError on a TT host) [{method.where.rpartition(':')[0]}:"
                    f"{at_line}]"
                )
        for call in body.calls:
            if call.guarded:
                continue
            after = (call.after or method.owner) if call.how == "super" else call.after
            nxt = lookup(source, target, call.how, call.method, call.after, method.owner)
            if nxt is not None and not known(nxt):
                out.unresolved.append(f"{describe_chain(chain)} calls {call.describe()}: "
                                      f"{nxt.unresolved} [{method.where.rpartition(':')[0]}:"
                                      f"{call.line}]")  # fmt: skip
                continue
            if nxt is None:
                if call.how == "self" and has_attribute(target, call.method):
                    setters = attribute_setters(source, target, call.method)
                    if setters and "" not in setters:  # set only where it may not have run
                        out.unresolved.append(
                            f"{describe_chain(chain)} calls {call.describe()}, an attribute "
                            f"only set in {', '.join(setters)} [{method.where.rpartition(':')[0]}:"
                            f"{call.line}]"
                        )
                    continue  # an attribute holding a callable
                others = foreign(target)
                where = f"after {class_label(after)} " if after and call.how == "super" else ""
                line = (
                    f"{describe_chain(chain)} calls {call.describe()}, which no class {where}in "
                    f"the MRO of {class_label(target)} defines"
                )
                at = f"[{method.where.rpartition(':')[0]}:{call.line}]"
                if others:  # a base this check does not read may define it: cannot say missing
                    out.unresolved.append(
                        f"{line}; but the base {', '.join(others)} from outside tt-metal may "
                        f"define it {at}"
                    )
                else:
                    out.missing.append(f"{line} {at}")
                continue
            bind_call(
                lambda link, a, k, variant, inner, certain: _walk(
                    source, target, family, variant, link, a, k, [], inner, certain
                ),
                _Walk, method, chain, call, nxt, out,
            )  # fmt: skip
            nexts.append(nxt)
        for construct in (*body.constructs, *method.scan.builds):
            _construct(source, target, family, method, chain, construct, out)
        for nxt in nexts:
            if nxt is None or (nxt.owner, nxt.name) in seen:
                continue
            seen.add((nxt.owner, nxt.name))
            queue.append((nxt, [*chain, nxt]))
    if queue:  # methods left unread: their calls are not checked
        out.unresolved.append(
            f"{describe_chain([start])} reaches more than {_MAX_REACHED} methods, "
            f"more than the checker follows (first not read: {describe_chain(queue[0][1])})"
        )


def _construct(
    source: SignatureSource,
    target: str,
    family: str,
    method: FoundMethod,
    chain: list[FoundMethod],
    construct: Any,
    out: _Walk,
) -> None:
    where = f"{method.where.rpartition(':')[0]}:{construct.line}"
    target = getattr(construct, "target", "") or target  # a class built by name (source_scan)
    if getattr(construct, "unresolved", ""):
        out.unresolved.append(f"{describe_chain(chain)} {construct.unresolved} [{where}]")
        return
    if construct.starred:  # *x / **x the checker cannot count: never "ok"
        out.unresolved.append(
            f"{describe_chain(chain)} builds cls(...) with arguments the checker cannot count "
            f"(*x / **x) [{where}]"
        )
        return
    left: list[str] = getattr(source, "abstract_left", lambda t: [])(target)
    if left:  # abc refuses to build a class with abstract methods left
        out.errors.append(
            f"{describe_chain(chain)} builds cls(...), but {class_label(target)} leaves the "
            f"abstract method(s) {', '.join(left)} unimplemented (TypeError) [{where}]"
        )
        return
    init = find_method(source, target, "__init__")
    args = tuple(f"arg{i}" for i in range(construct.positional))
    kwargs = {k: k for k in construct.keywords}
    if init is None:
        unresolved = source.unresolved_bases(target)
        others: list[str] = getattr(source, "foreign_bases", lambda t: [])(target)
        if (args or kwargs) and not unresolved and not others:
            out.errors.append(
                f"{describe_chain(chain)} builds cls(...) with arguments, but no class in the "
                f"MRO of {class_label(target)} defines __init__ (object() takes none) [{where}]"
            )
        return
    inner = _Walk()
    _walk(source, target, family, f"cls(...) [{where}]", init, args, kwargs, [], inner)
    out.errors += [f"{describe_chain(chain)} builds the model: {e}" for e in inner.errors]
    out.missing += inner.missing
    out.abstract += inner.abstract
    out.unresolved += inner.unresolved  # an __init__ the checker cannot read: never "ok"


def check_target(
    source: SignatureSource,
    profile: FamilyProfile,
    archs: tuple[str, ...] = (),
    depth: int = 0,
) -> list[Finding]:
    """Bind every call the plugin makes to ``profile.target`` against ``source`` (for each
    value of the facts the class's declarations can take), and to every other class whose
    instance ``initialize_vllm_model`` returns (``depth``: how many such hops were taken)."""
    target = profile.target
    begin: Callable[[], None] = getattr(source, "begin_target", lambda: None)
    begin()
    if not source.has_class(target):
        unreadable = _unreadable(source, target, archs)
        return (
            unreadable
            or unfollowed_binding(source, profile, archs, check_target)
            or [Finding(target, archs, "*", "no_class", "module or class not in this checkout")]
        )
    variants_of: Callable[[str], list[ClassFacts]] | None = getattr(
        source, "class_fact_variants", None
    )
    variants: list[ClassFacts | None] = list(variants_of(target)) if variants_of else [None]
    if len(variants) == 1:
        findings = _check_variant(source, profile, archs, variants[0])
    else:
        per_variant = [(v, _check_variant(source, profile, archs, v)) for v in variants]
        findings = merge_variants(target, archs, per_variant)
    first = variants[0]
    doubt = next((v.doubt for v in variants if v is not None and v.doubt), "")
    if doubt:
        findings.insert(0, Finding(target, archs, "decode_input_update_contract", "unresolved",
                                   f"{doubt}: the plugin plans the decode call on the loaded "
                                   "instance's version, which is not evaluated"))  # fmt: skip
    refusals = {
        (fact, f"[{v.variant}] {error}" if v.variant else error): None
        for v in variants if v is not None for fact, error in v.refusals
    }  # fmt: skip
    for fact, error in reversed(list(refusals)):
        findings.insert(0, Finding(target, archs, fact, "broken",
                                   f"{error}: the plugin refuses the class at launch"))  # fmt: skip
    if first is not None and (first.env_vars or first.unknown):
        labels = "; ".join(f"[{v.variant}]" for v in variants if v is not None)
        read = []
        if first.env_vars:
            read.append(f"the class's facts read the environment ({', '.join(first.env_vars)})")
        if first.unknown:
            read.append(f"cannot evaluate {', '.join(first.unknown)}")
        detail = f"{' and '.join(read)}: every call checked for each variant: {labels}"
        findings.insert(0, Finding(target, archs, FACTS, "facts", detail))
    unresolved = source.unresolved_bases(target)
    findings = [_unresolved(f, unresolved) for f in findings]
    composes: Callable[[str], bool] = getattr(source, "composes", lambda target: False)
    if composes(target):  # __getattr__ hands unknown names to another object: cannot say missing
        findings = [
            Finding(f.target, f.archs, f.method, "unresolved",
                    f"{f.detail}; but the class defines __getattr__, which may provide it")
            if f.status == "missing" else f
            for f in findings
        ]  # fmt: skip
    findings = [*import_raises(source, target, archs), *findings]
    writes = [
        Finding(target, archs, WRITTEN[0], st, d) for st, d in read_only_writes(source, target)
    ]
    findings = module_findings(source, target, archs) + writes + findings
    found = _unreadable(source, target, archs) + doubt_findings(source, target, archs, findings)
    return found + returned_findings(source, profile, archs, depth, check_target)


def _unreadable(source: SignatureSource, target: str, archs: tuple[str, ...]) -> list[Finding]:
    """A module on the target's path that does not parse: the adapter would not import."""
    touched: Callable[[], list[str]] = getattr(source, "unreadable_touched", lambda: [])
    return [Finding(target, archs, "(source)", "unreadable", d) for d in touched()]


def _check_variant(
    source: SignatureSource,
    profile: FamilyProfile,
    archs: tuple[str, ...],
    read: ClassFacts | None,
) -> list[Finding]:
    target = profile.target
    facts, differences = plan_facts(source, profile, read)
    findings: list[Finding] = []
    if differences:
        findings.append(Finding(target, archs, FACTS, "facts", "; ".join(differences)))
    served = ServedFacts(profile.facts.mrope, profile.facts.multimodal_kwargs)
    caps = (
        read or getattr(source, "class_facts", lambda t: None)(target) or ClassFacts()
    ).capabilities
    for plan in METHODS:
        if not plan.applies(facts):
            lone = _lone_read_back_hook(source, target, plan.method)
            why = unplanned(find_method(source, target, plan.method), lone)
            if why is not None:
                findings.append(Finding(target, archs, plan.method, *why))
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
        shape = call_shape(method, found)
        if shape:
            findings.append(Finding(target, archs, method, "broken", shape))
            continue
        shadow = instance_shadow(source, target, method)
        if shadow:
            findings.append(Finding(target, archs, method, "unresolved", shadow))
            continue
        form = facts.warmup_form(method) if method.startswith("warmup_") else None
        if form is not None and form.refusal is not None:
            # The plugin refuses this form at launch (platform), before any device opens.
            detail = f"{form.error(target)} [{found.where}]"
            findings.append(Finding(target, archs, method, "broken", detail))
            continue
        walk = _Walk(structure=_first_path(source, target, found))
        calls = plan_calls(method, facts, served)
        for call in calls:
            args, kwargs = call.as_call()
            _walk(source, target, profile.family, call.variant, found, args, kwargs, [], walk)
        value_checks(source, target, method, found, calls, caps, walk)
        walk.unresolved += missing_pair(source, target, method, found, served.mrope)
        _reach(source, target, profile.family, found, walk)
        composed_errors(source, target, profile.family, [found, *(p[-1] for p in walk.paths)], walk)
        walk.errors += stub_errors(source, method, [found, *(p[-1] for p in walk.paths)])
        verdict = _verdict(profile, method, walk, fixture_entry is not None, archs)
        findings.append(with_result(verdict, result_shape(source, method, found)))
    block = block_hooks_without_blocks(source, target, facts, archs)
    if block is not None:
        findings.append(block)
    return findings


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
    if walk.dropped:
        return Finding(target, archs, method, "dropped", "; ".join(dict.fromkeys(walk.dropped)))
    if walk.unresolved:
        detail = "; ".join(dict.fromkeys(walk.unresolved))
        return Finding(target, archs, method, "unresolved", detail)
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
    parser.add_argument(
        "--diff",
        nargs=2,
        type=Path,
        metavar=("OLD", "NEW"),
        help="which targets change verdict between two trees (checkouts or skeletons), and why",
    )
    parser.add_argument(
        "--table", type=Path, metavar="TREE", help="one tree's verdicts as a Markdown table"
    )
    args = parser.parse_args(argv)
    out: Callable[[str], None] = print
    try:
        profiles = load_profiles(args.fixture)
        targets = registry_targets(args.arch)
    except FixtureError as exc:
        print(f"contract-parity: {exc}", file=sys.stderr)
        return 2
    if args.diff or args.table:
        trees: list[Path] = list(args.diff) if args.diff else [args.table]
        for tree in trees:
            if not (tree / "models").is_dir():
                print(
                    f"contract-parity: {tree} is not a tt-metal tree (no models/)", file=sys.stderr
                )
                return 2
        try:
            found = [check(CheckoutReader(tree), profiles, targets) for tree in trees]
        except Exception as exc:
            print(internal_error(exc), file=sys.stderr)
            return 2
        mode = "diff" if args.diff else "table"
        for line in parity_diff.run(mode, trees, found, targets, FAILING):
            out(line)
        return parity_diff.exit_code(mode, found, targets, FAILING)
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
    try:
        findings = check(CheckoutReader(root), profiles, targets)
    except Exception as exc:
        print(internal_error(exc), file=sys.stderr)
        return 2
    shown = findings if args.verbose else [f for f in findings if f.status != "ok"]
    out(f"contract-parity: {root} against {args.fixture or DEFAULT_FIXTURE}")
    out(render(shown))
    bad = failures(findings, args.require_all)
    if bad:
        out(f"contract-parity: {len(bad)} failing finding(s)")
        return 1
    if all(f.status == "no_class" for f in findings):  # a wrong TT_METAL_HOME binds nothing
        out(
            f"contract-parity: 0 targets checked: none of the {len(targets)} registry target(s) "
            f"is in {root} (is TT_METAL_HOME the tt-metal checkout?)"
        )
        return 1
    out("contract-parity: every call the plugin makes binds to this checkout")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
