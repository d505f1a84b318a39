"""TTPlatform: plugin discovery, config rewrite, runtime class selection, early rejections.

Every config here is a real VllmConfig from vLLM's EngineArgs (the path `vllm serve` takes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, write_checkpoint_config

FAKES = "tests.unit.fakes.models"


def _platform_in_subprocess(pythonpath: str) -> str:
    env = {**os.environ, "PYTHONPATH": pythonpath, "VLLM_PLUGINS": "tt,tt_model_registry"}
    code = "from vllm.platforms import current_platform; print(current_platform.device_name)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_tt_platform_is_selected_when_ttnn_is_importable() -> None:
    assert _platform_in_subprocess(str(REPO / "host_stubs")) == "tt"


def test_tt_platform_is_not_selected_without_ttnn() -> None:
    assert _platform_in_subprocess("") != "tt"


def test_architectures_rewritten_and_tt_classes_selected(make_config: Any) -> None:
    config = make_config()
    assert config.model_config.hf_config.architectures == ["TTReferenceLlamaForCausalLM"]
    assert config.parallel_config.worker_cls == "vllm_tt_plugin.worker.TTWorker"
    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert not config.use_v2_model_runner


def test_no_registered_architecture_is_a_clear_error(make_config: Any, tmp_path: Path) -> None:
    model = write_checkpoint_config(tmp_path / "llama", architectures=["LlamaForCausalLM"])
    with pytest.raises(Exception) as info:
        make_config(model=model, model_class=None)
    for fragment in ("TTLlamaForCausalLM", "models.tt_transformers", "PYTHONPATH"):
        assert fragment in str(info.value)
    with pytest.raises(Exception, match="No TT model class is registered.*TTReferenceLlama"):
        make_config(model_class=None)


def test_test_models_need_the_option(make_config: Any) -> None:
    with pytest.raises(Exception, match="register_test_models"):
        make_config(model_class=None, tt={"register_test_models": False})


def test_v2_model_runner_is_refused(make_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    with pytest.raises(Exception, match="VLLM_USE_V2_MODEL_RUNNER=1 is not supported on TT"):
        make_config()


@pytest.mark.parametrize(
    ("engine_args", "fragment"),
    [
        ({"tensor_parallel_size": 2}, "--tensor-parallel-size 2 is not supported on TT"),
        ({"pipeline_parallel_size": 2}, "--pipeline-parallel-size 2 is not supported on TT"),
        ({"enable_lora": True}, "LoRA"),
        (
            {
                "speculative_config": {
                    "method": "ngram",
                    "num_speculative_tokens": 2,
                    "prompt_lookup_max": 2,
                }
            },
            "Speculative decoding",
        ),
        (
            {
                "nnodes": 2,
                "data_parallel_size": 2,
                "data_parallel_size_local": 1,
                "data_parallel_address": "127.0.0.1",
            },
            "Multi-host data parallelism",
        ),
    ],
)
def test_operational_constraints_are_rejected(
    make_config: Any, engine_args: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(Exception, match=fragment):
        make_config(**engine_args)


def test_prompt_logprobs_rejected_at_request_validation() -> None:
    from vllm.sampling_params import SamplingParams

    from vllm_tt_plugin.platform import TTPlatform

    TTPlatform.validate_request({}, SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="prompt_logprobs is not supported on TT"):
        TTPlatform.validate_request({}, SamplingParams(max_tokens=4, prompt_logprobs=1))


def test_logprobs_capped_at_20(make_config: Any) -> None:
    from vllm.sampling_params import SamplingParams

    from vllm_tt_plugin.platform import TTPlatform

    assert make_config().model_config.max_logprobs == 20
    assert make_config(max_logprobs=5).model_config.max_logprobs == 5
    assert make_config(max_logprobs=50).model_config.max_logprobs == 20
    assert make_config(max_logprobs=-1).model_config.max_logprobs == 20  # -1 = whole vocab
    TTPlatform.validate_request({}, SamplingParams(max_tokens=4, logprobs=20))
    with pytest.raises(ValueError, match="logprobs=21 .* at most 20 'logprobs'"):
        TTPlatform.validate_request({}, SamplingParams(max_tokens=4, logprobs=21))


def test_chunked_prefill_kept_for_capable_model_and_budget_untouched(make_config: Any) -> None:
    config = make_config(max_num_batched_tokens=512)
    assert config.scheduler_config.enable_chunked_prefill
    assert config.scheduler_config.max_num_batched_tokens == 512
    # a chunk that starts before an image ends before it (one that starts at it can cut it)
    assert config.scheduler_config.disable_chunked_mm_input


def test_chunked_prefill_disabled_without_capability_and_budget_raised(make_config: Any) -> None:
    config = make_config(model_class=f"{FAKES}:BareModel", max_num_batched_tokens=256)
    assert not config.scheduler_config.enable_chunked_prefill
    assert config.scheduler_config.max_num_batched_tokens == config.model_config.max_model_len


def test_no_enable_chunked_prefill_raises_small_budget(make_config: Any) -> None:
    # Plain vLLM refuses this combination outright (SchedulerConfig validation); TT raises the
    # budget so a whole prompt fits one prefill step (ledger P4).
    config = make_config(
        enable_chunked_prefill=False, max_model_len=1024, max_num_batched_tokens=256
    )
    assert not config.scheduler_config.enable_chunked_prefill
    assert config.scheduler_config.max_num_batched_tokens == 1024
    # A budget that already covers max_model_len is left as given.
    config = make_config(
        enable_chunked_prefill=False, max_model_len=1024, max_num_batched_tokens=4096
    )
    assert config.scheduler_config.max_num_batched_tokens == 4096


def test_shutdown_timeout_keeps_time_for_the_device_teardown(make_config: Any) -> None:
    # vLLM's default 0 s kills the engine core at once on SIGTERM, before the mesh is closed;
    # TT raises it to the teardown reserve (ledger P7). A longer timeout is left as given.
    from vllm_tt_plugin.launch.vllm_patches import SHUTDOWN_TEARDOWN_S

    assert make_config().shutdown_timeout == SHUTDOWN_TEARDOWN_S > 0
    assert make_config(shutdown_timeout=2).shutdown_timeout == SHUTDOWN_TEARDOWN_S
    assert make_config(shutdown_timeout=60).shutdown_timeout == 60


def test_prefix_caching_only_when_declared(make_config: Any) -> None:
    assert make_config().cache_config.enable_prefix_caching
    assert not make_config(model_class=f"{FAKES}:BareModel").cache_config.enable_prefix_caching


def test_async_scheduling_on_by_default_for_models_that_declare_it(make_config: Any) -> None:
    assert make_config().scheduler_config.async_scheduling  # vLLM's default, kept
    assert make_config(async_scheduling=True).scheduler_config.async_scheduling
    assert not make_config(async_scheduling=False).scheduler_config.async_scheduling


def test_async_scheduling_turned_off_with_one_warning_for_incapable_model(
    make_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from vllm_tt_plugin import platform

    platform._warned.clear()
    with caplog.at_level("WARNING", logger="vllm.tt_plugin.platform"):
        for _ in range(2):
            config = make_config(model_class=f"{FAKES}:BareModel", async_scheduling=True)
            assert not config.scheduler_config.async_scheduling
        assert not make_config(model_class=f"{FAKES}:BareModel").scheduler_config.async_scheduling
    warnings = [r for r in caplog.records if "supports_async_decode" in r.getMessage()]
    assert len(warnings) == 1
    assert "async scheduling turned off" in warnings[0].getMessage()


@pytest.mark.parametrize(
    ("model", "async_scheduling", "overlap"),
    [("CapableModel", True, True), ("CapableModel", False, False), ("BareModel", True, False)],
)
def test_the_scheduler_class_follows_the_plans_async_overlap(
    make_config: Any, model: str, async_scheduling: bool, overlap: bool
) -> None:
    """The platform installs the sync or the async TT scheduler as the plan says; the engine
    core resolves it through vLLM's own SchedulerConfig.get_scheduler_cls."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    from vllm_tt_plugin.launch.launch_plan import read_plan
    from vllm_tt_plugin.scheduler import TTAsyncScheduler, TTScheduler

    config = make_config(model_class=f"{FAKES}:{model}", async_scheduling=async_scheduling)
    assert read_plan(config).async_overlap is overlap
    installed = config.scheduler_config.get_scheduler_cls()
    assert installed is (TTAsyncScheduler if overlap else TTScheduler)
    # vLLM's engine core runs its async batch queue exactly when the class keeps placeholders.
    assert issubclass(installed, AsyncScheduler) is bool(config.scheduler_config.async_scheduling)


