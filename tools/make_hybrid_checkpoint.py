#!/usr/bin/env python3
"""Build `fixtures/models/tt-reference-hybrid` from the bundled Llama checkpoint.

The hybrid reference checkpoint is a Hugging Face `SmolLM3ForCausalLM` (model_type "smollm3")
whose layers alternate sliding-window and full attention (`layer_types`). Its weights are the
bundled Llama's, unchanged: SmolLM3 uses Llama's parameter names and math (no biases, RMSNorm,
SwiGLU) once every layer uses RoPE (`no_rope_layers` all 1), so a prompt shorter than the window
gives exactly the Llama's logits. The plugin serves it as `ReferenceHybridForCausalLM` (the
reference Llama math plus per-layer sliding windows and vLLM's hybrid KV cache groups).

Why SmolLM3: transformers 5.x takes its `layer_types` verbatim and applies `sliding_window` to the
"sliding_attention" layers when `use_sliding_window` is true, and it registers no tokenizer class
of its own, so `AutoTokenizer` (what vLLM and the accuracy tool load) honours the copied
`tokenizer_config.json` and tokenizes exactly as the Llama does. It was Qwen2 before: in
transformers 5.24 and 5.25 `AutoTokenizer` forces `Qwen2Tokenizer` on a qwen2 config, whose own
pre-tokenizer splits numbers into single digits, so the served model saw text it was never
trained on (5.20, the Python 3.10 lock, did not: two tokenizations of one checkpoint). The
check below tokenizes text with digits both ways.

Deterministic: the same input checkpoint gives byte-identical output files.

    python tools/make_hybrid_checkpoint.py [--src fixtures/models/tt-reference-llama]
        [--out fixtures/models/tt-reference-hybrid] [--sliding-window 96]

Needs torch, safetensors and transformers (5.x, for the load check); no network.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SRC = REPO / "fixtures" / "models" / "tt-reference-llama"
DEFAULT_OUT = REPO / "fixtures" / "models" / "tt-reference-hybrid"
DEFAULT_SLIDING_WINDOW = 96
ARCHITECTURE = "ReferenceHybridForCausalLM"
# Copied verbatim when present: the tokenizer and generation defaults are the Llama's.
COPIED_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
)
# Llama config keys carried into the SmolLM3 config (same meaning in both).
CARRIED_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_parameters",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "initializer_range",
)


class CheckpointError(ValueError):
    """The source checkpoint cannot be turned into the hybrid one."""


def layer_types(num_layers: int) -> list[str]:
    """Sliding first, full last, alternating (as Gemma-style hybrids do)."""
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]


def hybrid_config(llama: dict[str, Any], sliding_window: int) -> dict[str, Any]:
    if llama.get("model_type") != "llama":
        raise CheckpointError(f"source model_type={llama.get('model_type')!r}, expected 'llama'")
    for flag in ("attention_bias", "mlp_bias"):
        if llama.get(flag):
            raise CheckpointError(f"source {flag}=true: the hybrid carries no biases")
    rope = llama.get("rope_parameters") or {"rope_type": "default", "rope_theta": 10000.0}
    if rope.get("rope_type", "default") != "default":
        raise CheckpointError(f"source rope_parameters={rope!r}: only default RoPE is carried")
    missing = [k for k in CARRIED_KEYS[:6] if k not in llama]
    if missing:
        raise CheckpointError(f"source config.json lacks {missing}")
    config: dict[str, Any] = {
        "architectures": [ARCHITECTURE],
        "model_type": "smollm3",
        "dtype": "float32",
    }
    for key in CARRIED_KEYS:
        if key in llama:
            config[key] = llama[key]
    config["rope_parameters"] = rope
    num_layers = int(config["num_hidden_layers"])
    config.update(
        {
            "use_sliding_window": True,
            "sliding_window": sliding_window,
            "layer_types": layer_types(num_layers),
            "no_rope_layers": [1] * num_layers,  # 1 = this layer uses RoPE (SmolLM3's NoPE off)
            "attention_bias": False,
            "mlp_bias": False,
            "attention_dropout": 0.0,
            "use_cache": True,
        }
    )
    return dict(sorted(config.items()))


def hybrid_tensors(src: Path) -> dict[str, Any]:
    """The Llama tensors (same names in SmolLM3), in sorted name order."""
    from safetensors.torch import load_file

    path = src / "model.safetensors"
    if not path.is_file():
        raise CheckpointError(f"{src} has no model.safetensors (sharded sources are not supported)")
    tensors = load_file(str(path))
    biases = sorted(k for k in tensors if k.endswith(".bias"))
    if biases:
        raise CheckpointError(f"source has {biases[0]}: not a bias-free Llama")
    return {k: tensors[k].detach().float().contiguous() for k in sorted(tensors)}


def readme(config: dict[str, Any], src_name: str) -> str:
    kinds = ", ".join(
        f"{i}: {'sliding' if t == 'sliding_attention' else 'full'}"
        for i, t in enumerate(config["layer_types"])
    )
    return f"""# tt-reference-hybrid

