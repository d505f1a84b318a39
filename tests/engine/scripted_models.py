"""A reference model whose greedy output is a fixed script: the bundled reference Llama computes
as usual, then its logits are replaced so that the argmax of the k-th generated position is
``script[k]`` (the last token, normally EOS, repeated past the end). Lets an engine test serve
model output with an exact format (Gemma 4 reasoning and tool calls) through the real engine and
OpenAI server.

    TT_MODEL_CLASS_OVERRIDES="TTReferenceLlamaForCausalLM=tests.engine.scripted_models:ScriptedOutput"
    TT_TEST_SCRIPTED_OUTPUT="1024,638,277,...,1019"   # token ids, ending with EOS

Only the two contract calls are overridden, at their outputs (host sampling: prefill returns
logits [B, 1, V]). The base is the NoAsyncDecode variant, whose decode returns host logits even
for ``read_from_device=False`` (it has no read-back hooks). A request is recognised across calls
by the first block of its page-table row; its generated index is its decode position minus its
prompt length.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from vllm_tt_plugin.test_models.variants import NoAsyncDecode

SCRIPT_ENV = "TT_TEST_SCRIPTED_OUTPUT"


class ScriptedOutput(NoAsyncDecode):  # type: ignore[misc, valid-type]
    _prompt_ends: dict[int, int]

    def _script(self) -> list[int]:
        raw = os.environ.get(SCRIPT_ENV, "")
        if not raw:
            raise RuntimeError(f"ScriptedOutput needs {SCRIPT_ENV} (comma-separated token ids)")
        return [int(part) for part in raw.split(",")]

    def _force(self, logits: Any, steps: list[int | None]) -> Any:
        if isinstance(logits, tuple):  # decode: (values, logprobs)
            return self._force(logits[0], steps), logits[1]
        if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
            raise RuntimeError(
                "ScriptedOutput rewrites logits: serve it with host sampling and without "
                f"async decode (got {type(logits).__name__})"
            )
        script = self._script()
        forced = logits.clone()
        for row, step in enumerate(steps):
            if step is None:
                continue
            token = script[min(step, len(script) - 1)]
            forced[row] = -30.0
            forced[row, ..., token] = 30.0
        return forced

    def prefill_forward(self, **kwargs: Any) -> Any:  # type: ignore[override]
        out = super().prefill_forward(**kwargs)
        page_table, prompt_lens = kwargs["page_table"], kwargs["prompt_lens"]
        if not hasattr(self, "_prompt_ends"):
            self._prompt_ends = {}
        ends = [int(end) for end in prompt_lens]
        for row, end in enumerate(ends):
            self._prompt_ends[int(page_table[row, 0])] = end
        return self._force(out, [0] * len(ends))

    def decode_forward(self, **kwargs: Any) -> Any:  # type: ignore[override]
        out = super().decode_forward(**kwargs)
        page_table, start_pos = kwargs["page_table"], kwargs["start_pos"]
        ends = getattr(self, "_prompt_ends", {})
        steps: list[int | None] = []
        for row, pos in enumerate(start_pos.reshape(-1).tolist()):
            end = ends.get(int(page_table[row, 0])) if pos >= 0 else None
            steps.append(None if end is None else int(pos) - end + 1)
        return self._force(out, steps)
