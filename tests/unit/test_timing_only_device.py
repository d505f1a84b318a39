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
from tests.unit.metrics_files import scrape, value
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
from vllm_tt_plugin.emulation.mesh import EmulatedMeshDevice, StepFile
from vllm_tt_plugin.launch.mesh_spec import NAMED_MESHES
from vllm_tt_plugin.observability import host_phases
from vllm_tt_plugin.policy.step_kind import StepKind
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
    from vllm_tt_plugin.contract.sampling_params import DeviceSamplingRow

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
    clock.add(StepKind.DECODE, host_phases.Phase.INPUT_BUILD, 1_500_000)
    clock.add(StepKind.DECODE, host_phases.Phase.INPUT_BUILD, 500_000)
    clock.add(StepKind.PREFILL, host_phases.Phase.VLLM_SCHEDULE, 250_000)
    clock.publish()
    clock.add(StepKind.DECODE, host_phases.Phase.INPUT_BUILD, 1_000_000)
    clock.publish()
    clock.publish()  # nothing new: nothing added twice
    clock.add_cpu(StepKind.DECODE, host_phases.Part.PLUGIN, 400_000)
    clock.add_cpu(StepKind.DECODE, host_phases.Part.VLLM, 100_000)
    clock.publish()
    clock.add_cpu(StepKind.DECODE, host_phases.Part.PLUGIN, 200_000)
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


# --- the greedy fast path (timing_only.greedy_decode) -------------------------------------------
def _steady(model: Any, kv: Any, reqs: list[Any], steps: int, reload: dict[str, Any]) -> list[Any]:
    """One decode with the ``reload`` flags, then resident steps (no flags, stale host inputs);
    returns each step's (tokens, logprobs) and appends the tokens to the requests."""
    from tests.unit.test_reference_model import NO_RELOAD, decode_args

    results = []
    for step in range(steps):
        flags = reload if step == 0 else NO_RELOAD
        out = model.decode_forward(
            kv_cache=kv, enable_trace=True, **decode_args(model, reqs, sampling=True), **flags
        )
        for r in reqs:
            r.out.append(int(out[0][r.slot, 0]))
        results.append((out[0].clone(), out[1].clone()))
    return results


class _SamplerCalls:
    """Counts the device sampler's calls (the full path) on the decode path."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from vllm_tt_plugin.test_models.sampling import DeviceSampler

        self.calls = 0
        real = DeviceSampler.sample_tokens

        def counted(model: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(model, *args, **kwargs)

        monkeypatch.setattr(DeviceSampler, "sample_tokens", counted)


def _snapshot(model: Any) -> tuple[torch.Tensor, ...]:
    state = model.resident_snapshot()
    return state.tokens, state.positions, state.history.output_counts


def test_the_greedy_fast_path_gives_the_full_paths_tokens_and_resident_state(
    checkpoint, timing_mesh, monkeypatch
) -> None:
    from tests.unit.test_reference_model import FULL_RELOAD, encode
    from vllm_tt_plugin.contract.sampling_params import DeviceSamplingRow

    config, _ = checkpoint
    rng = random.Random(11)
    fast, fast_kv = build(ReferenceLlamaForCausalLM, config, timing_mesh)
    full, full_kv = build(ReferenceLlamaForCausalLM, config, timing_mesh)
    full._timing_greedy = False  # the logits + sampler path, on the same inputs
    sampler = _SamplerCalls(monkeypatch)
    base = make_reqs(prompts(rng, [3, 17, 9, 30, 1]), [0, 2, 3, 5, 7], rng)
    penalised = [DeviceSamplingRow(repetition_penalty=1.6, presence_penalty=0.5)] * 8
    runs: dict[str, Any] = {}
    for name, model, kv in (("fast", fast, fast_kv), ("full", full, full_kv)):
        reqs = _clone(base)
        calls = sampler.calls
        prefill(model, kv, reqs[:4], sampling=True)
        steps = _steady(model, kv, reqs[:4], 9, FULL_RELOAD)
        prefill(model, kv, reqs[4:], sampling=True)  # a new request joins: full reload
        steps += _steady(model, kv, reqs, 7, FULL_RELOAD)
        greedy_calls = sampler.calls - calls - 2  # the two prefills sample
        snap = _snapshot(model)
        # Penalties uploaded without a history reset: they count what the greedy steps made.
        params = {**FULL_RELOAD, "reload_inputs": False, "reset_sampling_state": False}
        monkeypatch.setattr(
            "tests.unit.test_reference_model.encode", lambda rows: encode(penalised)
        )
        steps += _steady(model, kv, reqs, 4, params)
        monkeypatch.undo()
        sampler = _SamplerCalls(monkeypatch) if name == "fast" else sampler
        runs[name] = (steps, [r.out for r in reqs], snap, _snapshot(model), greedy_calls)
    fast_run, full_run = runs["fast"], runs["full"]
    assert fast_run[4] == 0  # the fast model never ran the sampler on its greedy steps
    assert full_run[4] == 16
    for (ft, fl), (gt, gl) in zip(fast_run[0], full_run[0], strict=True):
        assert torch.equal(ft, gt)  # every slot, empty ones too
        assert torch.equal(fl.isnan(), gl.isnan()) and torch.equal(fl.nan_to_num(), gl.nan_to_num())
    assert fast_run[1] == full_run[1]
    for fast_state, full_state in ((fast_run[2], full_run[2]), (fast_run[3], full_run[3])):
        for a, b in zip(fast_state, full_state, strict=True):
            assert torch.equal(a, b)
    for r, out in zip(base, fast_run[1][:4], strict=False):
        assert out[: 1 + 16] == expected_greedy(r.prompt, 17)  # prefill + 16 greedy steps


@pytest.mark.parametrize(
    "row",
    [
        {"num_logprobs": 0},
        {"repetition_penalty": 1.5, "frequency_penalty": 0.3},
        {"temperature": 0.8, "top_k": 40, "seed": 7},
    ],
    ids=["logprobs", "penalties", "temperature"],
)
def test_a_row_needing_a_distribution_takes_the_full_path(
    checkpoint, timing_t3k, monkeypatch, row
) -> None:
    """On T3K, whose 8 devices per lane compute device logprobs."""
    from tests.unit.test_reference_model import FULL_RELOAD
    from vllm_tt_plugin.contract.sampling_params import DeviceSamplingRow

    config, _ = checkpoint
    rng = random.Random(4)
    rows = [DeviceSamplingRow(), DeviceSamplingRow(**row), DeviceSamplingRow()]
    base = make_reqs(prompts(rng, [4, 11, 6]), [1, 4, 6], rng, rows)
    outs = []
    for disabled in (False, True):
        model, kv = build(ReferenceLlamaForCausalLM, config, timing_t3k)
        model._timing_greedy = not disabled and model._timing_greedy
        reqs = _clone(base)
        prefill(model, kv, reqs, sampling=True)
        sampler = _SamplerCalls(monkeypatch)
        steps = _steady(model, kv, reqs, 6, FULL_RELOAD)
        assert sampler.calls == 6  # every step sampled from the logits
        monkeypatch.undo()
        outs.append((steps, [r.out for r in reqs]))
        for r in (reqs[0], reqs[2]):  # the greedy rows still follow the closed form
            assert r.out == expected_greedy(r.prompt, 7)
        if "num_logprobs" in row:
            peak = timing_only.PEAK
            want = peak - torch.logsumexp(torch.tensor([peak] + [0.0] * (VOCAB - 1)), 0)
            logprobs = torch.stack([lp for _, lp in steps])
            assert torch.allclose(logprobs[:, reqs[1].slot], want, atol=1e-5)
    (fast_steps, fast_out), (full_steps, full_out) = outs
    assert fast_out == full_out
    for (ft, _), (gt, _) in zip(fast_steps, full_steps, strict=True):
        assert torch.equal(ft, gt)


def test_a_step_counts_from_the_model_call_start_and_the_wait_ends_at_the_deadline() -> None:
    """The reference model's own parsing is device time (the step starts when the call
    began), a busy device queues the next step behind the last, and waiting ends at the
    deadline, not a sleep's overshoot after it."""
    mesh = EmulatedMeshDevice(NAMED_MESHES["N150"], step_time_s=0.05, timing_only=True)
    try:
        began = time.perf_counter() - 0.02  # the call began 20 ms ago (its parsing)
        first = mesh.enqueue(lambda: "a", started=began)
        second = mesh.enqueue(lambda: "b")  # queued behind the first
        assert first._deadline == pytest.approx(began + 0.05)
        assert second._deadline == pytest.approx(began + 0.10)
        assert first.result() == "a"
        assert time.perf_counter() >= first._deadline
        assert second.result() == "b"
        assert time.perf_counter() >= second._deadline
    finally:
        mesh.close()


