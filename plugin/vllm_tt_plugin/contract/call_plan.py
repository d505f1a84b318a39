"""Which arguments the plugin passes to each method of a TT model class: the one planner.

``ModelAdapter`` builds every call it makes from these functions, and the parity checker
(``contract_parity``) binds the same plans to tt-metal's real signatures, so the description the
checker verifies cannot drift from what the adapter sends. The inputs are the facts the plugin
reads from a model class (``PlanFacts``, derived by ``derive_facts`` from a live class or from a
checkout's source) and, per call, what that step needs (device sampling, penalty history, a slot
remap, mRoPE). Standard library only: the checker runs without torch or vLLM.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PER_GROUP_TABLES = "page_tables_per_group"
PER_LAYER_TABLES = "page_tables_per_layer"

LOAD_POSITIONAL = ("hf_config", "mesh_device", "max_batch_size")
SIZING_KEYWORDS = ("model_name", "num_devices", "tt_data_parallel", "max_model_len", "max_num_seqs")
WARMUP_PREFILL_KEYWORDS = ("kv_cache", "enable_trace", "can_sample_on_device")
WARMUP_DECODE_KEYWORDS = (
    "kv_cache",
    "enable_trace",
    "max_batch_size",
    "num_blocks",
    "can_sample_on_device",
)
# Older tt-metal warm-ups name it (required in WarmupForwardMixin's decode warm-up and in the
# Galaxy / Qwen3-VL prefill warm-ups of that time); sent only to a signature that names it.
NON_GREEDY = "non_greedy_decoding_on_device"
# A warm-up that cannot take these is not one the plugin can call (the rest are negotiated).
_WARMUP_ESSENTIAL = {
    "warmup_model_prefill": ("kv_cache", "enable_trace"),
    "warmup_model_decode": ("kv_cache", "enable_trace", "max_batch_size", "num_blocks"),
}
# What the plugin sends that carries content: an adapter that takes one of these in its
# ``**kwargs`` and never reads it drops the content silently (images, sampling parameters,
# penalty histories, per-row mRoPE deltas, hybrid page tables). Not slot_remap: the plugin
# reloads inputs and resets sampling state on every layout change, so a class may ignore it.
CONTENT_KEYWORDS = frozenset(
    {
        "pixel_values",
        "image_sizes",
        "image_grid_thw",
        "pixel_values_videos",
        "video_grid_thw",
        "sampling_params",
        "prompt_tokens",
        "output_tokens",
        "rope_deltas_all_users",
        "page_tables_per_group",
        "page_tables_per_layer",
    }
)
DECODE_COMMANDS = (
    "reload_inputs",
    "reload_page_table",
    "reload_sampling_params",
    "reset_sampling_state",
)


@dataclass(frozen=True)
class WarmupForm:
    """How the plugin calls one warm-up method, negotiated from the signature it found
    (``negotiate_warmup``): the keywords it sends, or why it cannot call it."""

    method: str
    signature: str  # as found, for messages
    keywords: tuple[str, ...]
    refusal: str | None = None  # set: the plugin cannot call this form

    def error(self, owner: str) -> str:
        return (
            f"{owner}.{self.method}{self.signature} cannot be called as the TT model contract "
            f"calls it: {self.refusal} (docs/TT_MODEL_CONTRACT.md, warm-up forms)"
        )


def negotiate_warmup(method: str, signature: inspect.Signature) -> WarmupForm:
    """The keywords to send ``method`` (``warmup_model_prefill`` / ``warmup_model_decode``)
    given its own signature (without ``self``). Today's keywords go to a signature that names
    them or takes ``**kwargs``; ``can_sample_on_device`` is left out where the form has no
    place for it (a Qwen3-VL prefill warm-up form issue #33 reports);
    ``non_greedy_decoding_on_device`` is sent only where named (older forms require it;
    ``**kwargs`` forms may drop it as stale).
    Anything else the form requires, or a missing essential keyword, is a refusal."""
    base = WARMUP_PREFILL_KEYWORDS if method == "warmup_model_prefill" else WARMUP_DECODE_KEYWORDS
    params = signature.parameters
    by_keyword = {
        name for name, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    keywords = [k for k in base if k in by_keyword or var_kw]
    if NON_GREEDY in by_keyword:
        keywords.append(NON_GREEDY)
    bare = [p.replace(annotation=p.empty) for p in params.values()]
    text = str(signature.replace(parameters=bare, return_annotation=signature.empty))
    reasons = []
    lacking = [k for k in _WARMUP_ESSENTIAL[method] if k not in keywords]
    if lacking:
        reasons.append(f"takes no {', '.join(lacking)}")
    unserved = [
        name
        for name, p in params.items()
        if p.default is p.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and name not in keywords
    ]
    if unserved:
        reasons.append(f"required but not passed: {', '.join(unserved)}")
    if reasons:
        return WarmupForm(method, text, (), "; ".join(reasons))
    return WarmupForm(method, text, tuple(keywords))


@dataclass(frozen=True)
class PlanFacts:
    """What the plugin reads from a model class (and, for the contract version, its instance)
    that decides which arguments it sends."""

    decode_contract: int = 0  # decode_input_update_contract: >= 1 -> reload commands
    device_sampling: bool = False  # model_capabilities["supports_sample_on_device"]
    hybrid_tables: str | None = None  # get_kv_cache_spec present: the page-table keyword
    init_takes_vllm_config: bool = False  # initialize_vllm_model names vllm_config
    per_layer_allocation: bool = False  # allocate_kv_cache_per_layer present
    block_output: bool = False  # model_capabilities["output_tokens_per_step"] > 1
    # model_capabilities["supports_device_penalties"] (default True): without it a batch with an
    # active penalty is host-sampled, so prompt_tokens / output_tokens are never sent.
    device_penalties: bool = True
    # read_decode_output and process_decode_output_host both present: the adapter reads decode
    # output back through them; with either missing it calls neither (host tensors expected).
    read_back_hooks: bool = False  # read_decode_output and process_decode_output_host
    # The warm-up forms found (None: the method is absent, or its signature was not read).
    warmup_prefill: WarmupForm | None = None
    warmup_decode: WarmupForm | None = None

    def warmup_form(self, method: str) -> WarmupForm | None:
        return self.warmup_prefill if method == "warmup_model_prefill" else self.warmup_decode

    def warmup_refusal(self) -> WarmupForm | None:
        """The first warm-up form the plugin cannot call, if any."""
        forms = (self.warmup_prefill, self.warmup_decode)
        return next((f for f in forms if f is not None and f.refusal is not None), None)


def derive_facts(
    *,
    decode_contract: int,
    device_sampling: bool,
    output_tokens_per_step: int,
    has_method: Callable[[str], bool],
    takes: Callable[[str, str], bool],
    signature: Callable[[str], inspect.Signature | None] = lambda method: None,
    device_penalties: bool = True,
) -> PlanFacts:
    """``PlanFacts`` from what a class offers: ``has_method(name)``, ``takes(method,
    param)`` (the method's own signature names ``param``) and ``signature(method)`` (its own
    parameters without ``self``, None when absent or unreadable). The adapter passes a live
    class, the checker a class read from source; the rules live here once."""
    hybrid = None
    if has_method("get_kv_cache_spec"):
        per_layer = takes("prefill_forward", PER_LAYER_TABLES)
        hybrid = PER_LAYER_TABLES if per_layer else PER_GROUP_TABLES
    return PlanFacts(
        decode_contract=decode_contract,
        device_sampling=device_sampling,
        hybrid_tables=hybrid,
        init_takes_vllm_config=takes("initialize_vllm_model", "vllm_config"),
        per_layer_allocation=has_method("allocate_kv_cache_per_layer"),
        block_output=output_tokens_per_step > 1,
        device_penalties=device_penalties,
        read_back_hooks=all(map(has_method, ("read_decode_output", "process_decode_output_host"))),
        **warmup_forms(lambda m: signature(m) if has_method(m) else None),
    )


def warmup_forms(signature: Callable[[str], inspect.Signature | None]) -> dict[str, Any]:
    """``PlanFacts``' warm-up fields from each warm-up method's own signature (None: absent)."""
    forms: dict[str, WarmupForm | None] = {}
    for method, field in (("warmup_model_prefill", "warmup_prefill"),
                          ("warmup_model_decode", "warmup_decode")):  # fmt: skip
        found = signature(method)
        forms[field] = negotiate_warmup(method, found) if found is not None else None
    return forms


def warmup_keywords(facts: PlanFacts, method: str) -> tuple[str, ...]:
    """The negotiated warm-up keywords; today's form where the signature was not read."""
    form = facts.warmup_form(method)
    if form is not None and form.refusal is None:
        return form.keywords
    return WARMUP_PREFILL_KEYWORDS if method == "warmup_model_prefill" else WARMUP_DECODE_KEYWORDS


def load_keywords(facts: PlanFacts) -> tuple[str, ...]:
    """``initialize_vllm_model``: after ``LOAD_POSITIONAL``; ``n_layers`` never."""
    extra = ("vllm_config",) if facts.init_takes_vllm_config else ()
    return ("max_seq_len", "tt_data_parallel", "optimizations", *extra)


def prefill_keywords(
    facts: PlanFacts, *, on_device: bool, multimodal: Sequence[str] = ()
) -> tuple[str, ...]:
    """``prefill_forward``, all by keyword, in the order the adapter sends them."""
    names = ["tokens", "page_table", "kv_cache", "enable_trace", "prompt_lens", "start_pos"]
    if facts.hybrid_tables is not None:
        names.append(facts.hybrid_tables)
    names += [n for n in multimodal if n not in names]
    if on_device:
        names.append("sampling_params")
    names.append("empty_slots")
    return tuple(names)


def decode_keywords(
    facts: PlanFacts, *, on_device: bool, penalties: bool, remap: bool, mrope: bool
) -> tuple[str, ...]:
    """``decode_forward``, all by keyword. Version >= 1: ``slot_remap`` when the layout moved
    and the four reload commands; version 0: ``reset_batch`` on device-sampled calls only."""
    names = ["tokens", "page_table", "kv_cache", "start_pos", "enable_trace", "read_from_device"]
    if facts.hybrid_tables is not None:
        names.append(facts.hybrid_tables)
    if on_device:
        names.append("sampling_params")
        if penalties:
            names += ["prompt_tokens", "output_tokens"]
    if facts.decode_contract >= 1:
        if remap:
            names.append("slot_remap")
        names += DECODE_COMMANDS
    elif on_device:
        names.append("reset_batch")
    if mrope:
        names.append("rope_deltas_all_users")
    return tuple(names)


# --- every call, for checking a class ------------------------------------------------------------


@dataclass(frozen=True)
class ServedFacts:
    """Facts of the served model that are not read from the class (its HF config, processor)."""

    mrope: bool = False
    multimodal_kwargs: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlannedCall:
    method: str
    variant: str  # which step options produced it ("host", "device+penalties", ...)
    positional: tuple[str, ...]
    keywords: tuple[str, ...]

    def as_call(self) -> tuple[tuple[str, ...], dict[str, str]]:
        """Placeholder values (binding checks names, not values): each value is its name."""
        return self.positional, {k: k for k in self.keywords}


@dataclass(frozen=True)
class MethodPlan:
    method: str
    # The adapter copes with a class that lacks it (a fallback, or the step is skipped).
    optional: bool = False
    applies: Callable[[PlanFacts], bool] = lambda facts: True


METHODS: tuple[MethodPlan, ...] = (
    MethodPlan("initialize_vllm_model"),
    MethodPlan("get_max_tokens_all_users", optional=True),  # absent -> 131072
    MethodPlan("get_kv_cache_spec", applies=lambda f: f.hybrid_tables is not None),
    MethodPlan("allocate_kv_cache_per_layer", applies=lambda f: f.per_layer_allocation),
    MethodPlan("allocate_kv_cache", applies=lambda f: not f.per_layer_allocation),
    # ModelAdapter.warm_up skips a warm-up method the model does not have.
    MethodPlan("warmup_model_prefill", optional=True),
    MethodPlan("warmup_model_decode", optional=True),
    MethodPlan("prefill_forward"),
    MethodPlan("decode_forward"),
    MethodPlan("read_decode_output", optional=True, applies=lambda f: f.read_back_hooks),
    MethodPlan("process_decode_output_host", optional=True, applies=lambda f: f.read_back_hooks),
    MethodPlan("release_request", optional=True, applies=lambda f: f.block_output),
    MethodPlan("release_persistent_capture", optional=True, applies=lambda f: f.block_output),
)


def _variant(**options: bool) -> str:
    return "+".join(k for k, v in options.items() if v) or "plain"


def plan_calls(method: str, facts: PlanFacts, served: ServedFacts) -> list[PlannedCall]:
    """Every distinct call of ``method`` the adapter can make to a class with these facts."""
    calls: dict[tuple[tuple[str, ...], tuple[str, ...]], PlannedCall] = {}

    def add(variant: str, positional: tuple[str, ...], keywords: tuple[str, ...]) -> None:
        calls.setdefault((positional, keywords), PlannedCall(method, variant, positional, keywords))

    device = (False, True) if facts.device_sampling else (False,)
    if method == "initialize_vllm_model":
        add("load", LOAD_POSITIONAL, load_keywords(facts))
    elif method == "get_max_tokens_all_users":
        add("sizing", (), SIZING_KEYWORDS)
    elif method == "get_kv_cache_spec":
        add("spec", ("vllm_config",), ())
    elif method == "allocate_kv_cache_per_layer":
        add("allocate", ("per_layer_specs",), ())
    elif method == "allocate_kv_cache":
        add("allocate", ("kv_cache_shape", "dtype", "num_layers"), ())
    elif method in ("warmup_model_prefill", "warmup_model_decode"):
        add("warm-up", (), warmup_keywords(facts, method))
    elif method == "prefill_forward":
        for on_device in device:
            for mm in ((), served.multimodal_kwargs):
                names = prefill_keywords(facts, on_device=on_device, multimodal=mm)
                add(_variant(device=on_device, multimodal=bool(mm)), (), names)
    elif method == "decode_forward":
        for on_device in device:
            for penalties in (False, True) if on_device and facts.device_penalties else (False,):
                for remap in (False, True):
                    names = decode_keywords(
                        facts,
                        on_device=on_device,
                        penalties=penalties,
                        remap=remap,
                        mrope=served.mrope,
                    )
                    add(_variant(device=on_device, penalties=penalties, remap=remap), (), names)
    elif method == "read_decode_output":
        add("async read-back", ("tt_out",), ("async_read",))
    elif method == "process_decode_output_host":
        add("read-back", ("tt_out",), ("is_tokens",))
    elif method == "release_request":
        add("release", ("slot",), ())
    elif method == "release_persistent_capture":
        add("release", (), ())
    else:
        raise KeyError(f"the plugin never calls {method!r}")
    return list(calls.values())


def pick(values: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The planned keywords with their values (a planned name without a value is a bug)."""
    return {name: values[name] for name in names}
