"""TTWorker's start-up sequence with the real reference model on the emulated mesh (no engine).

The same calls, in the same order, that vLLM's engine makes: init_device, load_model,
get_kv_cache_spec, determine_available_memory, initialize_from_config,
compile_or_warm_up_model. The reference model records every contract call, so the test sees
which warm-up phases ran and with which trace setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from vllm.sampling_params import SamplingParams

from tests.unit.tiny_checkpoint import start_worker_and_scheduler, write_tiny_checkpoint
from vllm_tt_plugin.policy.sampling_route import choose_route
from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.worker import TTWorker


@pytest.fixture(scope="module")
def weights_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("ref-weights"))


def start_worker(make_config: Any, checkpoint: Path, **tt: Any) -> TTWorker:
    config = make_config(
        model=checkpoint,
        model_class=None,
        tt={"register_test_models": True, "emulated_mesh": True, **tt},
        max_num_seqs=4,
        max_model_len=256,
    )
    worker, _ = start_worker_and_scheduler(config)
    return worker


def warmups(worker: TTWorker) -> list[tuple[str, bool]]:
    return [
        (r.method, bool(r.enable_trace))
        for r in worker.get_model().call_log
        if r.method.startswith("warmup_model")
    ]


@pytest.mark.parametrize(
    ("trace_mode", "expected"),
    [
        (
            "all",
            [
                ("warmup_model_prefill", False),
                ("warmup_model_decode", False),
                ("warmup_model_prefill", True),
                ("warmup_model_decode", True),
            ],
        ),
        (
            "decode_only",
            [
                ("warmup_model_prefill", False),
                ("warmup_model_decode", False),
                ("warmup_model_decode", True),
            ],
        ),
        ("none", [("warmup_model_prefill", False), ("warmup_model_decode", False)]),
    ],
)
def test_two_phase_warmup_follows_trace_mode(
    make_config: Any, weights_checkpoint: Path, trace_mode: str, expected: list[tuple[str, bool]]
) -> None:
    worker = start_worker(make_config, weights_checkpoint, trace_mode=trace_mode)
    try:
        assert warmups(worker) == expected
        runner = worker.model_runner
        assert runner is not None
        assert runner.prefill_trace is (trace_mode == "all")
        assert runner.decode_trace is (trace_mode in ("all", "decode_only"))
    finally:
        worker.shutdown()


@pytest.mark.parametrize(
    ("mode", "compat", "prefill_on_device", "decode_on_device"),
    [
        ("all", False, True, True),
        ("decode_only", False, False, True),
        (None, False, False, False),
        # always_compat_sampling: serving never samples on the device, so warm-up compiles no
        # device sampling either.
        ("all", True, False, False),
        ("decode_only", True, False, False),
    ],
)
def test_warmup_device_sampling_flag_per_phase_and_one_request_table_width(
    make_config: Any,
    weights_checkpoint: Path,
    mode: str | None,
    compat: bool,
    prefill_on_device: bool,
    decode_on_device: bool,
) -> None:
    """Prefill warm-up may sample on the device only under mode "all", decode under "all" and
    "decode_only", never under always_compat_sampling, and each phase exactly when serving
    would route a plain request there; decode warm-up's num_blocks is one request's page-table
    width (ceil(max_model_len 256 / block 64) = 4), not the pool; and the prefill warm-up's
    trace phase runs at all only because already_warmed_up_prefill was reset between phases."""
    tt: dict[str, Any] = {"always_compat_sampling": compat}
    if mode is not None:
        tt["sample_on_device_mode"] = mode
    worker = start_worker(make_config, weights_checkpoint, **tt)
    try:
        records = [r for r in worker.get_model().call_log if r.method.startswith("warmup")]
        assert [(r.method, r.enable_trace) for r in records] == [
            ("warmup_model_prefill", False),
            ("warmup_model_decode", False),
            ("warmup_model_prefill", True),
            ("warmup_model_decode", True),
        ]
        prefill = [r.device_sampling for r in records if r.method == "warmup_model_prefill"]
        decode = [r for r in records if r.method == "warmup_model_decode"]
        assert prefill == [prefill_on_device] * 2
        assert [r.device_sampling for r in decode] == [decode_on_device] * 2
        assert {r.num_blocks for r in decode} == {4}
        assert worker.cache_config.num_gpu_blocks > 4
        plain = [SamplingParams(temperature=0.7, top_k=10, top_p=0.9)]
        model_steps = (StepKind.PREFILL, StepKind.DECODE)
        serving = {k: choose_route(worker.plan, k, plain).on_device for k in model_steps}
        assert serving == {StepKind.PREFILL: prefill_on_device, StepKind.DECODE: decode_on_device}
    finally:
        worker.shutdown()


def test_warmup_can_be_disabled(make_config: Any, weights_checkpoint: Path) -> None:
    worker = start_worker(make_config, weights_checkpoint, enable_model_warmup=False)
    try:
        assert warmups(worker) == []
    finally:
        worker.shutdown()


def test_block_budget_is_published_as_override_and_bytes(
    make_config: Any, weights_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TT_REFERENCE_MAX_TOKENS_ALL_USERS", "1024")
    worker = start_worker(make_config, weights_checkpoint)
    try:
        budget = worker.block_budget
        assert budget is not None
        assert budget.num_blocks == 1024 // 64 + 4 + 1
        assert worker.cache_config.num_gpu_blocks_override == budget.num_blocks
        assert worker.cache_config.num_gpu_blocks == budget.num_blocks
    finally:
        worker.shutdown()
    assert worker.mesh is None  # shutdown closed the mesh


def test_adapter_checks_the_contract_surface() -> None:
    from vllm_tt_plugin.adapter.model_adapter import ModelAdapter, ModelContractError

    class NotAModel:
        pass

    with pytest.raises(ModelContractError, match="NotAModel has no initialize_vllm_model"):
        ModelAdapter(NotAModel)
