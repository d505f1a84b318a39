"""The body of a composed object's method the plugin's values reach (rt45h NA03, CK12, CK13,
WU01), judged as the adapter's own driven method is: ``self.generator.decode(...)`` runs
``LlamaGenerator.decode``'s body with what the plugin sent.

- Python 3.10 (``source_bodyhost``: 3.11+ names, imports of modules / names the checkout
  lacks, names nothing binds) and a body that always raises: ``broken``.
- Content the plugin sent that the method takes and never uses (``sampling_params`` returned
  as ``None``), and a command of the plugin's it mentions without acting on it (``del
  reload_inputs, ...``) or sets itself: ``dropped``, as ``parity_reach.unused_content`` rules
  for the adapter's own methods. The plugin's meaning is the adapter's argument (its parameter
  or ``kwargs.get("k")``), whatever the method calls its parameter.
- A warm-up the adapter forwards to a method that returns early on a flag of its own its first
  call sets: the plugin resets ``already_warmed_up_prefill`` on the adapter (``ModelAdapter``'s
  warm-up), never on the composed object, so the traced round never reaches it (``dropped``).

Where the call runs only on some paths, each of these is ``unresolved``.
"""

from __future__ import annotations

import inspect
from typing import Any

from vllm_tt_plugin.contract.call_plan import CONTENT_KEYWORDS
from vllm_tt_plugin.contract.parity_content import CARRIED, commands_kept, lost_command
from vllm_tt_plugin.contract.parity_reach import WalkLike
from vllm_tt_plugin.contract.source import FoundMethod
from vllm_tt_plugin.contract.warmup_flag import RESET_BY_PLUGIN, WARMUPS, own_guard


def callee_body(
    source: Any,
    driven: str,
    callee: FoundMethod,
    bound: inspect.BoundArguments,
    where: str,
    sure: bool,
    out: WalkLike,
) -> None:
    """Report what ``callee``'s body does with the call (``where``: who calls it, how)."""
    at = f"[{callee.where.rpartition(':')[0]}"
    for fail in callee.scan.host:
        certain = sure and fail.status == "broken"
        (out.errors if certain else out.unresolved).append(
            f"{where}, whose body {fail.why}: fails on Python 3.10 (tt-metal's host Python)"
            f"{'' if certain or fail.status != 'broken' else ' where the call reaching it runs'}"
            f" {at}:{fail.line}]"
        )
    body = callee.body
    if body is None:
        return
    if body.raises:
        (out.errors if sure else out.unresolved).append(
            f"{where}, which always raises: {body.raises} [{callee.where}]"
        )
    kept = commands_kept(getattr(source, "root", None), callee.where)
    lost = [
        f"{value!r}" + (f" (as {param!r})" if param != value else "")
        for param, value in bound.arguments.items()
        if isinstance(value, str) and value in CARRIED and param in body.unused
        and (value in CONTENT_KEYWORDS or (kept and lost_command(callee.node, param, value)))
    ]  # fmt: skip
    if lost:
        (out.dropped if sure else out.unresolved).append(
            f"{where}, which takes {', '.join(lost)} and never uses "
            f"{'it' if len(lost) == 1 else 'them'} [{callee.where}]"
        )
    guard = own_guard(callee.node, None) if driven in WARMUPS else None
    if guard is not None:
        (out.dropped if sure else out.unresolved).append(
            f"{where}, which returns early on {guard.flag} (line {guard.guard_line}), a "
            f"flag its first call sets (line {guard.set_line}); the plugin resets "
            f"{RESET_BY_PLUGIN} on the adapter, not on that object, so its traced warm-up "
            f"(enable_trace=True, after the untraced one) never reaches it [{callee.where}]"
        )
