"""A method as the parity checker found it (``source.SignatureSource.own_method``): where it
is, its signature, what it forwards, its body. Its own module so that the readers which build
one (``source``, ``source_alias``) import it without importing each other."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field

from vllm_tt_plugin.contract.source_body import Body, Forward
from vllm_tt_plugin.contract.source_scan import Scan


@dataclass(frozen=True)
class FoundMethod:
    owner: str  # "module:Class" that defines it
    name: str
    signature: inspect.Signature
    where: str  # file:line, or "fixture"
    forwards: tuple[Forward, ...] = ()
    abstract: bool = False  # the body only raises NotImplementedError
    body: Body | None = None  # None: not read (the fixture)
    unresolved: str = ""  # why the signature Python calls may not be this def's (a decorator)
    # "classmethod", "staticmethod", "method"; "function": a module def; "constant": `m = None`
    kind: str = "method"
    coroutine: bool = False  # an ``async def``: calling it returns a coroutine, not its result
    scan: Scan = field(
        default_factory=Scan
    )  # plugin imports and constructions source_body does not read
    fails: bool = False  # ``unresolved`` says why every call fails (a decorator order)
    # The def read (None: the fixture, a stub): the content-flow rules (``parity_content``)
    # re-read what ``Body`` does not keep (overwrites, the values an own call hands on).
    node: ast.FunctionDef | ast.AsyncFunctionDef | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def delegates_to(self) -> str | None:
        """The method the first forwarding call hands the arguments to."""
        return self.forwards[0].method if self.forwards else None
