"""The mutation suite's own checks: every mutant is a real, deterministic device-side fault, and
the driver classifies runs as killed, survived or invalid from what the run left behind.

Whether the conformance suite kills each mutant is what ``tox -e mutants`` measures (a live
server per mutant); here each fault is shown to change the device's output on inputs built for
it, against the shipped reference sampler, so that a surviving mutant means a blind check and
not a no-op mutant.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.mutants import device_faults
from tests.mutants.catalog import MUTANTS, by_name
from tests.tool_modules import load_tool
from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM
from vllm_tt_plugin.test_models.sampling import (
    PenaltyHistory,
    SamplingTensors,
    device_sample,
    flat_logprobs,
)

VOCAB = 64
ROWS = 4


def params(**overrides: Any) -> SamplingTensors:
    base: dict[str, Any] = {
        "temperature": torch.full((ROWS,), 1.0),
        "top_k": torch.zeros(ROWS, dtype=torch.int32),
        "top_p": torch.ones(ROWS),
        "presence_penalty": torch.zeros(ROWS),
        "frequency_penalty": torch.zeros(ROWS),
        "repetition_penalty": torch.ones(ROWS),
        "seed": torch.arange(ROWS, dtype=torch.int64) + 11,
        "num_logprobs": torch.zeros(ROWS, dtype=torch.int32),
    }
    base.update(overrides)
    return SamplingTensors(**base)


def logits(seed: int = 0) -> torch.Tensor:
    return torch.randn((ROWS, VOCAB), generator=torch.Generator().manual_seed(seed)) * 3


def history(prompt: list[int], outputs: list[int]) -> PenaltyHistory:
    h = PenaltyHistory.empty(ROWS, VOCAB)
    h.prompt_mask[:, prompt] = True
    for t in outputs:
        h.counts[:, t] += 1
    return h


def mutant(name: str) -> Any:
    cls = getattr(device_faults, name)
    model = object.__new__(cls)  # the sampler seam needs no loaded weights
    model.devices_per_lane = 8
    return model


def draws(name: str, p: SamplingTensors, h: PenaltyHistory | None = None, n: int = 40) -> bool:
    """Whether the mutant's tokens differ from the reference's on some of ``n`` positions."""
    model = mutant(name)
    for step in range(n):
        x = logits(step)
        pos = torch.full((ROWS,), 100 + step, dtype=torch.int64)
        if not torch.equal(model.sample_tokens(x, p, h, pos), device_sample(x, p, h, pos)):
            return True
    return False


def test_the_catalog_names_twenty_or_more_distinct_mutant_classes() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) >= 20 and len(set(names)) == len(names)
    for m in MUTANTS:
        cls = getattr(device_faults, m.name)
        assert issubclass(cls, ReferenceLlamaForCausalLM) and cls.__doc__, m.name
        assert m.override == f"TTReferenceLlamaForCausalLM=tests.mutants.device_faults:{m.name}"
    concerns = {m.concern for m in MUTANTS}
    assert {"sampling", "penalties", "seeding", "logprobs", "long_context"} <= concerns
    assert {"batched_prefill", "isolation", "accuracy"} <= concerns
    assert [m.name for m in MUTANTS if m.ci], "CI serves a subset"
    with pytest.raises(ValueError, match="unknown mutant"):
        by_name(["NoSuchMutant"])


PENALTY_HISTORY = history(prompt=list(range(16)), outputs=list(range(16, 48)) * 3)
SAMPLING_CASES = {
    "TopPIgnored": params(top_p=torch.full((ROWS,), 0.3)),
    "TopPComplement": params(top_p=torch.full((ROWS,), 0.3)),
    "TopKOffByOne": params(top_k=torch.full((ROWS,), 2, dtype=torch.int32)),
    "TopKIgnored": params(top_k=torch.full((ROWS,), 2, dtype=torch.int32)),
    "TemperatureIgnored": params(temperature=torch.full((ROWS,), 0.3)),
    "TemperatureInverted": params(temperature=torch.full((ROWS,), 0.3)),
    "TemperatureSquared": params(temperature=torch.full((ROWS,), 0.5)),
    "FirstRowParams": params(temperature=torch.tensor([0.0, 1.5, 1.5, 1.5])),
    "SeedIgnored": params(),
    "SeedFromSlot": params(),
}
PENALTY_CASES = {
    "RepetitionPromptIgnored": params(repetition_penalty=torch.full((ROWS,), 2.0)),
    "FrequencyAsPresence": params(frequency_penalty=torch.full((ROWS,), 1.5)),
    "PresenceIgnored": params(presence_penalty=torch.full((ROWS,), 2.0)),
    "RepetitionInverted": params(repetition_penalty=torch.full((ROWS,), 2.0)),
    "RepetitionPromptDroppedWithLogprobs": params(repetition_penalty=torch.full((ROWS,), 2.0)),
    "PenaltiesFromPromptOnly": params(frequency_penalty=torch.full((ROWS,), 1.5)),
    "PenaltyOnGreedyRows": params(
        temperature=torch.tensor([0.0, 1.0, 1.0, 1.0]),
        repetition_penalty=torch.tensor([1.0, 2.0, 2.0, 2.0]),
    ),
}


@pytest.mark.parametrize("name", sorted(SAMPLING_CASES))
def test_each_sampling_mutant_changes_the_device_draws(name: str) -> None:
    assert draws(name, SAMPLING_CASES[name])
    # ... and only where its parameter is in use: a greedy batch is untouched.
    if name not in ("FirstRowParams", "SeedIgnored", "SeedFromSlot"):
        assert not draws(name, params(temperature=torch.zeros(ROWS)))


@pytest.mark.parametrize("name", sorted(PENALTY_CASES))
def test_each_penalty_mutant_changes_the_device_draws(name: str) -> None:
    # Greedy rows make the penalty's effect visible without noise.
    p = PENALTY_CASES[name]
    if name != "PenaltyOnGreedyRows":
        p = SamplingTensors(**{**p.__dict__, "temperature": torch.zeros(ROWS)})
    assert draws(name, p, PENALTY_HISTORY)


def test_the_prompt_drop_touches_only_rows_that_ask_for_logprobs() -> None:
    name = "RepetitionPromptDroppedWithLogprobs"
    greedy = {"temperature": torch.zeros(ROWS), "repetition_penalty": torch.full((ROWS,), 2.0)}
    none = params(**greedy, num_logprobs=torch.full((ROWS,), -1, dtype=torch.int32))
    assert not draws(name, none, PENALTY_HISTORY)
    some = params(**greedy, num_logprobs=torch.tensor([-1, 1, -1, -1], dtype=torch.int32))
    model, changed = mutant(name), set()
    for step in range(40):
        x, pos = logits(step), torch.full((ROWS,), 100 + step, dtype=torch.int64)
        got = model.sample_tokens(x, some, PENALTY_HISTORY, pos)
        changed |= set(
            (got != device_sample(x, some, PENALTY_HISTORY, pos)).nonzero().flatten().tolist()
        )
    assert changed == {1}


def test_the_logprob_mutants_report_other_values_for_the_same_tokens() -> None:
    x = logits(3)
    tokens = torch.tensor([5, 6, 7, 8])
    right = flat_logprobs(x, tokens)
    for name in ("LogprobsScaled", "LogprobsOfArgmax"):
        wrong = mutant(name).device_logprobs(x, tokens)
        assert wrong.shape == right.shape and not torch.allclose(wrong, right), name


def test_the_prefill_mutants_touch_only_multi_row_prefills() -> None:
    p = params(
        temperature=torch.tensor([0.0, 1.0, 1.0, 1.0]),
        top_k=torch.tensor([0, 2, 0, 0], dtype=torch.int32),
    )
    for name in ("PrefillRowsShareFirstParams", "PrefillLastRowOffByOne"):
        assert not draws(name, p)  # decode: untouched
        model = mutant(name)
        model._in_prefill = True  # what _prefill_step sets around the sampler
        pos = torch.full((ROWS,), 50, dtype=torch.int64)
        changed = [
            not torch.equal(model.sample_tokens(x, p, None, pos), device_sample(x, p, None, pos))
            for x in map(logits, range(20))
        ]
        assert any(changed), name


def test_the_rope_mutants_rewrite_positions_only_past_their_bound() -> None:
    class Recorder:
        def hidden_states(
            self, tokens: Any, positions: Any, attend: Any, embeds: Any = None
        ) -> Any:
            return positions

    positions = torch.tensor([0, 255, 256, 383, 384, 900])
    got = {}
    for cls in (device_faults.RopeWrapsAt384, device_faults.DecodeRopeFrozen):
        model = object.__new__(cls)
        decoder = device_faults._DecoderWith(Recorder(), model._positions)
        got[cls.__name__, "prefill"] = decoder.hidden_states(None, positions, None).tolist()
        model._in_decode = True  # what _decode_logits sets around the decoder
        got[cls.__name__, "decode"] = decoder.hidden_states(None, positions, None).tolist()
    wrapped = [0, 255, 256, 383, 0, 132]
    assert got["RopeWrapsAt384", "prefill"] == got["RopeWrapsAt384", "decode"] == wrapped
    assert got["DecodeRopeFrozen", "prefill"] == positions.tolist()  # prefill is right
    assert got["DecodeRopeFrozen", "decode"] == [0, 255, 256, 256, 256, 256]


def test_greedy_runner_up_swaps_only_close_greedy_rows() -> None:
    x = torch.zeros((ROWS, VOCAB))
    x[:, 3], x[:, 4] = 5.0, 4.8  # close: swapped on greedy rows
    x[1, 4] = 1.0  # far: kept
    p = params(temperature=torch.tensor([0.0, 0.0, 1.0, 0.0]))
    got = mutant("GreedyRunnerUp").sample_tokens(x, p, None, torch.zeros(ROWS, dtype=torch.int64))
    assert got[0] == 4 and got[1] == 3 and got[3] == 4


# --- forward-pass mutants -----------------------------------------------------------------------
def forward_mutant(name: str, start: int, hit: bool) -> Any:
    model = object.__new__(getattr(device_faults, name))
    model._row = SimpleNamespace(index=0, start=start)
    model._prefix_hits = frozenset({0} if hit else ())
    model._block_size = 64
    return model


def test_the_position_mutants_move_only_their_kind_of_continuation() -> None:
    positions = torch.arange(100, 104)
    moved = {}
    for name in ("PrefixHitPositionsFromZero", "ChunkStartRoundedToBlock"):
        for hit in (True, False):
            model = forward_mutant(name, 100, hit)
            moved[name, hit] = model.forward_positions(positions).tolist()
        fresh = forward_mutant(name, 0, False)  # a prompt from position 0: untouched
        assert fresh.forward_positions(torch.arange(4)).tolist() == [0, 1, 2, 3]
    assert moved["PrefixHitPositionsFromZero", True] == [0, 1, 2, 3]
    assert moved["PrefixHitPositionsFromZero", False] == positions.tolist()
    assert moved["ChunkStartRoundedToBlock", False] == [64, 65, 66, 67]  # 100 % 64 dropped
    assert moved["ChunkStartRoundedToBlock", True] == positions.tolist()


def test_the_late_chunk_mutant_moves_only_chunks_starting_late_in_a_block() -> None:
    name, block = "ChunkLateInBlockOffByOne", 64
    for start, hit, shift in ((100, False, 0), (120, False, -1), (120, True, 0), (0, False, 0)):
        assert 100 % block < 3 * block // 4 <= 120 % block  # the cases straddle the bound
        positions = torch.arange(start, start + 4)
        got = forward_mutant(name, start, hit).forward_positions(positions)
        assert got.tolist() == (positions + shift).tolist(), (start, hit)


def test_vocab_tail_masked_bans_only_the_last_tile() -> None:
    x = torch.randn(2, 1024)
    got = forward_mutant("VocabTailMasked", 0, False).forward_logits(x)
    assert torch.equal(got[:, :992], x[:, :992]) and bool(torch.isinf(got[:, 992:]).all())


def test_prefill_rows_rotated_only_with_several_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    out = torch.arange(3.0)[:, None].expand(3, 4)
    monkeypatch.setattr(ReferenceLlamaForCausalLM, "_prefill_logits", lambda *a: out.clone())
    model = object.__new__(device_faults.PrefillRowsRotated)
    assert model._prefill_logits(None, (1, 2, 3), False)[:, 0].tolist() == [1.0, 2.0, 0.0]
    assert model._prefill_logits(None, (1,), False)[:, 0].tolist() == [0.0, 1.0, 2.0]


def test_decode_last_row_stale_serves_the_previous_step(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = iter([torch.full((4, 2), 1.0), torch.full((4, 2), 2.0), torch.full((4, 2), 3.0)])
    rows = [torch.tensor([0, 2]), torch.tensor([0, 2]), torch.tensor([1])]
    it = iter(rows)
    monkeypatch.setattr(
        ReferenceLlamaForCausalLM, "_decode_logits", lambda *a: (next(steps), next(it))
    )
    model = object.__new__(device_faults.DecodeLastRowStale)
    first, _ = model._decode_logits(None, None, False)
    second, _ = model._decode_logits(None, None, False)
    alone, _ = model._decode_logits(None, None, False)
    assert first[:, 0].tolist() == [1.0] * 4  # no earlier step
    assert second[:, 0].tolist() == [2.0, 2.0, 1.0, 2.0]  # row 2, the last active, is stale
    assert alone[:, 0].tolist() == [3.0] * 4  # one row: nothing to mix up


def test_decode_kv_to_previous_block_moves_only_block_openers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm_tt_plugin.test_models.paged_kv import LayerLayout

    keys = [torch.zeros(4, 1, 4, 2)]
    values = [torch.zeros(4, 1, 4, 2)]
    keys[0][2, :, 0], values[0][2, :, 0] = 7.0, 9.0  # slot 0 wrote position 4 into block 2
    keys[0][3, :, 1] = 5.0  # slot 1 wrote position 5 into block 3
    lane = SimpleNamespace(keys=[keys], values=[values])
    kv = SimpleNamespace(layers=(LayerLayout(0, 4, 4),), lanes=[lane])
    state = SimpleNamespace(
        active=torch.tensor([True, True]),
        positions=torch.tensor([4, 5]),
        page_tables=(torch.tensor([[1, 2], [2, 3]], dtype=torch.int32),),
    )
    monkeypatch.setattr(ReferenceLlamaForCausalLM, "_decode_logits", lambda *a: "out")
    model = object.__new__(device_faults.DecodeKVToPreviousBlock)
    model.max_batch_size, model.num_lanes = 2, 1
    assert model._decode_logits(kv, state, False) == "out"
    assert float(keys[0][1, 0, 0, 0]) == 7.0 and float(values[0][1, 0, 0, 0]) == 9.0
    assert float(keys[0][2, 0, 0, 0]) == 0.0  # the opener's own slot is left empty
    assert float(keys[0][3, 0, 1, 0]) == 5.0  # position 5 is mid-block: untouched


# --- the driver's verdicts ----------------------------------------------------------------------
def report(
    path: Path, outcomes: dict[str, str], model_class: str | None = None, **top: Any
) -> Path:
    checks = [{"id": c, "outcome": o} for c, o in outcomes.items()]
    body = {"checks": checks, "server": {"model_class": model_class}, "coverage": {"full": True}}
    path.write_text(json.dumps({**body, **top}))
    return path


def test_the_driver_judges_killed_survived_and_invalid(tmp_path: Path) -> None:
    tool = load_tool("run_mutants")
    m = MUTANTS[0]
    served = f"tests.mutants.device_faults.{m.name}"
    assert m.dotted == served
    baseline = report(tmp_path / "base.json", {"a": "pass", "b": "pass", "c": "fail"})
    run = report(tmp_path / "run.json", {"a": "pass", "b": "fail", "c": "fail"}, served)
    killed = tool.judge(m, 2, run, baseline, 12.0, gate=1)
    assert killed.status == "killed" and killed.killed_by == ("b",)  # c failed before too
    clean = report(tmp_path / "clean.json", {"a": "pass", "b": "pass", "c": "fail"}, served)
    # The driver's gate refuses every mutant run (exit 2: another model class); the suite's
    # verdict is the gate's as the shipped class.
    assert tool.judge(m, 2, clean, baseline, 1.0, gate=0).status == "survived"
    gate_only = tool.judge(m, 2, clean, baseline, 1.0, gate=1)  # e.g. an accuracy regression
    assert gate_only.status == "killed" and "gate found a regression" in gate_only.note
    # A gate refusing its input, or a suite that did not finish (no gate): nothing judged, even
    # with failing checks in the report (rt46c C01-C06: a report the run did not finish).
    for unjudged in (2, 3, 4):
        for evidence in (clean, run):
            refused = tool.judge(m, unjudged, evidence, baseline, 1.0, gate=None)
            assert refused.status == "invalid" and f"exit {unjudged}" in refused.note
    # The suite finished but the gate refused the restated run: only failing checks count.
    # rt46d F1: a failing check on a run the gate refuses (another vLLM, weights, device) is no
    # sighting either: the shipped class might fail there too.
    assert tool.judge(m, 2, clean, baseline, 1.0, gate=2).status == "invalid"
    assert tool.judge(m, 2, run, baseline, 1.0, gate=2).status == "invalid"
    # A check the baseline did not pass (absent, skipped) failing here is no sighting.
    new = report(
        tmp_path / "new.json", {"a": "pass", "b": "pass", "c": "fail", "d": "fail"}, served
    )
    assert tool.judge(m, 2, new, baseline, 1.0, gate=1).killed_by == ()
    # rt46d F2: valid JSON that is no report reads invalid, never stops the campaign.
    for junk in ("null", "[]", '{"checks": null}', '{"checks": [{"id": "a"}]}'):
        (tmp_path / "junk.json").write_text(junk)
        assert tool.judge(m, 2, tmp_path / "junk.json", baseline, 1.0, gate=2).status == "invalid"
    # Not served (the report names the shipped class, or there is no report): proves nothing.
    shipped = "vllm_tt_plugin.test_models.reference_llama.ReferenceLlamaForCausalLM"
    other = report(tmp_path / "other.json", {"a": "pass", "b": "fail"}, shipped)
    invalid = tool.judge(m, 1, other, baseline, 1.0, gate=1)
    assert invalid.status == "invalid" and shipped in invalid.note
    assert tool.judge(m, 2, None, baseline, 1.0).status == "invalid"


# rt46c: a gate regression is a sighting only on a full, clean run; otherwise the run says
# nothing (narrowed with -k, partial, aborted, a baseline pass skipped or flaky here).
NOT_OF_RECORD = {
    "narrowed": ({"a": "pass", "c": "fail"}, {"coverage": {"full": False}}),
    "no_coverage": ({"a": "pass", "b": "pass", "c": "fail"}, {"coverage": None}),
    "pass_to_skip": ({"a": "pass", "b": "skip", "c": "fail"}, {}),
    "pass_to_flaky": ({"a": "pass", "b": "flaky", "c": "fail"}, {}),
    "aborted": ({"a": "pass", "b": "pass", "c": "fail"}, {"aborted": {"reason": "went away"}}),
}


@pytest.mark.parametrize("case", sorted(NOT_OF_RECORD))
def test_a_gate_regression_on_a_run_not_of_record_is_no_kill(tmp_path: Path, case: str) -> None:
    tool = load_tool("run_mutants")
    m = MUTANTS[0]
    baseline = report(tmp_path / "base.json", {"a": "pass", "b": "pass", "c": "fail"})
    outcomes, top = NOT_OF_RECORD[case]
    run = report(tmp_path / "run.json", outcomes, m.dotted, **top)
    for gate in (0, 1):
        got = tool.judge(m, 2, run, baseline, 1.0, gate=gate)
        assert got.status == "invalid" and "not a run of record" in got.note, (case, gate, got)
    # A check that fails here and passed in the baseline is a sighting on a narrowed run too,
    # never on an aborted one.
    failing = report(tmp_path / "f.json", {**outcomes, "a": "fail"}, m.dotted, **top)
    want = "invalid" if case == "aborted" else "killed"
    assert tool.judge(m, 2, failing, baseline, 1.0, gate=1).status == want


def test_only_a_report_this_run_writes_is_judged(tmp_path: Path, monkeypatch: Any) -> None:
    """rt46c C01: a timed-out rerun read the previous run's report and counted a kill."""
    tool = load_tool("run_mutants")
    m = MUTANTS[0]
    where = tmp_path / m.name / "reports" / tool.MODEL / tool.DEVICE
    where.mkdir(parents=True)
    earlier = report(where / "20261207T000000Z-00000000.json", {"a": "fail"}, m.dotted)
    assert earlier in tool.run_files(where)

    def driver(cmd: list[str], **kwargs: Any) -> int:
        kwargs["stdout"].write("[emu] suite timed out\n")
        return 3

    monkeypatch.setattr(tool.subprocess, "call", driver)
    got = tool.run_one(m, tmp_path, 1, 1.0)
    assert got.status == "invalid" and "no report written by this run" in got.note


