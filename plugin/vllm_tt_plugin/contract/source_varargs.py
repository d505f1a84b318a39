"""Reads of a method's ``*args`` by position (``ast``): ``args[0]``, ``a, b = args[:2]``, ``a, b
= args``. The plugin calls most methods all by keyword, so there ``*args`` is always empty and
such a read raises (``IndexError`` / ``ValueError``) on the first call."""

from __future__ import annotations

import ast
from dataclasses import dataclass

Fn = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class VarargRead:
    line: int
    text: str
    certain: bool  # every call of the method runs it
    needs: int  # positional arguments it needs to not raise
    unpacked: bool = False  # `a, b = <text>`: the target's count, not an index

    def skeleton(self) -> str:
        """The read as an interface skeleton keeps it."""
        text = f"{', '.join(['_'] * self.needs)} = {self.text}" if self.unpacked else (
            f"used({self.text})"
        )  # fmt: skip
        return text if self.certain else f"if ...: {text}"


def _needs(node: ast.Subscript, target: ast.AST | None) -> int | None:
    """How many items ``args[...]`` needs: ``args[i]`` i+1; ``x, y = args[:n]`` the unpacked
    count (a slice alone never raises); None when the checker cannot tell (a computed index)."""
    index = node.slice
    if isinstance(index, ast.Constant) and isinstance(index.value, int):
        return index.value + 1 if index.value >= 0 else -index.value
    if isinstance(index, ast.Slice) and isinstance(target, (ast.Tuple, ast.List)):
        if any(isinstance(e, ast.Starred) for e in target.elts):
            return None
        return len(target.elts)
    return 0 if isinstance(index, ast.Slice) else None


def vararg_reads(fn: Fn, vararg: str | None, run: set[int]) -> tuple[VarargRead, ...]:
    """The positional reads of ``*vararg`` in ``fn`` that raise when it is empty."""
    if vararg is None:
        return ()
    found: list[VarargRead] = []
    unpacked: dict[int, ast.AST] = {}  # args[...] nodes assigned to a tuple: the target
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(value, ast.Subscript):
            unpacked[id(value)] = target
        elif (
            isinstance(value, ast.Name) and value.id == vararg
            and isinstance(target, (ast.Tuple, ast.List))
            and not any(isinstance(e, ast.Starred) for e in target.elts)
        ):  # fmt: skip
            found.append(VarargRead(node.lineno, vararg, id(node) in run, len(target.elts), True))
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and node.value.id == vararg and isinstance(node.ctx, ast.Load)
        ):  # fmt: skip
            needs = _needs(node, unpacked.get(id(node)))
            if needs:
                found.append(VarargRead(node.lineno, ast.unparse(node), id(node) in run, needs,
                                        isinstance(node.slice, ast.Slice)))  # fmt: skip
    return tuple(found)
