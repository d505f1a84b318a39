"""ModelAdapter: the only caller of a TT model, checked against recording fakes of tt-metal
classes (no device). Each test makes the adapter call a class the way the real plugin would and
asserts what the class received, in tt-metal's argument names and layouts."""

from __future__ import annotations

import inspect
import math
from typing import Any, ClassVar

import pytest
import torch
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)

from vllm_tt_plugin.adapter.kv_cache import KVLayoutError, layer_specs_for_model
from vllm_tt_plugin.adapter.model_adapter import (
    HybridTables,
    LogprobsForm,
    ModelAdapter,
    ModelContractError,
)
from vllm_tt_plugin.contract.call_types import (
    DecodeCall,
    KVSizingCall,
    LoadCall,
    PrefillCall,
    WarmupPlan,
)
from vllm_tt_plugin.contract.reload_contract import FULL_RELOAD, STEADY, ReloadCommand
from vllm_tt_plugin.contract.sampling_params import DeviceSamplingRow, TTSamplingParams
from vllm_tt_plugin.step.runner_outputs import UNKNOWN_RANK, logprobs_rows_from_device

B, V = 4, 64


class Recorder:
    """A tt-metal-like class that records every call (method, args, kwargs)."""

    model_capabilities: ClassVar[dict[str, Any]] = {"supports_sample_on_device": True}
    decode_input_update_contract: ClassVar[int] = 1
    calls: ClassVar[list[tuple[str, tuple[Any, ...], dict[str, Any]]]]
    outputs: dict[str, Any]

    def __init__(self) -> None:
        self.outputs = {}
        self.warm_flags: list[bool] = []
        self.already_warmed_up_prefill = False

    @classmethod
    def initialize_vllm_model(
        cls,
        hf_config: Any,
        mesh_device: Any,
        max_batch_size: int,
        max_seq_len: int = 131072,
        n_layers: int | None = None,
        tt_data_parallel: int = 1,
        optimizations: str | None = None,
    ) -> Recorder:
        cls.calls = [("initialize_vllm_model", (hf_config, mesh_device, max_batch_size), {
            "max_seq_len": max_seq_len, "n_layers": n_layers,
            "tt_data_parallel": tt_data_parallel, "optimizations": optimizations,
        })]  # fmt: skip
        return cls()

    def _record(self, name: str, *args: Any, **kwargs: Any) -> Any:
        type(self).calls.append((name, args, kwargs))
        return self.outputs.get(name)

    def allocate_kv_cache_per_layer(self, per_layer_specs: Any) -> Any:
        return self._record("allocate_kv_cache_per_layer", per_layer_specs) or "kv"

    def warmup_model_prefill(
        self, kv_cache: Any, enable_trace: bool, can_sample_on_device: bool
    ) -> None:
        self.warm_flags.append(self.already_warmed_up_prefill)
        self.already_warmed_up_prefill = True
        self._record("warmup_model_prefill", kv_cache=kv_cache, enable_trace=enable_trace,
                     can_sample_on_device=can_sample_on_device)  # fmt: skip

    def warmup_model_decode(
        self,
        kv_cache: Any,
        enable_trace: bool,
        max_batch_size: int,
        num_blocks: int,
        can_sample_on_device: bool,
    ) -> None:
        self._record("warmup_model_decode", kv_cache=kv_cache, enable_trace=enable_trace,
                     max_batch_size=max_batch_size, num_blocks=num_blocks,
                     can_sample_on_device=can_sample_on_device)  # fmt: skip

    def prefill_forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._record("prefill_forward", *args, **kwargs)

    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._record("decode_forward", *args, **kwargs)

    def read_decode_output(self, tt_out: Any, async_read: bool = False) -> Any:
        self._record("read_decode_output", tt_out, async_read=async_read)
        return ("host", tt_out), []

    def process_decode_output_host(self, tt_out: Any, is_tokens: bool = False) -> Any:
        return self._record("process_decode_output_host", tt_out, is_tokens=is_tokens)


def loaded(cls: type = Recorder, hf_config: Any = None) -> tuple[ModelAdapter, Any]:
    adapter = ModelAdapter(cls, hf_config)
    adapter.load(LoadCall("hf", "mesh", 32, 4096, 1, None, vllm_config="vllm-config"))
    return adapter, adapter.model


