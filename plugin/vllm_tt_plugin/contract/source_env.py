"""Facts a class declares from the environment: ``model_capabilities`` or
``decode_input_update_contract`` built from ``os.environ`` are evaluated for every value worth
trying (the strings the declaration compares the variable with, ``0``/``1``, unset); what cannot
be evaluated is reported unknown and both values of the flag are checked (``EnvFacts``, a
mixin of ``source.CheckoutReader``)."""

from __future__ import annotations

import abc
import ast
import dataclasses
import itertools
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_tt_plugin.contract.class_caps import body_caps
from vllm_tt_plugin.contract.fact_alias import fact_exposure
from vllm_tt_plugin.contract.fact_rules import (
    capability_refusal,
    contract_version,
    device_penalties,
)
from vllm_tt_plugin.contract.fact_values import NOT_HANDLED, special_value
from vllm_tt_plugin.contract.mro_bases import hidden_fact
from vllm_tt_plugin.contract.parsed_module import ParsedModule

FACT_NAMES = ("decode_input_update_contract", "model_capabilities")

_MAX_DEPTH = 20
UNREADABLE: Any = object()


@dataclass(frozen=True)
class ClassFacts:
    """The attributes the plugin reads from a class, as declared in its source."""

    decode_contract: int = 0  # decode_input_update_contract (0 when not declared)
    capabilities: Mapping[str, Any] = field(default_factory=dict)  # model_capabilities
    unreadable: tuple[str, ...] = ()  # declared but not a literal: named here
    # Facts that depend on the environment (os.environ) or could not be evaluated: the
    # variant's label ("QWEN36_X=1", "supports_sample_on_device unknown: True"), "" otherwise.
    variant: str = ""
    env_vars: tuple[str, ...] = ()  # the variables the facts depend on
    unknown: tuple[str, ...] = ()  # facts that could not be evaluated (every value checked)
    # (fact, the plugin's error) for each value the plugin refuses at launch or load
    refusals: tuple[tuple[str, str], ...] = ()
    doubt: str = ""  # why decode_input_update_contract may not be the class-level value

    @property
    def device_sampling(self) -> bool:
        return self.capabilities.get("supports_sample_on_device") is True

    @property
    def output_tokens_per_step(self) -> int:
        value = self.capabilities.get("output_tokens_per_step", 1)
        return value if isinstance(value, int) else 1


