"""Every call ModelAdapter makes, bound to the real tt-metal signatures of each served family.

For each served profile of ``fixtures/tt_metal/signatures.json`` (``contract_signatures``) a
recording class is built whose methods carry the profile's real signatures and facts (decode
contract version, device sampling, hybrid KV, mRoPE, multimodal fields, block-output hooks); the
adapter then loads, sizes, allocates, warms up, prefills and decodes it the way the plugin
serves. Every recorded call is bound with ``contract_signatures.bind_call``
(``inspect.Signature.bind``, also to what a pass-through method delegates to): a renamed,
missing or unexpected argument fails. Each call's argument names must also be one of the calls
``call_plan.plan_calls`` lists for the facts the adapter read from the class (what the parity
checker binds to a checkout), so the adapter and the checker cannot drift apart. A break the
fixture records (``known_breaks``) must still be a break, and where it is the load, the adapter
must refuse it loudly, naming the argument.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
import torch

from vllm_tt_plugin.adapter.kv_cache import KVLayerEntry
from vllm_tt_plugin.adapter.model_adapter import ModelAdapter, ModelContractError
from vllm_tt_plugin.contract.call_plan import METHODS, ServedFacts, plan_calls
from vllm_tt_plugin.contract.call_types import (
    DecodeCall,
    KVSizingCall,
    LoadCall,
    PrefillCall,
    WarmupPlan,
)
from vllm_tt_plugin.contract.reload_contract import FULL_RELOAD, STEADY
from vllm_tt_plugin.contract.sampling_params import DeviceSamplingRow, TTSamplingParams
from vllm_tt_plugin.contract.signatures import (
    ContractMismatch,
    FamilyProfile,
    bind_call,
    load_profiles,
    parse_signature,
)

PROFILES = load_profiles()
# Profiles the fixture pins no methods for (checked against a checkout only) have nothing to bind.
SERVED = sorted(t for t, p in PROFILES.items() if p.role == "served" and p.methods)
SHAPES = {plan.method: plan for plan in METHODS}
B, V, LAYERS = 4, 64, 2
Call = tuple[str, tuple[Any, ...], dict[str, Any]]


def recording_class(profile: FamilyProfile) -> tuple[type, list[Call]]:
    """A class with the profile's real method signatures that records every call."""
    calls: list[Call] = []
    has_readback = all(
        profile.lookup(m) is not None for m in ("read_decode_output", "process_decode_output_host")
    )

    def output(method: str, kwargs: dict[str, Any]) -> Any:
        tokens = torch.zeros((B, 1), dtype=torch.int64)
        if method == "prefill_forward":
            out: Any = (
                tokens if kwargs.get("sampling_params") is not None else torch.zeros((B, 1, V))
            )
            return (out, torch.zeros(B, dtype=torch.int64)) if profile.facts.mrope else out
        if method == "decode_forward" and has_readback:
            return "device-output"
        if method in ("decode_forward", "process_decode_output_host"):
            on_device = kwargs.get("is_tokens", kwargs.get("sampling_params") is not None)
            return (tokens if on_device else torch.zeros((B, 1, V))), torch.zeros(B)
        if method == "read_decode_output":
            return "host-output", []
        if method == "get_max_tokens_all_users":
            return 32768
        if method == "get_kv_cache_spec":
            return {}
        return "kv" if method.startswith("allocate") else None

    def make(method: str, sig: inspect.Signature, is_classmethod: bool) -> Any:
        def call(owner: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append((method, args, kwargs))
            return owner() if method == "initialize_vllm_model" else output(method, kwargs)

        first = inspect.Parameter(
            "cls" if is_classmethod else "self", inspect.Parameter.POSITIONAL_ONLY
        )
        call.__signature__ = sig.replace(parameters=[first, *sig.parameters.values()])  # type: ignore[attr-defined]
        return classmethod(call) if is_classmethod else call

    attrs: dict[str, Any] = {}
    for method in SHAPES:
        found = profile.lookup(method)
        if found is not None:
            _, m = found
            attrs[method] = make(method, m.signature, m.is_classmethod)
    for method in ("prefill_forward", "decode_forward"):
        # Not in the public data (checked against a checkout only): accept, bind nothing.
        attrs.setdefault(method, make(method, parse_signature("(**unrecorded)"), False))
    if profile.facts.hybrid and "get_kv_cache_spec" not in attrs:
        attrs["get_kv_cache_spec"] = make(
            "get_kv_cache_spec", parse_signature("(vllm_config)"), True
        )
    attrs["model_capabilities"] = {"supports_sample_on_device": profile.facts.device_sampling}
    attrs["decode_input_update_contract"] = profile.facts.decode_contract
    attrs["already_warmed_up_prefill"] = False
    return type(profile.target.rsplit(":", 1)[1], (), attrs), calls


def serve(adapter: ModelAdapter, profile: FamilyProfile) -> None:
    """What the plugin does with a model class, from load to read-back."""
    facts = profile.facts
    adapter.load(LoadCall("hf", "mesh", B, 4096, 1, None, vllm_config="vllm-config"))
    adapter.max_tokens_all_users(KVSizingCall("m", 8, 1, 4096, B))
    adapter.kv_cache_spec("vllm-config")
    shape = (16, 1, 64, 128)
    entries = [KVLayerEntry(f"model.layers.{i}.self_attn", i, shape, torch.bfloat16, i)
               for i in range(LAYERS)]  # fmt: skip
    adapter.allocate_kv_cache(entries)
    device = facts.device_sampling
    adapter.warm_up(WarmupPlan("kv", B, 64, device, device, True, True))
    tables = [torch.zeros((B, 2), dtype=torch.int32)]
    params = TTSamplingParams.encode([DeviceSamplingRow(repetition_penalty=1.2)] * B, V)
    mm = {name: [None] * B for name in facts.multimodal_kwargs}
    for sampling in (None, params) if device else (None,):
        for multimodal in ({}, mm):
            adapter.prefill(PrefillCall(
                tokens=torch.zeros((B, 8), dtype=torch.int32), page_tables=tables,
                kv_cache="kv", enable_trace=True, prompt_lens=[8] * B, start_pos=[0] * B,
                empty_slots=list(range(B)), sampling_params=sampling, multimodal=multimodal,
                uses_mrope=facts.mrope, layer_groups=(0,) * LAYERS,
            ))  # fmt: skip
    history = torch.full((B, 2), -1, dtype=torch.int32)
    steps = [(FULL_RELOAD, None, torch.arange(B))]
    if device:
        steps.append((STEADY, params, None))
    for command, sampling, remap in steps:
        submission = adapter.submit_decode(DecodeCall(
            tokens=torch.zeros((B, 1), dtype=torch.int32),
            start_pos=torch.zeros(B, dtype=torch.int32), page_tables=tables, kv_cache="kv",
            enable_trace=True, command=command, slot_remap=remap, sampling_params=sampling,
            prompt_tokens=history if sampling else None,
            output_tokens=history if sampling else None,
            uses_mrope=facts.mrope, rope_deltas=torch.zeros(B, dtype=torch.int64) if remap
            is not None else None, layer_groups=(0,) * LAYERS,
        ))  # fmt: skip
        for overlapped in (False, True):
            adapter.read_decode(submission, overlapped)
    if facts.block_output:
        adapter.release_request(0)
        adapter.release_persistent_capture()


def check_names(
    adapter: ModelAdapter, profile: FamilyProfile, method: str, args: tuple[Any, ...], kwargs: dict
) -> str:
    """'' when the call is one the planner lists for the facts the adapter read, else why."""
    served = ServedFacts(profile.facts.mrope, profile.facts.multimodal_kwargs)
    planned = plan_calls(method, adapter.facts, served)
    if any(len(args) == len(p.positional) and set(kwargs) == set(p.keywords) for p in planned):
        return ""
    return (f"{method}: sent {len(args)} positional + {sorted(kwargs)}; planned "
            f"{[(p.positional, p.keywords) for p in planned]}")  # fmt: skip


@pytest.mark.parametrize("target", SERVED)
def test_every_adapter_call_binds_to_the_real_signature(target: str) -> None:
    profile = PROFILES[target]
    cls, calls = recording_class(profile)
    failures: list[str] = []
    adapter = ModelAdapter(cls)
    try:
        serve(adapter, profile)
    except ModelContractError as exc:
        if "initialize_vllm_model" not in profile.known_breaks:
            failures.append(f"adapter refused: {exc}")
        else:  # a recorded break at load: the adapter refuses it loudly, by name
            assert "initialize_vllm_model" in str(exc) and "max_seq_len" in str(exc)
    for method, args, kwargs in calls:
        if profile.lookup(method) is None:
            continue  # not in the public data: the checkout check covers it
        try:
            bind_call(profile, method, args, kwargs)
        except ContractMismatch as exc:
            if method not in profile.known_breaks:
                failures.append(str(exc))
        else:
            if method in profile.known_breaks:
                failures.append(f"{method}: recorded as a known break but it binds now")
        names = check_names(adapter, profile, method, args, kwargs)
        if names:
            failures.append(names)
    assert calls or "initialize_vllm_model" in profile.known_breaks, f"{target}: no call made"
    assert not failures, f"{target}:\n" + "\n".join(failures)


def test_binding_catches_a_renamed_argument() -> None:
    """The check has teeth: the same calls against a decode that renames page_table fail."""
    profile = PROFILES["models.tt_transformers.tt.generator_vllm:LlamaForCausalLM"]
    cls, calls = recording_class(profile)
    serve(ModelAdapter(cls), profile)
    strict = parse_signature(
        "(tokens, start_pos, page_tbl, kv_cache, *, enable_trace, read_from_device, "
        "reload_inputs, reload_page_table, reload_sampling_params, reset_sampling_state)"
    )
    _, args, kwargs = next(c for c in calls if c[0] == "decode_forward")
    bind_call(profile, "decode_forward", args, kwargs)
    with pytest.raises(TypeError, match="page_tbl"):
        strict.bind(*args, **kwargs)


def test_version_0_family_gets_reset_batch_on_device_calls_only() -> None:
    # A version-0 family that samples on the device (the pinned fixture has none today).
    llama = PROFILES["models.tt_transformers.tt.generator_vllm:LlamaForCausalLM"]
    assert llama.facts.decode_contract == 0
    profile = dataclasses.replace(
        llama, facts=dataclasses.replace(llama.facts, device_sampling=True)
    )
    cls, calls = recording_class(profile)
    serve(ModelAdapter(cls), profile)
    decodes = [k for m, _, k in calls if m == "decode_forward"]
    assert [k.get("reset_batch") for k in decodes] == [None, False]
    assert not any("reload_inputs" in k or "slot_remap" in k for k in decodes)


def test_an_instance_of_another_class_must_keep_the_planned_kv_cache_layout() -> None:
    # tt_transformers.vllm_registry: the registered class returns its generator's own model.
    class Generator:
        def prefill_forward(self, *args: Any, **kwargs: Any) -> None: ...

        def decode_forward(self, *args: Any, **kwargs: Any) -> None: ...

    class HybridGenerator(Generator):
        @classmethod
        def get_kv_cache_spec(cls, vllm_config: Any) -> dict[str, Any]:
            return {}

    def dispatcher(returns: type) -> type:
        def initialize_vllm_model(cls: type, *args: Any, **kwargs: Any) -> Any:
            return returns()

        return type("Dispatcher", (), {"initialize_vllm_model": classmethod(initialize_vllm_model)})

    call = LoadCall("hf", "mesh", B, 4096, 1, None)
    plain = ModelAdapter(dispatcher(Generator))
    plain.load(call)
    assert type(plain.model) is Generator
    hybrid = ModelAdapter(dispatcher(HybridGenerator))
    with pytest.raises(ModelContractError, match="has the get_kv_cache_spec hook its class lacks"):
        hybrid.load(call)
