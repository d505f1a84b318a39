#!/usr/bin/env python3
"""Build `fixtures/models/tt-reference-qwen2vl` from the bundled trained LM.

A Hugging Face `Qwen2VLForConditionalGeneration` (model_type "qwen2_vl"): a small Qwen2-VL
vision tower (8x8 patches, 2x2 spatial merge, temporal patch 2, two blocks) randomly initialised
from a fixed seed, in front of the bundled trained tiny LM as language model (the weights of
`tt-reference-llama`, whose parameter names Qwen2-VL's text model shares, plus the zero q/k/v
biases Qwen2 has and Llama has not; full attention everywhere). The text rotary
embedding is multimodal RoPE (`mrope_section` [4, 6, 6] of the 16 frequency pairs for temporal,
height and width), which equals plain RoPE on text-only prompts, so text answers stay the
trained model's.

The tokenizer is the LM's plus Qwen2-VL's four vision tokens (`<|vision_start|>`,
`<|vision_end|>`, `<|image_pad|>`, `<|video_pad|>`), whose embedding rows are the mean of the
others and whose lm_head rows are zero (logit exactly 0: below the trained LM's top text logit,
and four equal rows cannot tie by rounding). The image
processor resizes every image to multiples of 16 pixels between 32x32 and 64x64 pixels of area
(4 to 16 image tokens after the merge, any aspect ratio); the chat template is the LM's, and
vLLM puts `<|vision_start|><|image_pad|><|vision_end|>` in the text for each image.

The plugin serves it as `ReferenceQwen2VLForConditionalGeneration`
(plugin/vllm_tt_plugin/test_models/reference_qwen2vl.py); the engine tests compare its greedy
tokens with transformers' Qwen2-VL on the same images. The vision weights are untrained, so
images steer the output but the answers about them are not meaningful.

Deterministic: the same input checkpoint gives the same weights.

    python tools/make_qwen2vl_checkpoint.py [--src fixtures/models/tt-reference-llama]
        [--out fixtures/models/tt-reference-qwen2vl]

Needs torch, safetensors, transformers (5.x) and Pillow; no network, no torchvision.
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
DEFAULT_OUT = REPO / "fixtures" / "models" / "tt-reference-qwen2vl"
ARCHITECTURE = "ReferenceQwen2VLForConditionalGeneration"
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
PATCH_SIZE, MERGE_SIZE, TEMPORAL_PATCH = 8, 2, 2
MIN_PIXELS, MAX_PIXELS = 32 * 32, 64 * 64
MROPE_SECTION = [4, 6, 6]  # sums to head_dim / 2 = 16
SEED = 0
BIASES = ("q_proj.bias", "k_proj.bias", "v_proj.bias")
# Text config keys carried over from the source LM (same meaning in Qwen2 and Qwen2-VL's text).
CARRIED_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_act",
    "max_position_embeddings",
    "rms_norm_eps",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)

README = """# tt-reference-qwen2vl