def names(cls: type) -> list[str]:
    return [name for name, _, _ in cls.calls]


# --- loading and sizing -------------------------------------------------------------------------
def test_initialize_vllm_model_three_positional_rest_keyword_no_n_layers() -> None:
    adapter, _ = loaded()
    [(_, args, kwargs)] = Recorder.calls
    assert args == ("hf", "mesh", 32)
    assert kwargs == {"max_seq_len": 4096, "n_layers": None, "tt_data_parallel": 1,
                      "optimizations": None}  # fmt: skip
    assert not adapter.profile.init_takes_vllm_config


def test_vllm_config_only_when_the_signature_names_it() -> None:
    seen: dict[str, Any] = {}

    class TakesVllmConfig(Recorder):
        @classmethod
        def initialize_vllm_model(  # type: ignore[override]
            cls, hf_config: Any, mesh_device: Any, max_batch_size: int, *,
            max_seq_len: int, tt_data_parallel: int, optimizations: Any, vllm_config: Any = None,
        ) -> Recorder:  # fmt: skip
            seen["vllm_config"] = vllm_config
            cls.calls = []
            return cls()

    adapter, _ = loaded(TakesVllmConfig)
    assert adapter.profile.init_takes_vllm_config and seen["vllm_config"] == "vllm-config"


def test_kv_budget_by_keyword_and_default() -> None:
    got: dict[str, Any] = {}

    class Budget(Recorder):
        @classmethod
        def get_max_tokens_all_users(cls, **kwargs: Any) -> int:
            got.update(kwargs)
            return 5000

    call = KVSizingCall("m", 32, 4, 4096, 8)
    assert ModelAdapter(Budget).max_tokens_all_users(call) == 5000
    assert got == {"model_name": "m", "num_devices": 32, "tt_data_parallel": 4,
                   "max_model_len": 4096, "max_num_seqs": 8}  # fmt: skip
    assert ModelAdapter(Recorder).max_tokens_all_users(call) == 131072

    class Zero(Recorder):
        @classmethod
        def get_max_tokens_all_users(cls, **kwargs: Any) -> int:
            return 0

    with pytest.raises(ValueError, match="positive integer"):
        ModelAdapter(Zero).max_tokens_all_users(call)


def test_kv_budget_default_only_for_a_missing_method() -> None:
    """131072 is for a class (or the generator it delegates to) without the method; an
    AttributeError raised inside the budget is the model failing and is refused at load."""
    call = KVSizingCall("m", 1, 1, 4096, 8)

    class Generator:  # a generator a registry class delegates to, without the method
        pass

    class Delegates(Recorder):
        @classmethod
        def get_max_tokens_all_users(cls, **kwargs: Any) -> int:
            return int(Generator.get_max_tokens_all_users(**kwargs))  # type: ignore[attr-defined]

    assert ModelAdapter(Delegates).max_tokens_all_users(call) == 131072

    class Fails(Recorder):
        @classmethod
        def get_max_tokens_all_users(cls, **kwargs: Any) -> int:
            return int(math.no_such_function())  # type: ignore[attr-defined]

    with pytest.raises(ValueError, match=r"Fails\.get_max_tokens_all_users failed: .*no_such"):
        ModelAdapter(Fails).max_tokens_all_users(call)


# --- warm-up ------------------------------------------------------------------------------------
def plan(**overrides: Any) -> WarmupPlan:
    values = dict(kv_cache="kv", max_batch_size=32, num_blocks=64, prefill_on_device=False,
                  decode_on_device=True, trace_prefill=True, trace_decode=True)  # fmt: skip
    return WarmupPlan(**{**values, **overrides})


def test_warmup_by_keyword_phases_and_prefill_flag_reset() -> None:
    adapter, model = loaded()
    adapter.warm_up(plan())
    warm = [(n, k) for n, _, k in Recorder.calls if n.startswith("warmup")]
    assert [(n, k["enable_trace"]) for n, k in warm] == [
        ("warmup_model_prefill", False), ("warmup_model_decode", False),
        ("warmup_model_prefill", True), ("warmup_model_decode", True),
    ]  # fmt: skip
    assert all(not args for n, args, _ in Recorder.calls if n.startswith("warmup"))
    assert [k["can_sample_on_device"] for n, k in warm] == [False, True, False, True]
    assert {k["num_blocks"] for n, k in warm if n == "warmup_model_decode"} == {64}
    assert model.warm_flags == [False, False]  # reset before the trace phase


