"""The served model (adapter/served_model.py): the plan plus the loaded instance's facts,
derived once.

The platform parses a class's capability declaration once; the worker, adapter and runner read
the plan and the served model built after load. A version-0 decode never overlaps, so the
platform keeps such a launch's scheduler synchronous, and an instance that contradicts the
class a launch was planned from is refused at load.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from vllm.sampling_params import SamplingParams

from tests.unit.tiny_checkpoint import start_worker_and_scheduler, write_tiny_checkpoint
from vllm_tt_plugin.adapter.instance_capabilities import InstanceCapabilities, instance_declared
from vllm_tt_plugin.adapter.model_adapter import ModelContractError
from vllm_tt_plugin.adapter.served_model import ServedModel
from vllm_tt_plugin.config import TTOptions
from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.launch.data_parallel import LaneLayout
from vllm_tt_plugin.launch.launch_plan import read_plan, resolve_plan
from vllm_tt_plugin.model_registry import ModelTarget
from vllm_tt_plugin.policy.sampling_route import row_feature

LEGACY_MODEL = "vllm_tt_plugin.test_models.variants:LegacyDecodeContract"
ASYNC_CAPS = ModelCapabilities(supports_async_decode=True, supports_sample_on_device=True)
TARGET = ModelTarget("TTReferenceLlamaForCausalLM", "tests.unit.fakes.models:CapableModel", "t")


@pytest.fixture(scope="module")
def weights_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("served-weights"))


def _reference_config(make_config: Any, checkpoint: Path, max_model_len: int) -> Any:
    """The reference model on the emulated mesh (the worker really loads and warms it up)."""
    return make_config(
        model=checkpoint,
        model_class=None,
        tt={"register_test_models": True, "emulated_mesh": True},
        max_num_seqs=4,
        max_model_len=max_model_len,
    )


def test_capabilities_are_parsed_by_the_platform_only(
    make_config: Any, weights_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the platform resolved the plan, the worker's start-up, warm-up and a served step
    never parse the declaration again (only the reference model itself reads its own)."""
    config = _reference_config(make_config, weights_checkpoint, max_model_len=256)
    callers: list[str] = []
    original = ModelCapabilities.from_model_class.__func__  # type: ignore[attr-defined]

    def recording(cls: type[ModelCapabilities], model_cls: type) -> ModelCapabilities:
        callers.append(sys._getframe(1).f_globals["__name__"])
        return original(cls, model_cls)  # type: ignore[no-any-return]

    monkeypatch.setattr(ModelCapabilities, "from_model_class", classmethod(recording))
    worker, _ = start_worker_and_scheduler(config)
    try:
        served = worker.served
        assert served is not None and served.plan == read_plan(config)
        assert worker.adapter is not None
        assert worker.adapter.capabilities == served.plan.capabilities
    finally:
        worker.shutdown()
    assert set(callers) <= {"vllm_tt_plugin.test_models.core"}, callers


