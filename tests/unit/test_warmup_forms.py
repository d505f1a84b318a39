"""Warm-up forms negotiated from the signature found (issue #33 item 4): the adapter, the
platform's launch-time refusal and the parity checker read the same ``call_plan`` facts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit.test_contract_parity_checker import GENERATOR, edit, run, tree
from tests.unit.test_model_adapter import Recorder, loaded, plan
from vllm_tt_plugin.adapter.model_adapter import AdapterProfile, ModelContractError
from vllm_tt_plugin.config import TTOptions
from vllm_tt_plugin.contract.call_plan import WARMUP_DECODE_KEYWORDS, WARMUP_PREFILL_KEYWORDS
from vllm_tt_plugin.platform import TTConfigurationError, _resolve_model
from vllm_tt_plugin.test_models import warmup_forms
from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM


class Older(Recorder):
    """The older form: ``non_greedy_decoding_on_device`` required in both warm-ups."""

    def warmup_model_prefill(  # type: ignore[override]
        self, kv_cache: Any, enable_trace: bool, can_sample_on_device: bool,
        non_greedy_decoding_on_device: bool,
    ) -> None:  # fmt: skip
        self._record("warmup_model_prefill", kv_cache=kv_cache, enable_trace=enable_trace,
                     can_sample_on_device=can_sample_on_device,
                     non_greedy_decoding_on_device=non_greedy_decoding_on_device)  # fmt: skip

    def warmup_model_decode(  # type: ignore[override]
        self, kv_cache: Any, enable_trace: bool, max_batch_size: int, num_blocks: int,
        can_sample_on_device: bool, non_greedy_decoding_on_device: bool,
    ) -> None:  # fmt: skip
        self._record("warmup_model_decode", kv_cache=kv_cache, enable_trace=enable_trace,
                     max_batch_size=max_batch_size, num_blocks=num_blocks,
                     can_sample_on_device=can_sample_on_device,
                     non_greedy_decoding_on_device=non_greedy_decoding_on_device)  # fmt: skip


class Qwen3VL(Recorder):
    """Qwen3-VL's prefill warm-up: no ``can_sample_on_device`` (passing it is a TypeError)."""

    def warmup_model_prefill(  # type: ignore[override]
        self, kv_cache: Any, enable_trace: bool, sampling_params: Any = None
    ) -> None:
        self._record("warmup_model_prefill", kv_cache=kv_cache, enable_trace=enable_trace,
                     sampling_params=sampling_params)  # fmt: skip


class Oldest(Recorder):
    """``DecodeWarmupMixin``'s decode warm-up (``num_gpu_blocks`` required): not servable."""

    def warmup_model_decode(  # type: ignore[override]
        self, kv_cache: Any, enable_trace: bool, max_batch_size: int, num_gpu_blocks: int,
        sample_on_device_mode: Any = None, non_greedy_decoding_on_device: bool = False,
    ) -> None:  # fmt: skip
        raise AssertionError("never called")


def warm_calls(cls: type) -> list[tuple[str, dict[str, Any]]]:
    return [(n, k) for n, _, k in cls.calls if n.startswith("warmup")]


def test_older_form_gets_non_greedy_from_the_launch_plan() -> None:
    adapter, _ = loaded(Older)
    adapter.warm_up(plan(prefill_on_device=False, decode_on_device=True))
    warm = warm_calls(Older)
    assert [n for n, _ in warm] == ["warmup_model_prefill", "warmup_model_decode"] * 2
    # Non-greedy rows sample on the device exactly when the step kind does.
    assert [k["non_greedy_decoding_on_device"] for _, k in warm] == [False, True, False, True]
    assert [k["can_sample_on_device"] for _, k in warm] == [False, True, False, True]


def test_qwen3_vl_prefill_form_gets_no_can_sample_on_device() -> None:
    adapter, _ = loaded(Qwen3VL)
    adapter.warm_up(plan(prefill_on_device=True))
    prefill = [k for n, k in warm_calls(Qwen3VL) if n == "warmup_model_prefill"]
    want = [{"kv_cache": "kv", "enable_trace": t, "sampling_params": None} for t in (False, True)]
    assert prefill == want
    decode = [k for n, k in warm_calls(Qwen3VL) if n == "warmup_model_decode"]
    assert [sorted(k) for k in decode] == [sorted(WARMUP_DECODE_KEYWORDS)] * 2  # today's form


