"""The TT schedulers over vLLM's real scheduler and KV cache manager (no engine, no device).

Drives schedule() / update_from_output() by hand, feeding back one token per scheduled request,
and checks the TT invariants: every step is prefill-only or decode-only, the interleave policy
is honoured, max_num_seqs bounds the whole batch, a prefill that admits nothing falls back to
decode, and preemption under KV pressure keeps every request's token stream complete.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.sampling_params import SamplingParams
from vllm.v1.core.encoder_cache_manager import EncoderCacheManager
from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from tests.unit.metrics_files import scrape, value
from tests.unit.tiny_checkpoint import BLOCK_HASHER
from vllm_tt_plugin.adapter.kv_cache import pool_bytes_per_block, uniform_kv_cache_spec
from vllm_tt_plugin.launch.launch_plan import read_plan
from vllm_tt_plugin.policy.step_kind import StepKind
from vllm_tt_plugin.scheduler import (
    SchedulerClassError,
    TTAsyncScheduler,
    TTScheduler,
    TTSchedulerBase,
    is_decode_ready,
    scheduler_class,
)

_ids = itertools.count()


def make_scheduler(
    config: Any, num_blocks: int, cls: type[TTSchedulerBase] | None = None
) -> TTSchedulerBase:
    """The plan's scheduler class (``cls``: another one) over ``num_blocks`` KV blocks."""
    specs = uniform_kv_cache_spec(config)
    config.cache_config.num_gpu_blocks_override = num_blocks
    kv = get_kv_cache_configs(config, [specs], [num_blocks * pool_bytes_per_block(config, specs)])[
        0
    ]
    config.cache_config.num_gpu_blocks = kv.num_blocks
    cls = scheduler_class(read_plan(config)) if cls is None else cls
    return cls(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=config.cache_config.block_size,
    )


def request(prompt_len: int, max_tokens: int) -> Request:
    rid = next(_ids)
    return Request(
        request_id=f"r{rid}",
        prompt_token_ids=[5 + rid % 50] * prompt_len,
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        block_hasher=BLOCK_HASHER,
    )


def step_kind(sched: TTSchedulerBase, out: SchedulerOutput) -> str:
    decode = prefill = 0
    for req_id, n in out.num_scheduled_tokens.items():
        req = sched.requests[req_id]
        # num_computed_tokens was advanced by schedule(): look at the state before it.
        before = req.num_computed_tokens - n
        if n == 1 and before >= req.num_prompt_tokens:
            decode += 1
        else:
            prefill += 1
    assert not (decode and prefill), f"mixed step: {out.num_scheduled_tokens}"
    label = "D" if decode else ("P" if prefill else ".")
    # The kind the scheduler hands the runner is the one its rows show.
    assert out.step_kind is {"D": StepKind.DECODE, "P": StepKind.PREFILL, ".": StepKind.IDLE}[label]
    return label


def feed_back(sched: Any, out: SchedulerOutput, emitted: dict[str, list[int]]) -> None:
    """What the worker would return: one token for each request whose step completes (for a
    TT scheduler, or a lane coordinator whose lanes hold the requests)."""
    lanes = getattr(sched, "lanes", None)
    req_ids = list(out.num_scheduled_tokens)
    sampled = []
    for req_id in req_ids:
        owner = sched if lanes is None else lanes[sched.lane_of[req_id]]
        req = owner.requests[req_id]
        done = req.num_computed_tokens >= req.num_tokens
        token = 7 if done else None
        sampled.append([] if token is None else [token])
        if token is not None:
            emitted.setdefault(req_id, []).append(token)
    sched.update_from_output(
        out,
        ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
        ),
    )


def run(sched: TTSchedulerBase, max_steps: int = 500) -> tuple[str, dict[str, list[int]]]:
    pattern, emitted = [], {}
    for _ in range(max_steps):
        if not sched.has_requests():
            break
        facts = sched.work_facts()
        out = sched.schedule()
        pattern.append(step_kind(sched, out))
        if pattern[-1] == "." and (facts.prefill_ready or facts.decode_ready):
            raise AssertionError(f"empty step with work pending: {facts}")
        assert len(sched.running) <= sched.max_num_running_reqs
        feed_back(sched, out, emitted)
    return "".join(pattern), emitted


def test_steps_never_mix_and_all_requests_finish(make_config: Any) -> None:
    config = make_config(max_num_seqs=4, max_model_len=512, max_num_batched_tokens=128)
    sched = make_scheduler(config, num_blocks=64)
    reqs = [request(p, 6) for p in (3, 70, 150, 9, 40, 200)]
    for r in reqs:
        sched.add_request(r)
    pattern, emitted = run(sched)
    # "." = a step that only flushes finished ids to the worker
    assert set(pattern) <= {"P", "D", "."} and pattern.rstrip(".").count(".") == 0
    assert all(len(emitted[r.request_id]) == 6 for r in reqs)


