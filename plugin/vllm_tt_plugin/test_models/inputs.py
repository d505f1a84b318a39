"""Host-side checks of prefill/decode arguments, turned into copies the device thread can own.

Everything here runs on the caller's thread before a step is enqueued, so a malformed call is
rejected synchronously (and the plugin's slot map stays consistent with the model's). The copies
make async submission safe: the host may reuse its buffers as soon as ``decode_forward`` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from vllm_tt_plugin.test_models.resident import DecodeInputs, DecodeUpdate
from vllm_tt_plugin.test_models.sampling import (
    SamplerLimits,
    SamplingTensors,
    check_token_ids,
    tensors_from_params,
    validate_params,
)

FLAG_NAMES = (
    "reload_inputs",
    "reload_page_table",
    "reload_sampling_params",
    "reset_sampling_state",
)


class ContractInputError(ValueError):
    """A prefill/decode argument does not match docs/TT_MODEL_CONTRACT.md."""


class UnexpectedArgumentError(TypeError):
    """A keyword argument the real class's signature does not have (Python's own TypeError)."""


@dataclass(frozen=True)
class Geometry:
    """The fixed numbers every call is checked against."""

    num_slots: int  # global decode batch: lanes x per-lane slots
    num_lanes: int
    vocab_size: int
    num_groups: int
    max_seq_len: int
    limits: SamplerLimits

    @property
    def slots_per_lane(self) -> int:
        return self.num_slots // self.num_lanes


@dataclass(frozen=True)
class PrefillRow:
    index: int
    lane: int
    slot: int | None  # global decode slot (from empty_slots), None when not sent
    start: int
    end: int
    tokens: torch.Tensor  # int64 [end - start]: tokens[row, start_pos:prompt_lens]
    page_rows: tuple[torch.Tensor, ...]  # per group, int32 [W]
    # tokens[row, :start_pos]: what the KV cache already holds (a vision model counts the
    # placeholders in it to know where in an image the chunk starts). None when not given.
    before: torch.Tensor | None = None


@dataclass(frozen=True)
class PrefillBatch:
    rows: tuple[PrefillRow, ...]
    sampling_params: SamplingTensors | None


def _tensor(
    value: Any, name: str, dtype: torch.dtype, shape: tuple[int | None, ...], what: str
) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ContractInputError(
            f"{what}: {name} must be a torch.Tensor, got {type(value).__name__}"
        )
    if value.dtype != dtype:
        raise ContractInputError(f"{what}: {name} must be {dtype}, got {value.dtype}")
    if value.dim() != len(shape) or any(
        want is not None and got != want for got, want in zip(value.shape, shape, strict=True)
    ):
        expected = tuple("*" if s is None else s for s in shape)
        raise ContractInputError(
            f"{what}: {name} has shape {tuple(value.shape)}, expected {expected}"
        )
    return value


def _int_list(value: Any, name: str, length: int, what: str) -> list[int]:
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ContractInputError(
            f"{what}: {name} must be a list of ints, got {type(value).__name__}"
        )
    items = list(value)
    if len(items) != length:
        raise ContractInputError(f"{what}: {name} has {len(items)} entries, expected {length}")
    if any(isinstance(x, bool) or not isinstance(x, int) for x in items):
        raise ContractInputError(f"{what}: {name} must hold ints, got {items!r}")
    return items


def reject_unknown(kwargs: dict[str, Any], what: str) -> None:
    """Keyword arguments outside the class's signature: a TypeError, as Python raises it."""
    if kwargs:
        raise UnexpectedArgumentError(
            f"{what}() got unexpected keyword argument(s) {', '.join(sorted(kwargs))}"
        )


def group_tables(
    page_table: Any,
    page_tables_per_group: Any,
    rows: int,
    geometry: Geometry,
    what: str,
) -> tuple[torch.Tensor, ...]:
    """One int32 [rows, W] table per KV cache group (the caller's tensors: copy to keep)."""
    if page_tables_per_group is None:
        if geometry.num_groups != 1:
            raise ContractInputError(
                f"{what}: this model has {geometry.num_groups} KV cache groups; "
                "page_tables_per_group is required"
            )
        return (_tensor(page_table, "page_table", torch.int32, (rows, None), what),)
    if not isinstance(page_tables_per_group, Sequence) or len(page_tables_per_group) != (
        geometry.num_groups
    ):
        raise ContractInputError(
            f"{what}: page_tables_per_group must be a list of {geometry.num_groups} tensors"
        )
    return tuple(
        _tensor(t, f"page_tables_per_group[{g}]", torch.int32, (rows, None), what)
        for g, t in enumerate(page_tables_per_group)
    )


