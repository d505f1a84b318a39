"""The one module that calls into a tt-metal model class and its instances.

Everything the plugin asks of a TT model goes through ``ModelAdapter``: loading
(``initialize_vllm_model``), the KV budget and allocation, warm-up, prefill, decode submit and
read-back, and the release hooks. The runner and worker build typed call objects
(``contract/call_types.py``) and receive typed results; they never touch the model object or
probe it.
What a class offers is read once, from its attributes and signatures, into ``AdapterProfile``.
Every call passes the real argument names by keyword, except where docs/TT_MODEL_CONTRACT.md
says positional (the first three of ``initialize_vllm_model``, ``allocate_kv_cache_per_layer``'s
list and legacy ``allocate_kv_cache``'s three arguments).
"""

from __future__ import annotations

import enum
import functools
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import torch

from vllm_tt_plugin.adapter.kv_cache import KVLayerEntry
from vllm_tt_plugin.async_decode import wait_events
from vllm_tt_plugin.config import DEFAULT_DEVICE_TIMEOUT_S, DEFAULT_WARMUP_TIMEOUT_S
from vllm_tt_plugin.contract.budget import checked_budget
from vllm_tt_plugin.contract.call_plan import (
    LOAD_POSITIONAL,
    SIZING_KEYWORDS,
    PlanFacts,
    decode_keywords,
    derive_facts,
    load_keywords,
    pick,
    prefill_keywords,
    warmup_forms,
    warmup_keywords,
)
from vllm_tt_plugin.contract.call_types import (
    DecodeCall,
    DecodeSubmission,
    DeviceLogprobs,
    KVSizingCall,
    LoadCall,
    ModelOutput,
    PrefillCall,
    WarmupPlan,
)
from vllm_tt_plugin.contract.protocols import (
    DEFAULT_MAX_TOKENS_ALL_USERS,
    TTAsyncReadback,
    TTHybridModelClass,
    TTKVAllocator,
    TTLegacyKVAllocator,
    TTModel,
    TTModelClass,
    decode_contract_version,
)
from vllm_tt_plugin.device.watchdog import DeviceCall, DeviceWatchdog
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.utils.log import get_logger

logger = get_logger(__name__)

# Devices per DP rank on which tt-metal computes the flat sampled-token logprob.
FLAT_LOGPROB_DEVICES = (8, 32)
# Class names whose generator returns top-k (values, indices) device logprobs (identity fact).
TOP_K_LOGPROB_CLASSES = ("GptOssForCausalLM",)


class ModelContractError(TypeError):
    """A TT model class or object does not offer the part of the contract the plugin calls."""


class HybridTables(str, enum.Enum):
    """How a hybrid class takes its page tables (its signature decides)."""

    PER_GROUP = "page_tables_per_group"
    PER_LAYER = "page_tables_per_layer"


class LogprobsForm(str, enum.Enum):
    FLAT = "flat"  # the sampled token's logprob, [B]
    TOP_K = "top_k"  # GPT-OSS: (values [B, 32], indices [B, 32])