def test_interleave_bounds_decode_wait_under_prefill_pressure(make_config: Any) -> None:
    config = make_config(
        max_num_seqs=8,
        max_model_len=512,
        max_num_batched_tokens=64,
        tt={"decode_interleave_prefill_steps": 2, "decode_interleave_decode_steps": 1},
    )
    sched = make_scheduler(config, num_blocks=128)
    sched.add_request(request(4, 40))  # the decoding request
    pattern, emitted = "", {}
    for i in range(60):
        if i % 2 == 0 and i < 40:
            sched.add_request(request(120, 2))  # a stream of long prompts (2 chunks each)
        out = sched.schedule()
        pattern += step_kind(sched, out)
        feed_back(sched, out, emitted)
    runs_of_prefill = [len(r) for r in pattern.split("D")]
    assert "D" in pattern and "P" in pattern
    assert max(runs_of_prefill) <= 2, pattern


def test_interleave_disabled_prefills_first(make_config: Any) -> None:
    config = make_config(
        max_num_seqs=8,
        max_model_len=512,
        max_num_batched_tokens=64,
        tt={"decode_interleave_enabled": False},
    )
    sched = make_scheduler(config, num_blocks=128)
    sched.add_request(request(4, 20))
    out = sched.schedule()
    feed_back(sched, out, {})
    for _ in range(3):
        sched.add_request(request(120, 2))
    pattern = ""
    for _ in range(6):
        out = sched.schedule()
        pattern += step_kind(sched, out)
        feed_back(sched, out, {})
    assert pattern == "PPPPPP"


def test_admission_counts_hidden_decoders(make_config: Any) -> None:
    config = make_config(max_num_seqs=2, max_model_len=256, max_num_batched_tokens=256)
    sched = make_scheduler(config, num_blocks=64)
    for _ in range(4):
        sched.add_request(request(5, 30))
    for _ in range(10):
        out = sched.schedule()
        feed_back(sched, out, {})
        assert len(sched.running) <= 2


def test_prefill_that_admits_nothing_falls_back_to_decode(make_config: Any) -> None:
    config = make_config(max_num_seqs=4, max_model_len=256, max_num_batched_tokens=256)
    # 5 blocks of 64, one of them vLLM's null block: the first request holds 1, the 250-token
    # prompt needs 4, so while the first one runs prefill cannot admit it.
    sched = make_scheduler(config, num_blocks=5)
    first = request(60, 30)
    sched.add_request(first)
    feed_back(sched, sched.schedule(), {})
    sched.add_request(request(250, 2))
    out = sched.schedule()
    assert step_kind(sched, out) == "D"
    assert sched.last_step_kind is StepKind.DECODE and out.step_kind is StepKind.DECODE
    assert list(out.num_scheduled_tokens) == [first.request_id]


def test_preemption_under_kv_pressure_completes_every_stream(make_config: Any) -> None:
    config = make_config(max_num_seqs=4, max_model_len=256, max_num_batched_tokens=256)
    sched = make_scheduler(config, num_blocks=8)
    reqs = [request(50, 100) for _ in range(4)]
    for r in reqs:
        sched.add_request(r)
    _, emitted = run(sched, max_steps=2000)
    assert sum(r.num_preemptions for r in reqs) > 0
    assert all(len(emitted[r.request_id]) == 100 for r in reqs)


def test_known_readiness_agrees_with_derivation_through_preemption(make_config: Any) -> None:
    # readiness() skips re-deriving requests it found decode-ready until they are preempted, and
    # the whole running list while every request in it is ready and no pass admitted one; at
    # every pass it must equal the derivation, including requests resumed after preemption and
    # ones admitted while others decode.
    config = make_config(max_num_seqs=4, max_model_len=256, max_num_batched_tokens=256)
    sched = make_scheduler(config, num_blocks=8)
    reqs = [request(50, 100) for _ in range(4)] + [request(20, 10) for _ in range(3)]
    for r in reqs:
        sched.add_request(r)
    emitted: dict[str, list[int]] = {}
    passes = all_ready_passes = resumed_passes = 0
    while sched.has_requests() and passes < 3000:
        derived = [is_decode_ready(r) for r in sched.running]
        assert sched.readiness() == derived
        all_ready_passes += int(bool(derived) and all(derived))
        out = sched.schedule()
        resumed_passes += int(bool(out.scheduled_cached_reqs.resumed_req_ids))
        feed_back(sched, out, emitted)
        passes += 1
    assert sum(r.num_preemptions for r in reqs) > 0
    assert resumed_passes > 0 and all_ready_passes > 0
    assert all(len(emitted[r.request_id]) == r.sampling_params.max_tokens for r in reqs)