class EnvFacts(abc.ABC):
    """The environment-aware evaluation of a class's fact declarations; the reader it is mixed
    into supplies the three lookups below."""

    @abc.abstractmethod
    def _module(self, module: str) -> ParsedModule | None: ...

    @abc.abstractmethod
    def attribute_expr(self, target: str, name: str) -> tuple[ParsedModule, ast.expr] | None: ...

    @abc.abstractmethod
    def attribute_doubt(self, target: str, name: str) -> str: ...

    @abc.abstractmethod
    def attribute_shape(self, target: str, name: str) -> str:
        """ "def" when the first class along the MRO to bind ``name`` binds a def (a method or
        a ``@property``), "changed" when module-level code touches ``Class.name``, else ""."""

    def _env_eval(
        self, module: ParsedModule, expr: ast.expr, env: Mapping[str, str], depth: int = 0
    ) -> Any:
        """``expr`` evaluated with ``env`` as ``os.environ``: literals, module constants,
        ``os.environ.get`` / ``os.getenv`` / ``os.environ[...]``, comparisons, boolean logic,
        ``int()`` / ``bool()`` / ``str.lower()``..., conditional expressions, containers and
        calls of argument-less module functions built from those. Anything else: _Unknown."""
        if depth > _MAX_DEPTH:
            raise _Unknown

        def ev(e: ast.expr) -> Any:
            return self._env_eval(module, e, env, depth + 1)

        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, ast.Name):
            if expr.id in module.assigns:
                if not constant(module, expr.id):
                    raise _Unknown
                return self._env_eval(module, module.assigns[expr.id], env, depth + 1)
            imported = module.imports.get(expr.id, "")
            source_name, _, name = imported.partition(":")
            other = self._module(source_name) if name else None
            if other is not None and name in other.assigns and constant(other, name):
                return self._env_eval(other, other.assigns[name], env, depth + 1)
            raise _Unknown
        env_read = _env_read(module, expr)
        if env_read is not None:
            key_expr, default_expr, subscript = env_read
            key = ev(key_expr)
            if not isinstance(key, str):
                raise _Unknown
            if key in env:
                return env[key]
            if subscript:
                raise _Unknown  # a KeyError where it is read
            return ev(default_expr) if default_expr is not None else None
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            items = [ev(e) for e in expr.elts]
            return (
                set(items)
                if isinstance(expr, ast.Set)
                else (tuple(items) if isinstance(expr, ast.Tuple) else items)
            )
        if isinstance(expr, ast.Dict):
            out: dict[Any, Any] = {}
            for k, v in zip(expr.keys, expr.values, strict=True):
                if k is None:
                    inner = ev(v)
                    if not isinstance(inner, dict):
                        raise _Unknown
                    out.update(inner)
                else:
                    out[ev(k)] = ev(v)
            return out
        if isinstance(expr, ast.BoolOp):
            values = expr.values
            if isinstance(expr.op, ast.And):
                result: Any = True
                for v in values:
                    result = ev(v)
                    if not result:
                        return result
                return result
            for v in values:
                result = ev(v)
                if result:
                    return result
            return result
        if isinstance(expr, ast.UnaryOp):
            operand = ev(expr.operand)
            if isinstance(expr.op, ast.Not):
                return not operand
            if isinstance(expr.op, ast.USub) and isinstance(operand, (int, float)):
                return -operand
            raise _Unknown
        if isinstance(expr, ast.IfExp):
            return ev(expr.body) if ev(expr.test) else ev(expr.orelse)
        if isinstance(expr, ast.Compare):
            left = ev(expr.left)
            for op, comp in zip(expr.ops, expr.comparators, strict=True):
                right = ev(comp)
                ok = _compare(op, left, right)
                if not ok:
                    return False
                left = right
            return True
        special = special_value(self, module, expr, ev, env, depth)  # cast, enums, ChainMap
        if special is not NOT_HANDLED:
            return special
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and not expr.keywords:
                owner = ev(func.value)
                if isinstance(owner, str) and func.attr in _STR_METHODS:
                    args = [ev(a) for a in expr.args]
                    return getattr(owner, func.attr)(*args)
                raise _Unknown
            if isinstance(func, ast.Name) and func.id in _CONVERSIONS and len(expr.args) == 1:
                value = ev(expr.args[0])
                try:
                    return _CONVERSIONS[func.id](value)
                except (TypeError, ValueError) as exc:
                    raise _Unknown from exc
            if isinstance(func, ast.Name) and not expr.args and not expr.keywords:
                fn = module.functions.get(func.id)
                if fn is not None:
                    return self._env_run(module, fn.body, dict(env), {}, depth + 1)
            inner = _proxied(module, expr)
            if inner is not None:  # a read-only view: not a dict to the plugin
                value = ev(inner)
                if isinstance(value, dict):
                    return types.MappingProxyType(value)
        raise _Unknown

    def _env_run(
        self,
        module: ParsedModule,
        body: list[ast.stmt],
        env: Mapping[str, str],
        local: dict[str, Any],
        depth: int,
    ) -> Any:  # fmt: skip
        """The return value of an argument-less module function's body (assignments, ifs,
        return); its locals shadow the module's names."""
        shadow = dataclasses.replace(module, assigns={**module.assigns})
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring
            if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
                value = self._env_eval(shadow, stmt.value, env, depth + 1)
                for t in stmt.targets:
                    assert isinstance(t, ast.Name)
                    shadow.assigns[t.id] = ast.Constant(value)
                continue
            if isinstance(stmt, ast.Return):
                return (
                    None
                    if stmt.value is None
                    else self._env_eval(shadow, stmt.value, env, depth + 1)
                )
            if isinstance(stmt, ast.If):
                branch = (
                    stmt.body if self._env_eval(shadow, stmt.test, env, depth + 1) else stmt.orelse
                )
                inner = dataclasses.replace(shadow)
                result = self._env_run(inner, branch, env, local, depth + 1)
                if result is not _NO_RETURN:
                    return result
                continue
            raise _Unknown
        return _NO_RETURN

    def _env_vars(
        self, module: ParsedModule, expr: ast.expr, depth: int = 0
    ) -> dict[str, set[str]]:
        """The environment variables ``expr`` reads (through module functions too), each with
        the strings the expression compares it with (the values worth trying)."""
        found: dict[str, set[str]] = {}
        if depth > _MAX_DEPTH:
            return found
        # The values worth trying: what the expression compares with (a dict's keys are not
        # values of a variable; a number compared is tried as its text).
        keys = {id(k) for n in ast.walk(expr) if isinstance(n, ast.Dict) for k in n.keys if k}
        strings = {n.value for n in ast.walk(expr) if isinstance(n, ast.Constant)
                   and isinstance(n.value, str) and id(n) not in keys}  # fmt: skip
        strings |= {
            str(c.value) for n in ast.walk(expr) if isinstance(n, ast.Compare)
            for c in (n.left, *n.comparators) if isinstance(c, ast.Constant)
            and isinstance(c.value, int) and not isinstance(c.value, bool)
        }  # fmt: skip
        for node in ast.walk(expr):
            if not isinstance(node, ast.expr):
                continue
            read = _env_read(module, node)
            if read is not None:
                try:
                    key = self._env_eval(module, read[0], {})
                except _Unknown:
                    continue
                if isinstance(key, str):
                    found.setdefault(key, set()).update(strings - {key})
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                fn = module.functions.get(node.func.id)
                if fn is not None:
                    for stmt in fn.body:
                        for sub in ast.walk(stmt):
                            if isinstance(sub, ast.expr):
                                for var, values in self._env_vars(module, sub, depth + 1).items():
                                    found.setdefault(var, set()).update(values)
            elif isinstance(node, ast.Name) and node.id in module.assigns and depth < 3:
                for var, values in self._env_vars(
                    module, module.assigns[node.id], depth + 1
                ).items():
                    found.setdefault(var, set()).update(values)
        return found

    def _fact_values(
        self, target: str, name: str
    ) -> tuple[list[tuple[dict[str, str], Any]], tuple[str, ...]]:
        """``[(env, value)]`` for every environment worth trying (one, ``{}``, when the
        declaration reads none; ``UNREADABLE`` where it cannot be evaluated), and the
        variables read."""
        found = self.attribute_expr(target, name)
        if found is None:
            return [({}, None)], ()
        module, expr = found
        variables = self._env_vars(module, expr)
        names = sorted(variables)
        choices: list[list[str | None]] = [
            [None, *sorted(variables[v] | {"0", "1"})] for v in names
        ]
        combos: list[dict[str, str]] = []
        for values in itertools.product(*choices) if names else [()]:
            combos.append({k: v for k, v in zip(names, values, strict=True) if v is not None})
            if len(combos) >= _MAX_ENV_COMBOS:
                break
        out: list[tuple[dict[str, str], Any]] = []
        for env in combos:
            try:
                value = self._env_eval(module, expr, env)
            except _Unknown:
                value = _dict_entries(self, module, expr, env)
            out.append((env, value))
        return out, tuple(names)

    def class_fact_variants(self, target: str) -> list[ClassFacts]:
        """The class's facts for every value its declarations can take: one entry when they are
        literals; one per distinct outcome when they read ``os.environ`` (labelled with the
        environment); both values of a flag that cannot be evaluated (labelled unknown). Each
        value goes through the plugin's own rules (``fact_rules``): what it refuses is named."""
        owner = target.rpartition(":")[2]
        contracts, contract_vars = self._fact_values(target, "decode_input_update_contract")
        caps_values, caps_vars = self._fact_values(target, "model_capabilities")
        # The plugin plans on the loaded instance's version: set anywhere but the class body,
        # it is not a fact here (both versions are checked, and the finding is unresolved).
        doubt = self.attribute_doubt(target, "decode_input_update_contract")
        if doubt:
            contracts, contract_vars = [({}, UNREADABLE)], ()
        hidden = {n: hidden_fact(self, target, n) for n in FACT_NAMES}  # an opaque base first
        if hidden["decode_input_update_contract"]:
            contracts, contract_vars = [({}, UNREADABLE)], ()
        if not hidden["model_capabilities"]:  # the dict changed through another name
            hidden["model_capabilities"] = fact_exposure(self, target)
        shape = self.attribute_shape(target, "model_capabilities")
        opaque_base = hidden_fact(self, target, "model_capabilities")
        stepped = body_caps(self, target) if not opaque_base else None
        unread = any(v is UNREADABLE for _, v in caps_values)
        if stepped is not None and (hidden["model_capabilities"] or shape == "changed" or unread):
            hidden["model_capabilities"], shape = "", ""  # built in steps, evaluated (IM02)
            caps_values, caps_vars = [({}, stepped.caps)], ()
        if hidden["model_capabilities"]:
            caps_values, caps_vars = [({}, UNREADABLE)], ()
        shape_refusal = ""
        if shape == "def":
            # The plugin reads it from the class: a function or property object, not a dict.
            shape_refusal = (
                f"{owner}.model_capabilities is a method or property, not a dict "
                "(CapabilityError: must be a dict)"
            )
            caps_values = [({}, UNREADABLE)]
        elif shape == "changed":  # set or changed after the class body: not known here
            caps_values = [({}, UNREADABLE)]
        variables = tuple(dict.fromkeys((*contract_vars, *caps_vars)))
        variants: list[ClassFacts] = []
        seen: set[tuple[Any, ...]] = set()
        for (c_env, contract), (k_env, caps) in itertools.product(contracts, caps_values):
            if any(c_env.get(k, v) != v for k, v in k_env.items()):
                continue  # two different values of one variable
            env = {**c_env, **k_env}
            unknown: list[str] = []
            refusals: list[tuple[str, str]] = []
            if shape_refusal:
                refusals.append(("model_capabilities", shape_refusal))
            contract_options: list[int]
            if contract is None:
                contract_options = [0]
            elif contract is UNREADABLE:
                unknown.append(_named("decode_input_update_contract", hidden))
                contract_options = [0, 1]
            else:
                version, error = contract_version(owner, contract)
                if error:
                    refusals.append(("decode_input_update_contract", error))
                contract_options = [version]
            sampling_options: list[bool | None] = [None]
            if caps is UNREADABLE:
                unknown.append(_named("model_capabilities", hidden))
                caps = {}
                sampling_options = [False, True]
            else:
                error = capability_refusal(owner, caps, UNREADABLE)
                if error:
                    refusals.append(("model_capabilities", error))
                if not isinstance(caps, dict):
                    caps = {}
                unknown += [
                    f"model_capabilities[{k!r}]" for k, v in caps.items() if v is UNREADABLE
                ]
                if caps.get("supports_sample_on_device") is UNREADABLE:
                    sampling_options = [False, True]
                caps = {k: v for k, v in caps.items() if v is not UNREADABLE}
            for version, sampling in itertools.product(contract_options, sampling_options):
                facts_caps = dict(caps)
                label_parts = [f"{k}={v}" for k, v in sorted(env.items())]
                if variables and not env:
                    label_parts.append(f"{', '.join(variables)} unset")
                if sampling is not None:
                    facts_caps["supports_sample_on_device"] = sampling
                    label_parts.append(f"supports_sample_on_device unknown: checked {sampling}")
                if len(contract_options) > 1:
                    label_parts.append(f"decode_input_update_contract unknown: checked {version}")
                facts = ClassFacts(
                    version, facts_caps, (), "; ".join(label_parts), variables,
                    tuple(dict.fromkeys(unknown)), tuple(refusals), doubt,
                )  # fmt: skip
                # Every outcome the plugin plans (or refuses) differently is checked.
                key = (
                    version, facts.device_sampling, facts.output_tokens_per_step,
                    device_penalties(facts_caps), facts.refusals,
                )  # fmt: skip
                if key in seen:
                    continue
                seen.add(key)
                variants.append(facts)
        return variants

    def class_facts(self, target: str) -> ClassFacts:
        return self.class_fact_variants(target)[0]