def test_unservable_form_is_refused_before_any_warmup_naming_method_and_signature() -> None:
    adapter, _ = loaded(Oldest)
    with pytest.raises(ModelContractError) as info:
        adapter.warm_up(plan())
    message = str(info.value)
    assert "Oldest.warmup_model_decode(kv_cache, enable_trace, max_batch_size, num_gpu_blocks" in (
        message
    )
    assert "required but not passed: num_gpu_blocks" in message
    assert warm_calls(Oldest) == []  # refused before the prefill warm-up ran


def test_reference_variants_negotiate_like_the_real_forms() -> None:
    def keywords(cls: type, method: str) -> tuple[str, ...] | None:
        form = AdapterProfile.of(cls).plan_facts.warmup_form(method)
        assert form is not None and form.refusal is None, form
        return form.keywords

    today = ReferenceLlamaForCausalLM  # greedy_only stays at its default: today's call
    assert keywords(today, "warmup_model_prefill") == WARMUP_PREFILL_KEYWORDS
    assert keywords(today, "warmup_model_decode") == WARMUP_DECODE_KEYWORDS
    older = warmup_forms.OlderWarmupForm
    assert keywords(older, "warmup_model_prefill") == (
        *WARMUP_PREFILL_KEYWORDS,
        "non_greedy_decoding_on_device",
    )
    assert keywords(older, "warmup_model_decode") == (
        *WARMUP_DECODE_KEYWORDS,
        "non_greedy_decoding_on_device",
    )
    assert keywords(warmup_forms.Qwen3VLWarmupForm, "warmup_model_prefill") == (
        "kv_cache",
        "enable_trace",
    )
    refused = AdapterProfile.of(warmup_forms.OldestDecodeWarmupForm).plan_facts.warmup_refusal()
    assert refused is not None and refused.method == "warmup_model_decode"


def _launch(options: TTOptions) -> Any:
    hf_config = SimpleNamespace(architectures=["ReferenceLlamaForCausalLM"], model_type="llama")
    config = SimpleNamespace(model_config=SimpleNamespace(hf_config=hf_config, model="ref"))
    return _resolve_model(config, options)  # type: ignore[arg-type]


def test_platform_refuses_an_unservable_form_at_launch(
    clean_registry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = "vllm_tt_plugin.test_models.warmup_forms:OldestDecodeWarmupForm"
    monkeypatch.setenv("TT_MODEL_CLASS_OVERRIDES", f"TTReferenceLlamaForCausalLM={target}")
    with pytest.raises(TTConfigurationError) as info:
        _launch(TTOptions(register_test_models=True))
    assert (
        f"{target}.warmup_model_decode(kv_cache, enable_trace, max_batch_size, num_gpu_blocks"
        in (str(info.value))
    )
    # Without warm-up the plugin never calls it: served.
    _launch(TTOptions(register_test_models=True, enable_model_warmup=False))


def test_checker_binds_the_negotiated_older_form_and_fails_the_refused_one(
    tmp_path: Path,
) -> None:
    older = edit(
        GENERATOR,
        ("enable_trace, can_sample_on_device):",
         "enable_trace, can_sample_on_device, non_greedy_decoding_on_device):"),
        ("num_blocks, can_sample_on_device\n",
         "num_blocks, can_sample_on_device, non_greedy_decoding_on_device\n"),
    )  # fmt: skip
    found = run(tree(tmp_path / "older", generator=older))
    # Binds (``drift``: this fixture records no signature for the demo class).
    assert found["warmup_model_prefill"].status == "drift", found["warmup_model_prefill"]
    assert found["warmup_model_decode"].status == "drift", found["warmup_model_decode"]
    oldest = edit(GENERATOR, ("max_batch_size, num_blocks,", "max_batch_size, num_gpu_blocks,"))
    found = run(tree(tmp_path / "oldest", generator=oldest))
    assert found["warmup_model_decode"].status == "broken", found["warmup_model_decode"]
    assert "num_gpu_blocks" in found["warmup_model_decode"].detail
