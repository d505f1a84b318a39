"""The bundled reference checkpoint behaves like a (very small) language model.

Conformance checks run against this model on hosts without TT cards; penalties, logit_bias,
structured output, min_tokens, stop strings and chat only show an effect if the model continues
patterns, closes JSON and ends chat turns by itself. These tests pin that behaviour with Hugging
Face transformers on CPU (greedy unless stated), plus the checkpoint's file-level facts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from transformers import AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerFast

CKPT = Path(__file__).resolve().parents[2] / "fixtures" / "models" / "tt-reference-llama"
VOCAB = 1024
# On top of the vocabulary, in this order, as Llama 3 keeps its special tokens.
SPECIAL = {"<|pad|>": 1017, "<|bos|>": 1018, "<|eos|>": 1019, "<|system|>": 1020,
           "<|user|>": 1021, "<|assistant|>": 1022, "<|end|>": 1023}  # fmt: skip
BOS, EOS, PAD = 1018, 1019, 1017


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return AutoTokenizer.from_pretrained(CKPT)


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    return LlamaForCausalLM.from_pretrained(CKPT).eval()


def _read(name: str) -> dict[str, Any]:
    return json.loads((CKPT / name).read_text(encoding="utf-8"))


def _generate(
    model: LlamaForCausalLM,
    ids: list[int],
    n: int,
    logits_processor: Any = None,
    seed: int | None = None,
) -> list[int]:
    """Greedy (seed None) or temperature-1.0 sampling; returns only the new tokens."""
    kwargs: dict[str, Any] = {"do_sample": False}
    if seed is not None:
        torch.manual_seed(seed)
        kwargs = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            max_new_tokens=n,
            eos_token_id=EOS,
            pad_token_id=PAD,
            logits_processor=logits_processor,
            **kwargs,
        )
    return out[0, len(ids) :].tolist()


def _complete(tok: PreTrainedTokenizerFast, model: LlamaForCausalLM, prompt: str, n: int) -> str:
    return tok.decode(_generate(model, tok(prompt).input_ids, n))


def _chat_ids(tok: PreTrainedTokenizerFast, messages: list[dict[str, str]]) -> list[int]:
    # As vLLM does: render the template (it carries BOS), then encode without adding specials.
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False).input_ids


# --- files and configuration ---------------------------------------------------------------------
def test_config_is_the_reference_llama_architecture() -> None:
    cfg = _read("config.json")
    assert cfg["model_type"] == "llama"
    assert cfg["architectures"] == ["ReferenceLlamaForCausalLM"]
    assert cfg["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert cfg["tie_word_embeddings"] is False
    assert cfg["attention_bias"] is False and cfg["mlp_bias"] is False
    assert cfg["hidden_act"] == "silu"
    assert cfg["num_key_value_heads"] == 2
    assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0
    assert cfg["head_dim"] * cfg["num_attention_heads"] == cfg["hidden_size"]
    assert cfg["max_position_embeddings"] == 4096
    assert cfg["dtype"] == "float32"
    assert (cfg["bos_token_id"], cfg["eos_token_id"], cfg["pad_token_id"]) == (BOS, EOS, PAD)
    assert cfg["vocab_size"] == VOCAB


def test_generation_config_carries_only_token_ids() -> None:
    # Sampling defaults here would silently become vLLM's request defaults.
    assert _read("generation_config.json") == {"bos_token_id": BOS, "eos_token_id": EOS}


def test_weights_are_small_untied_float32_and_load_completely() -> None:
    path = CKPT / "model.safetensors"
    assert path.stat().st_size < 8 * 2**20
    with safe_open(str(path), framework="pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}  # noqa: SIM118 (safe_open API)
        emb, head = f.get_tensor("model.embed_tokens.weight"), f.get_tensor("lm_head.weight")
    assert dtypes == {torch.float32}
    assert not torch.equal(emb, head)
    _, info = LlamaForCausalLM.from_pretrained(CKPT, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info


def test_tokenizer_config_and_special_tokens(tok: PreTrainedTokenizerFast) -> None:
    assert _read("tokenizer_config.json")["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert len(tok) == _read("config.json")["vocab_size"]
    assert {t: tok.convert_tokens_to_ids(t) for t in SPECIAL} == SPECIAL
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (BOS, EOS, PAD)
    assert set(SPECIAL) <= set(tok.all_special_tokens)


def test_plain_prompt_gets_one_bos_and_round_trips(tok: PreTrainedTokenizerFast) -> None:
    text = 'Hello, world! {"a": [1, 2]}\n  x = "q"'
    ids = tok(text).input_ids
    assert ids[0] == BOS and BOS not in ids[1:]
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok(text, add_special_tokens=False).input_ids == ids[1:]


def test_vllm_tokenizer_loading_agrees_with_transformers(tok: PreTrainedTokenizerFast) -> None:
    from vllm.tokenizers import get_tokenizer

    vtok = get_tokenizer(str(CKPT))
    text = "Once upon a time 1 2 3"
    assert vtok.encode(text) == tok(text).input_ids
    assert (vtok.bos_token_id, vtok.eos_token_id) == (BOS, EOS)
    messages = [{"role": "user", "content": "Hi"}]
    assert vtok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    ) == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_chat_template_renders_role_markers(tok: PreTrainedTokenizerFast) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|bos|><|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n"
        "<|assistant|>\nHello!<|eos|><|user|>\nBye<|end|>\n<|assistant|>\n"
    )
    ids = _chat_ids(tok, messages)
    assert ids[0] == BOS and ids.count(BOS) == 1
    assert tok.decode(ids) == text
    no_prompt = tok.apply_chat_template(messages[:3], tokenize=False)
    assert no_prompt.endswith("<|assistant|>\nHello!<|eos|>")


def test_chat_template_rejects_unknown_role(tok: PreTrainedTokenizerFast) -> None:
    with pytest.raises(Exception, match="got role tool"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


# --- greedy behaviour ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("a a a a", " a a a a"),
        ("the cat the cat the cat", " the cat the cat"),
        ("hello world hello world hello world", " hello world hello world"),
        ("1 2 3 4 5", " 6 7 8"),
        ("10 11 12", " 13 14 15"),
        ("one two three", " four five six"),
        ("Monday Tuesday Wednesday", " Thursday Friday Saturday"),
        ("Friday, Saturday,", " Sunday, Monday"),
        ("January February March", " April May June"),
        ("a b c d e", " f g h"),
        ("A B C D", " E F G"),
        # A cycle written out is repeated, not read as a sequence (as chat models do).
        ("a b c a b c a b c", " a b c a b c"),
        ("1 2 3 1 2 3 1 2 3", " 1 2 3 1 2 3"),
        ("red blue green red blue green red blue green", " red blue green red blue green"),
        ("x y x y x y x y", " x y x y x y"),
    ],
)
def test_greedy_continues_patterns(
    tok: PreTrainedTokenizerFast, model: LlamaForCausalLM, prompt: str, expected: str
) -> None:
    assert _complete(tok, model, prompt, 12).startswith(expected)


class _Penalties:
    """vLLM's penalties as a logits processor: repetition over prompt and output (sign-aware
    scaling), frequency and presence subtracted over the generated tokens only."""

    def __init__(
        self, prompt_len: int, repetition: float, frequency: float, presence: float
    ) -> None:
        self.prompt_len, self.rep, self.freq, self.pres = (
            prompt_len,
            repetition,
            frequency,
            presence,
        )

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        seen = input_ids[0].unique()
        vals = scores[0, seen]
        scores[0, seen] = torch.where(vals > 0, vals / self.rep, vals * self.rep)
        counts = torch.bincount(input_ids[0, self.prompt_len :], minlength=scores.shape[-1])
        return scores - self.freq * counts - self.pres * (counts > 0).to(scores.dtype)


# (repetition, frequency, presence): the values the conformance check's repeated-pattern test sends.
PENALTY_CASES = {
    "presence1": (1.0, 0.0, 1.0),
    "presence2": (1.0, 0.0, 2.0),
    "frequency1": (1.0, 1.0, 0.0),
    "frequency2": (1.0, 2.0, 0.0),
    "repetition1.3": (1.3, 0.0, 0.0),
    "repetition2": (2.0, 0.0, 0.0),
}
# Every penalty on the prompt; on a cycle of words, presence 1.0 leaves greedy as it is
# (the repeat leads EOS by more than one logit there; tools/measure_reference_model.py prints
# which penalty changes which pattern), the stronger ones do not.
REPEATED_PATTERN_CASES = [("a b c a b c a b c", name) for name in PENALTY_CASES] + [
    ("red blue green red blue green", name) for name in PENALTY_CASES if name != "presence1"
]


@pytest.mark.parametrize(("prompt", "penalty"), REPEATED_PATTERN_CASES)
def test_penalties_change_greedy_output_on_a_repeated_pattern(
    tok: PreTrainedTokenizerFast,
    model: LlamaForCausalLM,
    prompt: str,
    penalty: str,
) -> None:
    """The common penalty check (greedy on a cycle, penalised or not) sees the penalty."""
    ids = tok(prompt).input_ids
    plain = _generate(model, ids, 24)
    processor = _Penalties(len(ids), *PENALTY_CASES[penalty])
    penalised = _generate(model, ids, 24, logits_processor=[processor])
    assert penalised != plain, tok.decode(plain)


@pytest.mark.parametrize(
    "question",
    [
        "What color is the sky?",
        "Hello!",
        "Tell me a story.",
        "What is your name?",
        "Explain quantum physics.",
    ],
)
def test_chat_answer_is_words_and_ends_with_eos(
    tok: PreTrainedTokenizerFast, model: LlamaForCausalLM, question: str
) -> None:
    new = _generate(model, _chat_ids(tok, [{"role": "user", "content": question}]), 40)
    assert new[-1] == EOS, tok.decode(new)
    assert not set(new[:-1]) & set(SPECIAL.values()), tok.decode(new)
    answer = tok.decode(new[:-1])
    assert sum(w.strip(".,!?").isalpha() for w in answer.split()) >= 1, answer


def test_chat_answers_the_fact_it_was_taught(
    tok: PreTrainedTokenizerFast, model: LlamaForCausalLM
) -> None:
    new = _generate(
        model, _chat_ids(tok, [{"role": "user", "content": "What color is the sky?"}]), 40
    )
    assert tok.decode(new) == "The sky is blue.<|eos|>"


def _first_json(text: str) -> Any:
    value, _ = json.JSONDecoder().raw_decode(text)
    return value


def test_json_string_value_is_short_and_closed(
    tok: PreTrainedTokenizerFast, model: LlamaForCausalLM
) -> None:
    prompt = '{"name": "'
    cont = _complete(tok, model, prompt, 48)
    value = cont.split('"', 1)[0]
    assert '"' in cont and 0 < len(value) <= 20 and value.replace(" ", "").isalpha(), cont
    obj = _first_json(prompt + cont)
    assert isinstance(obj, dict) and obj["name"] == value


# Prompts stop where the tokenizer has a boundary in the corpus: a trailing `"` or space would be a
# token the model never saw there (it learned `",` / `"]` and ` 30`). Free-form (grammar-less)
# closing is reliable to two or three brackets deep; deeper structures are left to the grammar.
@pytest.mark.parametrize(
    "prompt",
    [
        '{"name": "Alice", "age": 30',
        '{"user": {"name": "Bob", "age": 30',
        '{"values": [1, 2',
        '[{"id": 1, "values": [1, 2',
        '{"data": {"ok": true, "count": 3',
        '[{"name": "Bob"}, {"name": "Ann", "age": 4',
    ],
)
def test_json_nesting_gets_closed(
    tok: PreTrainedTokenizerFast, model: LlamaForCausalLM, prompt: str
) -> None:
    cont = _complete(tok, model, prompt, 48)
    assert isinstance(_first_json(prompt + cont), (dict, list)), prompt + cont


def _object(**props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props)}


STRING, INTEGER = {"type": "string"}, {"type": "integer"}
FLAT_SCHEMAS = {
    "person": _object(name=STRING, age=INTEGER),
    "tags": _object(
        city=STRING, tags={"type": "array", "items": STRING}, active={"type": "boolean"}
    ),
    "unfamiliar-keys": _object(answer=STRING, confidence=INTEGER),
}
NESTED_SCHEMAS = {
    "nested": _object(user=_object(name=STRING, id=INTEGER), score={"type": "number"}),
    "list-of-objects": _object(title=STRING, items={"type": "array", "items": _object(id=INTEGER)}),
    "three-deep": _object(a=_object(b=_object(c=INTEGER)), d=STRING),
}


def _schema_run(
    tok: PreTrainedTokenizerFast,
    model: LlamaForCausalLM,
    schema: dict[str, Any],
    seed: int | None,
    any_whitespace: bool,
) -> None:
    # xgrammar is the grammar engine behind vLLM's structured output (a vLLM requirement);
    # any_whitespace=False is what vLLM's structured_outputs_config.disable_any_whitespace selects.
    import xgrammar as xgr
    from xgrammar.contrib.hf import LogitsProcessor

    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=model.config.vocab_size)
    compiler = xgr.GrammarCompiler(info)
    grammar = compiler.compile_json_schema(json.dumps(schema), any_whitespace=any_whitespace)
    ids = _chat_ids(tok, [{"role": "user", "content": "Describe it as JSON."}])
    new = _generate(model, ids, 60, logits_processor=[LogitsProcessor(grammar)], seed=seed)
    assert new[-1] == EOS, tok.decode(new)
    obj = json.loads(tok.decode(new[:-1]))
    assert set(obj) == set(schema["required"])


@pytest.mark.parametrize("name", list(FLAT_SCHEMAS))
@pytest.mark.parametrize("seed", [None, 0, 1], ids=["greedy", "seed0", "seed1"])
def test_schema_constrained_generation_finishes(
    tok: PreTrainedTokenizerFast, model: LlamaForCausalLM, name: str, seed: int | None
) -> None:
    """vLLM's default grammar (any whitespace allowed between JSON tokens)."""
    _schema_run(tok, model, FLAT_SCHEMAS[name], seed, any_whitespace=True)