def test_platform_config_stays_valid_for_api_server_processes(make_config: Any) -> None:
    """vLLM re-validates the config in API-server processes; compact JSON is therefore forced
    in the engine core (TTScheduler), not here, where "auto" would fail validation."""
    from vllm.config import StructuredOutputsConfig

    config = make_config()
    structured = config.structured_outputs_config
    assert not structured.disable_any_whitespace
    StructuredOutputsConfig(
        **{k: getattr(structured, k) for k in ("backend", "disable_any_whitespace")}
    )


def test_device_sampling_needs_model_support(make_config: Any) -> None:
    assert make_config(tt={"sample_on_device_mode": "all"})
    with pytest.raises(Exception, match="sample_on_device_mode.*supports_sample_on_device"):
        make_config(model_class=f"{FAKES}:BareModel", tt={"sample_on_device_mode": "all"})


def test_block_size_default_and_validation(make_config: Any) -> None:
    assert make_config().cache_config.block_size == 64
    assert make_config(block_size=32).cache_config.block_size == 32
    with pytest.raises(Exception, match="--block-size 16 is not supported on TT"):
        make_config(block_size=16)


def test_malformed_capabilities_are_named(make_config: Any) -> None:
    with pytest.raises(
        Exception, match="MalformedCapabilities.model_capabilities\\['supports_async_decode'\\]"
    ):
        make_config(model_class=f"{FAKES}:MalformedCapabilities")