def _named(fact: str, hidden: Mapping[str, str]) -> str:
    return f"{fact} ({hidden[fact]})" if hidden.get(fact) else fact


def constant(module: ParsedModule, name: str) -> bool:
    """A module-level name whose one assignment is its value: not changed in place
    (``CAPS["k"] = v``, ``CAPS.update(...)``) nor assigned twice (a class body may read either)."""
    return name not in module.mutated and name not in module.rebound


class _Unknown(Exception):
    """An expression the checker cannot evaluate."""


_NO_RETURN = object()
_MAX_ENV_COMBOS = 64
_STR_METHODS = {"lower", "upper", "strip", "lstrip", "rstrip", "casefold", "startswith", "endswith",
                "isdigit"}  # fmt: skip
_CONVERSIONS: dict[str, Any] = {"int": int, "bool": bool, "str": str, "float": float}


def _compare(op: ast.cmpop, left: Any, right: Any) -> bool:
    try:
        if isinstance(op, ast.Eq):
            return bool(left == right)
        if isinstance(op, ast.NotEq):
            return bool(left != right)
        if isinstance(op, ast.In):
            return left in right
        if isinstance(op, ast.NotIn):
            return left not in right
        if isinstance(op, ast.Is):
            return left is right
        if isinstance(op, ast.IsNot):
            return left is not right
        if isinstance(op, ast.Lt):
            return bool(left < right)
        if isinstance(op, ast.LtE):
            return bool(left <= right)
        if isinstance(op, ast.Gt):
            return bool(left > right)
        if isinstance(op, ast.GtE):
            return bool(left >= right)
    except TypeError as exc:
        raise _Unknown from exc
    raise _Unknown


