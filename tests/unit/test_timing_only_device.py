"""The timing-only emulated device: contract-correct, deterministic, no decoder, and its time is
the configured step; the step file retunes it; host phase timing reaches the metrics files."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.unit import test_reference_model as ref
from tests.unit import test_tt_metrics
from tests.unit.test_reference_model import (
    _clone,
    _sampled_reqs,
    build,
    decode_async,
    decode_sync,
    make_reqs,
    prefill,
    prompts,
)
from tests.unit.test_tt_metrics import scrape, value
from vllm_tt_plugin import host_phases
from vllm_tt_plugin.emulation.mesh import EmulatedMeshDevice, StepFile
from vllm_tt_plugin.mesh_spec import NAMED_MESHES
from vllm_tt_plugin.test_models import timing_only
from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM

VOCAB = 256


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    return _checkpoint(tmp_path_factory.mktemp("tiny-llama"))


def _checkpoint(path: Path) -> tuple[Any, Any]:
    from transformers import AutoConfig

    hf = ref._write_checkpoint(path, tie=False)
    return AutoConfig.from_pretrained(path), hf


metrics_dir = test_tt_metrics.metrics_dir  # the fixture, shared


@pytest.fixture
def timing_mesh() -> Iterator[EmulatedMeshDevice]:
    device = EmulatedMeshDevice(NAMED_MESHES["N150"], step_time_s=0.0, timing_only=True)
    yield device
    device.close()


@pytest.fixture
def timing_t3k() -> Iterator[EmulatedMeshDevice]:
    device = EmulatedMeshDevice(NAMED_MESHES["T3K"], step_time_s=0.0, timing_only=True)
    yield device
    device.close()


def no_decoder(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the timing-only device ran the decoder")

    monkeypatch.setattr(model.decoder, "hidden_states", refuse)
    monkeypatch.setattr(model.decoder, "logits", refuse)


def expected_greedy(prompt: list[int], steps: int) -> list[int]:
    seq = list(prompt)
    for _ in range(steps):
        nxt = timing_only.next_token(torch.tensor([seq[-1]]), torch.tensor([len(seq) - 1]), VOCAB)
        seq.append(int(nxt))
    return seq[len(prompt) :]


@pytest.mark.parametrize("sampling", [False, True], ids=["host-logits", "device-greedy"])
def test_greedy_follows_the_closed_form_without_the_decoder(
    checkpoint,
    timing_mesh,
    monkeypatch,
    sampling,
) -> None:
    config, _ = checkpoint
    model, kv = build(ReferenceLlamaForCausalLM, config, timing_mesh)
    assert model.timing_only
    no_decoder(model, monkeypatch)
    rng = random.Random(3)
    reqs = make_reqs(prompts(rng, [1, 5, 17, 33]), [0, 2, 3, 7], rng)
    prefill(model, kv, reqs, sampling=sampling)
    decode_sync(model, kv, reqs, 12, sampling=sampling)
    for r in reqs:
        assert r.out == expected_greedy(r.prompt, 13)


def test_resident_async_decode_equals_sync_reloads_and_keeps_the_state(
    checkpoint,
    timing_mesh,
    monkeypatch,
) -> None:
    config, _ = checkpoint
    rng = random.Random(8)
    sync_model, sync_kv = build(ReferenceLlamaForCausalLM, config, timing_mesh)
    async_model, async_kv = build(ReferenceLlamaForCausalLM, config, timing_mesh)
    no_decoder(async_model, monkeypatch)
    sync_reqs = _sampled_reqs(rng, [0, 1, 2, 4, 6, 7])  # greedy, seeded, top-k rows
    async_reqs = _clone(sync_reqs)
    prefill(sync_model, sync_kv, sync_reqs, sampling=True)
    decode_sync(sync_model, sync_kv, sync_reqs, 10, sampling=True)
    prefill(async_model, async_kv, async_reqs, sampling=True)
    decode_async(async_model, async_kv, async_reqs, 10)  # read back through the events
    assert [r.out for r in async_reqs] == [r.out for r in sync_reqs]
    state = async_model.resident_snapshot()
    for r in async_reqs:
        assert int(state.tokens[r.slot]) == r.out[-1]
        assert int(state.positions[r.slot]) == len(r.seq) - 1


def test_device_logprobs_are_the_closed_form_distribution(checkpoint, timing_t3k) -> None:
    from tests.unit.test_reference_model import decode_args
    from vllm_tt_plugin.sampling_params import DeviceSamplingRow

    config, _ = checkpoint
    model, kv = build(ReferenceLlamaForCausalLM, config, timing_t3k)
    rng = random.Random(5)
    rows = [DeviceSamplingRow(num_logprobs=0)] * 2
    reqs = make_reqs(prompts(rng, [3, 9]), [0, 5], rng, rows)
    prefill(model, kv, reqs, sampling=True)
    args = decode_args(model, reqs, sampling=True)  # the rows ask for the sampled logprob
    tokens, logprobs = model.decode_forward(
        kv_cache=kv, reload_inputs=True, reload_page_table=False, reload_sampling_params=True,
        reset_sampling_state=True, **args,
    )  # fmt: skip
    peak = timing_only.PEAK
    want = peak - torch.logsumexp(torch.tensor([peak] + [0.0] * (VOCAB - 1)), 0)
    for r in reqs:
        assert int(tokens[r.slot, 0]) == expected_greedy(r.seq, 1)[0]
        assert float(logprobs[r.slot]) == pytest.approx(float(want), abs=1e-5)


def test_a_call_costs_the_step_time_and_little_host_cpu(checkpoint) -> None:
    config, _ = checkpoint
    step_s = 0.15
    mesh = EmulatedMeshDevice(NAMED_MESHES["N150"], step_time_s=step_s, timing_only=True)
    try:
        model, kv = build(ReferenceLlamaForCausalLM, config, mesh)
        rng = random.Random(2)
        reqs = make_reqs(prompts(rng, [4, 6]), [0, 1], rng)
        prefill(model, kv, reqs, sampling=True)
        wall, cpu = time.perf_counter(), time.process_time()
        decode_sync(model, kv, reqs, 3, sampling=True)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        mesh.close()
    assert wall >= 3 * step_s
    assert cpu < 0.5 * wall  # the device sleeps out its time (the GIL released)


def test_the_step_file_retunes_the_device_and_bad_contents_keep_the_last(tmp_path: Path) -> None:
    path = tmp_path / "step.ms"
    path.write_text("12.5\n")
    step = StepFile(path, initial_s=0.001)
    assert step.step_time_s() == pytest.approx(0.0125)
    path.write_text("oops")
    step._checked = -1.0  # past the poll interval
    assert step.step_time_s() == pytest.approx(0.0125)
    path.write_text("40")
    step._checked = -1.0
    assert step.step_time_s() == pytest.approx(0.040)
    path.unlink()
    step._checked = -1.0
    assert step.step_time_s() == pytest.approx(0.040)


def test_phase_times_are_published_as_counters(metrics_dir: Path) -> None:
    clock = host_phases.PhaseClock()
    clock._thread = object()  # type: ignore[assignment]  # publish by hand, no thread
    clock.add(host_phases.Kind.DECODE, host_phases.Phase.INPUT_BUILD, 1_500_000)
    clock.add(host_phases.Kind.DECODE, host_phases.Phase.INPUT_BUILD, 500_000)
    clock.add(host_phases.Kind.PREFILL, host_phases.Phase.VLLM_SCHEDULE, 250_000)
    clock.publish()
    clock.add(host_phases.Kind.DECODE, host_phases.Phase.INPUT_BUILD, 1_000_000)
    clock.publish()
    clock.publish()  # nothing new: nothing added twice
    clock.add_cpu(host_phases.Kind.DECODE, host_phases.Part.PLUGIN, 400_000)
    clock.add_cpu(host_phases.Kind.DECODE, host_phases.Part.VLLM, 100_000)
    clock.publish()
    clock.add_cpu(host_phases.Kind.DECODE, host_phases.Part.PLUGIN, 200_000)
    clock.publish()
    samples = scrape(metrics_dir)
    cpu = "tt_host_cpu_seconds_total"
    assert value(samples, cpu, kind="decode", part="plugin") == pytest.approx(0.0006)
    assert value(samples, cpu, kind="decode", part="vllm") == pytest.approx(0.0001)
    assert value(samples, cpu, kind="prefill", part="plugin") is None
    name = "tt_host_seconds_total"
    assert value(samples, name, kind="decode", phase="input_build") == pytest.approx(0.003)
    assert value(samples, name, kind="prefill", phase="vllm_schedule") == pytest.approx(0.00025)
    assert value(samples, name, kind="decode", phase="output_build") is None


def test_every_phase_is_plugin_model_or_vllm_once() -> None:
    groups = (host_phases.PLUGIN_PHASES, host_phases.MODEL_PHASES, host_phases.VLLM_PHASES)
    flat = [p for g in groups for p in g]
    assert sorted(flat) == sorted(host_phases.Phase)