The hybrid (mixed sliding-window / full attention) reference checkpoint. Hugging Face loads it
as `SmolLM3ForCausalLM` (model_type `smollm3`); the plugin's host-emulated runs serve it as
`ReferenceHybridForCausalLM` through vLLM's hybrid KV cache manager (one KV cache group per
attention type).

- Weights: those of `{src_name}`, unchanged (SmolLM3 uses Llama's parameter names and, with
  RoPE in every layer (`no_rope_layers` all 1) and no biases, Llama's math).
- Layers: {kinds}.
- `sliding_window` = {config["sliding_window"]} tokens: a sliding layer's query at position p
  attends to positions p-{config["sliding_window"] - 1}..p (transformers:
  `kv_idx > q_idx - sliding_window`).
- `use_sliding_window: true` and an explicit `layer_types` list: transformers 5.x takes the list
  verbatim.
- Tokenizer and generation config: copied from `{src_name}`. SmolLM3 has no tokenizer class of
  its own, so `AutoTokenizer` loads the copied one as it is (a Qwen2 config would get
  `Qwen2Tokenizer`, which splits numbers into single digits).

Made deterministically from `{src_name}` by `python tools/make_hybrid_checkpoint.py`; rerun it
whenever that checkpoint changes. `tests/unit/test_reference_hybrid.py` and
`tests/engine/test_hybrid_kv.py` check it against transformers.
"""


def verify(out: Path, src: Path, config: dict[str, Any]) -> None:
    """transformers loads it as SmolLM3 with every weight, the sliding layers as intended, the
    source's tokenization, and (for a prompt shorter than the window) the source's logits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, SmolLM3ForCausalLM

    model, info = SmolLM3ForCausalLM.from_pretrained(
        out, dtype=torch.float32, output_loading_info=True
    )
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise CheckpointError(f"transformers loading of {out} reported {problems}")
    windows = [layer.self_attn.sliding_window for layer in model.model.layers]
    want = [
        config["sliding_window"] if t == "sliding_attention" else None
        for t in config["layer_types"]
    ]
    if windows != want:
        raise CheckpointError(f"transformers built sliding windows {windows}, wanted {want}")
    text = "Call 555-0123 at 10:30, not 9.75; it's 2048 (x2)."
    has_tokenizer = (src / "tokenizer.json").is_file()
    ours, theirs = (
        AutoTokenizer.from_pretrained(p)(text).input_ids if has_tokenizer else None
        for p in (out, src)
    )
    if ours != theirs:
        raise CheckpointError(
            f"AutoTokenizer tokenizes {text!r} as {ours} here but {theirs} in {src}"
        )
    llama = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    ids = torch.arange(3, 3 + min(32, config["sliding_window"] - 1))[None] % config["vocab_size"]
    with torch.no_grad():
        diff = (model(ids).logits - llama(ids).logits).abs().max().item()
    if diff > 1e-5:
        raise CheckpointError(f"SmolLM3 logits differ from the source Llama's by {diff}")


def build(src: Path, out: Path, sliding_window: int, check: bool = True) -> dict[str, Any]:
    from safetensors.torch import save_file

    if sliding_window < 2:
        raise CheckpointError(f"--sliding-window {sliding_window} must be at least 2 tokens")
    if not (src / "config.json").is_file():
        raise CheckpointError(f"--src {src} is not a checkpoint directory (no config.json)")
    config = hybrid_config(json.loads((src / "config.json").read_text()), sliding_window)
    tensors = hybrid_tensors(src)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "model.safetensors").chmod(0o644)  # safetensors creates it owner-only
    for name in COPIED_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)
    (out / "README.md").write_text(readme(config, src.name), encoding="utf-8")
    if check:
        verify(out, src, config)
    return config


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", type=Path, default=DEFAULT_SRC, help="the Llama checkpoint to convert")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory to (re)write")
    p.add_argument("--sliding-window", type=int, default=DEFAULT_SLIDING_WINDOW)
    p.add_argument("--no-check", action="store_true", help="skip the transformers load check")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    if a.src.resolve() == a.out.resolve():
        p.error("--src and --out must differ")
    try:
        config = build(a.src, a.out, a.sliding_window, check=not a.no_check)
    except CheckpointError as exc:
        p.error(str(exc))
    print(f"wrote {a.out} (layer_types={config['layer_types']}, window={a.sliding_window})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