def _has_parameter(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _own_signature(fn: Any) -> inspect.Signature | None:
    """``fn``'s parameters as a caller passes them: a function read off the class loses its
    ``self`` (a bound method's signature has none already). None when unreadable."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(signature.parameters.values())
    if (
        inspect.isfunction(fn)
        and params
        and params[0].kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
    ):
        signature = signature.replace(parameters=params[1:])
    return signature


def _bind(fn: Callable[..., Any], what: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Fail before calling when ``fn``'s signature cannot take these arguments, naming the
    parameter (e.g. an older tt-metal's extra required warm-up argument)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        missing = [
            name
            for name, p in signature.parameters.items()
            if p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and name not in kwargs
        ][len(args) :]
        detail = f"; required but not passed: {', '.join(missing)}" if missing else ""
        raise ModelContractError(
            f"{what}{signature} cannot be called as the TT model contract calls it "
            f"({exc}){detail} (docs/TT_MODEL_CONTRACT.md)"
        ) from exc


@dataclass(frozen=True)
class AdapterProfile:
    """What a served class offers, read once from its attributes and signatures."""

    class_name: str
    capabilities: ModelCapabilities
    hybrid: bool  # has get_kv_cache_spec
    hybrid_tables: HybridTables | None
    hybrid_groups_enabled: bool  # _HYBRID_KV_CACHE_GROUPS_ENABLED
    init_takes_vllm_config: bool
    has_max_tokens_all_users: bool
    logprobs_form: LogprobsForm
    # What decides the calls' arguments (call_plan); the decode contract version is the
    # instance's, set by ModelAdapter.load (0 until then).
    plan_facts: PlanFacts

    @classmethod
    def of(
        cls,
        model_cls: type,
        hf_config: Any = None,
        capabilities: ModelCapabilities | None = None,
    ) -> AdapterProfile:
        """The class's profile; ``capabilities`` are the launch plan's where one exists (the
        platform parsed the declaration once), else parsed here (a class used without a plan)."""
        if capabilities is None:
            capabilities = ModelCapabilities.from_model_class(model_cls)
        facts = derive_facts(
            # What the class declares; the instance's value is read after load.
            decode_contract=decode_contract_version(model_cls),
            device_sampling=capabilities.supports_sample_on_device,
            output_tokens_per_step=capabilities.output_tokens_per_step,
            has_method=lambda name: callable(getattr(model_cls, name, None)),
            takes=lambda method, param: _has_parameter(getattr(model_cls, method, None), param),
            signature=lambda method: _own_signature(getattr(model_cls, method, None)),
            device_penalties=capabilities.supports_device_penalties,
        )
        tables = HybridTables(facts.hybrid_tables) if facts.hybrid_tables else None
        model_type = getattr(hf_config, "model_type", None)
        top_k = model_cls.__name__ in TOP_K_LOGPROB_CLASSES or model_type == "gpt_oss"
        return cls(
            class_name=model_cls.__qualname__,
            capabilities=capabilities,
            hybrid=tables is not None,
            hybrid_tables=tables,
            hybrid_groups_enabled=getattr(model_cls, "_HYBRID_KV_CACHE_GROUPS_ENABLED", False)
            is True,
            init_takes_vllm_config=facts.init_takes_vllm_config,
            has_max_tokens_all_users=callable(getattr(model_cls, "get_max_tokens_all_users", None)),
            logprobs_form=LogprobsForm.TOP_K if top_k else LogprobsForm.FLAT,
            plan_facts=facts,
        )

    def device_logprobs_on(self, devices_per_rank: int) -> bool:
        """Whether the default device path computes the flat sampled-token logprob here."""
        return devices_per_rank in FLAT_LOGPROB_DEVICES


class ModelAdapter:
    """Owns the class and, after ``load``, the instance of the served TT model."""

    def __init__(
        self,
        model_cls: type,
        hf_config: Any = None,
        device_timeout_s: float = DEFAULT_DEVICE_TIMEOUT_S,
        warmup_timeout_s: float = DEFAULT_WARMUP_TIMEOUT_S,
        *,
        capabilities: ModelCapabilities | None = None,
    ) -> None:
        init = getattr(model_cls, "initialize_vllm_model", None)
        if not callable(init):
            raise ModelContractError(
                f"{model_cls.__qualname__} has no initialize_vllm_model classmethod "
                "(docs/TT_MODEL_CONTRACT.md)"
            )
        self.model_cls = model_cls
        self.profile = AdapterProfile.of(model_cls, hf_config, capabilities)
        self._model: TTModel | None = None
        # The planner's input (call_plan): the class's facts until load, then the instance's
        # (``load`` reads what an instance may set itself: contract version, hooks, warm-up).
        self.facts = self.profile.plan_facts
        self._decode_names: dict[tuple[bool, bool, bool, bool], tuple[str, ...]] = {}
        # Every call below that reaches the device runs through the watchdog (RELIABILITY.md).
        self.watchdog = DeviceWatchdog()
        self.device_timeout_s = device_timeout_s
        self.warmup_timeout_s = warmup_timeout_s

    def _on_device(
        self, kind: str, method: str, batch: int | None, warmup: bool, fn: Callable[[], Any]
    ) -> Any:
        bound = self.warmup_timeout_s if warmup else self.device_timeout_s
        call = DeviceCall(kind, f"{self.profile.class_name}.{method}", batch, bound)
        return self.watchdog.run(call, fn)

    @property
    def capabilities(self) -> ModelCapabilities:
        return self.profile.capabilities

    @property
    def contract_version(self) -> int:
        """The instance's ``decode_input_update_contract`` once loaded (the class's before)."""
        return self.facts.decode_contract

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def model(self) -> TTModel:
        """The loaded instance (for tests and ``get_model``); the plugin never calls it."""
        if self._model is None:
            raise RuntimeError("the TT model is not loaded yet")
        return self._model

    # --- class level ---------------------------------------------------------------------------
    def kv_cache_spec(self, vllm_config: Any) -> dict[str, Any] | None:
        """``get_kv_cache_spec(vllm_config)`` of a hybrid class, else None."""
        if not self.profile.hybrid:
            return None
        # The profile read the class (hybrid: it has get_kv_cache_spec).
        hybrid_cls = cast("TTHybridModelClass", self.model_cls)
        return dict(hybrid_cls.get_kv_cache_spec(vllm_config))

    def max_tokens_all_users(self, call: KVSizingCall) -> int:
        if not self.profile.has_max_tokens_all_users:
            return DEFAULT_MAX_TOKENS_ALL_USERS
        sized_cls = cast("TTModelClass", self.model_cls)
        values = {
            "model_name": call.model_name,
            "num_devices": call.num_devices,
            "tt_data_parallel": call.tt_data_parallel,
            "max_model_len": call.max_model_len,
            "max_num_seqs": call.max_num_seqs,
        }
        try:
            value: object = sized_cls.get_max_tokens_all_users(**pick(values, SIZING_KEYWORDS))
        except AttributeError as exc:
            # The default is for a class without the method, also one a class delegates to (a
            # tt-transformers registry class selecting its generator). Any other AttributeError
            # is the budget failing (e.g. a Python 3.11 name on a 3.10 host): sizing the KV cache
            # at 131072 tokens then is a guess that can overrun the device, so it is refused.
            if exc.name != "get_max_tokens_all_users":
                raise ValueError(
                    f"{self.profile.class_name}.get_max_tokens_all_users failed: {exc!r}"
                ) from exc
            return DEFAULT_MAX_TOKENS_ALL_USERS
        return checked_budget(self.profile.class_name, value)

    def load(self, call: LoadCall) -> None:
        """``initialize_vllm_model``: three positional, the rest by keyword; ``vllm_config`` only
        when the signature has it; ``n_layers`` never."""
        values: dict[str, Any] = {
            "hf_config": call.hf_config,
            "mesh_device": call.mesh_device,
            "max_batch_size": call.max_batch_size,
            "max_seq_len": call.max_seq_len,
            "tt_data_parallel": call.tt_data_parallel,
            "optimizations": call.optimizations,
            "vllm_config": call.vllm_config,
        }
        kwargs = pick(values, load_keywords(self.facts))
        args = tuple(values[name] for name in LOAD_POSITIONAL)
        init = cast("TTModelClass", self.model_cls).initialize_vllm_model
        _bind(init, f"{self.profile.class_name}.initialize_vllm_model", args, kwargs)
        model: TTModel = init(*args, **kwargs)
        for method in ("prefill_forward", "decode_forward"):
            if not callable(getattr(model, method, None)):
                raise ModelContractError(
                    f"{self.profile.class_name}.initialize_vllm_model returned "
                    f"{type(model).__qualname__}, which has no {method} "
                    "(docs/TT_MODEL_CONTRACT.md)"
                )
        if type(model) is not self.model_cls:
            # tt_transformers.vllm_registry's classes return their generator's own model (and a
            # subclass may unset a hook): the KV cache layout was planned from the registered
            # class and must be the instance's too.
            planned = callable(getattr(self.model_cls, "get_kv_cache_spec", None))
            own = callable(getattr(type(model), "get_kv_cache_spec", None))
            if planned != own:
                raise ModelContractError(
                    f"{self.profile.class_name}.initialize_vllm_model returned "
                    f"{type(model).__qualname__}, which {'has' if own else 'lacks'} the "
                    f"get_kv_cache_spec hook its class {'lacks' if own else 'has'}: the KV cache "
                    "was planned from the class (docs/TT_MODEL_CONTRACT.md)"
                )
        self._model = model
        self.facts = instance_facts(self.profile.plan_facts, model)
        self._decode_names.clear()
        if self.contract_version == 0:
            logger.warning(
                "%s predates the decode reload contract (no decode_input_update_contract): it "
                "gets the legacy reset_batch flag; see docs/DECODE_RELOAD_CONTRACT.md",
                type(model).__qualname__,
            )

    # --- KV cache ------------------------------------------------------------------------------
    def allocate_kv_cache(self, entries: list[KVLayerEntry]) -> Any:
        """``allocate_kv_cache_per_layer(per_layer_specs)`` when present, else the legacy
        ``allocate_kv_cache(kv_cache_shape, dtype, num_layers)`` for identical layers."""
        if not entries:
            raise ValueError("no KV cache layers to allocate")
        model = self.model
        if self.facts.per_layer_allocation:
            allocator = cast("TTKVAllocator", model)
            specs = [e.as_tuple() for e in entries]
            return self._on_device(
                "KV allocation",
                "allocate_kv_cache_per_layer",
                None,
                True,
                lambda: allocator.allocate_kv_cache_per_layer(specs),
            )
        first = entries[0]
        for entry in entries:
            if (entry.shape, entry.dtype) != (first.shape, first.dtype):
                raise ModelContractError(
                    f"{self.profile.class_name} only has the legacy allocate_kv_cache, which "
                    f"needs identical layers; {entry.layer_name} is {entry.shape} {entry.dtype}, "
                    f"{first.layer_name} is {first.shape} {first.dtype}. Implement "
                    "allocate_kv_cache_per_layer"
                )
        if len({e.tensor_idx for e in entries}) != len(entries):
            raise ModelContractError(
                f"{self.profile.class_name} only has the legacy allocate_kv_cache, which cannot "
                "share buffers between layers; implement allocate_kv_cache_per_layer"
            )
        legacy = cast("TTLegacyKVAllocator", model)
        return self._on_device(
            "KV allocation",
            "allocate_kv_cache",
            None,
            True,
            lambda: legacy.allocate_kv_cache(first.shape, first.dtype, len(entries)),
        )

    # --- warm-up -------------------------------------------------------------------------------
    def warm_up(self, plan: WarmupPlan) -> None:
        """Compile with trace off, reset ``already_warmed_up_prefill``, then capture traces.
        The keywords are the ones negotiated with each method's signature (``call_plan``); a
        form the plugin cannot call is refused before any warm-up runs."""
        model = self.model
        refused = self.facts.warmup_refusal()
        if refused is not None:
            raise ModelContractError(refused.error(self.profile.class_name))
        prefill = getattr(model, "warmup_model_prefill", None)
        decode = getattr(model, "warmup_model_decode", None)
        for enable_trace in (False, True):
            if enable_trace and hasattr(model, "already_warmed_up_prefill"):
                model.already_warmed_up_prefill = False
            if enable_trace and not (plan.trace_prefill or plan.trace_decode):
                break
            if callable(prefill) and (not enable_trace or plan.trace_prefill):
                values = {
                    "kv_cache": plan.kv_cache,
                    "enable_trace": enable_trace,
                    "can_sample_on_device": plan.prefill_on_device,
                    # Non-greedy rows sample on the device whenever the step kind does
                    # (sampling_route.decide_route has no greedy-only condition).
                    "non_greedy_decoding_on_device": plan.prefill_on_device,
                }
                kwargs = pick(values, warmup_keywords(self.facts, "warmup_model_prefill"))
                _bind(prefill, f"{self.profile.class_name}.warmup_model_prefill", (), kwargs)
                self._on_device(
                    "warm-up",
                    "warmup_model_prefill",
                    None,
                    True,
                    functools.partial(prefill, **kwargs),
                )
            if callable(decode) and (not enable_trace or plan.trace_decode):
                values = {
                    "kv_cache": plan.kv_cache,
                    "enable_trace": enable_trace,
                    "max_batch_size": plan.max_batch_size,
                    "num_blocks": plan.num_blocks,
                    "can_sample_on_device": plan.decode_on_device,
                    "non_greedy_decoding_on_device": plan.decode_on_device,
                }
                kwargs = pick(values, warmup_keywords(self.facts, "warmup_model_decode"))
                _bind(decode, f"{self.profile.class_name}.warmup_model_decode", (), kwargs)
                self._on_device(
                    "warm-up",
                    "warmup_model_decode",
                    plan.max_batch_size,
                    True,
                    functools.partial(decode, **kwargs),
                )

    # --- prefill -------------------------------------------------------------------------------
    def prefill(self, call: PrefillCall) -> ModelOutput:
        values: dict[str, Any] = {
            "tokens": call.tokens,
            "page_table": call.page_tables[0],
            "kv_cache": call.kv_cache,
            "enable_trace": call.enable_trace,
            "prompt_lens": call.prompt_lens,
            "start_pos": call.start_pos,
        }
        values.update(self._hybrid_tables(call.page_tables, call.layer_groups))
        values.update(call.multimodal)
        values["sampling_params"] = call.sampling_params
        values["empty_slots"] = call.empty_slots
        names = prefill_keywords(
            self.facts,
            on_device=call.sampling_params is not None,
            multimodal=tuple(call.multimodal),
        )
        kwargs = pick(values, names)
        model = self.model
        out = self._on_device(
            "prefill",
            "prefill_forward",
            len(call.prompt_lens),
            False,
            lambda: model.prefill_forward(**kwargs),
        )
        rope_deltas = None
        if call.uses_mrope:
            out, rope_deltas = _split_mrope(out, len(call.prompt_lens))
        result = self._normalise(out, call.sampling_params is not None, call.want_logprobs)
        return ModelOutput(
            result.logits, result.tokens, result.logprobs, rope_deltas, blocks=result.blocks
        )

    def _hybrid_tables(
        self, tables: list[torch.Tensor], layer_groups: tuple[int, ...] | None
    ) -> dict[str, Any]:
        form = self.profile.hybrid_tables
        if form is None:
            return {}
        if form is HybridTables.PER_GROUP:
            return {form.value: list(tables)}
        if layer_groups is None:
            raise ModelContractError(
                f"{self.profile.class_name} takes page_tables_per_layer but the layer -> KV "
                "group map is unknown"
            )
        return {form.value: [tables[g] for g in layer_groups]}

    # --- decode --------------------------------------------------------------------------------
    def submit_decode(
        self,
        call: DecodeCall,
        read_in_call: bool = False,
        previous: DecodeSubmission | None = None,
    ) -> DecodeSubmission:
        """``decode_forward(read_from_device=False)``, one watchdog hand-off for the step:

        - ``read_in_call`` (a synchronous step): the same device call also runs
          ``process_decode_output_host`` on the result;
        - ``previous`` (an overlapped step submitted before this one and not read yet): after
          the submit, the same call reads that step back (``read_decode``'s async path),
          which vLLM's engine asks for right after this submit (``step_with_batch_queue``)."""
        on_device = call.sampling_params is not None
        key = (on_device, call.prompt_tokens is not None, call.slot_remap is not None,
               call.uses_mrope)  # fmt: skip
        names = self._decode_names.get(key)
        if names is None:
            names = decode_keywords(
                self.facts, on_device=key[0], penalties=key[1], remap=key[2], mrope=key[3]
            )
            self._decode_names[key] = names
        values: dict[str, Any] = {
            "tokens": call.tokens,
            "page_table": call.page_tables[0],
            "kv_cache": call.kv_cache,
            "start_pos": call.start_pos,
            "enable_trace": call.enable_trace,
            "read_from_device": False,
            "sampling_params": call.sampling_params,
            "prompt_tokens": call.prompt_tokens,
            "output_tokens": call.output_tokens,
            "slot_remap": call.slot_remap,
            "reset_batch": call.command.touches_device_inputs,
            "rope_deltas_all_users": call.rope_deltas,
        }
        values.update(self._hybrid_tables(call.page_tables, call.layer_groups))
        values.update(call.command.v1_kwargs())
        kwargs = pick(values, names)
        model = self.model
        batch = call.rows if call.rows is not None else int((call.start_pos >= 0).sum())
        read_now = read_in_call and self.facts.read_back_hooks
        read_previous = previous if previous is not None and self.facts.read_back_hooks else None
        submitted = [0]

        def run() -> tuple[Any, Any]:
            raw = model.decode_forward(**kwargs)
            submitted[0] = time.perf_counter_ns()
            if read_previous is not None:
                self._read_overlapped(read_previous)
            if not read_now:
                return raw, None
            # read_now: load() found both read-back methods on the instance.
            reader = cast("TTAsyncReadback", model)
            return raw, reader.process_decode_output_host(raw, is_tokens=on_device)

        start = time.perf_counter_ns()
        raw, host = self._on_device("decode", "decode_forward", batch, False, run)
        done = time.perf_counter_ns()
        return DecodeSubmission(
            raw, on_device, call.want_logprobs, batch, submitted[0] - start, read_now, host,
            done - start,
        )  # fmt: skip

    def read_decode(self, submission: DecodeSubmission, overlapped: bool) -> ModelOutput:
        """The step's host output, normalised (``read_decode_host``, then ``normalise_decode``)."""
        return self.normalise_decode(submission, self.read_decode_host(submission, overlapped))

    def normalise_decode(self, submission: DecodeSubmission, out: Any) -> ModelOutput:
        """The model's host output of a decode step in the plugin's form: host work, no device
        call (the runner counts it as output building, not as the read-back)."""
        return self._normalise(out, submission.on_device, submission.want_logprobs)

    def read_decode_host(self, submission: DecodeSubmission, overlapped: bool) -> Any:
        """The model's host output of a decode step, as the model returns it. Async path:
        ``read_decode_output(async_read=True)``, wait on every event, then
        ``process_decode_output_host``. Synchronous path: ``process_decode_output_host`` on the
        raw output. A model without ``read_decode_output`` returned host tensors already."""
        out = submission.raw
        if submission.host_ready:
            out = submission.host_output  # read back by the submitting (or the next) call
        elif self.facts.read_back_hooks and overlapped:
            self._on_device(
                "decode read-back",
                "read_decode_output",
                submission.batch_size,
                False,
                lambda: self._read_overlapped(submission),
            )
            out = submission.host_output
        elif self.facts.read_back_hooks:
            # load() found both read-back methods on the instance.
            model = cast("TTAsyncReadback", self.model)
            out = self._on_device(
                "decode read-back",
                "process_decode_output_host",
                submission.batch_size,
                False,
                lambda: model.process_decode_output_host(
                    submission.raw, is_tokens=submission.on_device
                ),
            )
        return out

    def _read_overlapped(self, submission: DecodeSubmission) -> None:
        """On the device thread: read an overlapped step back (``read_decode_output``, wait on
        its events, ``process_decode_output_host``) and keep the host output on the submission.
        Inside the next step's call it names itself to the watchdog first."""
        model = cast("TTAsyncReadback", self.model)
        self.watchdog.stage(
            DeviceCall(
                "decode read-back",
                f"{self.profile.class_name}.read_decode_output",
                submission.batch_size,
                self.device_timeout_s,
            )
        )
        raw, events = model.read_decode_output(submission.raw, async_read=True)
        wait_events(events)
        submission.host_output = model.process_decode_output_host(
            raw, is_tokens=submission.on_device
        )
        submission.host_ready = True

    # --- output normalisation ------------------------------------------------------------------
    def _normalise(self, out: Any, on_device: bool, want_logprobs: bool) -> ModelOutput:
        """A bare tensor or a ``(values, logprobs)`` 2-tuple -> logits [B, V] or one token per
        row (``[B]`` or ``[B, 1]``)."""
        logprobs_raw: Any = None
        if isinstance(out, (tuple, list)):
            if len(out) != 2:
                raise ModelContractError(
                    f"{self.profile.class_name} returned a {len(out)}-tuple; expected a tensor "
                    "or (values, logprobs)"
                )
            out, logprobs_raw = out
        values = out if isinstance(out, torch.Tensor) else torch.as_tensor(out)
        canvas = self.capabilities.output_tokens_per_step
        if canvas > 1:
            return ModelOutput(None, None, None, blocks=self._block(values, canvas))
        if not on_device:
            if values.dim() == 3:
                values = values[:, -1, :]
            return ModelOutput(logits=values, tokens=None, logprobs=None)
        # The tokens go on as Python ints, through numpy: one torch call (``numpy()``) where
        # flattening and casting the tensor take two or three, each several us right after the
        # device wait (cold caches). Host outputs are CPU tensors (the contract); a float or
        # bool form (numpy has no bfloat16; a float may carry grad) is cast in torch first.
        if values.is_floating_point() or values.dtype is torch.bool:
            values = values.to(torch.int64)
        array = values.numpy()
        if array.ndim != 1:
            array = array.reshape(array.shape[0], -1)[:, -1]  # [B, 1] (or [B, k]): the last
        tokens: list[int] = array.tolist()
        logprobs = None
        if want_logprobs:
            if logprobs_raw is None:
                raise ModelContractError(
                    f"{self.profile.class_name} sampled on the device with logprobs asked for "
                    "but returned no logprobs"
                )
            logprobs = self._device_logprobs(logprobs_raw, len(tokens))
        return ModelOutput(logits=None, tokens=tokens, logprobs=logprobs)

    def _block(self, values: torch.Tensor, canvas: int) -> torch.Tensor:
        """A block-output model's committed canvases: int64 [B, canvas]."""
        if values.dim() != 2 or values.shape[1] != canvas or values.is_floating_point():
            raise ModelContractError(
                f"{self.profile.class_name} declares output_tokens_per_step={canvas} but "
                f"returned {values.dtype} {tuple(values.shape)}; expected integer [rows, {canvas}] "
                "committed tokens (docs/BLOCK_SERVING.md)"
            )
        return values.to(torch.int64)

    def _device_logprobs(self, raw: Any, rows: int) -> DeviceLogprobs:
        if self.profile.logprobs_form is LogprobsForm.TOP_K:
            if not (isinstance(raw, (tuple, list)) and len(raw) == 2):
                raise ModelContractError(
                    f"{self.profile.class_name}: top-k device logprobs must be "
                    f"(values [B, 32], indices [B, 32]), got {type(raw).__name__}"
                )
            values, indices = (torch.as_tensor(t) for t in raw)
            return DeviceLogprobs(
                flat=None,
                top_values=values.reshape(rows, -1).to(torch.float32),
                top_indices=indices.reshape(rows, -1).to(torch.int64),
            )
        flat = torch.as_tensor(raw).reshape(-1).to(torch.float32)
        if flat.numel() != rows or bool(flat.isnan().any()):
            raise ModelContractError(
                f"{self.profile.class_name} returned no sampled-token logprobs (a placeholder) "
                "although the plugin routed logprobs to the device"
            )
        return DeviceLogprobs(flat=flat, top_values=None, top_indices=None)

    # --- release hooks -------------------------------------------------------------------------
    def release_request(self, slot: int) -> None:
        hook = getattr(self._model, "release_request", None)
        if callable(hook):
            hook(slot)

    def release_persistent_capture(self) -> None:
        hook = getattr(self._model, "release_persistent_capture", None)
        if callable(hook):
            hook()


def _split_mrope(out: Any, num_rows: int) -> tuple[Any, list[int]]:
    """``(out, rope_deltas)`` of an mRoPE model's prefill -> the output and one int per row."""
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ModelContractError(
            "an mRoPE model's prefill_forward must return (out, rope_deltas); got "
            f"{type(out).__name__}"
        )
    result, deltas = out
    values = torch.as_tensor(deltas).reshape(-1).tolist()
    if len(values) != num_rows:
        raise ModelContractError(f"prefill returned {len(values)} rope_deltas for {num_rows} rows")
    return result, [int(v) for v in values]


def instance_facts(class_facts: PlanFacts, model: object) -> PlanFacts:
    """The planner's facts of a loaded instance: what an instance may set or add itself (its
    ``decode_input_update_contract``, its read-back and per-layer allocation methods, its
    warm-up signatures) read from it, the rest the class's."""

    def has(method: str) -> bool:
        return callable(getattr(model, method, None))

    return replace(
        class_facts,
        decode_contract=decode_contract_version(model),
        # Without both read-back hooks a model returns host tensors and both are skipped.
        read_back_hooks=has("read_decode_output") and has("process_decode_output_host"),
        per_layer_allocation=has("allocate_kv_cache_per_layer"),
        **warmup_forms(lambda m: _own_signature(getattr(model, m)) if has(m) else None),
    )