def test_graph_compilation_is_off(make_config: Any) -> None:
    from vllm.config import CompilationMode, CUDAGraphMode

    config = make_config()
    assert config.compilation_config.mode == CompilationMode.NONE
    assert config.compilation_config.cudagraph_mode == CUDAGraphMode.NONE


def test_block_output_model_with_vllm_defaults_is_refused_naming_the_option(
    make_config: Any,
) -> None:
    # vLLM's defaults (many sequences, async scheduling) do not serve a block model.
    with pytest.raises(Exception, match="--max-num-seqs .* block-output model"):
        make_config(model_class=f"{FAKES}:BlockOutputModel")


def _mllama_checkpoint(path: Path) -> Path:
    """A config-only Llama 3.2 Vision checkpoint (MllamaConfig, tiny sizes)."""
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["MllamaForConditionalGeneration"],
        "model_type": "mllama",
        "text_config": {
            "model_type": "mllama_text_model",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 256,
            "cross_attention_layers": [1],
            "max_position_embeddings": 1024,
        },
        "vision_config": {
            "model_type": "mllama_vision_model",
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_global_layers": 1,
            "attention_heads": 2,
            "intermediate_size": 64,
            "image_size": 56,
            "patch_size": 14,
            "vision_output_dim": 64,
            "intermediate_layers_indices": [0],
        },
        "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("model_class", [None, f"{FAKES}:CapableModel"])
def test_llama32_vision_is_refused_at_launch_with_the_evidence(
    make_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_class: str | None
) -> None:
    # The built-in tt_transformers class and an operator's own (importable) class alike: vLLM
    # 0.26.0 cannot process or schedule Mllama, so the launch stops at config time, before the
    # class is imported and long before a worker could open a device.
    if model_class is not None:
        monkeypatch.setenv(
            "TT_MODEL_CLASS_OVERRIDES", f"TTMllamaForConditionalGeneration={model_class}"
        )
    with pytest.raises(Exception) as info:
        make_config(model=_mllama_checkpoint(tmp_path / "mllama"), model_class=None)
    message = str(info.value)
    for fragment in (
        "TTMllamaForConditionalGeneration cannot be served on TT",
        "after v0.10.2 with V0's encoder-decoder path",
        "vllm/model_executor/models/registry.py:737-740",
        "no Mllama processor and allocates no cross-attention KV cache",
        "Refused at launch",
    ):
        assert fragment in message
    assert "Cannot import" not in message


def test_t3000_llama2_70b_selector_is_refused_at_launch_naming_it(
    make_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TT_LLAMA_TEXT_VER", "llama2_70b")
    model = write_checkpoint_config(tmp_path / "llama", architectures=["LlamaForCausalLM"])
    with pytest.raises(Exception) as info:
        make_config(model=model, model_class=None)
    message = str(info.value)
    for fragment in (
        "TTLlamaForCausalLM from TT_LLAMA_TEXT_VER=llama2_70b "
        "(models.demos.t3000.llama2_70b.tt.generator_vllm:TtLlamaForCausalLM) cannot be served",
        "initialize_vllm_model(cls, hf_config, mesh_device, max_batch_size)",
        "prefill_forward(self, tokens, page_table, kv_cache, prompt_lens)",
        "choose another TT_LLAMA_TEXT_VER value",
    ):
        assert fragment in message
    assert "Cannot import" not in message  # refused before the class is imported