def test_all_ready_is_dropped_by_an_admission(make_config: Any) -> None:
    # While every running request is ready nothing is derived again; a pass that admits a
    # request (here a prompt too long for one chunk) makes the next derivation see it.
    config = make_config(max_num_seqs=2, max_model_len=256, max_num_batched_tokens=16)
    sched = make_scheduler(config, num_blocks=32)
    emitted: dict[str, list[int]] = {}
    first = request(10, 50)
    sched.add_request(first)
    feed_back(sched, sched.schedule(), emitted)  # its prefill
    for _ in range(3):  # decode steps with the running list all ready
        assert sched.readiness() == [True]
        feed_back(sched, sched.schedule(), emitted)
    second = request(40, 5)
    sched.add_request(second)
    out = sched.schedule()  # prefill has priority: admits the second request's first chunk
    assert [r.req_id for r in out.scheduled_new_reqs] == [second.request_id]
    feed_back(sched, out, emitted)
    assert second.num_computed_tokens < second.num_prompt_tokens
    assert sched.readiness() == [True, False] == [is_decode_ready(r) for r in sched.running]


def trace_steps(
    sched: Any, reqs: list[Request], arrivals: dict[int, list[Request]], max_steps: int = 3000
) -> tuple[list[list[tuple[int, int]]], dict[int, list[int]]]:
    """Every step's rows as (request index, tokens), and each request's emitted tokens: the
    schedule, independent of request ids. ``arrivals``: requests added before step N."""
    order = reqs + [r for late in arrivals.values() for r in late]
    index = {r.request_id: i for i, r in enumerate(order)}
    for r in reqs:
        sched.add_request(r)
    steps: list[list[tuple[int, int]]] = []
    emitted: dict[str, list[int]] = {}
    while (sched.has_requests() or len(steps) in arrivals) and len(steps) < max_steps:
        for r in arrivals.get(len(steps), []):
            sched.add_request(r)
        out = sched.schedule()
        steps.append(sorted((index[r], n) for r, n in out.num_scheduled_tokens.items()))
        feed_back(sched, out, emitted)
    return steps, {index[r]: tokens for r, tokens in emitted.items()}


def workload() -> tuple[list[Request], dict[int, list[Request]]]:
    """Long decodes under KV pressure (preemptions, resumptions) plus late arrivals while the
    batch decodes steadily (admissions out of the steady state)."""
    reqs = [request(50, 100) for _ in range(4)] + [request(20, 10) for _ in range(2)]
    return reqs, {40: [request(30, 5)], 90: [request(12, 8), request(70, 3)]}


def assert_same_schedule(
    traces: list[Any], steady_steps: int, reqs: list[Request], arrivals: dict[int, list[Request]]
) -> None:
    """Shortcut on and off scheduled the same steps, the shortcut was taken, and every request
    streamed all its tokens."""
    assert traces[0] == traces[1]
    assert steady_steps > 50
    everyone = reqs + [r for late in arrivals.values() for r in late]
    assert traces[0][1] == {i: [7] * r.sampling_params.max_tokens for i, r in enumerate(everyone)}


