"""The check ids each check module defines, for the suite manifest (schema.py writes it).

Coverage compares a run's checks with these per module (selection.py): a run that ran a module
but not one of its checks (``-k 'not test_foo'`` through a path pytest did not count, a test
function deleted from an installed module) is partial, naming the check.

Ids are pytest's: ``<module>::<function>`` or ``<module>::<function>[<params>]`` for static
``@pytest.mark.parametrize`` lists, whose ids are worked out here as pytest forms them (the
mark nearest the function first, joined by "-"). A function parametrised at collection from the
server's options or the expectations (the module's ``pytest_generate_tests``: accuracy tasks,
perf shapes) or with parameters whose ids cannot be known without pytest is listed as
``<function>[*]``: at least one instance of it must run.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Sequence
from typing import Any

from tt_conformance.names import CONCERN_MARKERS

__all__ = ["ANY_PARAMS", "check_ids", "covers", "module_concern"]

ANY_PARAMS = "[*]"
_GENERATED = re.compile(r"""["'](\w+)["']\s+(?:not\s+)?in\s+metafunc\.fixturenames""")


class _Unknown(Exception):
    """A parameter whose id pytest derives from the object (no literal id to list)."""


def check_ids(module_name: str) -> list[str]:
    """The check ids (``function`` or ``function[params]``) the module defines, sorted."""
    module = importlib.import_module(module_name)
    hook = getattr(module, "pytest_generate_tests", None)
    generated = set(_GENERATED.findall(inspect.getsource(hook))) if hook is not None else set()
    out: list[str] = []
    for name, fn in vars(module).items():
        if not name.startswith("test_") or not inspect.isfunction(fn):
            continue
        if fn.__module__ != module_name:
            continue  # imported from elsewhere: collected (and listed) where it is defined
        if generated & set(inspect.signature(fn).parameters):
            out.append(name + ANY_PARAMS)
            continue
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        try:
            combos = [""]
            for mark in marks:  # nearest the function first: pytest joins ids in that order
                ids = _mark_ids(mark)
                combos = [f"{a}-{b}" if a else b for a in combos for b in ids]
        except _Unknown:
            out.append(name + ANY_PARAMS)
            continue
        out += [f"{name}[{c}]" if marks else name for c in combos]
    return sorted(out)


def module_concern(module_name: str) -> str:
    """The concern of every check of the module, as the plugin names it (pytest_plugin's
    concern_for: the first concern marker of ``pytestmark``, else the module name minus
    ``test_``). The manifest records it, so a report cannot relabel a check; a function that
    carries a concern marker of its own would break that, and is refused here."""
    module = importlib.import_module(module_name)
    marks = getattr(module, "pytestmark", [])
    marks = marks if isinstance(marks, list) else [marks]
    named = [m.name for m in marks if m.name in CONCERN_MARKERS]
    base = module_name.rsplit(".", 1)[-1]
    concern = named[0] if named else base.removeprefix("test_").removesuffix("_test")
    for name, fn in vars(module).items():
        if name.startswith("test_") and inspect.isfunction(fn):
            own = [m.name for m in getattr(fn, "pytestmark", []) if m.name in CONCERN_MARKERS]
            if own and own[0] != concern:
                raise ValueError(
                    f"{module_name}::{name}: concern marker {own[0]!r} differs from its "
                    f"module's {concern!r} (the manifest records one concern per module)"
                )
    return concern


def _mark_ids(mark: Any) -> list[str]:
    argnames, values = mark.args[0], list(mark.args[1])
    names = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else argnames
    given = mark.kwargs.get("ids")
    if given is not None and not isinstance(given, (list, tuple)):
        raise _Unknown  # a function of the values: pytest's to call
    out = []
    for i, value in enumerate(values):
        explicit = getattr(value, "id", None)
        params = getattr(value, "values", None)
        if explicit is not None:
            out.append(str(explicit))
            continue
        if given is not None and i < len(given) and given[i] is not None:
            out.append(str(given[i]))
            continue
        parts = params if params is not None else (value if len(names) > 1 else (value,))
        out.append("-".join(_value_id(v, n, i) for v, n in zip(parts, names, strict=True)))
    return out


def _value_id(value: object, argname: str, index: int) -> str:
    if isinstance(value, str):
        return value.encode("unicode_escape").decode("ascii")
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, (dict, list, tuple, set)):
        return f"{argname}{index}"  # pytest names a container by its argument and position
    raise _Unknown


def covers(listed: str, ran: Sequence[str]) -> bool:
    """Whether a manifest entry (``function``, ``function[params]`` or ``function[*]``) is among
    the run's check names in its module (the part after ``::``)."""
    if listed.endswith(ANY_PARAMS):
        head = listed.removesuffix(ANY_PARAMS) + "["
        return any(r.startswith(head) for r in ran)
    return listed in ran