def test_decode_and_prefill_start_the_device_step_at_the_call(
    checkpoint: tuple[Any, Any], timing_mesh: EmulatedMeshDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both calls hand the emulated queue the time they began, before their input parsing."""
    config, _ = checkpoint
    model, kv = build(ReferenceLlamaForCausalLM, config, timing_mesh)
    from vllm_tt_plugin.test_models import core

    parsed: list[float] = []
    started: list[float | None] = []
    for name in ("parse_decode", "parse_prefill"):
        inner = getattr(core, name)

        def parse(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            parsed.append(time.perf_counter())
            return _inner(*args, **kwargs)

        monkeypatch.setattr(core, name, parse)
    enqueue = timing_mesh.enqueue

    def spy(fn: Any, started_at: float | None = None) -> Any:
        started.append(started_at)
        return enqueue(fn, started_at)

    monkeypatch.setattr(timing_mesh, "enqueue", spy)
    rng = random.Random(3)
    reqs = make_reqs(prompts(rng, [4, 6]), [0, 1], rng)
    prefill(model, kv, reqs, sampling=True)
    decode_sync(model, kv, reqs, 1, sampling=True)
    decode_async(model, kv, reqs, 2)
    assert len(started) == len(parsed) == 4
    for began, parse_time in zip(started, parsed, strict=True):
        assert began is not None and began <= parse_time


@pytest.mark.parametrize("timing_only", [True, False])
def test_a_load_keeps_its_queue_place_but_adds_no_step_time(timing_only: bool) -> None:
    """``enqueue(step=False)`` (the mRoPE model's deltas load) runs in order and completes with
    no step time of its own, on the timing-only and the full device alike."""
    step_s = 0.4
    mesh = EmulatedMeshDevice(NAMED_MESHES["N150"], step_time_s=step_s, timing_only=timing_only)
    try:
        order: list[str] = []
        start = time.perf_counter()
        mesh.enqueue(lambda: order.append("load"), step=False).result()
        loaded = time.perf_counter() - start
        mesh.run(lambda: order.append("step"))
        stepped = time.perf_counter() - start
    finally:
        mesh.close()
    assert order == ["load", "step"]
    assert loaded < step_s / 2  # generous: a step would take step_s
    assert stepped >= step_s
