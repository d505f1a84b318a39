"""The values the plugin sends with each planned call, as far as the plugin's own code decides
them: what ``parity_raises`` evaluates the ``assert`` / ``raise`` conditions of a driven method
against. A value the plugin does not decide here (a tensor, a page table) is unknown.

The reload commands are every command ``ReloadPlanner.plan`` returns for the call's route and
remap (and, for a version-0 class, ``ReloadPlanner.legacy_reset_batch`` of them: a reload of
inputs or page table), with inputs resident only where ``launch_plan`` keeps them
(``supports_async_decode`` and a traced decode). The checker runs with the standard library
only and ``reload_contract`` imports vLLM (through ``policy``), so they are recorded here as
``COMMANDS``; a unit test enumerates the planner and requires the same table.
``ModelAdapter.decode`` sends ``read_from_device=False`` and
``sampling_params`` / ``prompt_tokens`` / ``slot_remap`` only when not None (it picks the
variant from that); ``enable_trace`` is either value (the trace mode is the deployment's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm_tt_plugin.contract.call_plan import DECODE_COMMANDS, PlannedCall


class Unknown:
    """A value the checker does not know (its truth, its identity with None)."""

    def __repr__(self) -> str:
        return "<unknown>"


class Some:
    """An object the plugin sends that is never None (its truth is not known: a tensor's
    ``bool`` raises)."""

    def __repr__(self) -> str:
        return "<an object>"


UNKNOWN = Unknown()
SOME = Some()
# Keywords the adapter sends only when not None (ModelAdapter.decode picks the variant by it).
_NOT_NONE = ("sampling_params", "prompt_tokens", "output_tokens", "slot_remap")


@dataclass(frozen=True)
class Scenario:
    """One combination of values a planned call can carry."""

    values: Mapping[str, Any]  # keyword -> value (UNKNOWN / SOME where not decided)
    label: str  # the decided values, for messages


# (device route, slot_remap sent, inputs resident) -> the commands ReloadPlanner.plan gives
# over the device views a decode can follow (first decode, after a prefill or a host step,
# steady, moved): (reload_inputs, reload_page_table, reload_sampling_params,
# reset_sampling_state). test_contract_parity_round6_guards derives it from the planner.
_HOST = ((True, False, False, False),)
_FULL = (True, False, True, True)
COMMANDS: dict[tuple[bool, bool, bool], tuple[tuple[bool, bool, bool, bool], ...]] = {
    (False, False, False): _HOST,
    (False, False, True): _HOST,
    (False, True, False): _HOST,
    (False, True, True): _HOST,
    (True, False, False): ((True, False, False, False), _FULL),
    (True, False, True): ((False, False, False, False), (False, True, False, False), _FULL),
    (True, True, False): (_FULL,),
    (True, True, True): (_FULL,),
}


def scenarios(call: PlannedCall, async_decode: bool) -> list[Scenario]:
    """The value combinations of ``call`` (decode: per trace mode and reload command; other
    methods: per ``enable_trace``), unknown values left out of the label."""
    sent = set(call.keywords)
    base: dict[str, Any] = {k: SOME if k in _NOT_NONE else UNKNOWN for k in sent}
    out: list[Scenario] = []
    for traced in (False, True):
        values = dict(base)
        if "enable_trace" in sent:
            values["enable_trace"] = traced
        if call.method != "decode_forward":
            out.append(Scenario(values, _label(values, sent)))
            continue
        values["read_from_device"] = False
        resident = async_decode and traced
        device, remap = "sampling_params" in sent, "slot_remap" in sent
        for command in COMMANDS[device, remap, resident]:
            these = dict(values)
            if "reset_batch" in sent:  # legacy_reset_batch: touches_device_inputs
                these["reset_batch"] = command[0] or command[1]
            these.update({k: v for k, v in zip(DECODE_COMMANDS, command, strict=True) if k in sent})
            out.append(Scenario(these, _label(these, sent)))
    unique: dict[str, Scenario] = {}
    for s in out:
        unique.setdefault(s.label, s)
    return list(unique.values())


def _label(values: Mapping[str, Any], sent: set[str]) -> str:
    order = ("enable_trace", "read_from_device", *DECODE_COMMANDS, "reset_batch")
    shown = [f"{k}={values[k]!r}" for k in order if k in sent and isinstance(values[k], bool)]
    return ", ".join(shown)
