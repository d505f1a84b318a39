"""Which kind of step runs next: prefill, decode, or nothing (pure; no engine, no device).

A TT step is prefill-only or decode-only. Prefill has priority (new requests reach their first
token fast), but with decode interleave on, a run of ``decode_interleave_prefill_steps``
consecutive prefill steps is followed by up to ``decode_interleave_decode_steps`` decode-only
steps whenever requests are waiting to decode, so their inter-token latency is bounded by
roughly (prefill_steps x prefill step time) instead of growing with other requests' prompts.
Finishing an insertion only ends the policy's preference for decode; it never forces a prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_tt_plugin.policy.step_kind import StepKind


@dataclass(frozen=True)
class InterleaveConfig:
    enabled: bool = True
    prefill_steps: int = 2
    decode_steps: int = 1

    def __post_init__(self) -> None:
        if self.prefill_steps < 1 or self.decode_steps < 1:
            raise ValueError("decode interleave step counts must be >= 1")


@dataclass(frozen=True)
class WorkFacts:
    """What could run this step."""

    prefill_ready: bool  # a chunk continuation, or an admissible waiting request
    decode_ready: bool  # a running request waiting for its next token


# Requests wait for a token and nothing else can run (the steady decode step; a prefill fallback).
DECODE_ONLY = WorkFacts(prefill_ready=False, decode_ready=True)


@dataclass
class StepPolicy:
    config: InterleaveConfig
    consecutive_prefill: int = 0  # prefill steps since the last decode step
    inserted_decode: int = 0  # decode steps run by the current insertion

    def choose(self, facts: WorkFacts) -> StepKind:
        if not facts.prefill_ready and not facts.decode_ready:
            return StepKind.IDLE
        if not facts.prefill_ready:
            return StepKind.DECODE
        if not facts.decode_ready:
            return StepKind.PREFILL
        cfg = self.config
        if not cfg.enabled:
            return StepKind.PREFILL
        if self.inserted_decode > 0 and self.inserted_decode < cfg.decode_steps:
            return StepKind.DECODE  # an insertion in progress continues
        if self.consecutive_prefill >= cfg.prefill_steps and self.inserted_decode == 0:
            return StepKind.DECODE  # start an insertion
        return StepKind.PREFILL

    def record(self, mode: StepKind, facts: WorkFacts) -> None:
        """Account for the step that actually ran (after any fallback)."""
        if mode is StepKind.PREFILL:
            self.consecutive_prefill += 1
            self.inserted_decode = 0
        elif mode is StepKind.DECODE:
            if facts.prefill_ready and self.config.enabled:
                # A decode step while prefill work waits counts toward the insertion.
                self.inserted_decode += 1
                if self.inserted_decode >= self.config.decode_steps:
                    self.consecutive_prefill = 0
            else:
                self.consecutive_prefill = 0
                self.inserted_decode = 0
