"""The call planner on its own: the facts it derives from a class, and every planned call bound
to a signature in the contract's form (binding checks what the plugin sends, not values)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_contract_parity_checker import ADAPTER, edit, run, tree
from vllm_tt_plugin.contract.call_plan import (
    METHODS,
    PlanFacts,
    PlannedCall,
    ServedFacts,
    derive_facts,
    negotiate_warmup,
    plan_calls,
)


# One signature per method in the form the TT model contract describes (docs/TT_MODEL_CONTRACT.md;
# the keyword-taking forwards as **kwargs), without self: what a conforming class accepts.
def initialize_vllm_model(
    hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int = 131072,
    tt_data_parallel: int = 1, optimizations: str = "performance",
) -> None: ...  # fmt: skip
def get_max_tokens_all_users(
    model_name: str, num_devices: int, tt_data_parallel: int, max_model_len: int,
    max_num_seqs: int,
) -> int: ...  # fmt: skip
def get_kv_cache_spec(vllm_config: Any) -> Any: ...
def allocate_kv_cache_per_layer(per_layer_specs: Any) -> Any: ...
def allocate_kv_cache(kv_cache_shape: Any, dtype: Any, num_layers: int) -> Any: ...
def warmup_model_prefill(kv_cache: Any, enable_trace: bool, can_sample_on_device: bool) -> None: ...
def warmup_model_decode(
    kv_cache: Any, enable_trace: bool, max_batch_size: int, num_blocks: int,
    can_sample_on_device: bool,
) -> None: ...  # fmt: skip
def read_decode_output(tt_out: Any, async_read: bool = False) -> Any: ...
def process_decode_output_host(tt_out: Any, is_tokens: bool = True) -> Any: ...
def release_request(slot: int) -> None: ...
def release_persistent_capture() -> None: ...
def prefill_forward(**kwargs: Any) -> Any: ...
def decode_forward(**kwargs: Any) -> Any: ...


FORMS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (
        initialize_vllm_model, get_max_tokens_all_users, get_kv_cache_spec,
        allocate_kv_cache_per_layer, allocate_kv_cache, warmup_model_prefill,
        warmup_model_decode, read_decode_output, process_decode_output_host, release_request,
        release_persistent_capture, prefill_forward, decode_forward,
    )
}  # fmt: skip


def facts_of(
    methods: Iterable[str],
    *,
    output_tokens_per_step: int = 1,
    takes: Callable[[str, str], bool] = lambda method, name: False,
    **kwargs: Any,
) -> PlanFacts:
    present = set(methods)
    return derive_facts(
        decode_contract=1,
        device_sampling=True,
        output_tokens_per_step=output_tokens_per_step,
        has_method=present.__contains__,
        takes=takes,
        signature=lambda m: inspect.signature(FORMS[m]) if m in present else None,
        **kwargs,
    )


def planned(facts: PlanFacts) -> dict[str, list[PlannedCall]]:
    served = ServedFacts()
    return {p.method: plan_calls(p.method, facts, served) for p in METHODS if p.applies(facts)}


def test_every_planned_call_binds_to_the_current_tt_metal_forms() -> None:
    for facts in (
        facts_of(FORMS, output_tokens_per_step=256),
        facts_of(set(FORMS) - {"allocate_kv_cache_per_layer"}),
        PlanFacts(),  # nothing read: today's forms
        PlanFacts(per_layer_allocation=True, hybrid_tables="page_tables_per_group"),
    ):
        for method, calls in planned(facts).items():
            assert calls, method
            for call in calls:
                assert call.method == method
                args, kwargs = call.as_call()
                inspect.signature(FORMS[method]).bind(*args, **kwargs)


def test_the_facts_follow_the_methods_the_class_defines() -> None:
    full = facts_of(FORMS, output_tokens_per_step=2)
    assert full.per_layer_allocation and full.read_back_hooks and full.block_output
    assert {m for m in planned(full)} >= {
        "allocate_kv_cache_per_layer", "read_decode_output", "release_request",
        "get_kv_cache_spec",
    }  # fmt: skip
    assert "allocate_kv_cache" not in planned(full)
    # One read-back hook without the other: the adapter calls neither.
    for missing in ("read_decode_output", "process_decode_output_host"):
        assert not facts_of(set(FORMS) - {missing}).read_back_hooks
    plain = facts_of({"prefill_forward", "decode_forward"})
    assert not (plain.per_layer_allocation or plain.block_output or plain.read_back_hooks)
    assert plain.hybrid_tables is None
    assert "allocate_kv_cache" in planned(plain)


def test_penalty_histories_are_planned_unless_the_class_opts_out() -> None:
    def histories(facts: PlanFacts) -> bool:
        calls = plan_calls("decode_forward", facts, ServedFacts())
        return any("prompt_tokens" in c.keywords for c in calls)

    assert histories(facts_of(FORMS))  # supports_device_penalties defaults to True
    assert not histories(facts_of(FORMS, device_penalties=False))


def test_warmups_without_a_form_read_get_todays_keywords() -> None:
    """A class whose warm-up signatures were not read (or were refused) is called with
    today's forms: each binds to its own method, not to the other's."""
    refused = negotiate_warmup("warmup_model_decode", inspect.signature(lambda x: None))
    assert refused.refusal is not None
    for facts in (PlanFacts(), PlanFacts(warmup_decode=refused)):
        for method in ("warmup_model_prefill", "warmup_model_decode"):
            (call,) = plan_calls(method, facts, ServedFacts())
            args, kwargs = call.as_call()
            inspect.signature(FORMS[method]).bind(*args, **kwargs)


def test_the_variants_of_a_step_name_the_options_that_shaped_them() -> None:
    """The checker reports a failing call by its variant: each names the options its keywords
    show (device sampling, penalty histories, a remap, multimodal inputs), and no two
    distinct calls share one."""
    served = ServedFacts(multimodal_kwargs=("pixel_values",))
    facts = facts_of(FORMS)
    shows = {
        "device": "sampling_params",
        "penalties": "prompt_tokens",
        "remap": "slot_remap",
        "multimodal": "pixel_values",
    }
    for method in ("prefill_forward", "decode_forward"):
        calls = plan_calls(method, facts, served)
        assert len({c.variant for c in calls}) == len(calls) > 1
        for call in calls:
            options = set(call.variant.split("+"))
            named = {o for o, keyword in shows.items() if keyword in call.keywords}
            assert options == (named or {"plain"}), (method, call)
    decode = plan_calls("decode_forward", facts, served)
    # A device step whose batch has no penalty sends no histories.
    assert any(
        "sampling_params" in c.keywords and "prompt_tokens" not in c.keywords for c in decode
    )


def test_a_method_the_plugin_never_calls_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="the plugin never calls 'forward'"):
        plan_calls("forward", PlanFacts(), ServedFacts())


def test_a_refused_warmup_names_its_form_as_found_and_every_reason() -> None:
    def oldest(
        kv_cache: Any, enable_trace: bool, max_batch_size: int, num_gpu_blocks: int
    ) -> None: ...

    form = negotiate_warmup("warmup_model_decode", inspect.signature(oldest))
    assert form.error("Owner") == (
        "Owner.warmup_model_decode(kv_cache, enable_trace, max_batch_size, num_gpu_blocks) "
        "cannot be called as the TT model contract calls it: takes no num_blocks; required but "
        "not passed: num_gpu_blocks (docs/TT_MODEL_CONTRACT.md, warm-up forms)"
    )

    def bare(x: Any, y: Any) -> None: ...

    form = negotiate_warmup("warmup_model_prefill", inspect.signature(bare))
    assert form.refusal == "takes no kv_cache, enable_trace; required but not passed: x, y"


BLOCK = ', "output_tokens_per_step": 4'
READ_BACK_OK = "def read_decode_output(self, tt_out, async_read=False):\n        ...\n\n    "
PROCESS_OK = "def process_decode_output_host(self, tt_out, is_tokens=True):\n        ...\n\n    "


@pytest.mark.parametrize(
    ("added", "capabilities", "method", "label"),
    [
        ("def allocate_kv_cache(self):", "", "allocate_kv_cache", "allocate"),
        ("def allocate_kv_cache_per_layer(self):", "", "allocate_kv_cache_per_layer", "allocate"),
        # A classmethod (the plugin calls it on the class; a plain def is refused for that).
        ("@classmethod\n    def get_kv_cache_spec(cls):", "", "get_kv_cache_spec", "spec"),
        ("@classmethod\n    def get_max_tokens_all_users(cls, x):", "", "get_max_tokens_all_users",
         "sizing"),
        (PROCESS_OK + "def read_decode_output(self):", "", "read_decode_output", "async read-back"),
        (READ_BACK_OK + "def process_decode_output_host(self):", "", "process_decode_output_host",
         "read-back"),
        ("def release_request(self):", BLOCK, "release_request", "release"),
        ("def release_persistent_capture(self, slot):", BLOCK, "release_persistent_capture",
         "release"),
    ],
)  # fmt: skip
def test_the_checker_names_the_call_a_signature_refuses(
    tmp_path: Path, added: str, capabilities: str, method: str, label: str
) -> None:
    """A method whose signature cannot take the plugin's call is reported broken, naming the
    call (its variant) the way the adapter makes it."""
    caps = '{"supports_sample_on_device": True'
    adapter = edit(
        ADAPTER,
        ("def allocate_kv_cache(self, kv_cache_shape, dtype, num_layers):\n        ...\n", ""),
        (caps + "}", caps + capabilities + "}"),
    )
    adapter += f"\n    {added}\n        ...\n"
    found = run(tree(tmp_path, adapter=adapter))[method]
    assert found.status == "broken", found
    assert found.detail.startswith(f"{label} call: "), found.detail


def test_the_checker_names_a_refused_load_call(tmp_path: Path) -> None:
    adapter = edit(ADAPTER, ("hf_config, mesh_device, max_batch_size, max_seq_len,", "hf_config,"))
    found = run(tree(tmp_path, adapter=adapter))["initialize_vllm_model"]
    assert found.status == "broken" and found.detail.startswith("load call: "), found


def test_the_checker_names_a_warmup_call_its_hand_off_refuses(tmp_path: Path) -> None:
    """A warm-up taking **kwargs is negotiated today's keywords; handing them to a method that
    cannot take them breaks the warm-up call."""
    adapter = ADAPTER + (
        "\n    def warmup_model_prefill(self, **kwargs):\n"
        "        return super().warmup_model_decode(**kwargs)\n"
    )
    found = run(tree(tmp_path, adapter=adapter))["warmup_model_prefill"]
    assert found.status == "broken" and found.detail.startswith("warm-up call: "), found