def test_warmup_trace_mode_decode_only_skips_prefill_capture() -> None:
    adapter, _ = loaded()
    adapter.warm_up(plan(trace_prefill=False))
    warm = [(n, k["enable_trace"]) for n, _, k in Recorder.calls if n.startswith("warmup")]
    assert warm == [("warmup_model_prefill", False), ("warmup_model_decode", False),
                    ("warmup_model_decode", True)]  # fmt: skip


def test_older_tt_metal_fourth_required_prefill_warmup_argument_fails_by_name() -> None:
    class OldWarmup(Recorder):
        def warmup_model_prefill(  # type: ignore[override]
            self, kv_cache: Any, enable_trace: bool, can_sample_on_device: bool,
            sampling_params_warmup: Any,
        ) -> None:  # fmt: skip
            raise AssertionError("never called")

    adapter, _ = loaded(OldWarmup)
    with pytest.raises(ModelContractError, match="required but not passed: sampling_params_warmup"):
        adapter.warm_up(plan())


# --- KV cache ----------------------------------------------------------------------------------
def full(heads: int = 8) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=64, num_kv_heads=heads, head_size=128, dtype=torch.bfloat16)


def name(i: int) -> str:
    return f"model.layers.{i}.self_attn"


def test_one_group_tensor_idx_is_the_layer_index_heads_by_columns() -> None:
    config = KVCacheConfig(10, [KVCacheTensor(1, [name(i)]) for i in range(3)],
                           [KVCacheGroupSpec([name(2), name(0), name(1)], full())])  # fmt: skip
    entries = layer_specs_for_model(config, tp_width=4)  # a Galaxy's 4 columns, not 32 devices
    assert [e.as_tuple() for e in entries] == [((10, 2, 64, 128), torch.bfloat16, i)
                                               for i in range(3)]  # fmt: skip


def test_uniform_type_group_gives_each_layer_its_own_shape() -> None:
    uniform = UniformTypeKVCacheSpecs(
        block_size=64, kv_cache_specs={name(0): full(8), name(1): full(2)}
    )
    config = KVCacheConfig(10, [], [KVCacheGroupSpec([name(0), name(1)], uniform)])
    entries = layer_specs_for_model(config, tp_width=1)
    assert [(e.shape[1], e.tensor_idx) for e in entries] == [(8, 0), (2, 1)]


def test_several_groups_share_one_buffer_per_kv_cache_tensor() -> None:
    sliding = SlidingWindowSpec(block_size=64, num_kv_heads=8, head_size=128,
                                dtype=torch.bfloat16, sliding_window=256)  # fmt: skip
    config = KVCacheConfig(
        10,
        [KVCacheTensor(1, [name(0), name(1)]), KVCacheTensor(1, [name(2), name(3)])],
        [
            KVCacheGroupSpec([name(0), name(2)], sliding),
            KVCacheGroupSpec([name(1), name(3)], full()),
        ],
    )
    assert [e.tensor_idx for e in layer_specs_for_model(config, 1)] == [0, 0, 1, 1]
    config.kv_cache_tensors.pop()
    with pytest.raises(KVLayoutError, match="model.layers.2.self_attn.*shared_by"):
        layer_specs_for_model(config, 1)


def test_missing_duplicated_or_unknown_layer_is_named() -> None:
    def one_group(*layer_names: str) -> KVCacheConfig:
        return KVCacheConfig(10, [], [KVCacheGroupSpec(list(layer_names), full())])

    with pytest.raises(KVLayoutError, match=r"layer\(s\) \[1\]"):
        layer_specs_for_model(one_group(name(0), name(2)), 1)
    with pytest.raises(KVLayoutError, match="both layer 0"):
        layer_specs_for_model(one_group(name(0), "model.layers.0.cross_attn"), 1)
    with pytest.raises(KVLayoutError, match="'lm_head' has no 'layers.<index>'"):
        layer_specs_for_model(one_group("lm_head"), 1)