def test_warm_up_and_serving_share_the_page_table_width(
    make_config: Any, weights_checkpoint: Path
) -> None:
    config = _reference_config(make_config, weights_checkpoint, max_model_len=200)
    worker, _ = start_worker_and_scheduler(config)
    try:
        assert worker.served is not None and worker.model_runner is not None
        width = worker.served.table_width(config.model_config.max_model_len)
        assert width == -(-200 // config.cache_config.block_size)
        assert worker.model_runner.batch.max_blocks_per_req == width
        decode_warmups = [
            r for r in worker.get_model().call_log if r.method == "warmup_model_decode"
        ]
        assert decode_warmups and all(r.num_blocks == width for r in decode_warmups)
    finally:
        worker.shutdown()


def test_version_zero_class_keeps_the_scheduler_synchronous(make_config: Any) -> None:
    """A class that declares async decode but no reload contract: the runner could not overlap,
    so the platform turns async scheduling off and the plan says so."""
    config = make_config(
        model_class=LEGACY_MODEL,
        tt={"register_test_models": True},
        async_scheduling=True,
    )
    plan = read_plan(config)
    assert plan.capabilities.supports_async_decode
    assert plan.decode_contract == 0
    assert not config.scheduler_config.async_scheduling
    assert not plan.async_overlap


def test_version_one_class_keeps_async_scheduling(make_config: Any) -> None:
    config = make_config(async_scheduling=True, tt={"trace_mode": "decode_only"})
    plan = read_plan(config)
    assert plan.decode_contract == 1
    assert config.scheduler_config.async_scheduling
    assert plan.async_overlap and plan.resident_decode_inputs


def _plan(decode_contract: int, *, async_scheduling: bool) -> Any:
    return resolve_plan(
        TTOptions(trace_mode="decode_only"),
        TARGET,
        ASYNC_CAPS,
        decode_contract=decode_contract,
        lanes=LaneLayout(1, 4),
        async_scheduling=async_scheduling,
    )


def _served(plan: Any, contract_version: int) -> ServedModel:
    return ServedModel.after_load(
        plan,
        class_name="Model",
        contract_version=contract_version,
        block_size=64,
    )


def test_an_instance_that_contradicts_an_async_plan_is_refused() -> None:
    plan = _plan(1, async_scheduling=True)
    with pytest.raises(ModelContractError, match="decode_input_update_contract=1 on its class"):
        _served(plan, 0)
    assert _served(plan, 1).overlap


def test_effective_values_follow_the_instance_contract() -> None:
    """A plan made from a version-1 class without overlap, served by an instance that says 0
    (set in its __init__): no reload commands and no slot remaps; inputs stay resident
    (``reset_batch`` says when they change)."""
    sync_plan = _plan(1, async_scheduling=False)
    assert sync_plan.resident_decode_inputs
    legacy = _served(sync_plan, 0)
    assert not legacy.reload_commands and not legacy.remaps_slots and not legacy.overlap
    assert legacy.resident_inputs
    current = _served(sync_plan, 1)
    assert current.reload_commands and current.resident_inputs and current.remaps_slots
    assert current.table_width(129) == 3 and current.table_width(128) == 2


def _load(plan: Any, declared: ModelCapabilities, drops: str | None = None) -> ServedModel:
    return ServedModel.after_load(
        plan, class_name="Model", contract_version=0, block_size=64,
        instance=InstanceCapabilities(declared, drops),
    )  # fmt: skip


def test_an_instance_declaring_less_than_its_class_acted_on_is_refused() -> None:
    # tt_transformers.vllm_registry: the registered class plans the launch, but
    # initialize_vllm_model returns the selected generator's own model, with its own capabilities.
    plan = _plan(0, async_scheduling=False)
    planned = plan.capabilities
    assert _load(plan, planned).plan == plan
    narrower = replace(planned, supports_sample_on_device=False, supports_async_decode=False)
    with pytest.raises(ModelContractError) as info:
        _load(plan, narrower)
    message = str(info.value)
    assert "supports_sample_on_device: class True, instance False" in message
    assert "supports_async_decode: class True, instance False" in message
    # Declaring more than the class is not a conflict (the plan stays within it).
    wider = replace(planned, supports_chunked_prefill=True, supports_prefix_caching=True)
    assert _load(plan, wider).plan == plan


def test_the_instance_s_per_request_limits_narrow_the_plan() -> None:
    """tt-transformers' generators declare their own device top-k and device penalties
    (Llama 3.1 8B: max_device_top_k 32; Phi-4: supports_device_penalties False, tenstorrent/
    tt-transformers @ 4fc26a3e) while the registry class declares neither: routing, decided per
    request after load, takes the narrower, where the instance was refused at load before."""
    plan = _plan(0, async_scheduling=False)
    planned = plan.capabilities
    assert planned.max_device_top_k is None and planned.supports_device_penalties
    served = _load(plan, replace(planned, max_device_top_k=32, supports_device_penalties=False))
    caps = served.plan.capabilities
    assert caps.max_device_top_k == 32 and not caps.supports_device_penalties
    assert served.plan == replace(plan, capabilities=caps)  # nothing else moves
    assert [r.split(" (")[0] for r in served.narrowed] == [
        "max_device_top_k 32",
        "supports_device_penalties False",
    ]
    penalised = SamplingParams(temperature=0.8, top_k=8, repetition_penalty=1.3)
    assert row_feature(plan, penalised) is None
    assert row_feature(served.plan, penalised) == "penalties"
    assert row_feature(served.plan, SamplingParams(temperature=0.8, top_k=64)) == "top_k"
    # A wider instance limit never widens the class's.
    tight = replace(plan, capabilities=replace(planned, max_device_top_k=8))
    assert _load(tight, replace(planned, max_device_top_k=32)).plan == tight


def test_an_instance_that_drops_the_penalty_histories_samples_penalties_on_the_host() -> None:
    plan = _plan(0, async_scheduling=False)
    served = _load(plan, plan.capabilities, drops="its adapter drops prompt_tokens")
    assert not served.plan.capabilities.supports_device_penalties
    assert served.narrowed == (
        "its adapter drops prompt_tokens: penalised rows sample on the host",
    )
    penalised = SamplingParams(temperature=0.0, presence_penalty=0.5)
    assert row_feature(served.plan, penalised) == "penalties"


def test_a_returned_subclass_declaring_less_is_refused_like_another_class() -> None:
    # rt45f K2: isinstance held for a subclass, so its narrower declaration was ignored and the
    # launch sent it device-sampled decodes it declared it cannot take.
    class Registered:
        model_capabilities = {"supports_sample_on_device": True, "supports_async_decode": True}

    class Narrower(Registered):
        model_capabilities = {"supports_sample_on_device": False}

    class Same(Registered):
        pass

    plan = _plan(0, async_scheduling=False)
    planned = plan.capabilities
    assert instance_declared(Registered(), Registered, planned) is planned
    same = instance_declared(Same(), Registered, planned)
    assert same == ModelCapabilities.from_model_class(Registered)
    declared = instance_declared(Narrower(), Registered, planned)
    assert not declared.supports_sample_on_device
    with pytest.raises(ModelContractError, match="supports_sample_on_device: class True"):
        _load(plan, declared)