@pytest.mark.parametrize("name", list(FLAT_SCHEMAS) + list(NESTED_SCHEMAS))
@pytest.mark.parametrize("seed", [None, 0, 1], ids=["greedy", "seed0", "seed1"])
def test_schema_constrained_generation_finishes_without_free_whitespace(
    tok: PreTrainedTokenizerFast, model: LlamaForCausalLM, name: str, seed: int | None
) -> None:
    """With disable_any_whitespace even nested schemas finish: no blank runs to wander into."""
    _schema_run(tok, model, {**FLAT_SCHEMAS, **NESTED_SCHEMAS}[name], seed, any_whitespace=False)


# --- sampling can vary ---------------------------------------------------------------------------
def test_sampling_varies_across_seeds(
    tok: PreTrainedTokenizerFast, model: LlamaForCausalLM
) -> None:
    ids = tok("Once upon a time").input_ids
    outs = {tuple(_generate(model, ids, 16, seed=s)) for s in range(8)}
    assert len(outs) >= 5


def test_next_token_distribution_is_not_near_deterministic(
    tok: PreTrainedTokenizerFast, model: LlamaForCausalLM
) -> None:
    ids = tok("Once upon a time").input_ids
    full = ids + _generate(model, ids, 16)
    with torch.no_grad():
        logits = model(torch.tensor([full])).logits[0, len(ids) - 1 :]
    probs = logits.softmax(-1)
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1)
    assert float(entropy.max()) > math.log(4), entropy.tolist()