def test_the_suite_exit_is_read_from_the_drivers_own_line() -> None:
    tool = load_tool("run_mutants")
    log = "[emu] server healthy\n[emu] suite finished in 110.4 s (pytest exit 0); stopping\n"
    assert tool.suite_exit(log) == 0
    assert tool.suite_exit(log.replace("exit 0", "exit 1")) == 1
    assert tool.suite_exit("[emu] suite timed out after 900 s\n") is None
    assert tool.suite_exit("noise (pytest exit 0)\n") is None  # only the driver's own line


def test_a_mutant_run_passing_everything_survives_the_gate_as_the_shipped_class(
    tmp_path: Path,
) -> None:
    """A real run: PrefillLastRowOffByOne served on 2026-12-07 (before the batched-prefill check
    measured its premise) passed every check. The gate refuses to compare two classes (exit 2,
    the fixed axis), so the suite read it as 'invalid'; as the shipped class it gates OK and
    reads 'survived'."""
    import subprocess
    import sys

    from tt_conformance.report import load_report

    tool = load_tool("run_mutants")
    root = Path(__file__).resolve().parents[2]
    baseline = root / "reports/baselines/tt-reference-llama/emulated-T3K/baseline.json"
    run = root / "tests/mutants/data/survivor_prefill_last_row_off_by_one.json"
    m = by_name(["PrefillLastRowOffByOne"])[0]
    assert load_report(run).server.model_class == m.dotted
    assert tool.failing_checks(run, baseline) == []
    cmd = [sys.executable, "-m", "tt_conformance.cli.gate", "--baseline", str(baseline)]
    driver = subprocess.run([*cmd, "--candidate", str(run), "--axis", "plugin"], cwd=root)
    assert driver.returncode == 2
    gate = tool.gate_as_shipped(run, baseline, tmp_path)
    assert gate == 0
    restated = load_report(next((tmp_path / "as-shipped").glob("*.json")))
    assert restated.server.model_class == load_report(baseline).server.model_class
    assert tool.judge(m, driver.returncode, run, baseline, 1.0, gate).status == "survived"