def _env_read(
    module: ParsedModule, expr: ast.expr
) -> tuple[ast.expr, ast.expr | None, bool] | None:
    """``os.environ.get(K, D)`` / ``os.getenv(K, D)`` / ``environ.get`` / ``os.environ[K]``:
    (key, default, by subscript)."""

    def is_environ(e: ast.expr) -> bool:
        if isinstance(e, ast.Attribute) and e.attr == "environ":
            return isinstance(e.value, ast.Name) and module.imports.get(e.value.id) == "os"
        return isinstance(e, ast.Name) and module.imports.get(e.id) == "os:environ"

    if isinstance(expr, ast.Subscript) and is_environ(expr.value):
        return expr.slice, None, True
    if not isinstance(expr, ast.Call) or not expr.args:
        return None
    func = expr.func
    default = expr.args[1] if len(expr.args) > 1 else None
    if isinstance(func, ast.Attribute) and func.attr == "get" and is_environ(func.value):
        return expr.args[0], default, False
    if (
        isinstance(func, ast.Attribute)
        and func.attr == "getenv"
        and isinstance(func.value, ast.Name)
        and module.imports.get(func.value.id) == "os"
    ) or (isinstance(func, ast.Name) and module.imports.get(func.id) == "os:getenv"):
        return expr.args[0], default, False
    return None