A tiny Qwen2-VL-style vision-language checkpoint for the plugin's tests, built by
`tools/make_qwen2vl_checkpoint.py` from `tt-reference-llama` (the trained tiny LM, with the zero
q/k/v biases Qwen2's attention has; full attention in every layer) and a randomly initialised
Qwen2-VL vision tower (seed {seed}; {patch}x{patch} patches, {merge}x{merge} merge, temporal
patch {temporal}).

- Images are resized to multiples of {factor} pixels with an area between {min_px} and {max_px}
  pixels, so each image becomes {min_tokens} to {max_tokens} `<|image_pad|>` tokens between
  `<|vision_start|>` and `<|vision_end|>`, its grid following the aspect ratio.
- The text model's rotary embedding is multimodal RoPE, `mrope_section` {section}: image tokens
  get (temporal, row, column) positions, text after an image continues from the largest one, and
  a request's `rope_deltas` (last rotary position + 1 - sequence length) shift every decode step.
- Tokens: the LM's 1024, then
  {tokens} ({ids});
  their embeddings are the mean of the others and their lm_head rows zero (a logit of
  exactly 0, so greedy decoding picks them only if every text logit is negative, and then by
  index). The chat template is the LM's.

It loads in Hugging Face transformers as `Qwen2VLForConditionalGeneration` (no torchvision
needed: the image processor falls back to its PIL version); the plugin serves it as
`TTReferenceQwen2VLForConditionalGeneration` with `register_test_models: true`. The vision
weights are untrained: images change the output, but the answers about them mean nothing.
"""


def _text_fields(src: Path, vocab_size: int) -> dict[str, Any]:
    source = json.loads((src / "config.json").read_text())
    fields = {key: source[key] for key in CARRIED_KEYS if key in source}
    theta = (source.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    fields["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": theta,
        "mrope_section": MROPE_SECTION,
    }
    fields["vocab_size"] = vocab_size
    fields["tie_word_embeddings"] = False
    fields["use_sliding_window"] = False
    return fields


def build(src: Path, out: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from tokenizers import AddedToken
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessorPil,
    )

    # The plain fast tokenizer, as the LM's own config loads it (a Qwen2 class would add an
    # <|endoftext|> token the LM never had and split numbers into single digits).
    tokenizer = PreTrainedTokenizerFast.from_pretrained(src)
    base_vocab = len(tokenizer)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in VISION_TOKENS])
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    text = _text_fields(src, len(tokenizer))
    config = Qwen2VLConfig(
        text_config=text,
        vision_config={
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": text["hidden_size"],
            "mlp_ratio": 2,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": TEMPORAL_PATCH,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(SEED)
    model = Qwen2VLForConditionalGeneration(config).eval()
    lm = load_file(str(src / "model.safetensors"))
    with torch.no_grad():
        for name, param in model.model.language_model.named_parameters():
            if name.endswith(BIASES) and "model." + name not in lm:
                param.zero_()  # Llama has none: zero keeps its math
                continue
            weight = lm["model." + name]
            if name == "embed_tokens.weight":
                param[:base_vocab] = weight
                param[base_vocab:] = weight.mean(0)
            else:
                param.copy_(weight)
        head = lm["lm_head.weight"]
        model.lm_head.weight[:base_vocab] = head
        # Zero rows: a vision token's logit is exactly 0 whatever the hidden state, so it wins
        # only when every text logit is negative, and then by index, with no rounding ties.
        model.lm_head.weight[base_vocab:] = 0.0
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out)
    # save_pretrained writes the class name; the plugin serves the checkpoint under its own.
    saved = json.loads((out / "config.json").read_text())
    saved["architectures"] = [ARCHITECTURE]
    (out / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=MIN_PIXELS,
        max_pixels=MAX_PIXELS,
        patch_size=PATCH_SIZE,
        merge_size=MERGE_SIZE,
        temporal_patch_size=TEMPORAL_PATCH,
    )
    # No Qwen2VLProcessor: transformers cannot build one without torchvision (it checks its
    # video processor's class even when there is none), so the tokenizer (with the chat
    # template) and the image processor are saved on their own.
    tokenizer.save_pretrained(out)
    image_processor.save_pretrained(out)
    factor = PATCH_SIZE * MERGE_SIZE
    (out / "README.md").write_text(
        README.format(
            seed=SEED,
            patch=PATCH_SIZE,
            merge=MERGE_SIZE,
            temporal=TEMPORAL_PATCH,
            factor=factor,
            min_px=MIN_PIXELS,
            max_px=MAX_PIXELS,
            min_tokens=MIN_PIXELS // factor**2,
            max_tokens=MAX_PIXELS // factor**2,
            section=MROPE_SECTION,
            tokens=", ".join(f"`{t}`" for t in VISION_TOKENS),
            ids=", ".join(str(ids[t]) for t in VISION_TOKENS),
        )
    )


def check(out: Path) -> None:
    """The checkpoint loads in transformers, and an image changes the greedy continuation."""
    import torch
    from PIL import Image, ImageDraw
    from transformers import AutoImageProcessor, AutoTokenizer, Qwen2VLForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(out)
    image_processor = AutoImageProcessor.from_pretrained(out)
    model = Qwen2VLForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    pad = model.config.image_token_id
    outputs = []
    for color, size, box in (
        ((200, 30, 90), (48, 40), (4, 4, 30, 20)),
        ((10, 230, 20), (80, 24), (40, 2, 70, 20)),
    ):
        picture = Image.new("RGB", size, color)
        ImageDraw.Draw(picture).rectangle(box, fill=(255 - color[0], color[2], color[1]))
        pixels = image_processor([picture], return_tensors="pt")
        count = int(pixels["image_grid_thw"][0].prod()) // MERGE_SIZE**2
        image = "<|vision_start|>" + "<|image_pad|>" * count + "<|vision_end|>"
        chat = [{"role": "user", "content": image + "What is it?"}]
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=False)
        input_ids = torch.tensor([ids])
        generated = model.generate(
            input_ids=input_ids,
            mm_token_type_ids=(input_ids == pad).int(),
            max_new_tokens=8,
            do_sample=False,
            **pixels,
        )
        outputs.append(generated[0, input_ids.shape[1] :].tolist())
    print(f"greedy continuations for two images: {outputs}")
    if outputs[0] == outputs[1]:
        raise SystemExit("the image does not change the output: the vision path is inert")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    build(args.src, args.out)
    check(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