def count_steady(sched: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the steps this scheduler (each lane's, for a coordinator) found steady."""
    hits = [0]
    for one in getattr(sched, "lanes", [sched]):
        check = one.steady_decode

        def counted(check: Any = check) -> bool:
            steady: bool = check()
            hits[0] += int(steady)
            return steady

        monkeypatch.setattr(one, "steady_decode", counted)
    return hits


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_steady_decode_shortcut_schedules_what_the_derivation_does(
    make_config: Any, monkeypatch: pytest.MonkeyPatch, async_scheduling: bool
) -> None:
    # The steady decode step skips readiness and the work facts; with the shortcut off (every
    # step derived) the same requests are scheduled step by step, through preemption,
    # resumption and admissions while others decode.
    traces = []
    steady_steps = []
    for shortcut in (True, False):
        config = make_config(
            max_num_seqs=4,
            max_model_len=256,
            max_num_batched_tokens=256,
            async_scheduling=async_scheduling,
        )
        sched = make_scheduler(config, num_blocks=8)
        assert sched.async_overlap is async_scheduling
        if shortcut:
            steady_steps = count_steady(sched, monkeypatch)
        else:
            monkeypatch.setattr(sched, "steady_decode", lambda: False)
        reqs, arrivals = workload()
        traces.append(trace_steps(sched, reqs, arrivals))
        if not shortcut:
            assert sum(r.num_preemptions for r in reqs) > 0
    assert_same_schedule(traces, steady_steps[0], reqs, arrivals)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_decode_ready_classification(make_config: Any, async_scheduling: bool) -> None:
    config = make_config(max_num_seqs=2, max_model_len=256, async_scheduling=async_scheduling)
    sched = make_scheduler(config, num_blocks=32)
    r = request(10, 5)
    sched.add_request(r)
    assert not is_decode_ready(r)
    out = sched.schedule()
    assert step_kind(sched, out) == "P"
    if not async_scheduling:
        feed_back(sched, out, {})
    assert is_decode_ready(r)  # one generated token (or its placeholder) left to compute


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_output_placeholders_only_with_async_scheduling(
    make_config: Any, async_scheduling: bool
) -> None:
    """vLLM's AsyncScheduler bookkeeping (a placeholder per scheduled output token) runs only
    under async scheduling; without it the plain Scheduler's does, on both of its paths."""
    config = make_config(max_num_seqs=2, max_model_len=256, async_scheduling=async_scheduling)
    sched = make_scheduler(config, num_blocks=32)
    r = request(10, 3)
    sched.add_request(r)
    emitted: dict[str, list[int]] = {}
    for _ in range(2):
        out = sched.schedule()
        assert r.num_output_placeholders == int(async_scheduling)
        feed_back(sched, out, emitted)
        assert r.num_output_placeholders == 0
    assert emitted[r.request_id] == [7, 7]


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_plans_class_keeps_vllms_bookkeeping_on_the_class(
    make_config: Any, async_scheduling: bool
) -> None:
    """Sync and async are two classes: vLLM's plain or async bookkeeping comes from the class
    (its MRO), never from methods bound on the instance."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    config = make_config(max_num_seqs=2, max_model_len=256, async_scheduling=async_scheduling)
    sched = make_scheduler(config, num_blocks=32)
    assert type(sched) is (TTAsyncScheduler if async_scheduling else TTScheduler)
    assert isinstance(sched, AsyncScheduler) is async_scheduling
    vllm_class = AsyncScheduler if async_scheduling else Scheduler
    for name in ("_update_after_schedule", "_update_request_with_output"):
        assert name not in vars(sched)
        assert getattr(type(sched), name) is getattr(vllm_class, name)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_class_the_plan_does_not_choose_is_refused(
    make_config: Any, async_scheduling: bool
) -> None:
    config = make_config(max_num_seqs=2, max_model_len=256, async_scheduling=async_scheduling)
    other = TTScheduler if async_scheduling else TTAsyncScheduler
    with pytest.raises(SchedulerClassError, match=f"async_overlap={async_scheduling}"):
        make_scheduler(config, num_blocks=32, cls=other)
    with pytest.raises(SchedulerClassError, match=scheduler_class(read_plan(config)).__name__):
        make_scheduler(config, num_blocks=32, cls=TTSchedulerBase)


def mm_request(prompt_len: int, items: list[tuple[int, int]]) -> Request:
    """A prompt with image placeholders at (offset, length); the encoder data itself is not
    needed to schedule, only the positions (and identifiers, for the block hashes)."""
    rid = f"r{next(_ids)}"
    return Request(
        request_id=rid,
        prompt_token_ids=[5] * prompt_len,
        sampling_params=SamplingParams(max_tokens=2, ignore_eos=True),
        pooling_params=None,
        mm_features=[
            MultiModalFeatureSpec(
                data=None,
                modality="image",
                identifier=f"{rid}-img{i}",
                mm_position=PlaceholderRange(offset=offset, length=length),
            )
            for i, (offset, length) in enumerate(items)
        ],
        block_hasher=BLOCK_HASHER,
    )


def prefill_chunks(sched: TTSchedulerBase, *reqs: Request) -> list[list[tuple[int, int]]]:
    """Add the requests (in order) and run until every prompt is computed; per request, the
    [start, end) token range of each of its prefill chunks."""
    for req in reqs:
        sched.add_request(req)
    chunks: list[list[tuple[int, int]]] = [[] for _ in reqs]
    while any(req.num_computed_tokens < req.num_prompt_tokens for req in reqs):
        out = sched.schedule()
        assert out.total_num_scheduled_tokens > 0, f"prefill stalled: {chunks}"
        for req, spans in zip(reqs, chunks, strict=True):
            n = out.num_scheduled_tokens.get(req.request_id, 0)
            end = req.num_computed_tokens  # schedule() advanced it
            if n and end - n < req.num_prompt_tokens:
                spans.append((end - n, end))
        feed_back(sched, out, {})
    return chunks


@pytest.mark.parametrize("tt_rule", [True, False])
def test_chunked_prefill_never_splits_a_multimodal_item(make_config: Any, tt_rule: bool) -> None:
    """TT keeps each image's tokens in one prefill chunk (the platform sets vLLM's
    disable_chunked_mm_input); the control run without the rule shows the same prompt would
    otherwise be cut inside an image."""
    config = make_config(max_num_seqs=2, max_model_len=512, max_num_batched_tokens=64)
    assert config.scheduler_config.disable_chunked_mm_input
    config.scheduler_config.disable_chunked_mm_input = tt_rule
    sched = make_scheduler(config, num_blocks=32)
    # The checkpoint is text-only, so vLLM gave the scheduler no encoder budget: give it one as
    # a multimodal model config would (room for every item of the prompt).
    sched.max_num_encoder_input_tokens = 256
    sched.encoder_cache_manager = EncoderCacheManager(cache_size=256)
    items = [(50, 40), (100, 60), (170, 20)]
    (chunks,) = prefill_chunks(sched, mm_request(220, items))
    assert chunks[-1][1] == 220 and all(a[1] == b[0] for a, b in itertools.pairwise(chunks))
    cuts = {end for _, end in chunks[:-1]}
    split = [(o, n) for o, n in items if any(o < c < o + n for c in cuts)]
    if tt_rule:
        assert not split, f"chunks {chunks} split images {split}"
        assert all(end - start <= 64 for start, end in chunks)
    else:
        assert split, f"control run: chunks {chunks} never cut an image"


def test_vllm_still_cuts_an_image_that_starts_the_chunk(make_config: Any) -> None:
    """disable_chunked_mm_input rolls a chunk back only when it starts before the image
    (vLLM's check is ``num_computed_tokens < offset``): an image that starts the chunk is cut
    when the step's budget is short, so a TT vision model must place features by their offset
    in the image (test_reference_vision.py). The vision engine test's schedule: a text prompt
    and two prompts whose images start at token 3 share a 32-token budget."""
    config = make_config(max_num_seqs=3, max_model_len=512, max_num_batched_tokens=32)
    assert config.scheduler_config.disable_chunked_mm_input
    sched = make_scheduler(config, num_blocks=32)
    sched.max_num_encoder_input_tokens = 256
    sched.encoder_cache_manager = EncoderCacheManager(cache_size=256)
    first, second = mm_request(29, [(3, 16)]), mm_request(46, [(3, 16), (20, 16)])
    _, first_chunks, second_chunks = prefill_chunks(sched, mm_request(15, []), first, second)
    # After the text prompt's 15 tokens both chunks stop before their images; next step the
    # first prompt takes 26 tokens and the second the 6 left, from its image's first token.
    assert first_chunks[:2] == [(0, 3), (3, 29)]
    assert second_chunks[:2] == [(0, 3), (3, 9)]


def test_engine_core_scheduler_forces_compact_json(make_config: Any) -> None:
    """The grammar backends read disable_any_whitespace from the structured output manager's
    config in the engine core: the TT scheduler sets it there (compact JSON cannot loop)."""
    config = make_config(max_num_seqs=4)
    assert not config.structured_outputs_config.disable_any_whitespace
    sched = make_scheduler(config, 64)
    assert (
        sched.structured_output_manager.vllm_config.structured_outputs_config.disable_any_whitespace
    )


def test_a_finished_request_flushes_the_metrics(make_config: Any, metrics_dir: Path) -> None:
    # Counters reach the metrics file at a flush; the update that finishes a request flushes, so
    # a client that scrapes /metrics once it has the last output sees that request's steps.
    from vllm_tt_plugin.observability import tt_metrics

    def steps_in_file() -> float:
        samples = scrape(metrics_dir, flush=False)
        return value(samples, "tt_steps_total", kind="decode", route="device") or 0.0

    config = make_config(max_num_seqs=2, max_model_len=256)
    sched = make_scheduler(config, num_blocks=32)
    req = request(10, 3)
    sched.add_request(req)
    emitted: dict[str, list[int]] = {}
    counted = 0
    while req.request_id in sched.requests:
        out = sched.schedule()
        tt_metrics.STEPS.inc("decode", "device")  # what the runner counts per step
        counted += 1
        assert steps_in_file() == 0  # nothing finished yet: still only in memory
        feed_back(sched, out, emitted)
    assert len(emitted[req.request_id]) == 3
    assert steps_in_file() == counted