def _dict_entries(
    reader: EnvFacts, module: ParsedModule, expr: ast.expr, env: Mapping[str, str]
) -> Any:
    """A dict literal evaluated entry by entry (an entry that cannot be: ``UNREADABLE``);
    ``UNREADABLE`` for anything else."""
    inner = _proxied(module, expr)
    if inner is not None:
        entries = _dict_entries(reader, module, inner, env)
        return types.MappingProxyType(entries) if isinstance(entries, dict) else UNREADABLE
    if not isinstance(expr, ast.Dict) or any(k is None for k in expr.keys):
        return UNREADABLE
    out: dict[Any, Any] = {}
    for k, v in zip(expr.keys, expr.values, strict=True):
        assert k is not None
        try:
            key = reader._env_eval(module, k, env)
        except _Unknown:
            return UNREADABLE
        try:
            out[key] = reader._env_eval(module, v, env)
        except _Unknown:
            out[key] = UNREADABLE
    return out


def _proxied(module: ParsedModule, expr: ast.expr) -> ast.expr | None:
    """The mapping of ``types.MappingProxyType(mapping)`` (None for any other expression)."""
    if not isinstance(expr, ast.Call) or len(expr.args) != 1 or expr.keywords:
        return None
    func = expr.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        named = func.attr == "MappingProxyType" and module.imports.get(func.value.id) == "types"
    else:
        named = isinstance(func, ast.Name) and (
            module.imports.get(func.id) == "types:MappingProxyType"
        )
    return expr.args[0] if named else None
