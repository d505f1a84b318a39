"""Values of the plugin's that a method body takes and then replaces before anything reads them
(rt45h CK05, MM01, PF03, MM02, MM03): ``source_flow.value_used`` asks here before following a
value into a local mapping or a conditional expression.

- A local mapping (``d = {"k": v}`` / ``d = dict(k=v)``) whose key ``k`` a later statement of
  the same block replaces or removes (``d["k"] = x``, ``d.update(k=x)``, ``d |= {"k": x}``,
  ``del d["k"]``, a bare ``d.pop("k")``) before the mapping is read any other way: ``v`` never
  leaves the body. A statement that may or may not run (under a test, in a loop), any other
  read of ``d`` in between, or a rebinding (``d = {**d, "k": x}``) ends the walk: ``v`` counts
  as used (the checker does not say it was lost).
- A choice between the plugin's value and one of the model's own (``own_value``: a constant, an
  attribute of ``self``), ``x = None if self._host_sampling else x``, ``if not self._vision:
  x = None``, on a test that does not read ``x`` itself: the plugin needs its value on every
  call, so a path that replaces it loses it. Whether the test holds on the TT host is a
  setting of the model's (a class constant, an ``__init__`` store, a config flag) that the
  checker does not evaluate; it counts such a choice as losing the value (``dropped``), the
  rule docs/CONTRACT_PARITY.md gives. A test on the value itself (``x = d if x is None else
  x``) keeps it: the model fills in what the plugin did not send.
"""

from __future__ import annotations

import ast

Fn = ast.FunctionDef | ast.AsyncFunctionDef


def own_value(value: ast.expr) -> bool:
    """``value`` is the model's own: constants and attributes of ``self`` / ``cls`` only (any
    other name, a call of one, or a skeleton's ``...`` may carry the plugin's value)."""
    for n in ast.walk(value):
        if isinstance(n, ast.Constant) and n.value is Ellipsis:
            return False
        if isinstance(n, ast.Name) and n.id not in ("self", "cls"):
            return False
    return True


def _key(expr: ast.expr | None) -> str | None:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


def _mapping_item(node: ast.AST, parents: dict[int, ast.AST]) -> tuple[str, ast.expr] | None:
    """(key, the mapping expression) where ``node`` is the value of a literal key of a dict
    display or of a ``dict(k=...)`` keyword."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.Dict):
        for k, v in zip(parent.keys, parent.values, strict=True):
            if v is node and _key(k) is not None:
                return str(_key(k)), parent
        return None
    if isinstance(parent, ast.keyword) and parent.arg is not None:
        call = parents.get(id(parent))
        func = call.func if isinstance(call, ast.Call) else None
        if isinstance(call, ast.Call) and isinstance(func, ast.Name) and func.id == "dict":
            return parent.arg, call
    return None


def _touches(st: ast.stmt, name: str, key: str) -> str:
    """What ``st`` does to key ``key`` of local ``name``: "replaced", "read" (any other load of
    ``name``, or a change the checker does not follow), or "" (does not touch it)."""
    if not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(st)):
        return ""
    if isinstance(st, ast.Assign) and len(st.targets) == 1:
        t = st.targets[0]
        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name:
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(st.value)):
                return "read"
            return "replaced" if _key(t.slice) == key else ("" if _key(t.slice) else "read")
    # `d |= {"k": x}`
    if (
        isinstance(st, ast.AugAssign) and isinstance(st.op, ast.BitOr)
        and isinstance(st.target, ast.Name) and st.target.id == name
        and isinstance(st.value, ast.Dict) and all(_key(k) is not None for k in st.value.keys)
        and not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(st.value))
    ):  # fmt: skip
        return "replaced" if any(_key(k) == key for k in st.value.keys) else ""
    if isinstance(st, ast.Delete) and len(st.targets) == 1:
        t = st.targets[0]
        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name:
            return "replaced" if _key(t.slice) == key else ("" if _key(t.slice) else "read")
    call = st.value if isinstance(st, ast.Expr) else None
    if (
        isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name) and call.func.value.id == name
    ):  # fmt: skip
        if call.func.attr == "pop" and call.args and _key(call.args[0]) is not None:
            return "replaced" if _key(call.args[0]) == key else ""
        if call.func.attr == "update" and not call.args:
            if any(k.arg is None for k in call.keywords):
                return "read"
            return "replaced" if any(k.arg == key for k in call.keywords) else ""
        if call.func.attr == "update" and len(call.args) == 1 and not call.keywords:
            arg = call.args[0]
            if isinstance(arg, ast.Dict) and all(_key(k) is not None for k in arg.keys):
                return "replaced" if any(_key(k) == key for k in arg.keys) else ""
    return "read"


def dict_key_dead(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """``node`` is stored under a literal key of a local mapping that a later statement of the
    same block replaces or removes before the mapping is read."""
    item = _mapping_item(node, parents)
    if item is None:
        return False
    key, mapping = item
    stmt = parents.get(id(mapping))
    if not (
        isinstance(stmt, ast.Assign) and stmt.value is mapping and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
    ):  # fmt: skip
        return False
    name = stmt.targets[0].id
    block = next(
        (b for f in ("body", "orelse", "finalbody")
         if isinstance(b := getattr(parents.get(id(stmt)), f, None), list) and stmt in b),
        None,
    )  # fmt: skip
    if block is None:
        return False
    for st in block[block.index(stmt) + 1 :]:
        touched = _touches(st, name, key)
        if touched == "replaced":
            return True
        if touched == "read":
            return False
    return False


def _names(expr: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


def replaced_by_choice(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """``node`` (a load of a name) is one branch of ``a if test else b`` whose other branch is
    the model's own value, on a test that does not read that name."""
    parent = parents.get(id(node))
    if not (isinstance(parent, ast.IfExp) and node is not parent.test):
        return False
    other = parent.orelse if node is parent.body else parent.body
    name = node.id if isinstance(node, ast.Name) else None
    return name is not None and own_value(other) and name not in _names(parent.test)


def replaced_under_test(st: ast.stmt, name: str) -> bool:
    """``if test: name = <own value>`` (no ``else``), on a test that does not read ``name``:
    where the test holds the plugin's value is gone (``shadowed`` counts it as a binding)."""
    if not (isinstance(st, ast.If) and not st.orelse and name not in _names(st.test)):
        return False
    return any(
        isinstance(s, ast.Assign) and own_value(s.value)
        and any(isinstance(t, ast.Name) and t.id == name for t in s.targets)
        for s in st.body
    )  # fmt: skip
