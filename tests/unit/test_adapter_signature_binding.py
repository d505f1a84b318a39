"""Every call ModelAdapter makes, bound to the real tt-metal signatures of each adapter family.

For each family in the signatures file (tt-metal / tt-transformers parameter lists, as data) a
recording class is built whose methods carry exactly those signatures; the adapter then loads,
sizes, allocates, warms up, prefills and decodes it the way the plugin serves. Every recorded
call is bound with ``inspect.Signature.bind``: a renamed, missing or unexpected argument fails.
A ``generator_vllm`` method that only forwards (``*args, **kwargs``) is checked against the
shared ``Generator`` method it forwards to.

The signatures file: ``TT_METAL_SIGNATURES`` or the shared spec copy (repoint ``SIGNATURES``
to the repository's ``fixtures/tt_metal`` data once that lands).
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from vllm_tt_plugin.call_types import (
    DecodeCall,
    KVSizingCall,
    LoadCall,
    PrefillCall,
    WarmupPlan,
)
from vllm_tt_plugin.kv_cache import KVLayerEntry
from vllm_tt_plugin.model_adapter import ModelAdapter
from vllm_tt_plugin.reload_contract import FULL_RELOAD, STEADY
from vllm_tt_plugin.sampling_params import DeviceSamplingRow, TTSamplingParams

SIGNATURES = Path(
    os.environ.get("TT_METAL_SIGNATURES", "/work/shared/spec/tt_metal_signatures.json")
)
GENERATOR = "models.tt_transformers.tt.generator:Generator"
CLASS_METHODS = {"initialize_vllm_model", "get_max_tokens_all_users", "get_kv_cache_spec"}
# Methods the adapter calls (the "_class_attrs" and other keys are not methods).
METHODS = (
    "initialize_vllm_model", "get_max_tokens_all_users", "get_kv_cache_spec",
    "allocate_kv_cache_per_layer", "allocate_kv_cache", "warmup_model_prefill",
    "warmup_model_decode", "prefill_forward", "decode_forward", "read_decode_output",
    "process_decode_output_host", "release_request", "release_persistent_capture",
)  # fmt: skip
# Not driven by this contract's prefill: Mllama's cross-attention API takes images and a
# cross page table positionally (the plugin does not serve it through prefill_forward's
# text contract; see docs/TT_MODEL_CONTRACT.md, compatibility table).
KNOWN_GAPS = {("models.tt_transformers.tt.generator_vllm:MllamaForConditionalGeneration",
               "prefill_forward")}  # fmt: skip
B, V, LAYERS = 4, 64, 2

if not SIGNATURES.is_file():
    pytest.skip(f"no tt-metal signatures file at {SIGNATURES}", allow_module_level=True)
DATA = json.loads(SIGNATURES.read_text())


def parse_signature(text: str) -> inspect.Signature:
    """``(a, b=, *, c=, **kwargs)`` (the file's notation: ``name=`` has a default)."""
    body = text.strip()
    if not (body.startswith("(") and body.endswith(")")):
        raise ValueError(f"not a parameter list: {text!r}")
    params: list[inspect.Parameter] = []
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for raw in body[1:-1].split(","):
        part = raw.strip()
        if not part:
            continue
        if part == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
        elif part.startswith("**"):
            params.append(inspect.Parameter(part[2:], inspect.Parameter.VAR_KEYWORD))
        elif part.startswith("*"):
            params.append(inspect.Parameter(part[1:], inspect.Parameter.VAR_POSITIONAL))
            kind = inspect.Parameter.KEYWORD_ONLY
        elif part.endswith("="):
            params.append(inspect.Parameter(part[:-1], kind, default=None))
        else:
            params.append(inspect.Parameter(part, kind))
    return inspect.Signature(params)


def forwards(sig: inspect.Signature) -> bool:
    kinds = {p.kind for p in sig.parameters.values()}
    named = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return inspect.Parameter.VAR_POSITIONAL in kinds and all(p.default is None for p in named)


def contract_version(family: dict[str, Any]) -> int:
    declared = family.get("_class_attrs", {}).get("decode_input_update_contract")
    if isinstance(declared, int):
        return declared
    return 0 if isinstance(declared, str) and "v0" in declared else 1


def effective_signatures(name: str) -> dict[str, inspect.Signature]:
    """Each method's own signature, or the Generator method a forwarding wrapper reaches."""
    family = DATA["adapters"][name]
    base = DATA["adapters"][GENERATOR]
    base_name = str(family.get("_class_attrs", {}).get("base", ""))
    uses_generator = name.startswith("models.tt_transformers.tt.generator_vllm:") or (
        base_name.startswith(("Generator", "models.tt_transformers.tt.generator.Generator"))
    )
    version = contract_version(family)
    fallback = {
        "prefill_forward": "prefill_forward_text",
        "decode_forward": "decode_forward" if version >= 1 else "decode_forward@legacy_v0",
        "read_decode_output": "read_decode_output",
        "process_decode_output_host": "process_decode_output_host",
        "warmup_model_prefill": "warmup_model_prefill",
        "warmup_model_decode": "warmup_model_decode",
    }
    out: dict[str, inspect.Signature] = {}
    for method in METHODS:
        entry = family.get(method)
        sig = parse_signature(entry["signature"]) if entry else None
        inherited = sig is None and method in ("decode_forward", "read_decode_output",
                                                "process_decode_output_host")  # fmt: skip
        if (
            (inherited or (sig is not None and forwards(sig)))
            and uses_generator
            and (method in fallback)
        ):
            sig = parse_signature(base[fallback[method]]["signature"])
        if sig is not None:
            out[method] = sig
    return out


def recording_class(name: str, sigs: dict[str, inspect.Signature]) -> tuple[type, list[Any]]:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    family = DATA["adapters"][name]
    hybrid = "get_kv_cache_spec" in sigs or "HybridAttention" in str(
        family.get("_class_attrs", {}).get("base", "")
    )

    def output(method: str, kwargs: dict[str, Any]) -> Any:
        if method == "prefill_forward":
            if kwargs.get("sampling_params") is not None:
                return torch.zeros((B, 1), dtype=torch.int64)
            return torch.zeros((B, 1, V))
        if method == "decode_forward":
            if "read_decode_output" in sigs and "process_decode_output_host" in sigs:
                return "device-output"
            return output("process_decode_output_host", {"is_tokens": "sampling_params" in kwargs})
        if method == "read_decode_output":
            return "host-output", []
        if method == "process_decode_output_host":
            if kwargs.get("is_tokens"):
                return torch.zeros((B, 1), dtype=torch.int64), torch.zeros(B)
            return torch.zeros((B, 1, V)), torch.zeros(B)
        if method == "get_max_tokens_all_users":
            return 32768
        if method == "get_kv_cache_spec":
            return {}
        return "kv" if method.startswith("allocate") else None

    def make(method: str, sig: inspect.Signature) -> Any:
        first = "cls" if method in CLASS_METHODS else "self"

        def call(owner: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append((method, args, kwargs))
            if method == "initialize_vllm_model":
                return owner()
            return output(method, kwargs)

        params = [inspect.Parameter(first, inspect.Parameter.POSITIONAL_ONLY)]
        call.__signature__ = sig.replace(parameters=[*params, *sig.parameters.values()])
        return classmethod(call) if method in CLASS_METHODS else call

    attrs: dict[str, Any] = {m: make(m, s) for m, s in sigs.items()}
    for method in ("prefill_forward", "decode_forward"):
        # A method the file does not list (inherited from an unrecorded base): accept anything,
        # bind nothing.
        attrs.setdefault(method, make(method, parse_signature("(**unrecorded)")))
    attrs["model_capabilities"] = {"supports_sample_on_device": True}
    attrs["decode_input_update_contract"] = contract_version(family)
    attrs["already_warmed_up_prefill"] = False
    if hybrid and "get_kv_cache_spec" not in attrs:
        attrs["get_kv_cache_spec"] = make("get_kv_cache_spec", parse_signature("(vllm_config)"))
    cls = type(name.rsplit(":", 1)[1], (), attrs)
    return cls, calls


def sampling(rows: int) -> TTSamplingParams:
    return TTSamplingParams.encode([DeviceSamplingRow(repetition_penalty=1.2)] * rows, V)


def serve(adapter: ModelAdapter, sigs: dict[str, inspect.Signature]) -> None:
    """What the plugin does with a model class, from load to read-back."""
    adapter.load(LoadCall("hf", "mesh", B, 4096, 1, None, vllm_config="vllm-config"))
    adapter.max_tokens_all_users(KVSizingCall("m", 8, 1, 4096, B))
    shape = (16, 1, 64, 128)
    entries = [KVLayerEntry(f"model.layers.{i}.self_attn", i, shape, torch.bfloat16, i)
               for i in range(LAYERS)]  # fmt: skip
    if "allocate_kv_cache_per_layer" in sigs or "allocate_kv_cache" in sigs:
        adapter.allocate_kv_cache(entries)
    adapter.warm_up(WarmupPlan("kv", B, 64, True, True, True, True))
    groups = (0,) * LAYERS
    tables = [torch.zeros((B, 2), dtype=torch.int32)]
    for params in (None, sampling(B)):
        adapter.prefill(PrefillCall(
            tokens=torch.zeros((B, 8), dtype=torch.int32), page_tables=tables, kv_cache="kv",
            enable_trace=True, prompt_lens=[8] * B, start_pos=[0] * B,
            empty_slots=list(range(B)), sampling_params=params, layer_groups=groups,
        ))  # fmt: skip
    history = torch.full((B, 2), -1, dtype=torch.int32)
    for command, params, remap in ((FULL_RELOAD, None, torch.arange(B)),
                                   (STEADY, sampling(B), None)):  # fmt: skip
        submission = adapter.submit_decode(DecodeCall(
            tokens=torch.zeros((B, 1), dtype=torch.int32),
            start_pos=torch.zeros(B, dtype=torch.int32), page_tables=tables, kv_cache="kv",
            enable_trace=True, command=command, slot_remap=remap, sampling_params=params,
            prompt_tokens=history if params else None, output_tokens=history if params else None,
            layer_groups=groups,
        ))  # fmt: skip
        for overlapped in (False, True):
            adapter.read_decode(submission, overlapped)
    adapter.release_request(0)
    adapter.release_persistent_capture()


FAMILIES = sorted(DATA["adapters"])


@pytest.mark.parametrize("family", FAMILIES)
def test_every_adapter_call_binds_to_the_real_signature(family: str) -> None:
    sigs = effective_signatures(family)
    if "initialize_vllm_model" not in sigs:
        pytest.skip(f"{family}: a base class, never served itself")
    cls, calls = recording_class(family, sigs)
    failures: list[str] = []
    try:
        serve(ModelAdapter(cls), sigs)
    except TypeError as exc:  # ModelContractError from the adapter's own binding check
        failures.append(f"adapter refused: {exc}")
    for method, args, kwargs in calls:
        if (family, method) in KNOWN_GAPS or method not in sigs:
            continue  # a known gap, or a method the file does not record
        try:
            sigs[method].bind(*args, **kwargs)
        except TypeError as exc:
            failures.append(f"{method}{sigs[method]}: {exc} (kwargs {sorted(kwargs)})")
    assert not failures, f"{family}:\n" + "\n".join(failures)
    assert calls, f"{family}: the adapter made no call"


def test_binding_catches_a_renamed_argument() -> None:
    """The check has teeth: a family whose decode renames page_table is refused."""
    sigs = effective_signatures(GENERATOR.replace("generator:Generator", "generator_vllm:"
                                                  "LlamaForCausalLM"))  # fmt: skip
    strict = parse_signature("(tokens, start_pos, page_tbl, kv_cache, *, enable_trace, "
                             "read_from_device, reload_inputs, reload_page_table, "
                             "reload_sampling_params, reset_sampling_state)")  # fmt: skip
    cls, calls = recording_class(
        "models.tt_transformers.tt.generator_vllm:LlamaForCausalLM",
        {**sigs, "decode_forward": strict},
    )
    serve(ModelAdapter(cls), {**sigs, "decode_forward": strict})
    decode = [(a, k) for m, a, k in calls if m == "decode_forward"]
    with pytest.raises(TypeError, match="page_table|page_tbl"):
        strict.bind(*decode[0][0], **decode[0][1])


def test_legacy_generator_decode_binds_for_a_v0_model() -> None:
    """tt_transformers' pre-contract decode_forward (reset_batch) takes the v0 calls."""
    legacy = parse_signature(DATA["adapters"][GENERATOR]["decode_forward@legacy_v0"]["signature"])
    name = "models.tt_transformers.tt.generator_vllm:LlamaForCausalLM"
    sigs = {**effective_signatures(name), "decode_forward": legacy}
    cls, calls = recording_class(name, sigs)
    cls.decode_input_update_contract = 0
    serve(ModelAdapter(cls), sigs)
    decodes = [k for m, _, k in calls if m == "decode_forward"]
    assert [k.get("reset_batch") for k in decodes] == [None, False]  # device-sampled only
    for kwargs in decodes:
        legacy.bind(**kwargs)