def test_per_layer_allocation_gets_tuples_legacy_only_identical_layers() -> None:
    config = KVCacheConfig(10, [], [KVCacheGroupSpec([name(0), name(1)], full())])
    entries = layer_specs_for_model(config, 1)
    adapter, _ = loaded()
    assert adapter.allocate_kv_cache(entries) == "kv"
    [(_, (specs,), _)] = [c for c in Recorder.calls if c[0] == "allocate_kv_cache_per_layer"]
    assert specs == [((10, 8, 64, 128), torch.bfloat16, 0), ((10, 8, 64, 128), torch.bfloat16, 1)]

    seen: list[tuple[Any, ...]] = []

    class Legacy:
        model_capabilities: ClassVar[dict[str, Any]] = {}

        @classmethod
        def initialize_vllm_model(cls, *args: Any, **kwargs: Any) -> Legacy:
            return cls()

        def prefill_forward(self, **kwargs: Any) -> None: ...

        def decode_forward(self, **kwargs: Any) -> None: ...

        def allocate_kv_cache(self, kv_cache_shape: Any, dtype: Any, num_layers: int) -> str:
            seen.append((kv_cache_shape, dtype, num_layers))
            return "legacy-kv"

    legacy, _ = loaded(Legacy)
    assert legacy.allocate_kv_cache(entries) == "legacy-kv"
    assert seen == [((10, 8, 64, 128), torch.bfloat16, 2)]
    uniform = UniformTypeKVCacheSpecs(64, {name(0): full(8), name(1): full(2)})
    mixed = layer_specs_for_model(KVCacheConfig(10, [], [KVCacheGroupSpec([name(0), name(1)],
                                                                         uniform)]), 1)  # fmt: skip
    with pytest.raises(ModelContractError, match="needs identical layers"):
        legacy.allocate_kv_cache(mixed)


# --- prefill and decode calls ------------------------------------------------------------------
def params(num_logprobs: int = -1, **row: Any) -> TTSamplingParams:
    return TTSamplingParams.encode([DeviceSamplingRow(num_logprobs=num_logprobs, **row)] * B, V)


def prefill_call(**overrides: Any) -> PrefillCall:
    values: dict[str, Any] = dict(
        tokens=torch.zeros((B, 8), dtype=torch.int32),
        page_tables=[torch.zeros((B, 2), dtype=torch.int32)] * 2,
        kv_cache="kv", enable_trace=True, prompt_lens=[8] * B, start_pos=[0] * B,
        empty_slots=list(range(B)), layer_groups=(0, 1, 0),
    )  # fmt: skip
    return PrefillCall(**{**values, **overrides})


def decode_call(**overrides: Any) -> DecodeCall:
    values: dict[str, Any] = dict(
        tokens=torch.zeros((B, 1), dtype=torch.int32),
        start_pos=torch.full((B,), -1, dtype=torch.int32),
        page_tables=[torch.zeros((B, 2), dtype=torch.int32)] * 2,
        kv_cache="kv", enable_trace=True, command=STEADY, layer_groups=(0, 1, 0),
    )  # fmt: skip
    return DecodeCall(**{**values, **overrides})