def _optional_history(
    value: Any, name: str, rows: int, geometry: Geometry, what: str
) -> torch.Tensor | None:
    if value is None:
        return None
    tensor = _tensor(value, name, torch.int32, (rows, None), what).to(torch.int64)
    check_token_ids(tensor, geometry.vocab_size, name, what)
    return tensor


def parse_prefill(
    tokens: Any,
    page_table: Any,
    prompt_lens: Any,
    start_pos: Any,
    page_tables_per_group: Any,
    sampling_params: Any,
    empty_slots: Any,
    geometry: Geometry,
) -> PrefillBatch:
    """``tokens`` holds each row's sequence from position 0; the model reads
    ``tokens[row, start_pos:prompt_lens]`` (docs/TT_MODEL_CONTRACT.md, Prefill)."""
    what = "prefill_forward"
    tokens = _tensor(tokens, "tokens", torch.int32, (None, None), what)
    batch, width = tokens.shape
    tables = tuple(
        t.clone() for t in group_tables(page_table, page_tables_per_group, batch, geometry, what)
    )
    ends = _int_list(prompt_lens, "prompt_lens", batch, what)
    starts = _int_list(start_pos, "start_pos", batch, what)
    slots: list[int | None]
    if empty_slots is None:
        if geometry.num_lanes != 1:
            raise ContractInputError(
                f"{what}: empty_slots is required with {geometry.num_lanes} lanes "
                "(it names each row's lane)"
            )
        slots = [None] * batch
    else:
        given = _int_list(empty_slots, "empty_slots", batch, what)
        for slot in given:
            if not 0 <= slot < geometry.num_slots:
                raise ContractInputError(
                    f"{what}: empty_slots entry {slot} is outside [0, {geometry.num_slots})"
                )
        if len(set(given)) != len(given):
            raise ContractInputError(f"{what}: empty_slots {given} names a slot twice")
        slots = list(given)
    rows = []
    for i in range(batch):
        start, end = starts[i], ends[i]
        if not 0 <= start < end:
            raise ContractInputError(
                f"{what}: row {i} has start_pos={start}, prompt_lens={end}; need 0 <= start < end"
            )
        if end > geometry.max_seq_len:
            raise ContractInputError(
                f"{what}: row {i} prompt_lens={end} exceeds max_seq_len={geometry.max_seq_len}"
            )
        if end > width:
            raise ContractInputError(
                f"{what}: row {i} ends at prompt_lens={end} but tokens has only {width} columns "
                "(tokens carry the whole sequence from position 0)"
            )
        chunk = tokens[i, start:end].to(torch.int64)
        if bool((chunk < 0).any()) or bool((chunk >= geometry.vocab_size).any()):
            raise ContractInputError(
                f"{what}: row {i} holds token ids outside [0, {geometry.vocab_size})"
            )
        row_slot = slots[i]
        lane = 0 if row_slot is None else row_slot // geometry.slots_per_lane
        page_rows = tuple(t[i] for t in tables)
        rows.append(PrefillRow(i, lane, row_slot, start, end, chunk, page_rows, tokens[i, :start]))
    return PrefillBatch(
        rows=tuple(rows), sampling_params=_params(sampling_params, batch, geometry, what)
    )


def _params(value: Any, rows: int, geometry: Geometry, what: str) -> SamplingTensors | None:
    if value is None:
        return None
    params = tensors_from_params(value, rows, geometry.vocab_size, what)
    validate_params(params, rows, geometry.limits, what)
    return params


