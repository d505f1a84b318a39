"""vLLM parity: the vLLM names the plugin relies on still exist, with the shape it relies on.

``fixtures/vllm/names.json`` lists every name a docs/VLLM_PATCHES.md entry depends on and every
private vLLM attribute the plugin touches (as tests/stub_parity pins ttnn). Each is resolved in
the installed vLLM and checked for its kind and the leading parameters the plugin passes. The
list is checked both ways: against the ledger (every live entry is covered, or says why it names
nothing) and against the plugin's code (every private vLLM attribute it reads, calls, overrides or
sets is listed).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import inspect
import json
import pkgutil
import re
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import vllm

import vllm_tt_plugin

REPO = Path(__file__).resolve().parents[2]
NAMES_FILE = REPO / "fixtures" / "vllm" / "names.json"
LEDGER = REPO / "docs" / "VLLM_PATCHES.md"
DATA: dict[str, Any] = json.loads(NAMES_FILE.read_text())
ENTRIES: list[dict[str, Any]] = DATA["names"]
KINDS = (
    "function",
    "method",
    "classmethod",
    "class",
    "attribute",
    "annotation",
    "instance_attribute",
    "field",
    "env",
)


def split(name: str) -> tuple[str, list[str]]:
    module, _, qualname = name.partition(":")
    return module, qualname.split(".")


def resolve_owner(name: str) -> tuple[Any, str]:
    """The object holding the last part of ``name`` (a module or a class) and that part."""
    module, parts = split(name)
    owner: Any = importlib.import_module(module)
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1]


def is_private(attr: str) -> bool:
    return attr.startswith("_") and not attr.startswith("__")


def canonical(owner: Any, attr: str) -> str | None:
    """``module:Class.attr`` of the vLLM class (first in the MRO) or module defining ``attr``."""
    if inspect.ismodule(owner):
        return f"{owner.__name__}:{attr}" if hasattr(owner, attr) else None
    for cls in inspect.getmro(owner):
        if attr in vars(cls) or attr in vars(cls).get("__annotations__", {}):
            return f"{cls.__module__}:{cls.__qualname__}.{attr}"
    return None


def instance_attributes(cls: type) -> set[str]:
    """Names a class (or a base) assigns as ``self.<name> = ...`` in its methods."""
    names: set[str] = set()
    for klass in inspect.getmro(cls):
        if klass is object:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for target in targets:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        names.add(t.attr)
    return names


def field_names(cls: type) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    struct = getattr(cls, "__struct_fields__", None)  # msgspec
    if struct is not None:
        return set(struct)
    return set(getattr(cls, "model_fields", {}))  # pydantic


def check_entry(entry: dict[str, Any]) -> None:
    name, kind = entry["name"], entry["kind"]
    if kind == "env":
        import vllm.envs

        module, parts = split(name)
        assert module == "vllm.envs", name
        assert parts[-1] in vllm.envs.environment_variables, f"{name}: not a vLLM env var"
        return
    owner, attr = resolve_owner(name)
    if kind == "instance_attribute":
        assert attr in instance_attributes(owner), f"{name}: no self.{attr} assignment"
        return
    if kind == "field":
        assert attr in field_names(owner), f"{name}: not a field of {owner.__qualname__}"
        return
    if kind == "annotation":
        declared = {a for c in inspect.getmro(owner) for a in vars(c).get("__annotations__", {})}
        assert attr in declared or hasattr(owner, attr), f"{name}: not declared"
        return
    assert hasattr(owner, attr), f"{name}: missing"
    value = getattr(owner, attr)
    if kind == "class":
        assert inspect.isclass(value), f"{name}: not a class"
    elif kind == "attribute":
        assert not callable(value) or isinstance(value, (dict, enum.Enum)), name
    elif kind in ("function", "method", "classmethod"):
        static = inspect.getattr_static(owner, attr)
        if kind == "classmethod":
            assert isinstance(static, classmethod), f"{name}: not a classmethod"
        elif kind == "method":
            assert inspect.isfunction(static), f"{name}: not a plain method"
        else:
            assert inspect.isfunction(value), f"{name}: not a function"
        params = list(inspect.signature(value).parameters)
        wanted = entry["params"]
        assert params[: len(wanted)] == wanted, (
            f"{name}{inspect.signature(value)}: the plugin relies on the leading parameters "
            f"{wanted}"
        )


def test_the_pinned_vllm_is_installed() -> None:
    # A vLLM bump reviews this list (and the ledger) on purpose.
    assert vllm.__version__ == DATA["vllm_version"]


def test_the_list_is_well_formed() -> None:
    names = [e["name"] for e in ENTRIES]
    assert len(names) == len(set(names)), "duplicate names"
    for entry in ENTRIES:
        assert entry["kind"] in KINDS, entry
        assert re.fullmatch(r"[\w.]+:[\w.]+", entry["name"]), entry
        assert ("params" in entry) == (entry["kind"] in ("function", "method", "classmethod"))


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_each_name_resolves_with_the_shape_the_plugin_relies_on(entry: dict[str, Any]) -> None:
    check_entry(entry)


# --- the list agrees with the ledger ---------------------------------------------------------
def ledger_ids() -> set[str]:
    ids = set()
    for line in LEDGER.read_text().splitlines():
        match = re.match(r"\| ([PW]\d+) \|(.*)", line)
        if match and "*(retired)*" not in match.group(2):
            ids.add(match.group(1))
    return ids


def test_every_live_ledger_entry_is_pinned_or_says_why_not() -> None:
    pinned = {i for e in ENTRIES for i in e["ledger"]}
    excused = set(DATA["no_vllm_name"])
    assert not pinned & excused, "an entry both pins names and says it names none"
    assert pinned | excused == ledger_ids(), (
        f"ledger ids {sorted(ledger_ids())} vs the list's {sorted(pinned | excused)}"
    )


def test_the_ledger_points_at_the_list() -> None:
    assert "fixtures/vllm/names.json" in LEDGER.read_text()


# --- the list agrees with the plugin's code ----------------------------------------------------
@cache
def plugin_modules() -> list[Any]:
    return [
        importlib.import_module(m.name)
        for m in pkgutil.walk_packages(vllm_tt_plugin.__path__, "vllm_tt_plugin.")
        if not m.name.endswith("__main__")
    ]


def from_vllm(obj: Any) -> bool:
    name = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", "") or ""
    return name.split(".")[0] == "vllm"


def vllm_bindings(tree: ast.Module) -> dict[str, Any]:
    """Names bound by ``from vllm... import X`` / ``import vllm.x as y`` anywhere in a module."""
    bound: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vllm":
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if value is None:
                    value = importlib.import_module(f"{node.module}.{alias.name}")
                bound[alias.asname or alias.name] = value
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "vllm" and alias.asname:
                    bound[alias.asname] = importlib.import_module(alias.name)
    return bound


def private_vllm_names_in_code() -> dict[str, str]:
    """Every private vLLM attribute the plugin touches -> where: ``X._attr`` on an imported vLLM
    name, and ``self._attr`` / class attributes of plugin classes resolving to a vLLM base."""
    found: dict[str, str] = {}
    for module in plugin_modules():
        tree = ast.parse(Path(module.__file__).read_text())
        bound = vllm_bindings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                owner = bound.get(node.value.id)
                if owner is not None and is_private(node.attr):
                    found.setdefault(
                        canonical(owner, node.attr) or f"{node.value.id}.{node.attr}?",
                        f"{module.__name__}:{node.lineno}",
                    )
        for cls in vars(module).values():
            if not (inspect.isclass(cls) and cls.__module__ == module.__name__):
                continue
            bases = [b for b in inspect.getmro(cls)[1:] if from_vllm(b)]
            if not bases:
                continue
            source = ast.parse(textwrap.dedent(inspect.getsource(cls)))
            used = set(vars(cls)) | {
                n.attr
                for n in ast.walk(source)
                if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id == "self"
            }
            for attr in sorted(a for a in used if is_private(a) and a != "_abc_impl"):
                for base in bases:
                    name = canonical(base, attr)
                    if name is not None:
                        found.setdefault(name, f"{module.__name__}.{cls.__qualname__}")
                        break
    return found


def test_every_private_vllm_name_the_plugin_touches_is_pinned() -> None:
    listed = {e["name"] for e in ENTRIES}
    missing = {n: w for n, w in private_vllm_names_in_code().items() if n not in listed}
    assert not missing, f"add these to {NAMES_FILE.name} (and the ledger if a patch): {missing}"


def test_the_code_scan_finds_the_known_private_names() -> None:
    # The scan itself works: it sees an attribute read, an override and an inherited helper.
    found = private_vllm_names_in_code()
    for name in (
        "vllm.v1.core.kv_cache_utils:_pool_bytes_per_block",
        "vllm.multimodal.processing.processor:BaseMultiModalProcessor._get_mm_fields_config",
        "vllm.multimodal.processing.dummy_inputs:BaseDummyInputsBuilder._get_dummy_images",
        "vllm.platforms.interface:Platform._enum",
    ):
        assert name in found


# --- every patch lives in launch/vllm_patches.py --------------------------------------------------
# A patch: code that assigns to, deletes from or mutates an object reached from an imported vLLM
# (or torch / transformers) name, directly or through a local alias, or that registers a chat
# parser (the plugin's parsers take vLLM's own names). Config objects a hook receives as a
# parameter are not reached from an import, so the platform's config edits are not patches.
PLUGIN_ROOT = Path(vllm_tt_plugin.__file__).parent
PATCH_MODULE = PLUGIN_ROOT / "launch" / "vllm_patches.py"
PATCHED_PACKAGES = ("vllm", "torch", "transformers")
MUTATING_METHODS = {"append", "clear", "extend", "insert", "pop", "popitem", "remove"}
MUTATING_METHODS |= {"setdefault", "update", "__setitem__", "__delitem__"}
REPLACING_REGISTRATIONS = {"register_lazy_module", "register_module"}


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patches_in(source: str) -> list[str]:
    """``line: target`` of each patch of a vLLM object in ``source``."""
    tree = ast.parse(source)
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            PATCHED_PACKAGES
        ):
            bound |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            bound |= {
                (a.asname or a.name).split(".")[0]
                for a in node.names
                if a.name.split(".")[0] in PATCHED_PACKAGES
            }
    # Aliases (``proc = core.EngineCoreProc``), to a fixed point; scopes are not told apart.
    while True:
        aliases = {
            t.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute))
            if _root(node.value) in bound
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        if aliases <= bound:
            break
        bound |= aliases
    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
                targets = [node.args[0]]
            elif isinstance(func, ast.Attribute) and func.attr in (
                MUTATING_METHODS | REPLACING_REGISTRATIONS
            ):
                targets = [func]
        for target in targets:
            # Rebinding a bare name is not a patch; setattr(vllm_obj, ...) is.
            if isinstance(target, ast.Name) and not isinstance(node, ast.Call):
                continue
            if _root(target) in bound:
                found.append(f"{node.lineno}: {ast.unparse(target)}")
    return sorted(set(found), key=lambda f: int(f.split(":")[0]))


def test_every_vllm_patch_lives_in_vllm_patches() -> None:
    outside = {
        str(path.relative_to(PLUGIN_ROOT)): found
        for path in sorted(PLUGIN_ROOT.rglob("*.py"))
        if path != PATCH_MODULE and (found := patches_in(path.read_text()))
    }
    assert not outside, (
        f"move these into launch/vllm_patches.py with a ledger entry ({LEDGER.name}): {outside}"
    )


def test_the_patch_scan_finds_the_known_patches() -> None:
    # The scan works: direct, aliased and registration patches in the module, and a patch
    # written anywhere else.
    found = "\n".join(patches_in(PATCH_MODULE.read_text()))
    for target in (
        "torch.accelerator.empty_cache",
        "EngineArgs._set_default_max_num_seqs_and_batched_tokens_args",
        "proc._send_engine_dead",  # proc = core.EngineCoreProc
        "ReasoningParserManager.reasoning_parsers[entry.name]",
        "ToolParserManager.register_lazy_module",
        "utils.wait_for_engine_startup",
    ):
        assert target in found, target
    elsewhere = textwrap.dedent(
        """
        import vllm.envs as vllm_envs
        from vllm.v1.engine import core

        def hook(vllm_config):
            vllm_config.scheduler_config.max_num_seqs = 4  # a hook's parameter: not a patch
            engine = core.EngineCoreProc
            setattr(engine, "step", None)
            vllm_envs.environment_variables.pop("X")
        """
    )
    assert patches_in(elsewhere) == ["8: engine", "9: vllm_envs.environment_variables.pop"]


def test_each_live_ledger_patch_is_in_vllm_patches_and_back() -> None:
    named = set(re.findall(r"\bP\d+\b", PATCH_MODULE.read_text()))
    assert named == {i for i in ledger_ids() if i.startswith("P")}