def last(cls: type, method: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return next((a, k) for n, a, k in reversed(cls.calls) if n == method)


def test_prefill_is_all_keyword_sampling_only_on_device_no_history() -> None:
    adapter, model = loaded()
    model.outputs["prefill_forward"] = torch.zeros((B, 3, V))
    out = adapter.prefill(prefill_call())
    args, kwargs = last(Recorder, "prefill_forward")
    assert args == ()
    assert set(kwargs) == {"tokens", "page_table", "kv_cache", "enable_trace", "prompt_lens",
                           "start_pos", "empty_slots"}  # fmt: skip
    assert out.logits is not None and out.logits.shape == (B, V)  # [:, -1, :]
    model.outputs["prefill_forward"] = torch.arange(B)[:, None]
    out = adapter.prefill(prefill_call(sampling_params=params(repetition_penalty=1.3)))
    _, kwargs = last(Recorder, "prefill_forward")
    assert "sampling_params" in kwargs and "prompt_tokens" not in kwargs
    assert out.tokens == list(range(B))


def test_hybrid_page_tables_take_the_form_the_signature_asks_for() -> None:
    class PerGroup(Recorder):
        @classmethod
        def get_kv_cache_spec(cls, vllm_config: Any) -> dict[str, Any]:
            return {}

    class PerLayer(PerGroup):
        def prefill_forward(self, *args: Any, page_tables_per_layer: Any = None,
                            **kwargs: Any) -> Any:  # fmt: skip
            return super().prefill_forward(*args, page_tables_per_layer=page_tables_per_layer,
                                           **kwargs)  # fmt: skip

    tables = [torch.full((B, 2), g, dtype=torch.int32) for g in range(2)]
    for cls, form in ((PerGroup, HybridTables.PER_GROUP), (PerLayer, HybridTables.PER_LAYER)):
        adapter, model = loaded(cls)
        assert adapter.profile.hybrid_tables is form
        model.outputs["prefill_forward"] = torch.zeros((B, 1, V))
        adapter.prefill(prefill_call(page_tables=tables))
        _, kwargs = last(cls, "prefill_forward")
        sent = kwargs[form.value]
        expected = [0, 1] if form is HybridTables.PER_GROUP else [0, 1, 0]
        assert [int(t[0, 0]) for t in sent] == expected
    loaded_plain, _ = loaded()
    loaded_plain.model.outputs["prefill_forward"] = torch.zeros((B, 1, V))
    loaded_plain.prefill(prefill_call(page_tables=tables))
    _, kwargs = last(Recorder, "prefill_forward")
    assert not {"page_tables_per_group", "page_tables_per_layer"} & set(kwargs)


def test_decode_v1_flags_history_remap_and_read_back_paths() -> None:
    adapter, model = loaded()
    remap = torch.tensor([1, 0, 2, 3])
    history = torch.full((B, 2), -1, dtype=torch.int32)
    model.outputs["decode_forward"] = "device-out"
    model.outputs["process_decode_output_host"] = (torch.arange(B)[:, None], torch.zeros(B))
    sub = adapter.submit_decode(
        decode_call(
            command=FULL_RELOAD,
            slot_remap=remap,
            sampling_params=params(repetition_penalty=1.2),
            prompt_tokens=history,
            output_tokens=history,
        )
    )
    _, kwargs = last(Recorder, "decode_forward")
    assert kwargs["read_from_device"] is False and kwargs["slot_remap"] is remap
    assert kwargs["prompt_tokens"] is history and kwargs["output_tokens"] is history
    assert {k: kwargs[k] for k in FULL_RELOAD.v1_kwargs()} == FULL_RELOAD.v1_kwargs()
    out = adapter.read_decode(sub, overlapped=False)  # sync: process the raw output directly
    assert names(Recorder)[-2:] == ["decode_forward", "process_decode_output_host"]
    assert last(Recorder, "process_decode_output_host") == (("device-out",), {"is_tokens": True})
    assert out.tokens == list(range(B))
    adapter.read_decode(sub, overlapped=True)  # async: read, wait events, then process
    assert names(Recorder)[-2:] == ["read_decode_output", "process_decode_output_host"]
    assert last(Recorder, "read_decode_output")[1] == {"async_read": True}
    # Host-sampled decode: slot_remap still sent; no sampling object, no history.
    adapter.submit_decode(decode_call(command=ReloadCommand(reload_inputs=True), slot_remap=remap))
    _, kwargs = last(Recorder, "decode_forward")
    assert "slot_remap" in kwargs and "sampling_params" not in kwargs
    assert "prompt_tokens" not in kwargs


def test_an_overlapped_submit_reads_the_previous_step_back_in_the_same_device_call() -> None:
    """Async decode: the next step's submit reads the step before it back (vLLM asks for it
    right after), so a steady step costs one watchdog hand-off, not two."""
    adapter, model = loaded()
    device_calls: list[str] = []
    run = adapter.watchdog.run

    def counted(call: Any, fn: Any) -> Any:
        device_calls.append(call.kind)
        return run(call, fn)

    adapter.watchdog.run = counted  # type: ignore[method-assign]
    model.outputs["process_decode_output_host"] = torch.arange(B)
    model.outputs["decode_forward"] = "step-1"
    first = adapter.submit_decode(decode_call(sampling_params=params()))
    model.outputs["decode_forward"] = "step-2"
    Recorder.calls.clear()
    second = adapter.submit_decode(decode_call(sampling_params=params()), previous=first)
    assert names(Recorder) == ["decode_forward", "read_decode_output", "process_decode_output_host"]
    assert last(Recorder, "read_decode_output") == (("step-1",), {"async_read": True})
    assert last(Recorder, "process_decode_output_host")[0] == (("host", "step-1"),)
    out = adapter.read_decode(first, overlapped=True)  # already read: no device call
    assert out.tokens == list(range(B))
    assert device_calls == ["decode", "decode"]
    adapter.read_decode(second, overlapped=True)  # nothing submitted after it: its own call
    assert device_calls == ["decode", "decode", "decode read-back"]
    assert names(Recorder)[-2:] == ["read_decode_output", "process_decode_output_host"]


@pytest.mark.parametrize(
    "form",
    [
        torch.arange(B),  # [B] int64, passed through as is
        torch.arange(B, dtype=torch.int32)[:, None],  # [B, 1] int32
        (torch.arange(B, dtype=torch.int32), torch.zeros(B)),  # (tokens, logprobs)
        torch.arange(B, dtype=torch.int32).repeat_interleave(2).reshape(B, 2),  # [B, k]: last
        torch.arange(B, dtype=torch.float32).requires_grad_()[:, None],  # cast, detached
    ],
    ids=["B-int64", "B1-int32", "tuple", "Bk-last-column", "B1-float-grad"],
)
def test_device_tokens_in_every_contract_form_come_back_as_one_int_per_row(form: Any) -> None:
    adapter, model = loaded()
    model.outputs["process_decode_output_host"] = form
    out = adapter.read_decode(
        adapter.submit_decode(decode_call(sampling_params=params())), overlapped=False
    )
    assert out.tokens == list(range(B))
    assert all(type(t) is int for t in out.tokens)


def test_v0_model_gets_reset_batch_on_device_sampled_calls_only() -> None:
    class V0(Recorder):
        decode_input_update_contract: ClassVar[int] = 0

    adapter, _ = loaded(V0)
    assert adapter.contract_version == 0
    adapter.submit_decode(decode_call(command=FULL_RELOAD, sampling_params=params()))
    _, kwargs = last(V0, "decode_forward")
    assert kwargs["reset_batch"] is True and "reload_inputs" not in kwargs
    adapter.submit_decode(decode_call(command=FULL_RELOAD))
    _, kwargs = last(V0, "decode_forward")
    assert "reset_batch" not in kwargs


def test_without_read_decode_output_both_hooks_are_skipped() -> None:
    class HostTensors(Recorder):
        read_decode_output = None  # type: ignore[assignment]

    adapter, model = loaded(HostTensors)
    model.outputs["decode_forward"] = torch.zeros((B, 1, V))
    out = adapter.read_decode(adapter.submit_decode(decode_call()), overlapped=True)
    assert names(HostTensors)[-1] == "decode_forward"
    assert out.logits is not None and out.logits.shape == (B, V)


def test_mrope_prefill_splits_rope_deltas_and_decode_sends_rope_deltas_all_users() -> None:
    adapter, model = loaded()
    model.outputs["prefill_forward"] = ((torch.arange(B)[:, None], None), torch.tensor([3] * B))
    out = adapter.prefill(prefill_call(sampling_params=params(), uses_mrope=True))
    assert out.rope_deltas == [3] * B and out.tokens is not None
    deltas = torch.tensor([3, 0, 0, 0])
    adapter.submit_decode(decode_call(uses_mrope=True, rope_deltas=deltas))
    assert last(Recorder, "decode_forward")[1]["rope_deltas_all_users"] is deltas
    adapter.submit_decode(decode_call(uses_mrope=True))
    assert last(Recorder, "decode_forward")[1]["rope_deltas_all_users"] is None


# --- device logprobs ------------------------------------------------------------------------------
def test_flat_logprobs_are_read_only_when_asked_and_placeholders_refused() -> None:
    adapter, model = loaded()
    flat = torch.tensor([-0.5, -1.0, -2.0, -3.0])
    model.outputs["prefill_forward"] = (torch.arange(B)[:, None], flat)
    out = adapter.prefill(prefill_call(sampling_params=params(0), want_logprobs=True))
    assert out.logprobs is not None and torch.equal(out.logprobs.flat, flat)
    rows = logprobs_rows_from_device(out.logprobs, [2, 0], [2, 0], [0, 0])
    assert rows.logprob_token_ids.tolist() == [[2], [0]]
    assert rows.logprobs.tolist() == [[-2.0], [-0.5]]
    assert rows.selected_token_ranks.tolist() == [UNKNOWN_RANK] * 2
    model.outputs["prefill_forward"] = (torch.arange(B)[:, None], torch.full((B,), float("nan")))
    assert adapter.prefill(prefill_call(sampling_params=params())).logprobs is None
    with pytest.raises(ModelContractError, match="placeholder"):
        adapter.prefill(prefill_call(sampling_params=params(0), want_logprobs=True))


def test_top_k_logprobs_trimmed_ranked_by_index_sampled_first() -> None:
    class GptOssForCausalLM(Recorder):
        pass

    adapter, model = loaded(GptOssForCausalLM)
    assert adapter.profile.logprobs_form is LogprobsForm.TOP_K
    values = -torch.arange(32, dtype=torch.float32).repeat(B, 1)
    indices = (torch.arange(32, dtype=torch.int32) + 10).repeat(B, 1)
    sampled = torch.tensor([10, 12, 41, 10])
    model.outputs["prefill_forward"] = (sampled[:, None], (values, indices))
    out = adapter.prefill(prefill_call(sampling_params=params(3), want_logprobs=True))
    assert out.logprobs is not None
    rows = logprobs_rows_from_device(out.logprobs, [1, 2], [12, 41], [2, 3])
    assert rows.logprob_token_ids.tolist() == [[12, 10, 11, 12], [41, 10, 11, 12]]
    assert rows.logprobs.tolist() == [[-2.0, 0.0, -1.0, -2.0], [-31.0, 0.0, -1.0, -2.0]]
    assert rows.selected_token_ranks.tolist() == [3, 32]  # 0-based device -> 1-based vLLM
    with pytest.raises(ValueError, match="do not contain the sampled token"):
        logprobs_rows_from_device(out.logprobs, [0], [99], [1])


def test_top_k_family_by_hf_model_type() -> None:
    gpt_oss = type("HFConfig", (), {"model_type": "gpt_oss"})()
    assert ModelAdapter(Recorder, gpt_oss).profile.logprobs_form is LogprobsForm.TOP_K
    assert ModelAdapter(Recorder).profile.logprobs_form is LogprobsForm.FLAT


def test_no_module_but_the_adapter_calls_the_model() -> None:
    """The runner, worker and their helpers reach the model only through ModelAdapter: their
    source calls no model method on anything but the adapter and never probes with hasattr."""
    import re

    from vllm_tt_plugin import async_decode, loader, model_runner, worker
    from vllm_tt_plugin.adapter import kv_cache
    from vllm_tt_plugin.step import multimodal, runner_outputs

    methods = "|".join((
        "prefill_forward", "decode_forward", "read_decode_output", "process_decode_output_host",
        "allocate_kv_cache_per_layer", "allocate_kv_cache", "warmup_model_prefill",
        "warmup_model_decode", "initialize_vllm_model", "get_max_tokens_all_users",
        "get_kv_cache_spec", "release_request", "release_persistent_capture",
    ))  # fmt: skip
    call = re.compile(rf"(\w+)\.({methods})\(")
    for module in (async_decode, kv_cache, loader, model_runner, multimodal, runner_outputs,
                   worker):  # fmt: skip
        source = inspect.getsource(module)
        # "self.x(": the module's own method of that name (the worker's get_kv_cache_spec).
        callers = {(o, m) for o, m in call.findall(source) if o not in ("adapter", "self")}
        assert not callers, f"{module.__name__} calls {sorted(callers)} itself"
        assert "hasattr(" not in source, f"{module.__name__} probes with hasattr"
