"""The warm-up forms of older tt-metal releases, negotiated and served end to end (issue #33).

Each variant of the reference Llama changes only its warm-up signatures
(``vllm_tt_plugin.test_models.warmup_forms``); a keyword the plugin got wrong is a ``TypeError``
at warm-up and the server never starts. Served with device sampling and traces on, so both
warm-ups run twice with every flag the plugin sends; the output must be HF greedy's.
"""

from __future__ import annotations

import pytest

from tests.engine.harness import complete_many, hf_greedy, mixed_prompts, serve

FORMS = "vllm_tt_plugin.test_models.warmup_forms"


@pytest.mark.parametrize("form", ["OlderWarmupForm", "Qwen3VLWarmupForm"])
def test_warmup_form_is_negotiated_and_served(form: str) -> None:
    prompts = mixed_prompts(3, seed=33, min_len=4, max_len=40)
    max_tokens = 6
    want = [hf_greedy(p, max_tokens) for p in prompts]
    with serve(
        tt={"sample_on_device_mode": "all", "trace_mode": "all"},
        vllm_args=["--max-num-seqs", "4", "--max-model-len", "256"],
        env={"TT_MODEL_CLASS_OVERRIDES": f"TTReferenceLlamaForCausalLM={FORMS}:{form}"},
    ) as server:
        got = complete_many(server.url, prompts, max_tokens, workers=3)
    assert got == want