def parse_slot_remap(slot_remap: Any, geometry: Geometry) -> torch.Tensor | None:
    what = "decode_forward"
    if slot_remap is None:
        return None
    remap = _tensor(slot_remap, "slot_remap", torch.int64, (geometry.num_slots,), what)
    if not torch.equal(remap.sort().values, torch.arange(geometry.num_slots)):
        raise ContractInputError(
            f"{what}: slot_remap {remap.tolist()} is not a permutation of "
            f"0..{geometry.num_slots - 1}"
        )
    lanes = torch.arange(geometry.num_slots) // geometry.slots_per_lane
    if not torch.equal(remap // geometry.slots_per_lane, lanes):
        raise ContractInputError(
            f"{what}: slot_remap {remap.tolist()} moves a slot to another lane; lanes hold "
            "separate KV caches"
        )
    return remap.clone()


def parse_decode(
    tokens: Any,
    page_table: Any,
    start_pos: Any,
    page_tables_per_group: Any,
    sampling_params: Any,
    prompt_tokens: Any,
    output_tokens: Any,
    geometry: Geometry,
    update: DecodeUpdate,
) -> DecodeInputs:
    """Shapes and dtypes are always checked; token and position values only when they are
    about to be loaded (``update.reload_inputs``): steady-state calls may carry stale host
    copies. Only what the call loads is copied (the rest is never read)."""
    what = "decode_forward"
    n = geometry.num_slots
    tokens = _tensor(tokens, "tokens", torch.int32, (n, 1), what)
    start_pos = _tensor(start_pos, "start_pos", torch.int32, (n,), what)
    tables = group_tables(page_table, page_tables_per_group, n, geometry, what)
    ids = positions = copied = None
    if update.reload_inputs:
        ids, positions = tokens[:, 0].to(torch.int64), start_pos.to(torch.int64)
        active = positions >= 0
        if bool((positions < -1).any()):
            raise ContractInputError(
                f"{what}: start_pos holds values below -1 (the empty-slot mark)"
            )
        if bool((positions[active] >= geometry.max_seq_len).any()):
            raise ContractInputError(
                f"{what}: start_pos reaches max_seq_len={geometry.max_seq_len}"
            )
        if bool((ids[active] < 0).any()) or bool((ids[active] >= geometry.vocab_size).any()):
            raise ContractInputError(
                f"{what}: active slots hold token ids outside [0, {geometry.vocab_size})"
            )
    if update.reload_inputs or update.reload_page_table:
        copied = tuple(t.clone() for t in tables)
    return DecodeInputs(
        tokens=ids,
        positions=positions,
        page_tables=copied,
        sampling_params=_params(sampling_params, n, geometry, what),
        prompt_tokens=_optional_history(prompt_tokens, "prompt_tokens", n, geometry, what),
        output_tokens=_optional_history(output_tokens, "output_tokens", n, geometry, what),
    )


def parse_decode_update(
    version: int,
    flags: dict[str, bool | None],
    slot_remap: Any,
    kwargs: dict[str, Any],
    geometry: Geometry,
) -> DecodeUpdate:
    """The reload flags (contract v1) or ``reset_batch`` (v0, popped from kwargs) of one call."""
    what = "decode_forward"
    if version >= 1:
        if "reset_batch" in kwargs:
            raise ContractInputError(
                f"{what}: reset_batch is the legacy (contract v0) argument; this model declares "
                f"decode_input_update_contract={version} and takes {', '.join(FLAG_NAMES)} instead"
            )
        missing = [name for name, value in flags.items() if value is None]
        if missing:
            raise ContractInputError(
                f"{what}: a decode_input_update_contract={version} model receives all four "
                f"reload flags on every call; missing: {', '.join(missing)}"
            )
        for name, value in flags.items():
            if not isinstance(value, bool):
                raise ContractInputError(f"{what}: {name}={value!r} must be a bool")
        update = DecodeUpdate(
            reload_inputs=bool(flags["reload_inputs"]),
            reload_page_table=bool(flags["reload_page_table"]),
            reload_sampling_params=bool(flags["reload_sampling_params"]),
            reset_sampling_state=bool(flags["reset_sampling_state"]),
            slot_remap=parse_slot_remap(slot_remap, geometry),
        )
        update.check_coherence()
        return update
    given = [name for name, value in flags.items() if value is not None]
    if given:
        raise ContractInputError(
            f"{what}: {', '.join(given)} belong to decode contract v1; this legacy model takes "
            "reset_batch"
        )
    if slot_remap is not None:
        raise ContractInputError(f"{what}: slot_remap is never sent to a contract-v0 model")
    reset_batch = kwargs.pop("reset_batch", False)
    if not isinstance(reset_batch, bool):
        raise ContractInputError(f"{what}: reset_batch={reset_batch!r} must be a bool")
    return DecodeUpdate.from_reset_batch(reset_batch)
