"""The mutation suite's catalog: each mutant, the concern it attacks, and whether CI runs it.

``tools/run_mutants.py`` serves each mutant with ``TT_MODEL_CLASS_OVERRIDES`` (the bundled
model's architecture -> the mutant class), runs ``tox -e emu``'s driver and gate against it, and
counts the mutant killed when the run fails against the committed baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

MODULE = "tests.mutants.device_faults"
# The bundled checkpoint's architecture, as the registry keys it.
ARCH = "TTReferenceLlamaForCausalLM"


@dataclass(frozen=True)
class Mutant:
    name: str  # the class in device_faults.py
    concern: str  # the conformance concern it attacks (a marker of tt_conformance.checks)
    ci: bool = False  # part of the subset .ci/run serves

    @property
    def target(self) -> str:
        return f"{MODULE}:{self.name}"

    @property
    def dotted(self) -> str:
        """How the plugin names the served class (``tt_plugin_info``'s ``model_class``)."""
        return f"{MODULE}.{self.name}"

    @property
    def override(self) -> str:
        return f"{ARCH}={self.target}"


MUTANTS: tuple[Mutant, ...] = (
    Mutant("TopPIgnored", "sampling"),
    Mutant("TopPComplement", "sampling"),
    Mutant("TopKOffByOne", "sampling"),
    Mutant("TopKIgnored", "sampling"),
    Mutant("TemperatureIgnored", "sampling"),
    Mutant("TemperatureInverted", "sampling"),
    Mutant("TemperatureSquared", "device_sampling"),
    Mutant("FirstRowParams", "isolation"),
    Mutant("RepetitionPromptIgnored", "penalties"),
    Mutant("FrequencyAsPresence", "penalties"),
    Mutant("PresenceIgnored", "penalties"),
    Mutant("RepetitionInverted", "penalties"),
    Mutant("PenaltyOnGreedyRows", "penalties"),
    Mutant("PenaltiesFromPromptOnly", "penalties"),
    Mutant("SeedIgnored", "seeding"),
    Mutant("SeedFromSlot", "seeding"),
    Mutant("LogprobsScaled", "logprobs", ci=True),
    Mutant("LogprobsOfArgmax", "logprobs"),
    Mutant("RopeWrapsAt384", "long_context"),
    Mutant("DecodeRopeFrozen", "long_context", ci=True),
    Mutant("PrefillRowsShareFirstParams", "batched_prefill", ci=True),
    Mutant("PrefillLastRowOffByOne", "batched_prefill"),
    Mutant("GreedyRunnerUp", "accuracy"),
    Mutant("PrefixHitPositionsFromZero", "forward_reference"),
    Mutant("ChunkStartRoundedToBlock", "forward_reference"),
    Mutant("DecodeKVToPreviousBlock", "forward_reference"),
    Mutant("VocabTailMasked", "forward_reference"),
    Mutant("PrefillRowsRotated", "forward_reference"),
    Mutant("DecodeLastRowStale", "forward_reference"),
    Mutant("ChunkLateInBlockOffByOne", "forward_reference"),
    Mutant("RepetitionPromptDroppedWithLogprobs", "penalties"),
)


def by_name(names: list[str]) -> tuple[Mutant, ...]:
    known = {m.name: m for m in MUTANTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return tuple(known[n] for n in names)
