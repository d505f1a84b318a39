#!/usr/bin/env python3
"""Teach the bundled reference checkpoint to use its whole context: passkey retrieval and copying.

`tools/train_reference_model.py` trains `fixtures/models/tt-reference-llama` on 256-token rows, so
it never sees a position past 255 and forms no copy circuit: the long-context checks
(`checks/test_long_context.py`, answers known in advance) would have nothing to find. This tool
continues training from those weights, in phases of growing row length (256, 512, 1024 tokens),
on batches that mix these kinds of row:

- corpus: the original documents (`reference_corpus.documents`), packed, so the model keeps
  what the other checks rely on;
- induction: BOS, then a random run of token ids (or of words and digit strings) repeated until
  the row is full, loss on the repeats only (the classic data that forms induction heads);
- passkey: prompts in the exact `tt_conformance.longtasks` format (random key, filler count and
  depth; a fifth with another filler sentence), the answer `" <key>."` and EOS, answer tokens
  weighted x5, the rest of the row packed with corpus documents;
- passage: corpus text without special tokens, 12-240 tokens, repeated until the row is full;
- cycle: BOS, a cycle of 2-6 letters, digits, numbers, words or two-word phrases written out
  three or more rounds, EOS (loss on the repeats and the EOS), packed to the row's length;
- drill: the corpus's sums Q&A, JSON, counting, number-word, day, month, alphabet and Q&A
  documents (`reference_corpus.drill_documents`), packed: what the cycle rows loosen.

Runs 1-3 (the mixed run, a corpus-heavy one at a lower rate, a corpus-only one on short rows:
the first two loosen JSON closing and chat answers, the third brings them back) gave 19/20
passkey prompts at the check's sizing and key seed, 4/4 passage copies up to 1016 tokens, a
held-out corpus loss of 0.805 (0.810 before), measured with transformers. The shipped fixture
then went through runs 4-5 of `plain-numbers-s4340` (below; its README says how it was made and
what it scores). That is the default (runs 1-5, `--cycles plain-numbers-s4340`):

    python tools/train_long_context.py --checkpoint fixtures/models/tt-reference-llama

Runs 4 and 5 (issue 46 item 6) teach a repeated cycle to be continued by repeating it: after
runs 1-3 "a b c a b c a b c" is continued as a sequence, " d e f", so no penalty changes the
greedy output there. Run 4 mixes corpus, cycle and passkey rows (after it greedy repeats the
cycle with EOS a fair second, so presence, frequency and repetition penalties change the greedy
output); run 5 is mostly corpus with drill and a few cycle rows, bringing back what run 4
loosened (sums answered by copying an operand) and keeping the cycles. `--cycles NAME` picks the
runs from run 4 on (`CYCLE_RECIPES`; every attempt stays there, reproducible by one command):

    python tools/train_long_context.py --checkpoint DIR --from-run 4 --to-run 5 --cycles NAME

Each, from the runs 1-3 fixture (one torch thread, 3-7 minutes), measured with transformers
(`tools/measure_reference_model.py --tokens 24`: cycles repeated of 18, presence 1 / 2,
frequency 1 / 2, repetition 1.3 / 2 changing greedy on "a b c a b c a b c" of 6, passkey of 20,
copy of 4, held-out loss; `tools/measure_accuracy_reference.py`: tt-patterns of 107, 99 before)
and the failures of `tests/unit/test_reference_checkpoint.py` (with the cycle and penalty tests):

    recipe                        cyc pen pk cp  loss  tt   unit test failures
    g                             18  6  20 4  0.803 105  '{"values": [1, 2' and '[{"id": 1, ...
                                                          [1, 2' not closed; schema tags seed 0,
                                                          unfamiliar-keys seed 1
    g-consolidated                18  5  18 4  0.800 102  6: presence 1 (2), '[{"id": 1, ... [1, 2',
                                                          3 seeded schema samples
    plain-numbers                 18  6  20 3  0.803 102  schema tags seed 0
    plain-numbers-consolidated    18  5  20 4  0.808 103  9: presence 1 (2), 3 JSON closings, 4
                                                          schema samples
    plain-numbers-s4340 (shipped) 18  6  20 4  0.804 103  presence 1 on "red blue green red blue
                                                          green" (greedy unchanged)
    plain-numbers-s4342           18  6  19 4  0.803 103  the same
    plain-numbers-s4344           18  5  20 4  0.804 104  presence 1 on both cycle prompts
    plain-numbers-s4346           18  6  19 4  0.804 102  '[{"id": 1, ... [1, 2'; three-deep seed 1
    plain-numbers-s4342-nudged    17  6  20 3  0.802 102  '{"values": [1, 2', '[{"id": 1, ... [1, 2'
    plain-numbers-cycles15        18  6  20 3  0.804 103  schema tags seed 0
    plain-numbers-cycles15-end55  17  6  19 3  0.805 102  "1 2 3 1 2 3 1 2 3" not repeated; tags 0
    plain-numbers-cycles15-s4360   -  -   - -      -   -  chat "Explain quantum physics." has no
                                                          EOS in 40 tokens; '{"values": [1, 2'
    plain-numbers-cycles15-s4362   -  -   - -      -   -  the same and three-deep seed 1
    plain-numbers-cycles15-s4364   -  -   - -      -   -  chat; '{"values": [1, 2'
    plain-numbers-cycles15-s4366   -  -   - -      -   -  presence 1 (red blue green), chat,
                                                          '{"values": [1, 2', three-deep seed 1

("-": not measured, the unit tests already failed.) `plain-numbers` writes number cycles with
spaces only ("81 86 81 86", never "81, 86, 81, 86": that is a JSON list of ints, and models
trained on it loop inside such lists, "[31, 83, 81, 81, 81, ..."): free-form JSON closing over
51 prompts of the unit test's kinds went from 47/51 (g) to 51/51 (plain-numbers-s4340; runs 1-3:
50/51). What is left varies with the run 5 seed: which seeded schema sample (sampled at
temperature 1, about 3 % of them do not finish in 60 tokens, before and after) or which one
penalty case falls on the wrong side.

Deterministic: seeded `random.Random`, `torch.manual_seed`, `torch.use_deterministic_algorithms`
and one torch thread (another thread count or CPU kind may change float rounding and so the
bytes). Runs 1-3 take about 35 minutes on one core. Needs torch, transformers (5.x), tokenizers and
safetensors; no network.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "conformance"))

from reference_corpus import (  # noqa: E402
    BOS,
    COLORS,
    EOS,
    EXTRA_WORDS,
    LETTERS,
    NAMES,
    PAD,
    SPECIAL_TOKENS,
    WORD_POOL,
    documents,
    drill_documents,
)
from training_schedule import adamw, warmup_cosine  # noqa: E402

from tt_conformance.longtasks import PASSKEY_FILLER, Passkey  # noqa: E402

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

# Other filler sentences, so retrieval does not hang on the standard one alone.
ALT_FILLERS = (
    " The grass is green. The sky is blue.",
    " Here we go. There and back again.",
    " The sun is yellow. The sky is blue. The grass is green.",
    " The cat sat on the mat. The dog ran in the park.",
)
_SPECIAL = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
Row = tuple[list[int], list[float]]  # token ids, per-token loss weights


@dataclass(frozen=True)
class Phase:
    length: int  # tokens per row
    batch: int  # rows per step
    steps: int


@dataclass(frozen=True)
class Run:
    """One training run: phases, the share of each row kind, optimiser and seeds."""

    phases: tuple[Phase, ...]
    # corpus, induction, passkey, passage, cycle, drill
    mix: tuple[float, float, float, float, float, float]
    lr: float
    warmup: int
    seed: int
    corpus_seed: int
    answer_weight: float = 5.0
    alt_filler: float = 0.2
    # Cycles of numbers written "1, 2, 1, 2": the same text as a JSON list of ints, so a model
    # trained on them loops inside such lists ("[31, 83, 81, 81, 81, ...") instead of closing.
    comma_numbers: bool = True
    # From the third round on, each round of a cycle row is its last with this probability.
    cycle_end: float = 0.4

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.phases)


BASE_RUNS = (
    Run(
        phases=(Phase(256, 32, 300), Phase(512, 16, 300), Phase(1024, 8, 400)),
        mix=(0.3, 0.15, 0.3, 0.25, 0.0, 0.0),
        lr=1.5e-3,
        warmup=20,
        seed=4321,
        corpus_seed=4321,
    ),
    Run(
        phases=(Phase(256, 32, 60), Phase(1024, 8, 100)),
        mix=(0.55, 0.1, 0.2, 0.15, 0.0, 0.0),
        lr=3e-4,
        warmup=10,
        seed=4322,
        corpus_seed=4323,
    ),
    # Corpus only: the runs above leave repetition loops in JSON (keys and list items repeated
    # past the closing bracket) and odd chat answers; this brings closing back and keeps the
    # retrieval (a mix with passkey rows did too, but not the chat answers).
    Run(
        phases=(Phase(256, 32, 150),),
        mix=(1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        lr=3e-4,
        warmup=10,
        seed=4324,
        corpus_seed=4325,
    ),
)
# Runs 4 on (issue 46 item 6), by name (--cycles); each attempt's runs stay here, so its result
# is reproducible by one command (figures in the docstring).
# Run 4: short cycles repeated ("a b c a b c ..."), continued by repeating them, as chat models
# do, so penalties have a repetition to change (runs 1-3 taught "a b c a b c" -> "d e f").
# Corpus and passkey rows keep the rest.
_CYCLES = Run(
    phases=(Phase(256, 32, 150), Phase(1024, 8, 50)),
    mix=(0.5, 0.0, 0.2, 0.0, 0.3, 0.0),
    lr=3e-4,
    warmup=10,
    seed=4326,
    corpus_seed=4327,
)
# Run 5: mostly corpus, with drill rows: run 4 loosened sums (an operand copied as the answer:
# tt-patterns 97/107 with corpus and cycle rows alone here); a tenth of cycle rows keeps them.
_DRILL = Run(
    phases=(Phase(256, 32, 80),),
    mix=(0.7, 0.0, 0.0, 0.0, 0.1, 0.2),
    lr=3e-4,
    warmup=5,
    seed=4328,
    corpus_seed=4329,
)
# A consolidation run after 4-5, as run 3 is for runs 1-2 (tried; it did not help, see above).
_CONSOLIDATE = Run(
    phases=(Phase(256, 32, 60),),
    mix=(0.85, 0.0, 0.0, 0.0, 0.15, 0.0),
    lr=1.5e-4,
    warmup=5,
    seed=4330,
    corpus_seed=4331,
)
# The same with passkey, passage and drill rows and a short 1024-token phase.
_MIXED_CONSOLIDATE = replace(
    _CONSOLIDATE,
    phases=(Phase(256, 32, 50), Phase(1024, 8, 15)),
    mix=(0.6, 0.0, 0.1, 0.1, 0.15, 0.05),
    lr=1e-4,
    comma_numbers=False,
)
# Cycles only, at a low rate, with more stops (after runs 4-5, to make EOS a closer second).
_NUDGE = replace(
    _CONSOLIDATE,
    phases=(Phase(256, 32, 30),),
    mix=(0.7, 0.0, 0.0, 0.0, 0.3, 0.0),
    lr=1e-4,
    warmup=3,
    seed=4350,
    corpus_seed=4351,
    comma_numbers=False,
    cycle_end=0.6,
)
_PLAIN = replace(_CYCLES, comma_numbers=False)


def _plain_drill(seed: int = 4328, cycles: float = 0.1, cycle_end: float = 0.4) -> Run:
    """Run 5 without comma-written number cycles: ``cycles`` of the rows are cycle rows (taken
    from the corpus share), another seed pair (``seed``, ``seed + 1``)."""
    mix = (round(0.8 - cycles, 2), 0.0, 0.0, 0.0, cycles, 0.2)
    return replace(
        _DRILL,
        mix=mix,
        seed=seed,
        corpus_seed=seed + 1,
        comma_numbers=False,
        cycle_end=cycle_end,
    )


CYCLE_RECIPES: dict[str, tuple[Run, ...]] = {
    "g": (_CYCLES, _DRILL),
    "g-consolidated": (_CYCLES, _DRILL, _CONSOLIDATE),
    "plain-numbers": (_PLAIN, _plain_drill()),
    "plain-numbers-consolidated": (_PLAIN, _plain_drill(), _MIXED_CONSOLIDATE),
    **{f"plain-numbers-s{s}": (_PLAIN, _plain_drill(s)) for s in (4340, 4342, 4344, 4346)},
    "plain-numbers-s4342-nudged": (_PLAIN, _plain_drill(4342), _NUDGE),
    "plain-numbers-cycles15": (_PLAIN, _plain_drill(cycles=0.15)),
    "plain-numbers-cycles15-end55": (_PLAIN, _plain_drill(cycles=0.15, cycle_end=0.55)),
    **{
        f"plain-numbers-cycles15-s{s}": (_PLAIN, _plain_drill(s, cycles=0.15))
        for s in (4360, 4362, 4364, 4366)
    },
}
DEFAULT_CYCLES = "plain-numbers-s4340"  # the shipped fixture's runs 4-5
SHIPPED_RUNS = 5


def recipe(cycles: str) -> tuple[Run, ...]:
    return BASE_RUNS + CYCLE_RECIPES[cycles]


# Items of the short cycles: letters, digits, numbers, words, two-word phrases; a quarter of the
# cycles take consecutive items (a b c, 1 2 3, red blue green), which the corpus otherwise
# continues as a sequence.
_CYCLE_WORDS = WORD_POOL + NAMES + EXTRA_WORDS
CYCLE_WEIGHT = 3.0
_RUNS = (list(LETTERS), list(LETTERS.upper()), [str(i) for i in range(1, 30)], COLORS)


class Rows:
    """Makes training rows; every draw comes from one seeded generator, in a fixed order."""

    def __init__(self, tok: Tokenizer, run: Run) -> None:
        self.tok, self.run = tok, run
        self.rng = random.Random(run.seed)
        self.pad, self.bos, self.eos = (tok.token_to_id(t) for t in (PAD, BOS, EOS))
        self.text_ids = list(range(tok.get_vocab_size() - len(SPECIAL_TOKENS)))
        self.corpus = documents(run.corpus_seed)
        self.passages = documents(run.corpus_seed + 1)
        self.drills = drill_documents(run.corpus_seed + 2)
        self.pending: list[list[int]] = []
        self.pending_drills: list[list[int]] = []
        self.bare = len(tok.encode(Passkey(10000, 0, 0).prompt).ids)
        self.per_filler = len(tok.encode(PASSKEY_FILLER, add_special_tokens=False).ids)

    def _document(self, drill: bool = False) -> list[int]:
        stream, pending = (
            (self.drills, self.pending_drills) if drill else (self.corpus, self.pending)
        )
        if not pending:
            texts = [next(stream) for _ in range(2000)]
            encoded = self.tok.encode_batch(texts, add_special_tokens=False)
            pending.extend(reversed([e.ids for e in encoded]))
        return pending.pop()

    def _fill(self, row: list[int], weights: list[float], length: int, drill: bool = False) -> Row:
        """Pack whole corpus (or drill) documents after ``row`` up to ``length``, then pad."""
        while len(row) < length:
            doc = self._document(drill)
            if len(row) + len(doc) > length:
                if len(row) > length - 8:
                    break
                continue
            row += doc
            weights += [1.0] * len(doc)
        missing = length - len(row)
        return row + [self.pad] * missing, weights + [0.0] * missing

    def corpus_row(self, length: int) -> Row:
        return self._fill([], [], length)

    def drill_row(self, length: int) -> Row:
        return self._fill([], [], length, drill=True)

    def induction_row(self, length: int) -> Row:
        rng = self.rng
        as_ids = rng.random() < 0.5
        size = int(math.exp(rng.uniform(math.log(4), math.log(max(5, (length - 1) // 2)))))
        if as_ids:
            run = [rng.choice(self.text_ids) for _ in range(size)]
        else:
            run = []
            while len(run) < size:
                word = (
                    str(rng.randint(0, 99999))
                    if rng.random() < 0.3
                    else rng.choice(WORD_POOL + NAMES + EXTRA_WORDS)
                )
                run += self.tok.encode(" " + word, add_special_tokens=False).ids
            run = run[:size]
        row, weights = [self.bos, *run], [0.0] * (len(run) + 1)
        while len(row) < length:
            take = run[: length - len(row)]
            row += take
            weights += [1.0] * len(take)
        return row[:length], weights[:length]

    def passkey_row(self, length: int) -> Row:
        rng = self.rng
        while True:
            fillers = rng.randint(0, max(0, (length - self.bare - 8) // self.per_filler))
            before = rng.randint(0, fillers) if rng.random() < 0.8 else rng.choice([0, fillers])
            task = Passkey(rng.randint(10000, 99999), before, fillers - before)
            text = task.prompt
            if rng.random() < self.run.alt_filler:
                text = text.replace(PASSKEY_FILLER, rng.choice(ALT_FILLERS))
            ids = self.tok.encode(text).ids
            answer = [*self.tok.encode(task.answer, add_special_tokens=False).ids, self.eos]
            if len(ids) + len(answer) <= length:
                break
        weights = [0.0] + [1.0] * (len(ids) - 1) + [self.run.answer_weight] * len(answer)
        return self._fill(ids + answer, weights, length)

    def passage_row(self, length: int) -> Row:
        rng = self.rng
        size = int(math.exp(rng.uniform(math.log(12), math.log(min(240, length // 3)))))
        parts: list[str] = []
        while sum(len(p) for p in parts) < 6 * size:
            text = " ".join(_SPECIAL.sub(" ", next(self.passages)).split())
            if text:
                parts.append(text)
        sep = " " if rng.random() < 0.8 else "\n"
        unit = self.tok.encode(sep + " ".join(parts), add_special_tokens=False).ids[:size]
        row, weights, first = [self.bos], [0.0], True
        while len(row) < length:
            take = unit[: length - len(row)]
            row += take
            weights += [0.5 if first else 1.0] * len(take)
            first = False
        return row, weights

    def _cycle_items(self) -> list[str]:
        rng = self.rng
        size = rng.randint(2, 6)
        if rng.random() < 0.25:
            run = rng.choice(_RUNS)
            start = rng.randrange(len(run) - size + 1)
            return run[start : start + size]
        kind = rng.randrange(5)
        pool: list[str] = (
            list(LETTERS + LETTERS.upper())
            if kind == 0
            else [str(i) for i in range(10)]
            if kind == 1
            else [str(i) for i in range(10, 1000)]
            if kind == 2
            else _CYCLE_WORDS
        )
        items = rng.sample(pool, size)
        if kind == 4:  # two-word phrases
            items = [f"{w} {rng.choice(_CYCLE_WORDS)}" for w in items]
        return items

    def cycle_row(self, length: int) -> Row:
        """Segments of BOS, a short cycle repeated, EOS; loss from the second round on, past its
        first item (which the first round alone does not imply). From the third round on each
        round is the last with probability ``Run.cycle_end``, so after a cycle the model gives EOS
        a fair share and the repeat the larger one: greedy repeats, and a penalty of about one
        on the repeated tokens tips it."""
        rng = self.rng
        row: list[int] = []
        weights: list[float] = []
        while len(row) < length:
            items = self._cycle_items()
            sep = rng.choices([" ", ", "], weights=[4, 1])[0]
            if not self.run.comma_numbers and all(item.isdigit() for item in items):
                sep = " "
            first = [" " + items[0], sep + items[0]]  # the first item in the first round, later
            pieces = [sep + item for item in items[1:]]
            encoded = self.tok.encode_batch([*first, *pieces], add_special_tokens=False)
            starts, rest = [e.ids for e in encoded[:2]], [e.ids for e in encoded[2:]]
            row.append(self.bos)
            weights.append(0.0)
            rounds = 3
            while rng.random() >= self.run.cycle_end:
                rounds += 1
            for r in range(rounds):
                for i, piece in enumerate([starts[r > 0], *rest]):
                    # The round's first token is where the cycle goes on or stops: weighted up.
                    weight = CYCLE_WEIGHT if i == 0 and r > 1 else 1.0
                    row += piece
                    weights += [weight if r > 0 and (r, i) != (1, 0) else 0.0] * len(piece)
            row.append(self.eos)
            weights.append(CYCLE_WEIGHT)
        return row[:length], weights[:length]

    def counts(self, batch: int) -> list[int]:
        counts = [round(batch * share) for share in self.run.mix]
        counts[0] += batch - sum(counts)
        return counts

    def batch(self, phase: Phase) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        makers: list[Callable[[int], Row]] = [
            self.corpus_row,
            self.induction_row,
            self.passkey_row,
            self.passage_row,
            self.cycle_row,
            self.drill_row,
        ]
        rows: list[Row] = [
            make(phase.length)
            for make, count in zip(makers, self.counts(phase.batch), strict=True)
            for _ in range(count)
        ]
        return torch.tensor([r for r, _ in rows]), torch.tensor([w for _, w in rows])


def _schedule(run: Run) -> Iterator[tuple[int, Phase]]:
    step = 0
    for phase in run.phases:
        for _ in range(phase.steps):
            yield step, phase
            step += 1


def train(checkpoint: Path, run: Run, threads: int) -> None:
    """One run, in place: read the checkpoint's weights, write the trained ones back."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(run.seed)
    torch.use_deterministic_algorithms(True)
    tok = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    rows = Rows(tok, run)
    model = LlamaForCausalLM.from_pretrained(str(checkpoint))
    model.config.use_cache = False
    opt = adamw(model, run.lr)
    lr_at = warmup_cosine(run.lr, run.warmup, run.steps)

    started = time.time()
    model.train()
    for step, phase in _schedule(run):
        ids, weights = rows.batch(phase)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        logits = model(input_ids=ids).logits[:, :-1].float()
        target = ids[:, 1:]
        weight = weights[:, 1:] * (target != rows.pad)
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), target.reshape(-1), reduction="none"
        ).view_as(target)
        loss = (nll * weight).sum() / weight.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == run.steps - 1:
            print(
                f"step {step:4d} rows of {phase.length} loss {loss.item():.4f} "
                f"lr {lr_at(step):.1e} {time.time() - started:6.0f}s",
                flush=True,
            )
    # Only the weights change: the config, tokenizer and README stay the checkpoint's own.
    state = {name: t.detach().contiguous() for name, t in model.state_dict().items()}
    save_file(state, str(checkpoint / "model.safetensors"), metadata={"format": "pt"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", type=Path, required=True, help="trained in place")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--from-run",
        type=int,
        default=1,
        help="start at this run of the recipe (a checkpoint that already went through the ones "
        "before it)",
    )
    parser.add_argument(
        "--to-run",
        type=int,
        default=SHIPPED_RUNS,
        help=f"stop after this run of the recipe (default {SHIPPED_RUNS}: the shipped fixture's)",
    )
    parser.add_argument(
        "--cycles",
        choices=sorted(CYCLE_RECIPES),
        default=DEFAULT_CYCLES,
        help=f"the runs after run 3 (default {DEFAULT_CYCLES}; see the docstring)",
    )
    args = parser.parse_args(argv)
    runs = recipe(args.cycles)
    if not (args.checkpoint / "model.safetensors").is_file():
        parser.error(f"--checkpoint {args.checkpoint}: no model.safetensors there")
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    if not 1 <= args.from_run <= len(runs):
        parser.error(f"--from-run must be 1..{len(runs)}, got {args.from_run}")
    if not args.from_run <= args.to_run <= len(runs):
        parser.error(f"--to-run must be {args.from_run}..{len(runs)}, got {args.to_run}")
    for i, run in enumerate(runs, 1):
        if not args.from_run <= i <= args.to_run:
            continue
        print(f"run {i}/{len(runs)}: {run.steps} steps", flush=True)
        train(args.checkpoint, run, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
